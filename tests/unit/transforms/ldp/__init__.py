"""Unit tests of ``transforms/ldp`` (mechanisms, estimators, metrics, simulation)."""
