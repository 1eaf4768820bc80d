"""Worker-side functions of the tabular release: counting passes and keyed synthesis batches.

The staged records are integer codes, one column per attribute (``a0``, ``a1``, … in schema
order) plus ``part``, the record's part of the split (seeds, structure, parameters, unused).
Counting emits sparse partial contingency tables keyed by a global cell index (every table of a
pass gets its own range of cells), which the engine sums exactly; synthesis runs whole keyed
batches, so a batch gives the same candidates wherever and however often it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from schemas.tabular.schema import TabularSchema
from transforms.tabular.contingency import joint_index
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.parameter_learning import ConditionalTables
from transforms.tabular.privacy_test import SeedIndex
from transforms.tabular.release import TabularReleaseParameters, run_batch

PART_SEEDS, PART_STRUCTURE, PART_PARAMETERS, PART_UNUSED = 0, 1, 2, 3
PART_ALL = -1
"""A counting pass over every record, whatever its part (the report's original marginals)."""


def code_columns(attribute_count: int) -> list[str]:
    return [f"a{index}" for index in range(attribute_count)]


def frame_codes(frame: pd.DataFrame, attribute_count: int) -> np.ndarray:
    return frame[code_columns(attribute_count)].to_numpy(dtype=np.int32)


@dataclass(frozen=True)
class TablePass:
    """The tables one pass counts over one part: each table's attributes and its first cell."""

    part: int
    domain_sizes: tuple[int, ...]
    tables: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]

    @classmethod
    def plan(cls, part: int, domain_sizes: Sequence[int], tables: Sequence[tuple[int, ...]]) -> TablePass:
        sizes = tuple(int(size) for size in domain_sizes)
        offsets, total = [], 0
        for table in tables:
            offsets.append(total)
            total += int(np.prod([sizes[a] for a in table], dtype=np.int64)) if table else 1
        return cls(part, sizes, tuple(tuple(int(a) for a in table) for table in tables), tuple(offsets))

    def unpack(self, sums: pd.DataFrame) -> dict[tuple[int, ...], np.ndarray]:
        """The dense tables from the summed ``(cell, records)`` rows."""
        cells = sums["cell"].to_numpy(np.int64)
        records = sums["records"].to_numpy(np.int64)
        tables = {}
        for table, offset in zip(self.tables, self.offsets, strict=True):
            shape = tuple(self.domain_sizes[a] for a in table)
            size = int(np.prod(shape, dtype=np.int64)) if shape else 1
            dense = np.zeros(size, dtype=np.int64)
            inside = (cells >= offset) & (cells < offset + size)
            dense[cells[inside] - offset] = records[inside]
            tables[table] = dense.reshape(shape)
        return tables


def table_count_rows(frame: pd.DataFrame, side: TablePass) -> pd.DataFrame:
    """Sparse partial counts of every table of the pass over this batch's rows of the pass's part."""
    rows = frame if side.part == PART_ALL else frame[frame["part"].to_numpy() == side.part]
    codes = frame_codes(rows, len(side.domain_sizes))
    cells, records = [], []
    for table, offset in zip(side.tables, side.offsets, strict=True):
        distinct, counts = np.unique(joint_index(codes, table, side.domain_sizes), return_counts=True)
        cells.append(distinct + offset)
        records.append(counts)
    return pd.DataFrame(
        {"cell": np.concatenate(cells).astype(np.int64), "records": np.concatenate(records).astype(np.int64)}
    )


@dataclass(frozen=True)
class SeedKeySide:
    kept_attributes: tuple[int, ...]
    domain_sizes: tuple[int, ...]


def seed_key_rows(frame: pd.DataFrame, side: SeedKeySide) -> pd.DataFrame:
    """Seeds per value of the kept attributes in this batch (the index's ``groupBy().count()``)."""
    rows = frame[frame["part"].to_numpy() == PART_SEEDS]
    keys = joint_index(frame_codes(rows, len(side.domain_sizes)), side.kept_attributes, side.domain_sizes)
    distinct, counts = np.unique(keys, return_counts=True)
    return pd.DataFrame({"seed_key": distinct.astype(np.int64), "seeds": counts.astype(np.int64)})


