"""Unit tests of ``schemas/tabular`` (the tabular schema file)."""
