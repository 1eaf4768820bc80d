"""Unit tests of ``transforms/filter`` (features, VAE, latent filters, privatization, accounting, evaluation)."""
