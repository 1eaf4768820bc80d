"""The driver-memory harness every kind's scale test shares (issue 15).

Parent side (the ``test_*_driver_memory.py`` modules):

- :func:`traced_run` runs ``python -m tests.scale.<kind>_scale CONFIG local --traced [...]`` in a
  child and returns the JSON line it prints; :func:`assert_traced_growth` is the ``make test``
  comparison of 10^4 and 10^5 rows: the same ``n`` as written, ten times the rows add less than a
  quarter of ``bytes_per_row`` a row to the traced peak (Python's allocations plus Arrow's pool
  peak), and the larger peak is within 1.2x of the smaller.
- :func:`scale_inputs_fixture` makes a module's ``scale_inputs`` fixture (10^6 and 10^7 rows, 250,000
  a file); :func:`assert_flat_driver_memory` runs ``privlake run`` on both in a child each
  (:func:`sampled_release`: the Python driver process alone sampled every 50 ms with
  ``benchmarks/harness.py``'s ``TreeSampler``, not the JVM, the Spark workers or the gate's worker),
  prints the figures, checks each summary and that at 10^7 the driver's peak stays within 1.2x of
  its value at 10^6, and under 1 GiB.

Child side (the ``<kind>_scale.py`` modules, run with ``python -m``): :func:`write_partition` and
:func:`write_config` (a generated input's files, its config and its test lake), :func:`start_child` (the gate's worker, as ``privlake
run`` starts it), :func:`peak_memory` (the traced figures of a block), :func:`timed_release` (one
release on a named engine, timed and optionally traced), :func:`release_figures` (its input rows,
released rows and status with them) and :func:`child_main` (the command line).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
PRIVLAKE = str(Path(PYTHON).with_name("privlake"))
GIB = 1 << 30
MIB = 1 << 20
TRACED_SIZES = (10**4, 10**5)
SCALE_SIZES = (10**6, 10**7)
SCALE_ROWS_PER_FILE = 250_000

# ----------------------------------------------------------------------------- parent side


def child_environment(test_secret: str | None = None) -> dict[str, str]:
    """This process's environment with the repository on ``PYTHONPATH``, Spark's workers on this
    Python and, when given, ``test_secret`` as ``PRIVLAKE_TEST_SECRET`` unless one is set."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = str(ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
    environment.setdefault("PYSPARK_PYTHON", PYTHON)
    if test_secret is not None:
        environment.setdefault("PRIVLAKE_TEST_SECRET", test_secret)
    return environment


def traced_run(module: str, config: Path, *arguments: str, test_secret: str | None = None) -> dict:
    """``python -m MODULE CONFIG local --traced ARGUMENTS`` in a child: its last JSON line."""
    done = subprocess.run([PYTHON, "-m", module, str(config), "local", "--traced", *arguments],
                          capture_output=True, text=True, cwd=ROOT, env=child_environment(test_secret), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_traced_growth(small: dict, large: dict, bytes_per_row: int = 24) -> None:
    """Ten times the rows add less than a quarter of ``bytes_per_row`` a row to the traced peak,
    and the larger peak is within 1.2x of the smaller (module docstring)."""
    assert (small["n"], large["n"]) == TRACED_SIZES
    peak_small = small["traced_peak_bytes"] + small["arrow_peak_bytes"]
    peak_large = large["traced_peak_bytes"] + large["arrow_peak_bytes"]
    growth = peak_large - peak_small
    assert growth < 0.25 * bytes_per_row * (large["n"] - small["n"]), (peak_small, peak_large)
    assert peak_large <= 1.2 * peak_small, (peak_small, peak_large)


def sampled_release(config: Path, engine: str, timeout: float = 3600, test_secret: str | None = None) -> dict:
    """``privlake run`` in a child, its own peak resident memory sampled every 50 ms."""
    from benchmarks.harness import TreeSampler

    command = [PRIVLAKE, "run", str(config), "--engine", engine, "--release-id", f"scale-{engine}"]
    if engine == "spark":
        command += ["--master", "local[2]"]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=child_environment(test_secret), cwd=config.parent)
    sampler = TreeSampler(process.pid, interval=0.05).start()
    out, err = process.communicate(timeout=timeout)
    sampler.stop()
    seconds = time.perf_counter() - start
    assert process.returncode == 0, err[-3000:]
    return {"seconds": seconds, "driver_peak_rss_mib": sampler.peak_root / MIB,
            "tree_peak_rss_mib": sampler.peak_total / MIB, "summary": out.strip().splitlines()[0]}


def scale_inputs_fixture(kind: str, write: Callable[[Path, int, int], Path]) -> Any:
    """A module-scoped ``scale_inputs`` fixture: ``{n: config}`` for 10^6 and 10^7 rows written by
    ``write(folder, n, rows_per_file)`` (250,000 rows a file) under temporary folders."""
    import pytest  # here: the child side runs without pytest's import

    @pytest.fixture(scope="module")
    def scale_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
        return {n: write(tmp_path_factory.mktemp(f"{kind}-{n}"), n, SCALE_ROWS_PER_FILE) for n in SCALE_SIZES}

    return scale_inputs


