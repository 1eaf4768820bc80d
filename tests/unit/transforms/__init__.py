"""Unit tests of the engine-free mathematics in ``transforms/``, one package per kind and ``core``."""
