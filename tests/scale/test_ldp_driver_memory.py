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

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.harness import TreeSampler
from tests.scale.ldp_scale import write_reports

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
PRIVLAKE = str(Path(PYTHON).with_name("privlake"))
GIB = 1 << 30


def child_environment() -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = str(ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
    environment.setdefault("PYSPARK_PYTHON", PYTHON)
    return environment


def traced_release(config: Path) -> dict:
    done = subprocess.run([PYTHON, "-m", "tests.scale.ldp_scale", str(config), "local", "--traced", str(64 << 10)],
                          capture_output=True, text=True, cwd=ROOT, env=child_environment(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ten_times_the_reports_add_almost_nothing_to_the_drivers_peak(tmp_path: Path) -> None:
    small = traced_release(write_reports(tmp_path / "small", 10**4, 2_500))
    large = traced_release(write_reports(tmp_path / "large", 10**5, 2_500))
    assert (small["n"], large["n"]) == (10**4, 10**5)
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
    out, err = process.communicate(timeout=1800)
    sampler.stop()
    seconds = time.perf_counter() - start
    assert process.returncode == 0, err[-3000:]
    return {"seconds": seconds, "driver_peak_rss_mib": sampler.peak_root / (1 << 20),
            "tree_peak_rss_mib": sampler.peak_total / (1 << 20), "summary": out.strip().splitlines()[0]}


@pytest.fixture(scope="module")
def scale_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return {n: write_reports(tmp_path_factory.mktemp(f"ldp-{n}"), n, 250_000) for n in (10**6, 10**7)}


@pytest.mark.scale
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_driver_memory_is_flat_from_a_million_to_ten_million_reports(scale_inputs: dict[int, Path],
                                                                     engine: str) -> None:
    measured = {n: sampled_release(config, engine) for n, config in scale_inputs.items()}
    print(f"\nldp driver peak RSS on {engine}: " + json.dumps(measured))
    for n, figures in measured.items():
        assert f"from {n} reports" in figures["summary"], figures["summary"]
    small, large = measured[10**6]["driver_peak_rss_mib"], measured[10**7]["driver_peak_rss_mib"]
    assert large <= 1.2 * small, measured
    assert large * (1 << 20) < GIB, measured
