"""Unit tests of the tabular kind's structure learning (scores, exponential mechanism, greedy build),
the independent-marginals baseline and the evaluation metrics."""
