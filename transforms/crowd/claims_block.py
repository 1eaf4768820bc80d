"""A block of whole objects' claims in compressed (CSR-like) form.

Every crowd transform works on a block: the claims of one or more objects, each object's
claims contiguous and in a canonical order (by source id). A block is what one engine
partition (or one Beam batch of groups) holds, so results per object never depend on which
other objects share the block — the property that makes every engine produce the same
release.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

OBJECT_ID = "object_id"
SOURCE_ID = "source_id"
VALUE = "value"


@dataclass(frozen=True)
class ClaimsBlock:
    """Claims ``X_i`` of objects ``i = 0..O-1``; object ``i`` owns rows ``offsets[i]:offsets[i+1]``.

    Attributes:
        object_ids: (O,) the object ids, one per object, sorted.
        offsets: (O+1,) int64 start of each object's claims; ``offsets[-1] == N``.
        source_ids: (N,) the source id of every claim, sorted within each object.
        values: (N,) float64 claimed values.
    """

    object_ids: np.ndarray
    offsets: np.ndarray
    source_ids: np.ndarray
    values: np.ndarray

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> ClaimsBlock:
        """Build a block from a frame with columns ``object_id, source_id, value``.

        The frame must hold whole objects (all claims of every object present). Rows are put
        in the canonical order: by object id, then source id (no sort when already so).
        """
        if len(frame) == 0:
            return cls(
                object_ids=np.empty(0, dtype=frame[OBJECT_ID].dtype if OBJECT_ID in frame else object),
                offsets=np.zeros(1, dtype=np.int64),
                source_ids=np.empty(0, dtype=frame[SOURCE_ID].dtype if SOURCE_ID in frame else object),
                values=np.empty(0, dtype=np.float64),
            )
        ordered = in_canonical_order(frame)
        object_column = ordered[OBJECT_ID].to_numpy()
        change = np.flatnonzero(object_column[1:] != object_column[:-1]) + 1
        starts = np.concatenate([[0], change]).astype(np.int64)
        offsets = np.concatenate([starts, [len(ordered)]]).astype(np.int64)
        return cls(
            object_ids=object_column[starts],
            offsets=offsets,
            source_ids=ordered[SOURCE_ID].to_numpy(),
            values=ordered[VALUE].to_numpy(dtype=np.float64),
        )

    @property
    def number_of_objects(self) -> int:
        return len(self.object_ids)

    @property
    def number_of_claims(self) -> int:
        return int(self.offsets[-1])

    @property
    def counts(self) -> np.ndarray:
        """(O,) number of claims ``|S_i|`` of each object."""
        return np.diff(self.offsets)

    @property
    def object_of_claim(self) -> np.ndarray:
        """(N,) index (0..O-1) of the object each claim belongs to."""
        return np.repeat(np.arange(self.number_of_objects, dtype=np.int64), self.counts)

    def object_slice(self, object_index: int) -> slice:
        return slice(int(self.offsets[object_index]), int(self.offsets[object_index + 1]))

    def select_objects(self, mask: np.ndarray) -> ClaimsBlock:
        """The sub-block of the objects where ``mask`` (O,) is true."""
        keep_claims = np.repeat(mask, self.counts)
        counts = self.counts[mask]
        return ClaimsBlock(
            object_ids=self.object_ids[mask],
            offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            source_ids=self.source_ids[keep_claims],
            values=self.values[keep_claims],
        )


def is_in_canonical_order(frame: pd.DataFrame) -> bool:
    """True when rows are sorted by object id, then strictly by source id within an object."""
    objects = frame[OBJECT_ID].to_numpy()
    sources = frame[SOURCE_ID].to_numpy()
    if len(objects) < 2:
        return True
    later_object = objects[1:] > objects[:-1]
    same_object = objects[1:] == objects[:-1]
    return bool(np.all(later_object | (same_object & (sources[1:] > sources[:-1]))))


def in_canonical_order(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` sorted by (object id, source id), without sorting when it already is."""
    if is_in_canonical_order(frame):
        return frame.reset_index(drop=True)
    return frame.sort_values([OBJECT_ID, SOURCE_ID], kind="mergesort", ignore_index=True)
