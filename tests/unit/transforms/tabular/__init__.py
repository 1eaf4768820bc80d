"""Unit tests of ``transforms/tabular`` (encoding, split, structure and parameter learning, synthesis,
privacy test, guarantee, in-memory release, evaluation)."""
