"""What every benchmark shares, once: thread pinning, the machine it ran on, timing, the peak memory
of a process tree, writing results, and one Markdown table writer.

Importing this module has no side effect and loads nothing numerical (the standard library only),
so that a script can pin its threads with it before NumPy, BLAS, numba or torch load::

    import os
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import harness

    os.environ.update(harness.one_thread())  # before any numerical import

    import numpy as np
    ...

A script that does not pin (its children get their thread settings explicitly, or it never did)
just leaves that line out.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import platform
import resource
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = ROOT.parent / "shared" / "datasets"

# ----------------------------------------------------------------------------- threads

BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
THREAD_VARIABLES = (*BLAS_VARIABLES, "NUMBA_NUM_THREADS")


def one_thread(environment: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The thread variables (BLAS, OpenMP, MKL, numba) at 1 unless ``environment`` sets them:
    ``os.environ.update(one_thread())`` before any numerical import pins this process and the
    children it starts to one thread each."""
    return {variable: environment.get(variable, "1") for variable in THREAD_VARIABLES}


# ----------------------------------------------------------------------------- the machine


def processor_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def total_memory() -> str:
    """``MemTotal`` from ``/proc/meminfo`` as written there (e.g. ``24684096 kB``)."""
    try:
        return Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    except (OSError, IndexError):
        return ""


def machine_basics() -> dict[str, Any]:
    """Platform, processor, cores, memory, Python version and the load average now (these machines
    are shared and noisy: the numbers are read next to the load average at the start)."""
    return {
        "platform": platform.platform(),
        "processor": processor_model(),
        "cores": os.cpu_count(),
        "memory": total_memory(),
        "python": platform.python_version(),
        "load_average_at_start": list(os.getloadavg()),
    }


def uptime() -> str:
    """The output of ``uptime`` (empty where it cannot run)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# ----------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    wall_seconds: float
    cpu_seconds: float
    """CPU seconds of this process (``time.process_time``)."""


def timed(function: Callable[..., Any], *arguments: Any, **keywords: Any) -> tuple[Any, Timing]:
    """``function(*arguments, **keywords)`` and its wall and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(*arguments, **keywords)
    return result, Timing(time.perf_counter() - wall, time.process_time() - cpu)


def accumulating(function: Callable[..., Any], sink: dict[str, float], name: str) -> Callable[..., Any]:
    """``function`` that adds the wall seconds of every call to ``sink[name]`` (to time the
    functions a pipeline module calls, by replacing them on the module, with no pipeline code
    changed)."""

    def wrapper(*arguments: Any, **keywords: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*arguments, **keywords)
        finally:
            sink[name] = sink.get(name, 0.0) + time.perf_counter() - start

    return wrapper


# ----------------------------------------------------------------------------- memory


