"""Engine-free mathematics of the ``ldp`` release kind (free-will local differential privacy)."""
