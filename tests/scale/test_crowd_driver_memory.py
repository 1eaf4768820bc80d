"""The crowd release never holds the claims on the driver (issue 15).

``make test-scale`` (marker ``scale``): releases of 10^6 and 10^7 claims from a generated
partitioned Parquet folder (250,000 claims per file), on Spark ``local[2]`` and on the local engine,
each by ``privlake run`` in a child process whose own resident memory is sampled
(``benchmarks/harness.py``'s ``TreeSampler``: the Python driver process alone, not the JVM, the Spark
workers or the gate's worker): at 10^7 it stays within 1.2x of its value at 10^6, and under 1 GiB.
On the local engine the engine's tasks run in the driver process, so this also bounds what a task
holds: one input file, one pass-2 task's claims (about ``engine_input.TASK_CLAIMS``), and in the
later stages one group file at a time (``read_groups_streaming``: the local engine maps the staged
group files one by one without holding them).

``make test`` keeps a small version: 10^4 and 10^5 claims (2,500 per file) on the local engine,
each in a child process that traces its allocations during the input pass (listing, both engine
passes, the gate: Python's, NumPy's and pandas' buffers through ``tracemalloc``, and Arrow's memory
pool peak), with the object buckets and pass-2 tasks sized small so that 10^5 claims spread over
more of them as 10^7 do by default. Ten times the claims must add less than a quarter of their own size (24 bytes
a claim) to the peak: a driver that read the claims into one frame (as the release did before
issue 15) adds more than all of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scale.crowd_scale import write_claims
from tests.scale.harness import (
    assert_flat_driver_memory,
    assert_traced_growth,
    scale_inputs_fixture,
    traced_run,
)

TEST_SECRET = "ab" * 32


def traced_input_pass(config: Path) -> dict:
    return traced_run("tests.scale.crowd_scale", config, str(16 << 10), test_secret=TEST_SECRET)


def test_ten_times_the_claims_add_almost_nothing_to_the_drivers_peak(tmp_path: Path) -> None:
    small = traced_input_pass(write_claims(tmp_path / "small", 10**4, 2_500, sources=40))
    large = traced_input_pass(write_claims(tmp_path / "large", 10**5, 2_500, sources=40))
    assert_traced_growth(small, large)


scale_inputs = scale_inputs_fixture("crowd", write_claims)


@pytest.mark.scale
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_driver_memory_is_flat_from_a_million_to_ten_million_claims(scale_inputs: dict[int, Path],
                                                                    engine: str) -> None:
    assert_flat_driver_memory("crowd", scale_inputs, engine, lambda n, summary: summary.startswith("published "),
                              timeout=3600, test_secret=TEST_SECRET)
