"""The ldp release's worker-side counting (``pipelines/ldp/blocks.py``) on hand-built batches against
hand-computed counts; partial counts of any split of the reports add up to the counts of the whole."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipelines.ldp.blocks import (
    BitSumSide,
    ReportKeySide,
    bit_matrix,
    bit_vector_count_rows,
    rappor_bit_sum_rows,
    report_count_rows,
)
from schemas.ldp.tables import LDP_MECHANISM_CODE


def batch(codes: list[int], reports: list) -> pd.DataFrame:
    return pd.DataFrame({LDP_MECHANISM_CODE: np.array(codes, dtype=np.int32), "report": reports})


def as_dict(frame: pd.DataFrame, key: str) -> dict:
    return dict(zip(frame[key].tolist(), frame["users"].tolist(), strict=True))


def test_report_counts_are_keyed_by_code_times_stride_plus_report() -> None:
    frame = batch([0, 1, 0, 2, 1, 0], np.array([3, 3, 3, 0, 9, 1], dtype=np.int64))
    result = report_count_rows(frame, ReportKeySide(output_stride=10))
    assert result["report_key"].dtype == np.int64 and result["users"].dtype == np.int64
    assert as_dict(result, "report_key") == {3: 2, 1: 1, 13: 1, 19: 1, 20: 1}
    assert result["report_key"].tolist() == sorted(result["report_key"].tolist())


def test_bit_vector_counts_are_keyed_by_code_and_bits() -> None:
    frame = batch([0, 0, 1, 0, 1], ["010", "010", "010", "111", "000"])
    result = bit_vector_count_rows(frame, None)
    assert result["users"].dtype == np.int64
    assert as_dict(result, "report_key") == {"0:010": 2, "1:010": 1, "0:111": 1, "1:000": 1}


def test_bit_matrix_reads_character_x_as_bit_x() -> None:
    matrix = bit_matrix(["0110", "1000", "0001"], 4)
    assert matrix.dtype == np.int64
    np.testing.assert_array_equal(matrix, [[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1]])
    with pytest.raises(ValueError):
        bit_matrix(["01", "011"], 2)


def test_rappor_bit_sums_count_set_bits_and_users_per_mechanism() -> None:
    frame = batch([2, 0, 2, 2], ["101", "011", "100", "111"])
    result = rappor_bit_sum_rows(frame, BitSumSide(bits=3))
    assert result["bit_key"].dtype == np.int64 and result["users"].dtype == np.int64
    # Keys code * 4 + x: bits 0..2 then the mechanism's users at x = 3.
    assert as_dict(result, "bit_key") == {0: 0, 1: 1, 2: 1, 3: 1, 8: 3, 9: 1, 10: 2, 11: 3}


@pytest.mark.parametrize("pieces", [2, 5])
def test_partial_counts_of_any_split_add_up_to_the_whole(pieces: int) -> None:
    rng = np.random.default_rng(pieces)
    codes = rng.integers(0, 3, 500).tolist()
    integers = batch(codes, rng.integers(0, 6, 500))
    bits = batch(codes, ["".join(map(str, row)) for row in rng.integers(0, 2, (500, 4))])
    cuts = np.array_split(np.arange(500), pieces)
    for function, frame, side, key in (
        (report_count_rows, integers, ReportKeySide(6), "report_key"),
        (bit_vector_count_rows, bits, None, "report_key"),
        (rappor_bit_sum_rows, bits, BitSumSide(4), "bit_key"),
    ):
        whole = as_dict(function(frame, side), key)
        summed: dict = {}
        for rows in cuts:
            for name, users in as_dict(function(frame.iloc[rows].reset_index(drop=True), side), key).items():
                summed[name] = summed.get(name, 0) + users
        assert summed == whole
    totals = as_dict(report_count_rows(integers, ReportKeySide(6)), "report_key")
    direct = pd.Series(np.array(codes) * 6 + integers["report"].to_numpy()).value_counts().to_dict()
    assert totals == direct
