"""Review tests of the tabular kind's privacy mathematics (brief D)."""
