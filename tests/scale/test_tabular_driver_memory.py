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

import json
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks.harness import TreeSampler
from tests.scale.tabular_scale import write_records
from tests.scale.test_ldp_driver_memory import GIB, PRIVLAKE, PYTHON, ROOT, child_environment


def traced_release(config: Path) -> dict:
    done = subprocess.run([PYTHON, "-m", "tests.scale.tabular_scale", str(config), "local", "--traced"],
                          capture_output=True, text=True, cwd=ROOT, env=child_environment(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ten_times_the_records_add_almost_nothing_to_the_drivers_peak(tmp_path: Path) -> None:
    small = traced_release(write_records(tmp_path / "small", 10**4, 2_500))
    large = traced_release(write_records(tmp_path / "large", 10**5, 2_500))
    assert (small["n"], large["n"]) == (10**4, 10**5) and small["status"] == large["status"] == "published"
    peak_small = small["traced_peak_bytes"] + small["arrow_peak_bytes"]
    peak_large = large["traced_peak_bytes"] + large["arrow_peak_bytes"]
    growth = peak_large - peak_small
    assert growth < 0.25 * 24 * (large["n"] - small["n"]), (peak_small, peak_large)
    assert peak_large <= 1.2 * peak_small, (peak_small, peak_large)


def sampled_release(config: Path, engine: str) -> dict:
    """``privlake run`` in a child, its own peak resident memory sampled every 50 ms."""
    command = [PRIVLAKE, "run", str(config), "--engine", engine, "--release-id", f"scale-{engine}"]
    if engine == "spark":
        command += ["--master", "local[2]"]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=child_environment(), cwd=config.parent)
    sampler = TreeSampler(process.pid, interval=0.05).start()
    out, err = process.communicate(timeout=3600)
    sampler.stop()
    seconds = time.perf_counter() - start
    assert process.returncode == 0, err[-3000:]
    return {"seconds": seconds, "driver_peak_rss_mib": sampler.peak_root / (1 << 20),
            "tree_peak_rss_mib": sampler.peak_total / (1 << 20), "summary": out.strip().splitlines()[0]}


@pytest.fixture(scope="module")
def scale_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return {n: write_records(tmp_path_factory.mktemp(f"tabular-{n}"), n, 250_000) for n in (10**6, 10**7)}


@pytest.mark.scale
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_driver_memory_is_flat_from_a_million_to_ten_million_records(scale_inputs: dict[int, Path],
                                                                     engine: str) -> None:
    measured = {n: sampled_release(config, engine) for n, config in scale_inputs.items()}
    print(f"\ntabular driver peak RSS on {engine}: " + json.dumps(measured))
    for figures in measured.values():
        assert figures["summary"].startswith("published 10000 synthetic records"), figures["summary"]
    small, large = measured[10**6]["driver_peak_rss_mib"], measured[10**7]["driver_peak_rss_mib"]
    assert large <= 1.2 * small, measured
    assert large * (1 << 20) < GIB, measured
