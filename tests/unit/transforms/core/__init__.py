"""Unit tests of ``transforms/core`` (samplers, guarantees and the plausible-deniability test shared by the kinds)."""
