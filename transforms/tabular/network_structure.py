"""The structure of a Bayesian network over coded attributes: an order σ and a parent set per attribute.

Shared contract between structure learning (which builds it), parameter learning (which fills in
the conditionals) and seed-based synthesis (which walks it). Attributes are referred to by their
column index in the coded record matrix (the schema's attribute order), never by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NetworkStructure:
    """``order`` is σ, a permutation of ``range(m)``; ``parents[j]`` is the parent set of attribute
    ``j`` (column index), all of which come before ``j`` in σ, so the graph is acyclic by
    construction."""

    order: tuple[int, ...]
    parents: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        attribute_count = len(self.parents)
        if sorted(self.order) != list(range(attribute_count)):
            raise ValueError("order must be a permutation of the attribute indices")
        position = {attribute: index for index, attribute in enumerate(self.order)}
        for attribute, parent_set in enumerate(self.parents):
            if len(set(parent_set)) != len(parent_set):
                raise ValueError(f"attribute {attribute} lists a parent twice")
            for parent in parent_set:
                if not 0 <= parent < attribute_count or position[parent] >= position[attribute]:
                    raise ValueError(f"parent {parent} of attribute {attribute} does not come before it in the order")

    @property
    def attribute_count(self) -> int:
        return len(self.parents)

    @property
    def degree(self) -> int:
        return max((len(parent_set) for parent_set in self.parents), default=0)

    def to_json(self) -> dict[str, Any]:
        return {"order": list(self.order), "parents": [list(parent_set) for parent_set in self.parents]}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> NetworkStructure:
        return cls(
            order=tuple(int(a) for a in document["order"]),
            parents=tuple(tuple(int(p) for p in parent_set) for parent_set in document["parents"]),
        )
