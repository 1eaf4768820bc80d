"""Unit tests of ``pipelines/tabular``."""