def max_rss_mib(children: bool = False) -> float:
    """The high-water mark of this process's resident set (with ``children``: of its reaped
    children), in MiB (``ru_maxrss`` is in KiB on Linux)."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024


def process_table() -> dict[int, tuple[int, str, int, float]]:
    """Every process from ``/proc``: parent, command name, resident bytes, CPU seconds (user +
    system, its own and that of the children it has reaped, so the CPU of a worker that exited
    stays in its parent's)."""
    table = {}
    page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                text = handle.read()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        fields = text.rsplit(")", 1)[1].split()
        try:
            table[int(entry)] = (int(fields[1]), name, int(fields[21]) * page, sum(map(int, fields[11:15])) / tick)
        except (IndexError, ValueError):
            continue
    return table


def process_tree(root: int, table: dict[int, tuple[int, str, int, float]] | None = None) -> list[int]:
    """``root`` and all its descendants that are in ``table`` (default: the processes now)."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if pid in table:
            found.append(pid)
    return found


class TreeSampler:
    """Peak resident memory of a process tree — the whole tree, its root, the JVMs in it, the
    other descendants (Python workers) and all descendants together (the tree without its root) —
    and the CPU seconds of every process seen in it, sampled from ``/proc`` every ``interval``
    seconds until ``stop``."""

    def __init__(self, root: int, interval: float = 0.2):
        self.root, self.interval = root, interval
        self.peak_total = self.peak_jvm = self.peak_workers = self.peak_root = self.peak_descendants = 0
        self.cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TreeSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        table = process_table()
        total = jvm = workers = root = 0
        for pid in process_tree(self.root, table):
            _, name, rss, cpu = table[pid]
            self.cpu[pid] = max(self.cpu.get(pid, 0.0), cpu)
            total += rss
            if pid == self.root:
                root = rss
                self.peak_root = max(self.peak_root, rss)
            elif name == "java":
                jvm += rss
            else:
                workers += rss
        self.peak_total = max(self.peak_total, total)
        self.peak_jvm = max(self.peak_jvm, jvm)
        self.peak_workers = max(self.peak_workers, workers)
        self.peak_descendants = max(self.peak_descendants, total - root)


def run_json_child(command: Sequence[str], environment: Mapping[str, str] | None = None) -> tuple[Any, TreeSampler]:
    """Run ``command`` with the memory of its process tree sampled; its last line on stdout is
    JSON. Returns that JSON and the sampler (peaks in bytes: ``peak_total`` etc.)."""
    process = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=None if environment is None else dict(environment),
    )
    sampler = TreeSampler(process.pid).start()
    out, err = process.communicate()
    sampler.stop()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{err[-4000:]}")
    return json.loads(out.strip().splitlines()[-1]), sampler


# ----------------------------------------------------------------------------- results


def add_results_option(parser: argparse.ArgumentParser) -> None:
    """``--results-dir``: where the script writes its JSON, Markdown and figures."""
    parser.add_argument(
        "--results-dir", type=Path, default=RESULTS, help="where to write the results (default: benchmarks/results)"
    )


def json_default(value: Any) -> Any:
    """A ``json.dumps`` default for NumPy arrays (lists) and scalars (Python numbers)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def json_ready(value: Any) -> Any:
    """``value`` with NumPy scalars as Python numbers, NaN as ``None``, tuples as lists and every
    dictionary key as text (what the JSON will read back as)."""
    import numpy as np

    if isinstance(value, dict):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(item) for item in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        number = float(value)
        return None if math.isnan(number) else number
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def write_json(folder: Path, stem: str, data: Any, **dumps: Any) -> Path:
    """``data`` as ``folder/stem.json`` (``json.dumps`` with ``dumps``, e.g. ``indent``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(data, **dumps) + "\n")
    return path


def write_markdown(folder: Path, stem: str, text: str) -> Path:
    """``text`` as ``folder/stem.md``, as it is."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.md"
    path.write_text(text)
    return path


def shown_path(path: Path) -> str:
    """``path`` relative to the checkout when inside it (as the reports link figures), else absolute."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------- Markdown

MISSING = "–"


def number(
    value: Any,
    spec: str = "",
    *,
    small: str | None = None,
    below: float = 10.0,
    large: str | None = None,
    above: float = 1000.0,
    integers: str | None = None,
) -> str:
    """One value as a table cell. ``None`` and NaN are "–", booleans "yes"/"no", text stays as it
    is. Integers take the format spec ``integers`` when it is given; any other number takes
    ``small`` when its magnitude is below ``below``, ``large`` from ``above`` on, else ``spec``."""
    if value is None:
        return MISSING
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral) and integers is not None:
        return format(value, integers)
    if isinstance(value, numbers.Real) and math.isnan(value):
        return MISSING
    magnitude = abs(value)
    if small is not None and magnitude < below:
        return format(value, small)
    if large is not None and magnitude >= above:
        return format(value, large)
    return format(value, spec)


Format = str | Callable[[Any], str] | None


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[Any] | Mapping[str, Any]],
    *,
    align: str | None = None,
    formats: Sequence[Format] | None = None,
    keys: Sequence[str] | None = None,
) -> list[str]:
    """A GitHub Markdown table as lines: the header, the alignment row, one line per row.

    ``align`` has a letter per column, ``l`` (``---``) or ``r`` (``---:``); by default the first
    column is left-aligned and the others right-aligned. A row is a sequence of cells in column
    order, or a mapping read at ``keys`` (default: the header). Each cell goes through its
    column's format: a format spec for :func:`number` (default ``""``) or a function of the
    value; text cells pass through ``number`` unchanged, so preformatted cells are welcome."""
    columns = len(header)
    align = align or "l" + "r" * (columns - 1)
    formats = formats or [None] * columns
    if len(align) != columns or len(formats) != columns:
        raise ValueError(f"{columns} columns, {len(align)} alignments, {len(formats)} formats")
    lines = [_row(header), "|" + "".join("---:|" if letter == "r" else "---|" for letter in align)]
    for row in rows:
        values = [row[key] for key in (keys or header)] if isinstance(row, Mapping) else list(row)
        if len(values) != columns:
            raise ValueError(f"a row of {len(values)} cells in a table of {columns} columns: {values}")
        cells = zip(values, formats, strict=True)
        lines.append(_row([fmt(value) if callable(fmt) else number(value, fmt or "") for value, fmt in cells]))
    return lines


def _row(cells: Sequence[str]) -> str:
    return "|" + "".join(f" {cell} |" if cell else " |" for cell in cells)


# ----------------------------------------------------------------------------- shared data


GOWALLA_GRID = DATASETS / "gowalla_sf" / "checkins_sf_grid.csv"
GOWALLA_ROWS, GOWALLA_COLUMNS, GOWALLA_CELL_KM = 16, 24, 0.5


@cache
def gowalla_cells(path: Path = GOWALLA_GRID) -> Any:
    """Cell index ``row * 24 + col`` of each San Francisco check-in (PROVENANCE.txt: 16 rows x
    24 columns of about 0.5 km cells), as a NumPy array; shared by the LDP reproduction benchmark
    and ``tests/reproduction/test_free_will_findings.py``. Reads a file: not mathematics, so it
    lives here rather than in ``transforms``."""
    import pandas as pd

    frame = pd.read_csv(path, header=None, names=["row", "column"])
    if not (frame["row"].between(0, GOWALLA_ROWS - 1).all() and frame["column"].between(0, GOWALLA_COLUMNS - 1).all()):
        raise ValueError(f"{path}: a check-in outside the {GOWALLA_ROWS} x {GOWALLA_COLUMNS} grid")
    return (frame["row"] * GOWALLA_COLUMNS + frame["column"]).to_numpy()


def benchmark_lake(lake: Path | str, *datasets: str, epsilon: float = 1e9, delta: float = 0.5) -> Path:
    """A lake made as an operator makes one for benchmarks: a test lake (the benchmarks use the fixed
    ``PRIVLAKE_TEST_SECRET``, which only a test lake accepts) with a large budget for each dataset —
    the benchmarks measure speed and utility, not spending. Keys go to ``PRIVLAKE_KEY_DIR`` (default:
    a folder beside the lake)."""
    from pipelines.platform.lake import Lake
    from pipelines.platform.policy import KEY_DIRECTORY_VARIABLE, LakePolicy

    lake = Path(lake)
    os.environ.setdefault(KEY_DIRECTORY_VARIABLE, str(lake.parent / f"{lake.name}-keys"))
    with Lake(lake) as opened:
        LakePolicy(opened).prepare_test_lake(datasets, epsilon, delta)
    return lake
