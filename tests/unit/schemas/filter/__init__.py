"""Unit tests of ``schemas/filter`` (the feature spec)."""
