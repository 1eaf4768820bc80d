"""Unit tests of ``pipelines/ldp``."""
