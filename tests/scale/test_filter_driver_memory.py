"""The filter release never holds its records on the driver (issue 15), with stored filters and the
evaluation off (the evaluation and the filters' training still read records on the driver).

``make test-scale`` (marker ``scale``): releases of 10^6 and 10^7 records from a generated
partitioned Parquet folder (250,000 records per file), on the local engine and on Spark
``local[2]``, each by ``privlake run`` in a child process whose own resident memory is sampled (the
Python driver process alone): at 10^7 it stays within 1.2x of its value at 10^6, and under 1 GiB.
On the local engine the tasks run in the driver process, so this also bounds what a task holds
(one staged file while it is privatized and written, one file's released rows while they are
checked, one bucket of record numbers).

``make test`` keeps a small version: 10^4 and 10^5 records (2,500 per file) on the local engine,
traced allocations plus Arrow's pool: ten times the records must add less than a quarter of a
record's staged codes (24 bytes) each to the peak; a driver that read the privatized rows back (as
the output gate did before) adds many times that.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scale.filter_scale import write_records
from tests.scale.harness import (
    assert_flat_driver_memory,
    assert_traced_growth,
    scale_inputs_fixture,
    traced_run,
)


def traced_release(config: Path) -> dict:
    return traced_run("tests.scale.filter_scale", config)


def test_ten_times_the_records_add_almost_nothing_to_the_drivers_peak(tmp_path: Path) -> None:
    small = traced_release(write_records(tmp_path / "small", 10**4, 2_500))
    large = traced_release(write_records(tmp_path / "large", 10**5, 2_500))
    assert small["status"] == large["status"] == "published"
    assert (small["rows"], large["rows"]) == (10**4, 10**5)
    assert_traced_growth(small, large)


scale_inputs = scale_inputs_fixture("filter", write_records)


@pytest.mark.scale
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_driver_memory_is_flat_from_a_million_to_ten_million_records(scale_inputs: dict[int, Path],
                                                                     engine: str) -> None:
    assert_flat_driver_memory("filter", scale_inputs, engine,
                              lambda n, summary: summary.startswith(f"published {n} privatized records"), timeout=3600)
