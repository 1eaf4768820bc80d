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

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.harness import TreeSampler
from tests.scale.crowd_scale import write_claims

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
PRIVLAKE = str(Path(PYTHON).with_name("privlake"))
GIB = 1 << 30


def child_environment() -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = str(ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
    environment.setdefault("PYSPARK_PYTHON", PYTHON)
    environment.setdefault("PRIVLAKE_TEST_SECRET", "ab" * 32)
    return environment


def traced_input_pass(config: Path) -> dict:
    done = subprocess.run([PYTHON, "-m", "tests.scale.crowd_scale", str(config), "local", "--traced", str(16 << 10)],
                          capture_output=True, text=True, cwd=ROOT, env=child_environment(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ten_times_the_claims_add_almost_nothing_to_the_drivers_peak(tmp_path: Path) -> None:
    small = traced_input_pass(write_claims(tmp_path / "small", 10**4, 2_500, sources=40))
    large = traced_input_pass(write_claims(tmp_path / "large", 10**5, 2_500, sources=40))
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
    out, err = process.communicate(timeout=3600)
    sampler.stop()
    seconds = time.perf_counter() - start
    assert process.returncode == 0, err[-3000:]
    return {"seconds": seconds, "driver_peak_rss_mib": sampler.peak_root / (1 << 20),
            "tree_peak_rss_mib": sampler.peak_total / (1 << 20), "summary": out.strip().splitlines()[0]}


@pytest.fixture(scope="module")
def scale_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return {n: write_claims(tmp_path_factory.mktemp(f"crowd-{n}"), n, 250_000) for n in (10**6, 10**7)}


@pytest.mark.scale
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_driver_memory_is_flat_from_a_million_to_ten_million_claims(scale_inputs: dict[int, Path],
                                                                    engine: str) -> None:
    measured = {n: sampled_release(config, engine) for n, config in scale_inputs.items()}
    print(f"\ncrowd driver peak RSS on {engine}: " + json.dumps(measured))
    for figures in measured.values():
        assert figures["summary"].startswith("published "), figures["summary"]
    small, large = measured[10**6]["driver_peak_rss_mib"], measured[10**7]["driver_peak_rss_mib"]
    assert large <= 1.2 * small, measured
    assert large * (1 << 20) < GIB, measured
