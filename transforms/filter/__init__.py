"""Engine-free mathematics of the ``filter`` release kind (Chen, Navidi, Rajagopal, "Generating
private data with user customization"): the feature matrix (``features``), the shared VAE
(``vae``), the per-choice linear latent filter and its distortion (``latent_filter``), its Rényi DP
for the private label and the Gaussian baseline (``filter_accounting``), and the retrained-adversary
evaluation (``filter_evaluation``). Uses torch (CPU) for the VAE and the filter's training."""
