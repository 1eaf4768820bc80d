"""The ldp release never holds the reports on the driver (issue 15).

``make test-scale`` (marker ``scale``): releases of 10^6 and 10^7 reports from a generated
partitioned Parquet folder (250,000 reports per file), on the local engine and on Spark
``local[2]``, each by ``privlake run`` in a child process whose own resident memory is sampled
(``benchmarks/harness.py``'s ``TreeSampler``: the Python driver process alone, not the JVM, the
Spark workers or the gate's worker): at 10^7 it stays within 1.2x of its value at 10^6, and under
1 GiB. On the local engine the engine's tasks run in the driver process, so this also bounds what
a task holds (a fragment, a bucket of user ids).

``make test`` keeps a small version: 10^4 and 10^5 reports (2,500 per file) on the local engine,
each in a child process that traces its allocations during the release (Python's, NumPy's and
pandas' buffers through ``tracemalloc``, and Arrow's memory pool peak), with the duplicate check's
buckets sized small so that 10^5 reports spread over more buckets as 10^7 do by default. Ten times
the reports must add less than a quarter of their own size (24 bytes a report) to the peak: a
driver that read the reports into one frame (as the release did before) adds more than all of it.
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
from tests.scale.ldp_scale import write_reports


def traced_release(config: Path) -> dict:
    return traced_run("tests.scale.ldp_scale", config, str(64 << 10))


def test_ten_times_the_reports_add_almost_nothing_to_the_drivers_peak(tmp_path: Path) -> None:
    small = traced_release(write_reports(tmp_path / "small", 10**4, 2_500))
    large = traced_release(write_reports(tmp_path / "large", 10**5, 2_500))
    assert_traced_growth(small, large)


scale_inputs = scale_inputs_fixture("ldp", write_reports)


@pytest.mark.scale
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_driver_memory_is_flat_from_a_million_to_ten_million_reports(scale_inputs: dict[int, Path],
                                                                     engine: str) -> None:
    assert_flat_driver_memory("ldp", scale_inputs, engine, lambda n, summary: f"from {n} reports" in summary,
                              timeout=1800)
