"""Unit tests of ``transforms/crowd`` (the crowd release kind's mathematics)."""
