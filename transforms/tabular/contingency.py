"""Contingency tables over integer-coded records: the one counting primitive of the tabular kind.

Structure learning (scores of candidate parent sets), parameter learning (counts over an attribute
and its parents) and the evaluation (k-way marginals) all count the joint values of a few columns.
The counts of a partition are plain integer arrays, so partial tables from many partitions merge by
addition (exactly, on every engine).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def joint_index(codes: np.ndarray, attributes: Sequence[int], domain_sizes: Sequence[int]) -> np.ndarray:
    """The mixed-radix (row-major, first attribute most significant) cell index of each record's values
    on ``attributes``; ``codes`` is an ``(n, m)`` integer matrix with ``0 ≤ codes[:, j] < domain_sizes[j]``."""
    index = np.zeros(codes.shape[0], dtype=np.int64)
    for attribute in attributes:
        index = index * int(domain_sizes[attribute]) + codes[:, attribute].astype(np.int64, copy=False)
    return index


def contingency_counts(codes: np.ndarray, attributes: Sequence[int], domain_sizes: Sequence[int]) -> np.ndarray:
    """Counts of every joint value of ``attributes``, shaped ``tuple(domain_sizes[a] for a in attributes)``
    (int64); the cell ``counts[v1, v2, ...]`` is the number of records with those values."""
    shape = tuple(int(domain_sizes[attribute]) for attribute in attributes)
    cell_count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    counts = np.bincount(joint_index(codes, attributes, domain_sizes), minlength=cell_count)
    return counts.astype(np.int64, copy=False).reshape(shape)
