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

import json
import subprocess
from pathlib import Path

import pytest

from tests.scale.filter_scale import write_records
from tests.scale.test_ldp_driver_memory import GIB, PYTHON, ROOT, child_environment
from tests.scale.test_tabular_driver_memory import sampled_release


def traced_release(config: Path) -> dict:
    done = subprocess.run([PYTHON, "-m", "tests.scale.filter_scale", str(config), "local", "--traced"],
                          capture_output=True, text=True, cwd=ROOT, env=child_environment(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ten_times_the_records_add_almost_nothing_to_the_drivers_peak(tmp_path: Path) -> None:
    small = traced_release(write_records(tmp_path / "small", 10**4, 2_500))
    large = traced_release(write_records(tmp_path / "large", 10**5, 2_500))
    assert (small["n"], large["n"]) == (10**4, 10**5) and small["status"] == large["status"] == "published"
    assert (small["rows"], large["rows"]) == (10**4, 10**5)
    peak_small = small["traced_peak_bytes"] + small["arrow_peak_bytes"]
    peak_large = large["traced_peak_bytes"] + large["arrow_peak_bytes"]
    growth = peak_large - peak_small
    assert growth < 0.25 * 24 * (large["n"] - small["n"]), (peak_small, peak_large)
    assert peak_large <= 1.2 * peak_small, (peak_small, peak_large)


@pytest.fixture(scope="module")
def scale_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return {n: write_records(tmp_path_factory.mktemp(f"filter-{n}"), n, 250_000) for n in (10**6, 10**7)}


@pytest.mark.scale
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_driver_memory_is_flat_from_a_million_to_ten_million_records(scale_inputs: dict[int, Path],
                                                                     engine: str) -> None:
    measured = {n: sampled_release(config, engine) for n, config in scale_inputs.items()}
    print(f"\nfilter driver peak RSS on {engine}: " + json.dumps(measured))
    for n, figures in measured.items():
        assert figures["summary"].startswith(f"published {n} privatized records"), figures["summary"]
    small, large = measured[10**6]["driver_peak_rss_mib"], measured[10**7]["driver_peak_rss_mib"]
    assert large <= 1.2 * small, measured
    assert large * (1 << 20) < GIB, measured