@dataclass(frozen=True)
class SynthesisSide:
    """Everything a synthesis batch needs, shipped once per worker. ``seeds_codes``: the seeds as
    a matrix or as ``seed_synthesis.SeedRows`` (the release's staged seeds,
    ``pipelines/tabular/seeds.py``: read where the batch runs, never on the driver); ``None``: the
    synthesis resamples every attribute (``omega = all``), so it reads only the seeds' number
    (``seed_count``: a candidate's seed is drawn among them and then every value is resampled);
    the seeds' values never travel."""

    seeds_codes: Any
    seed_index: SeedIndex
    structure: NetworkStructure
    conditionals: ConditionalTables
    schema: TabularSchema
    parameters: TabularReleaseParameters
    secret: bytes
    release_id: str
    seed_count: int = 0

    def seeds(self) -> Any:
        """The seeds the synthesis draws from: the seeds' codes (a matrix or ``SeedRows``), or
        (``omega = all``) a read-only view of zeros of the seeds' shape that costs no memory."""
        if self.seeds_codes is not None:
            return self.seeds_codes
        width = len(self.structure.order)
        return np.broadcast_to(np.zeros((1, width), dtype=np.int32), (self.seed_count, width))


def synthesis_rows(frame: pd.DataFrame, side: SynthesisSide) -> pd.DataFrame:
    """The passing candidates of each batch in ``frame["batch"]``, decoded, with their batch and
    position; candidates beyond the attempt cap are never examined."""
    parameters = side.parameters
    outputs = []
    seeds = side.seeds()
    for batch in frame["batch"].to_numpy(np.int64).tolist():
        outcome = run_batch(
            batch, seeds, side.seed_index, side.structure, side.conditionals, side.schema,
            parameters, side.secret, side.release_id,
        )
        examined = min(parameters.batch_size, parameters.max_attempts - batch * parameters.batch_size)
        positions = np.flatnonzero(outcome.passed)
        keep = positions < examined
        decoded = outcome.decoded_passing.loc[keep].reset_index(drop=True)
        decoded.insert(0, "position", positions[keep].astype(np.int64))
        decoded.insert(0, "batch", np.full(int(keep.sum()), batch, dtype=np.int64))
        outputs.append(decoded)
    result = pd.concat(outputs, ignore_index=True)
    result["passes"] = np.ones(len(result), dtype=np.int64)
    return result


@dataclass(frozen=True)
class Cut:
    """Release every passing candidate of batches before ``last_batch``, and of ``last_batch`` those
    at positions up to ``last_position``."""

    last_batch: int
    last_position: int
    attribute_names: tuple[str, ...]


def released_rows(frame: pd.DataFrame, side: Cut) -> pd.DataFrame:
    batch = frame["batch"].to_numpy(np.int64)
    inside = (batch < side.last_batch) | ((batch == side.last_batch) & (frame["position"].to_numpy() <= side.last_position))
    return frame.loc[inside, list(side.attribute_names)]


RECORD_KEY = "record_key"


def keyed_records(frame: pd.DataFrame, _side: Any) -> pd.DataFrame:
    """Released records with a fixed hash of their values (pandas' row hash under its fixed key),
    the key their release file is chosen by."""
    keys = pd.util.hash_pandas_object(frame, index=False).to_numpy(np.uint64).view(np.int64)
    return frame.assign(**{RECORD_KEY: keys})


def batch_positions(frame: pd.DataFrame, side: int) -> pd.DataFrame:
    """The passing positions of batch ``side`` (to place the cut inside it)."""
    return frame.loc[frame["batch"].to_numpy(np.int64) == side, ["batch", "position"]]