def assert_flat_driver_memory(kind: str, inputs: dict[int, Path], engine: str,
                              published: Callable[[int, str], bool], timeout: float = 3600,
                              test_secret: str | None = None) -> dict[int, dict]:
    """The sampled releases of ``inputs`` on ``engine``, printed; each summary must satisfy
    ``published(n, summary)``, and the driver's peak at 10^7 stays within 1.2x of its value at 10^6
    and under 1 GiB."""
    measured = {n: sampled_release(config, engine, timeout, test_secret) for n, config in inputs.items()}
    print(f"\n{kind} driver peak RSS on {engine}: " + json.dumps(measured))
    for n, figures in measured.items():
        assert published(n, figures["summary"]), figures["summary"]
    small, large = measured[SCALE_SIZES[0]]["driver_peak_rss_mib"], measured[SCALE_SIZES[1]]["driver_peak_rss_mib"]
    assert large <= 1.2 * small, measured
    assert large * MIB < GIB, measured
    return measured


# ----------------------------------------------------------------------------- child side


def write_partition(root: Path, key: str, index: int, table: Any) -> None:
    """``table`` (Arrow) as the hive partition ``root/<key>=<index, 4 digits>/part-00000.parquet``."""
    import pyarrow.parquet as pq

    part = root / f"{key}={index:04d}"
    part.mkdir(parents=True)
    pq.write_table(table, part / "part-00000.parquet")


def write_config(folder: Path, config: dict) -> Path:
    """``config`` as ``folder/<kind>.yaml`` (its path returned), its lake (``config["lake"]``) a
    test lake with a budget for ``config["dataset"]``."""
    import yaml

    from tests.lake_setup import prepare_lake

    path = folder / f"{config['kind']}.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_lake(Path(config["lake"]), config["dataset"])
    return path


def start_child(test_secret: str | None = None) -> None:
    """The gate's worker started, as ``privlake run`` does (GX runs in its own process), and
    ``test_secret`` as ``PRIVLAKE_TEST_SECRET`` unless one is set."""
    from pipelines.platform.validation import start_gate_worker

    start_gate_worker()
    if test_secret is not None:
        os.environ.setdefault("PRIVLAKE_TEST_SECRET", test_secret)


@contextmanager
def peak_memory(figures: dict, traced: bool = True) -> Iterator[dict]:
    """With ``traced``, the block's peak of Python's traced allocations (NumPy and pandas buffers
    included) as ``figures["traced_peak_bytes"]`` and Arrow's memory pool peak as
    ``figures["arrow_peak_bytes"]``; without, nothing."""
    if not traced:
        yield figures
        return
    import tracemalloc

    import pyarrow as pa

    tracemalloc.start()
    arrow_before = pa.default_memory_pool().bytes_allocated()
    yield figures
    _, traced_peak = tracemalloc.get_traced_memory()
    figures["traced_peak_bytes"] = traced_peak
    figures["arrow_peak_bytes"] = pa.default_memory_pool().max_memory() - arrow_before


def timed_release(run: Callable[..., Any], config_path: Path, engine_name: str, release_id: str,
                  traced: bool) -> tuple[Any, dict]:
    """``run(config, release_id=..., engine=...)`` on a new ``engine_name`` engine in this process:
    its outcome and figures (wall ``seconds``; traced, :func:`peak_memory`'s)."""
    from pipelines.engines import make_engine
    from pipelines.platform.config import load_config

    config = load_config(config_path)
    figures: dict = {}
    with peak_memory(figures, traced):
        with make_engine(engine_name) as engine:
            start = time.perf_counter()
            outcome = run(config, release_id=release_id, engine=engine)
            figures["seconds"] = time.perf_counter() - start
    return outcome, figures


def release_figures(run: Callable[..., Any], config_path: Path, engine_name: str, traced: bool) -> dict:
    """:func:`timed_release` (a new release id) with the input rows (``n``), the released rows and the
    status (a kind whose operator record has ``input_rows``)."""
    outcome, figures = timed_release(run, config_path, engine_name, f"scale-{time.time_ns()}", traced)
    return {"n": outcome.internal["input_rows"], "rows": outcome.manifest["rows"], "status": outcome.status, **figures}


def child_main(measure: Callable[[Path, str, Any], dict], arguments: list[str], bucket_bytes: bool = False) -> None:
    """``CONFIG ENGINE [--traced]`` (``--traced BUCKET_BYTES`` with ``bucket_bytes``): prints
    ``measure(config, engine, traced)`` as one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("config", type=Path)
    parser.add_argument("engine")
    if bucket_bytes:
        parser.add_argument("--traced", type=int, default=None, metavar="BUCKET_BYTES")
    else:
        parser.add_argument("--traced", action="store_true")
    options = parser.parse_args(arguments)
    print(json.dumps(measure(options.config, options.engine, options.traced)))
