"""Unit tests of the contracts in ``schemas/``, one package per kind."""
