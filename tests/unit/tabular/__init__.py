"""Unit tests of the tabular release kind's engine-free mathematics (schema, encoding, split, parameters,
synthesis, privacy test, guarantee, in-memory release)."""
