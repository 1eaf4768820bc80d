"""Worker-side functions of the ldp release: the one pass that computes the sufficient statistics.

Each function takes a frame of canonical reports ``(mechanism_code, report)`` — the good rows of
one input fragment, as ``pipelines/ldp/engine_input.py`` reads them on the engine — and returns
partial counts keyed for ``Engine.sum_by_key``; the engine adds the partial counts of all
fragments exactly (integers), so the statistics do not depend on partitioning or engine. Kept
light: pandas and numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schemas.ldp.tables import LDP_MECHANISM_CODE


@dataclass(frozen=True)
class ReportKeySide:
    """``output_stride``: an upper bound of every mechanism's output alphabet size, so
    ``mechanism_code * output_stride + report`` is a unique int64 key."""

    output_stride: int


def report_count_rows(frame: pd.DataFrame, side: ReportKeySide) -> pd.DataFrame:
    """Users per (mechanism, integer report) in this batch."""
    keys = frame[LDP_MECHANISM_CODE].to_numpy(np.int64) * side.output_stride + frame["report"].to_numpy(np.int64)
    distinct, users = np.unique(keys, return_counts=True)
    return pd.DataFrame({"report_key": distinct, "users": users.astype(np.int64)})


def bit_vector_count_rows(frame: pd.DataFrame, side: None) -> pd.DataFrame:
    """Users per (mechanism, RAPPOR bit vector) in this batch, keyed ``"<code>:<bits>"``."""
    keys = frame[LDP_MECHANISM_CODE].astype(str) + ":" + frame["report"].astype(str)
    users = keys.value_counts(sort=False)
    return pd.DataFrame({"report_key": users.index.to_numpy(dtype=object), "users": users.to_numpy(np.int64)})


@dataclass(frozen=True)
class BitSumSide:
    bits: int


def bit_matrix(texts: Sequence[str], bits: int) -> np.ndarray:
    """RAPPOR reports written as ``0``/``1`` strings (character ``x`` is bit ``x``) as an
    ``(n, bits)`` int64 0/1 matrix."""
    joined = "".join(texts).encode("ascii")
    return (np.frombuffer(joined, dtype=np.uint8).reshape(len(texts), bits) - ord("0")).astype(np.int64)


def rappor_bit_sum_rows(frame: pd.DataFrame, side: BitSumSide) -> pd.DataFrame:
    """Per mechanism in this batch: reports with each bit set (key ``code * (k + 1) + x``) and
    users (key ``code * (k + 1) + k``)."""
    k = side.bits
    codes = frame[LDP_MECHANISM_CODE].to_numpy(np.int64)
    bits = bit_matrix(frame["report"].to_numpy(dtype=object).tolist(), k)
    keys, users = [], []
    for code in np.unique(codes):
        members = codes == code
        keys.append(code * (k + 1) + np.arange(k + 1, dtype=np.int64))
        users.append(np.append(bits[members].sum(axis=0), members.sum()))
    return pd.DataFrame({"bit_key": np.concatenate(keys), "users": np.concatenate(users).astype(np.int64)})
