"""Unit tests of the filter release kind's engine-free core (``transforms/filter``)."""
