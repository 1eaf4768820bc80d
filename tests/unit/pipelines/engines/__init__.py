"""Unit tests of ``pipelines/engines``."""
