"""Unit tests of ``pipelines/platform``."""
