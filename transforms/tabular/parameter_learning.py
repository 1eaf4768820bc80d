"""DP parameter learning: the conditional distribution of every attribute given its parents, from noisy counts.

Issue 3, step 5 (Bindschaedler et al., VLDB 2017, Section 5; PrivBayes, Zhang et al. SIGMOD 2014,
Section 4 uses the same noisy-count construction). For attribute ``j`` with parents ``Π_j`` the
counts over ``(*Π_j, j)`` (parents in the order the structure lists them, child last) are
computed on the parameter data ``DP``; then each table receives discrete Laplace noise, the
Dirichlet prior ``α`` is added to every cell, negative cells are clipped to zero and each parent
configuration's row is normalized over the child's axis (a row that is all zero after clipping
becomes uniform).

Privacy (neighbours: same public record count, one record replaced). Replacing one record moves
one unit of count from one cell to another in each table, so each table has L1 sensitivity 2
and the ``m`` tables together ``2m``. Noise of scale ``2m/ε_p`` on every cell of every table
(``discrete_laplace_scale(ε_p, 2m)``, rounded up) makes the released tables ``ε_p``-DP on ``DP``
— equivalently, each table is ``(ε_p/m)``-DP and the ``m`` tables compose. Everything after the
noise (prior, clipping, normalization) is post-processing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from transforms.core.discrete_laplace import discrete_laplace_scale, sample_discrete_laplace
from transforms.tabular.network_structure import NetworkStructure

REPLACE_ONE_TABLE_SENSITIVITY = 2
"""L1 change of one contingency table when one record is replaced by another."""


@dataclass(frozen=True)
class ConditionalTables:
    """``tables[j]`` has shape ``(*domain sizes of parents[j], domain size of j)``; every slice along the
    last axis is a probability distribution of attribute ``j`` given one parent configuration."""

    parents: tuple[tuple[int, ...], ...]
    domain_sizes: tuple[int, ...]
    tables: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        if not (len(self.parents) == len(self.domain_sizes) == len(self.tables)):
            raise ValueError("parents, domain_sizes and tables must have one entry per attribute")
        for attribute, table in enumerate(self.tables):
            expected = expected_table_shape(self.parents[attribute], attribute, self.domain_sizes)
            if table.shape != expected:
                raise ValueError(
                    f"table of attribute {attribute} has shape {table.shape}, expected {expected}"
                )

    def flat_table(self, attribute: int) -> np.ndarray:
        """Attribute's table as ``(parent configurations, child values)``; row index = ``joint_index`` of the parents."""
        table = self.tables[attribute]
        return table.reshape(-1, table.shape[-1])

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; floats survive ``json`` exactly (shortest round-trip repr)."""
        return {
            "parents": [list(parent_set) for parent_set in self.parents],
            "domain_sizes": list(self.domain_sizes),
            "tables": [table.reshape(-1).tolist() for table in self.tables],
        }

    @classmethod
    def from_json(cls, document: dict[str, Any] | str) -> ConditionalTables:
        if isinstance(document, str):
            document = json.loads(document)
        parents = tuple(tuple(int(p) for p in parent_set) for parent_set in document["parents"])
        sizes = tuple(int(size) for size in document["domain_sizes"])
        tables = tuple(
            np.asarray(values, dtype=np.float64).reshape(
                expected_table_shape(parents[attribute], attribute, sizes)
            )
            for attribute, values in enumerate(document["tables"])
        )
        return cls(parents=parents, domain_sizes=sizes, tables=tables)


def expected_table_shape(
    parent_set: Sequence[int], attribute: int, domain_sizes: Sequence[int]
) -> tuple[int, ...]:
    return tuple(int(domain_sizes[p]) for p in parent_set) + (int(domain_sizes[attribute]),)


def table_attributes(structure: NetworkStructure) -> list[tuple[int, ...]]:
    """The attributes each parameter table counts over: ``(*parents[j], j)`` for every attribute ``j``."""
    return [(*structure.parents[j], j) for j in range(structure.attribute_count)]


def normalize_conditionals(values: np.ndarray) -> np.ndarray:
    """Normalize over the last axis; an all-zero row becomes uniform."""
    totals = values.sum(axis=-1, keepdims=True)
    uniform = np.full_like(values, 1.0 / values.shape[-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, values / np.where(totals > 0, totals, 1.0), uniform)


def noisy_conditional_distributions(
    counts: list[np.ndarray],
    structure: NetworkStructure,
    domain_sizes: Sequence[int],
    epsilon_parameters: float,
    dirichlet_alpha: float,
    rng: np.random.Generator,
) -> ConditionalTables:
    """ε_p-DP conditionals from the exact counts on ``DP`` (see the module docstring).

    Noise is drawn in one call for all cells, tables in attribute (column) order, each table in
    row-major order, so the draws are the same wherever the counts were computed.
    """
    attribute_count = structure.attribute_count
    if len(counts) != attribute_count or len(domain_sizes) != attribute_count:
        raise ValueError("give one count table and one domain size per attribute")
    if not (np.isfinite(dirichlet_alpha) and dirichlet_alpha >= 0):
        raise ValueError("the Dirichlet prior alpha must be a finite number >= 0")
    shapes = []
    for attribute, table in enumerate(counts):
        expected = expected_table_shape(structure.parents[attribute], attribute, domain_sizes)
        if np.shape(table) != expected:
            raise ValueError(
                f"counts of attribute {attribute} have shape {np.shape(table)}, expected {expected}"
            )
        shapes.append(expected)
    scale = discrete_laplace_scale(epsilon_parameters, REPLACE_ONE_TABLE_SENSITIVITY * attribute_count)
    flat_counts = [np.asarray(table, dtype=np.int64).reshape(-1) for table in counts]
    noise = sample_discrete_laplace(scale, sum(flat.size for flat in flat_counts), rng)
    tables = []
    offset = 0
    for flat, shape in zip(flat_counts, shapes, strict=True):
        noisy = (flat + noise[offset : offset + flat.size]).astype(np.float64) + float(dirichlet_alpha)
        offset += flat.size
        tables.append(normalize_conditionals(np.maximum(noisy, 0.0).reshape(shape)))
    return ConditionalTables(
        parents=tuple(tuple(parent_set) for parent_set in structure.parents),
        domain_sizes=tuple(int(size) for size in domain_sizes),
        tables=tuple(tables),
    )
