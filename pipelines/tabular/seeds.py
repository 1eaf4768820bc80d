"""Worker side of the tabular seeds for ``omega < all`` (issue 15: nothing proportional to the input
on the driver).

A synthesis that keeps attributes from its seeds (``omega < all``) reads, for each candidate, the
seed at a keyed-random position (``transforms.tabular.seed_synthesis``: positions in ``ROW_ID``
order). The seeds are neither collected on the driver nor shipped in a side value:

* :func:`write_fragment_seeds` (a pass over the staged codes, one task per staged fragment) writes
  each fragment's seeds, in ``ROW_ID`` order, as a raw int32 matrix to the release's staging and
  returns how many it wrote; the driver turns the counts (one per fragment) into offsets;
* :class:`StagedSeeds` is the synthesis side's view of them (``seed_synthesis.SeedRows``): the
  rows a batch draws are read from the files where the batch runs (a local file memory-mapped for
  the batch and unmapped after it, so a process holds at most one batch's pages; an object-store
  file read whole, one fragment's seeds at a time).

The seed index of kept attributes whose joint values overflow one int64 key
(``privacy_test.SeedIndex`` in blocks) is counted on the engine too: :func:`index_blocks` is the
blocking ``SeedIndex.build`` makes (from the public seed count), and :func:`seed_block_key_rows`
emits each seed's key through the blocks known so far, so that one ``sum_by_key`` per block gives
that block's ranks (and the last one the index's keys and counts) — the very index ``build``
makes from the seeds' matrix.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.engines import storage
from pipelines.engines.storage import Where
from pipelines.platform.sources import ROW_BITS, ROW_ID
from pipelines.tabular.blocks import PART_SEEDS, frame_codes
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.privacy_test import SeedIndex
from transforms.tabular.seed_synthesis import kept_and_resampled

KEY_LIMIT = 2**62
"""``privacy_test._KEY_LIMIT``: the largest product of domain sizes one block's key may reach."""


def seeds_file(folder: Where, ordinal: int) -> Where:
    return folder / f"seeds-{ordinal:07d}.bin"


@dataclass(frozen=True)
class SeedWriting:
    folder: Where
    attribute_count: int


def write_fragment_seeds(frame: pd.DataFrame, side: SeedWriting) -> pd.DataFrame:
    """This staged fragment's seeds (codes, ``ROW_ID`` order) written as one raw int32 file; one row:
    the fragment's ordinal and its seed count (a fragment without seeds writes no file)."""
    ordinal = int(frame[ROW_ID].iloc[0]) >> ROW_BITS if len(frame) else -1
    seeds = frame.loc[frame["part"].to_numpy() == PART_SEEDS]
    seeds = seeds.sort_values(ROW_ID, kind="stable")
    if len(seeds):
        codes = np.ascontiguousarray(frame_codes(seeds, side.attribute_count), dtype=np.int32)
        storage.write_bytes(seeds_file(side.folder, ordinal), codes.tobytes())
    return pd.DataFrame({"ordinal": np.array([ordinal], dtype=np.int64),
                         "seeds": np.array([len(seeds)], dtype=np.int64)})


@dataclass(frozen=True)
class StagedSeeds:
    """The seeds as staged files (``seed_synthesis.SeedRows``): ``files[i]`` holds the seeds at
    positions ``offsets[i]`` to ``offsets[i + 1]`` (the last up to ``seed_count``)."""

    files: tuple[Where, ...]
    offsets: tuple[int, ...]
    seed_count: int
    attribute_count: int

    def take_rows(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        result = np.empty((positions.shape[0], self.attribute_count), dtype=np.int32)
        if positions.size and (positions.min() < 0 or positions.max() >= self.seed_count):
            raise IndexError("a seed position outside the seeds")
        starts = np.asarray(self.offsets, dtype=np.int64)
        which = np.searchsorted(starts, positions, side="right") - 1
        ends = np.append(starts[1:], self.seed_count)
        for index in np.unique(which).tolist():
            chosen = np.flatnonzero(which == index)
            local = positions[chosen] - starts[index]
            rows = int(ends[index] - starts[index])
            where = self.files[index]
            if isinstance(where, Path):
                # mapped for this batch only: unmapped on leaving, its pages leave the process
                with open(where, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                    matrix = np.frombuffer(mapped, dtype=np.int32).reshape(rows, self.attribute_count)
                    result[chosen] = matrix[local]
                    del matrix
            else:
                matrix = np.frombuffer(storage.read_bytes(where), dtype=np.int32).reshape(rows, self.attribute_count)
                result[chosen] = matrix[local]
        return result


# ---- the seed index in blocks, on the engine ----------------------------------------------------

def index_blocks(structure: NetworkStructure, omega: int, domain_sizes: tuple[int, ...],
                 seed_count: int) -> tuple[tuple[int, ...], ...]:
    """The blocks of kept attributes ``SeedIndex.build`` makes for ``seed_count`` seeds."""
    kept, _ = kept_and_resampled(structure, omega)
    blocks: list[tuple[int, ...]] = []
    current: list[int] = []
    bound = 1
    for attribute in kept:
        if current and bound * domain_sizes[attribute] > KEY_LIMIT:
            blocks.append(tuple(current))
            current, bound = [], seed_count + 1
        current.append(attribute)
        bound *= domain_sizes[attribute]
    blocks.append(tuple(current))
    return tuple(blocks)


def partial_index(kept: tuple[int, ...], domain_sizes: tuple[int, ...], blocks: tuple[tuple[int, ...], ...],
                  block_ranks: tuple[np.ndarray, ...], keys: np.ndarray | None = None,
                  counts: np.ndarray | None = None) -> SeedIndex:
    """A ``SeedIndex`` over the first ``len(block_ranks) + 1`` blocks (its ``keys_of`` is a seed's key
    through them); with ``keys`` and ``counts``, the whole index."""
    empty = np.zeros(0, dtype=np.int64)
    return SeedIndex(kept_attributes=kept, domain_sizes=domain_sizes, blocks=blocks, block_ranks=block_ranks,
                     keys=empty if keys is None else keys, counts=empty if counts is None else counts)


def seed_block_key_rows(frame: pd.DataFrame, side: SeedIndex) -> pd.DataFrame:
    """Seeds per key through the blocks of ``side`` (a :func:`partial_index`) in this batch."""
    rows = frame[frame["part"].to_numpy() == PART_SEEDS]
    keys = side.keys_of(frame_codes(rows, len(side.domain_sizes)))
    distinct, counts = np.unique(keys, return_counts=True)
    return pd.DataFrame({"seed_key": distinct.astype(np.int64), "seeds": counts.astype(np.int64)})
