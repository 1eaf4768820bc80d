"""The tabular release never holds its records on the driver (issue 15).

``make test-scale`` (marker ``scale``): releases of 10^6 and 10^7 records from a generated
partitioned Parquet folder (250,000 records per file; 10,000 released records, so the output stays
small while the input grows), on the local engine and on Spark ``local[2]``, each by ``privlake
run`` in a child process whose own resident memory is sampled (``benchmarks/harness.py``'s
``TreeSampler``: the Python driver process alone, not the JVM, the Spark workers or the gate's
worker): at 10^7 it stays within 1.2x of its value at 10^6, and under 1 GiB. On the local engine
the engine's tasks run in the driver process, so this also bounds what a task holds (a fragment,
the split's one byte per record).

``make test`` keeps a small version: 10^4 and 10^5 records (2,500 per file) on the local engine,
each in a child process that traces its allocations during the release (Python's, NumPy's and
pandas' buffers through ``tracemalloc``, and Arrow's memory pool peak). Ten times the records must
add less than a quarter of their codes' size (six int32 codes, 24 bytes a record) to the peak: a
driver that read the records into a frame (as the release did before) adds many times all of it,
and one that collected only the structure part's codes (a quarter of the records) adds more.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scale.harness import (
    assert_flat_driver_memory,
    assert_traced_growth,
    scale_inputs_fixture,
    traced_run,
)
from tests.scale.tabular_scale import write_records


def traced_release(config: Path) -> dict:
    return traced_run("tests.scale.tabular_scale", config)


def test_ten_times_the_records_add_almost_nothing_to_the_drivers_peak(tmp_path: Path) -> None:
    small = traced_release(write_records(tmp_path / "small", 10**4, 2_500))
    large = traced_release(write_records(tmp_path / "large", 10**5, 2_500))
    assert small["status"] == large["status"] == "published"
    assert_traced_growth(small, large)


scale_inputs = scale_inputs_fixture("tabular", write_records)


@pytest.mark.scale
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_driver_memory_is_flat_from_a_million_to_ten_million_records(scale_inputs: dict[int, Path],
                                                                     engine: str) -> None:
    assert_flat_driver_memory("tabular", scale_inputs, engine,
                              lambda n, summary: summary.startswith("published 10000 synthetic records"), timeout=3600)
