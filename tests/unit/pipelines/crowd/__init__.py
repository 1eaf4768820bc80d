"""Unit tests of ``pipelines/crowd``."""
