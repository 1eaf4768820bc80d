"""Random Bayesian networks, conditionals and data for the tabular tests (seeded numpy generators)."""

from __future__ import annotations

import numpy as np

from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.parameter_learning import ConditionalTables


def random_structure(attribute_count: int, max_degree: int, rng: np.random.Generator) -> NetworkStructure:
    """A random order σ and, for each attribute, up to ``max_degree`` random parents among earlier ones."""
    order = tuple(int(a) for a in rng.permutation(attribute_count))
    parents: list[tuple[int, ...]] = [()] * attribute_count
    for position, attribute in enumerate(order):
        degree = int(rng.integers(0, min(position, max_degree) + 1))
        parents[attribute] = tuple(int(p) for p in rng.permutation(order[:position])[:degree])
    return NetworkStructure(order=order, parents=tuple(parents))


def random_conditionals(
    structure: NetworkStructure, sizes: tuple[int, ...], rng: np.random.Generator, zero_fraction: float = 0.2
) -> ConditionalTables:
    """Dirichlet(1) rows with some cells set to zero (every row keeps at least one positive cell)."""
    tables = []
    for attribute in range(structure.attribute_count):
        shape = tuple(sizes[p] for p in structure.parents[attribute]) + (sizes[attribute],)
        table = rng.dirichlet(np.ones(sizes[attribute]), size=int(np.prod(shape[:-1], dtype=np.int64)))
        zero = rng.random(table.shape) < zero_fraction
        zero[np.arange(table.shape[0]), rng.integers(0, table.shape[1], table.shape[0])] = False
        table = np.where(zero, 0.0, table)
        table /= table.sum(axis=1, keepdims=True)
        tables.append(table.reshape(shape))
    return ConditionalTables(parents=structure.parents, domain_sizes=sizes, tables=tuple(tables))


def random_codes(count: int, sizes: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return np.stack([rng.integers(0, size, count) for size in sizes], axis=1).astype(np.int32)


def brute_force_generation_probability(y, seed, structure, conditionals, omega) -> float:
    """``Pr{y = M(seed)}`` by walking σ in plain Python: a kept attribute must equal the seed's value,
    a resampled one is drawn from its table at y's own parent values."""
    probability = 1.0
    for position, attribute in enumerate(structure.order):
        if position < structure.attribute_count - omega:
            probability *= 1.0 if y[attribute] == seed[attribute] else 0.0
        else:
            parent_values = tuple(y[parent] for parent in structure.parents[attribute])
            probability *= float(conditionals.tables[attribute][parent_values + (y[attribute],)])
    return probability
