"""Unit tests of ``pipelines/filter``."""
