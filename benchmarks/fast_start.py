"""Fast start for small releases (issue 16): ``privlake run`` of a small release of each kind on the
local engine, wall time from process start to exit, against the floor, in one run.

Each measurement is a fresh process (``privlake run CONFIG --json``) whose wall time runs from just
before it is started to the moment it is reaped; its CPU time (user + system) comes from
``os.wait4`` and so includes the children it reaped itself (the validation gate's worker).
Variants run interleaved (round ``r`` runs every variant once, odd rounds in reverse order), so a
load spike on this shared machine spreads over all of them; medians and the range are reported.

The cases (≤ 10^4 rows each; data generated here or read from ``../shared/datasets``):

- crowd: ``privlake generate-crowd --objects 350`` (7,000 claims, 20 per object), the settings of
  ``examples/crowd_sample.yaml`` with the local engine and its truth evaluation;
- tabular: UCI Abalone (4,177 records, ``examples/tabular_abalone_schema.yaml``), ε = 1, ω = all;
- ldp: 10,000 users' ages on a line of 30 values, reports simulated with ``privlake simulate-ldp``
  (3 k-RR and 3 truncated geometric mechanisms), GIBU;
- filter: 2,000 generated records with the shared VAE stored in the lake beforehand
  (``privlake train-encoder``, not timed). ``privlake run (filter)`` trains its one choice's linear
  filter in the release (3 epochs, torch) and evaluates it (adversary and utility classifiers
  retrained on 400 records: operator figures); the goal's case, the privatize run, uses the
  filters stored beforehand too (``privlake train-filters``, not timed; ``filters: {artifact:
  latest}``) with the evaluation off: encoder and filters applied in NumPy, no torch.

The project's modules are byte-compiled first, as a wheel's are at install time
(``PYTHONDONTWRITEBYTECODE`` is dropped from the measured processes' environment).

Floors, measured in the same rounds: ``python -c pass`` (the interpreter), ``privlake --help``
(the command line's own start), the import of the libraries the release's process needs (pandas,
pyarrow, pyiceberg's SQL catalog), the gate worker's import of Great Expectations (which runs in
parallel with the release), and per kind the release's own computation (the sum of its stage timings outside reading, validation and publishing, from the
operator record).

    .venv/bin/python benchmarks/fast_start.py [--repeats 5] [--kinds crowd,tabular,ldp,filter]

Results: ``benchmarks/results/fast_start.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import harness  # noqa: E402

os.environ.update(harness.one_thread())

ROOT = harness.ROOT
PYTHON = ROOT / ".venv" / "bin" / "python"
PRIVLAKE = ROOT / ".venv" / "bin" / "privlake"
SECRET_HEX = "f5a7" * 16
GOAL_SECONDS = 3.0
KINDS = ("crowd", "tabular", "ldp", "filter")
DATASETS = {"crowd": "sample", "tabular": "abalone", "ldp": "ages", "filter": "people"}
PRIVATIZE_ONLY = "filter, stored filters, evaluation off"
"""The filter config with stored filters and without its evaluation: the same lake, encoder and dataset."""
NOT_COMPUTATION = ("read", "validat", "publish", "wait for engine", "stage", "write", "evaluat", "report")
"""Stage names (substrings) that are not the kind's own computation."""
LIBRARIES = "import pandas, pyarrow.parquet, pyiceberg.catalog.sql"
"""What the release's own process imports before its work (GX is the gate worker's: next)."""
GATE_WORKER_IMPORT = (
    "from pipelines.platform import validation\nvalidation.prepare_gx_imports()\nimport great_expectations"
)
"""What the gate's worker imports, in parallel (``pipelines/platform/validation.py``)."""


def _write_yaml(path: Path, data: dict[str, Any]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


CLI: list[str] = [str(PRIVLAKE)]
"""How the measured releases and the set-up and read-back commands run (``--code`` makes it
``python -P -m pipelines``)."""


def _cli(*arguments: str, environment: dict[str, str]) -> str:
    done = subprocess.run([*CLI, *arguments], capture_output=True, text=True, env=environment)
    if done.returncode != 0:
        raise RuntimeError(f"privlake {' '.join(arguments)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def setup(folder: Path, kinds: tuple[str, ...], rounds: int, environment: dict[str, str]) -> list[dict[str, Path]]:
    """The data, and per round a fresh lake (a test lake with a budget per dataset; the filter's
    encoder stored in it) and one config per kind releasing into it: every measured release is the
    first of its dataset in its lake, so the ledger's history is the same in every round."""
    lake = folder / "lake-template"
    template = _configs(folder, lake, kinds, environment)
    per_round = []
    for round_number in range(rounds):
        lake = folder / f"lake-{round_number + 1}"
        harness.benchmark_lake(lake, *DATASETS.values())
        configs = {}
        for kind, path in template.items():
            configs[kind] = _with_lake(path, folder / f"{kind}-{round_number + 1}.yaml", lake)
        if "filter" in configs:
            _cli("train-encoder", str(configs["filter"]), environment=environment)
            _cli("train-filters", str(configs[PRIVATIZE_ONLY]), environment=environment)
        per_round.append(configs)
    return per_round


def _with_lake(template: Path, path: Path, lake: Path) -> Path:
    import yaml

    config = yaml.safe_load(template.read_text())
    config["lake"] = str(lake)
    return _write_yaml(path, config)


def _configs(folder: Path, lake: Path, kinds: tuple[str, ...], environment: dict[str, str]) -> dict[str, Path]:
    """The data and one config per kind (releasing into ``lake``)."""
    import numpy as np
    import pandas as pd
    import yaml

    configs: dict[str, Path] = {}
    if "crowd" in kinds:
        _cli("generate-crowd", "--out", str(folder / "crowd"), "--objects", "350", environment=environment)
        crowd = yaml.safe_load((ROOT / "examples" / "crowd_sample.yaml").read_text())
        crowd.update(lake=str(lake), engine={"name": "local"})
        crowd["input"]["path"] = str(folder / "crowd" / "claims.csv")
        crowd["evaluation"]["truth_path"] = str(folder / "crowd" / "truth.csv")
        configs["crowd"] = _write_yaml(folder / "crowd.yaml", crowd)
    if "tabular" in kinds:
        configs["tabular"] = _write_yaml(folder / "tabular.yaml", {
            "kind": "tabular", "dataset": "abalone", "lake": str(lake),
            "input": {"path": str(harness.DATASETS / "abalone" / "abalone.csv"), "header": False,
                      "schema": str(ROOT / "examples" / "tabular_abalone_schema.yaml")},
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "k": 50, "gamma": 4.0},
            "model": {"max_degree": 2, "complexity_cap": 64},
            "synthesis": {"omega": "all"},
            "engine": {"name": "local"},
        })
    if "ldp" in kinds:
        ages = np.random.default_rng(5).binomial(29, 0.4, size=10_000) + 10
        pd.DataFrame({"age": ages}).to_csv(folder / "ages.csv", index=False)
        configs["ldp"] = _write_yaml(folder / "ldp.yaml", {
            "kind": "ldp", "dataset": "ages", "lake": str(lake),
            "input": {"path": str(folder / "reports.parquet"), "format": "parquet",
                      "catalog": str(folder / "catalog.json")},
            "secrets": {"layout": "line", "first_value": 10, "values": 30},
            "estimator": {"method": "gibu"},
            "engine": {"name": "local"},
            "evaluation": {"truth_path": str(folder / "truth.parquet")},
            "simulation": {
                "source": {"path": str(folder / "ages.csv"), "columns": ["age"]},
                "mechanisms": [{"type": "krr", "epsilon": [0.5, 3.0], "count": 3},
                               {"type": "truncated_geometric", "epsilon": [0.3, 1.5], "count": 3, "share": 2.0}],
                "truth_out": str(folder / "truth.parquet"),
            },
        })
        _cli("simulate-ldp", str(configs["ldp"]), environment=environment)
    if "filter" in kinds:
        _write_yaml(folder / "features.yaml", {"features": [
            {"name": "height", "type": "numeric", "bounds": [100, 220]},
            {"name": "years", "type": "numeric", "bounds": [0, 60], "integer": True},
            {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]},
        ]})
        _people(800, 1).to_csv(folder / "training.csv", index=False)
        _people(2000, 5).to_csv(folder / "records.csv", index=False)
        configs["filter"] = _write_yaml(folder / "filter.yaml", {
            "kind": "filter", "dataset": "people", "lake": str(lake),
            "feature_spec": str(folder / "features.yaml"),
            "training": {"path": str(folder / "training.csv")},
            "input": {"path": str(folder / "records.csv")},
            "labels": {"group": {"column": "group", "categories": ["a", "b"]},
                       "senior": {"column": "senior", "categories": ["no", "yes"]}},
            "choices": [{"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0}],
            "encoder": {"latent_dimension": 4, "hidden_widths": [16], "training": {"epochs": 4, "batch_size": 128}},
            "filter_training": {"epochs": 3, "batch_size": 128, "refit_every": 5},
            "engine": {"name": "local"},
            "evaluation": {"max_records": 400},
        })
        privatize_only = yaml.safe_load(configs["filter"].read_text())
        privatize_only["evaluation"] = {"enabled": False}
        privatize_only["filters"] = {"artifact": "latest"}
        configs[PRIVATIZE_ONLY] = _write_yaml(folder / "filter-privatize.yaml", privatize_only)
    return configs


def _people(records: int, seed: int) -> Any:
    """Two labels, each predictable from different features (as the filter tests' records)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    group = rng.integers(0, 2, records)
    senior = rng.integers(0, 2, records)
    return pd.DataFrame({
        "height": np.clip(rng.normal(160 + 15 * group, 8), 100, 220).round(1),
        "years": np.clip(rng.normal(20 + 20 * senior, 6), 0, 60).round().astype(int),
        "colour": np.where(rng.random(records) < 0.6 + 0.3 * group, "blue",
                           np.where(rng.random(records) < 0.5, "red", "green")),
        "group": np.array(["a", "b"])[group],
        "senior": np.array(["no", "yes"])[senior],
    })


def measure(command: list[str], environment: dict[str, str], cwd: Path | None = None) -> tuple[float, float, str]:
    """Wall seconds from start to reaping, CPU seconds (user + system, reaped children included)
    and standard output of one process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=environment, cwd=cwd)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{err.read().decode()[-3000:]}")
        return wall, usage.ru_utime + usage.ru_stime, out.read().decode()


def computation_seconds(release_id: str, lake: Path, environment: dict[str, str]) -> tuple[float, dict[str, float]]:
    record = json.loads(_cli("show", release_id, "--lake", str(lake), "--internal", "--json", environment=environment))
    timings = record.get("timings") or {}
    own = sum(seconds for stage, seconds in timings.items()
              if not any(word in stage.lower() for word in NOT_COMPUTATION))
    return own, timings


def plan_variants(kinds: tuple[str, ...], compare_with: Path | None) -> dict[str, tuple[Any, dict[str, str], str | None]]:
    """Name -> (command from the round's configs, extra environment, kind or None). The release
    variants run as :data:`CLI` does (``--code``: that checkout, on the environment's ``PYTHONPATH``)."""
    variants: dict[str, tuple[Any, dict[str, str], str | None]] = {
        "python -c pass": (lambda _: [str(PYTHON), "-c", "pass"], {}, None),
        "privlake --help": (lambda _: [str(PRIVLAKE), "--help"], {}, None),
        "libraries a release imports": (lambda _: [str(PYTHON), "-c", LIBRARIES], {}, None),
        "the gate worker's GX import": (lambda _: [str(PYTHON), "-P", "-c", GATE_WORKER_IMPORT], {}, None),
    }
    for kind in kinds:
        def run(configs: dict[str, Path], kind: str = kind) -> list[str]:
            return [*CLI, "run", str(configs[kind]), "--json"]

        variants[f"privlake run ({kind})"] = (run, {}, kind)
        if kind != "filter":
            variants[f"privlake run ({kind}), gate worker off"] = (run, {"PRIVLAKE_GATE_WORKER": "0"}, kind)
        else:
            def privatize(configs: dict[str, Path]) -> list[str]:
                return [*CLI, "run", str(configs[PRIVATIZE_ONLY]), "--json"]

            variants[f"privlake run ({PRIVATIZE_ONLY})"] = (privatize, {}, None)
        if compare_with is not None:
            def run_before(configs: dict[str, Path], kind: str = kind) -> list[str]:
                # the older code's entry; -P: no working folder on sys.path ahead of PYTHONPATH
                return [str(PYTHON), "-P", "-m", "pipelines", "run", str(configs[kind]), "--json"]

            variants[f"privlake run ({kind}), before"] = (run_before, {"PYTHONPATH": str(compare_with)}, kind)
    return variants


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--keep", type=Path, help="set up in this folder and keep it (default: a temporary one)")
    parser.add_argument("--compare-with", type=Path,
                        help="another checkout of the code (e.g. `git archive COMMIT | tar -x -C DIR`): its "
                             "`privlake run` is measured beside this one's (PYTHONPATH=DIR)")
    parser.add_argument("--code", type=Path,
                        help="measure this checkout's code (PYTHONPATH=DIR, `python -P -m pipelines`) instead of the "
                             "installed `privlake`, e.g. a `git worktree` of a commit while this folder is being edited")
    harness.add_results_option(parser)
    args = parser.parse_args()
    kinds = tuple(kind for kind in args.kinds.split(",") if kind)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")

    machine = {**harness.machine_basics(), "uptime_at_start": harness.uptime()}
    with tempfile.TemporaryDirectory(prefix="privlake-fast-start-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        os.environ["PRIVLAKE_KEY_DIR"] = str(folder / "lake-keys")
        environment = {**os.environ, "PRIVLAKE_TEST_SECRET": SECRET_HEX}
        if args.code is not None:
            CLI[:] = [str(PYTHON), "-P", "-m", "pipelines"]
            environment["PYTHONPATH"] = str(args.code)
        environment.pop("PRIVLAKE_PROGRESS", None)
        # as installed: a wheel's modules are byte-compiled at install time (pip), so no measured run
        # compiles the project's sources (PYTHONDONTWRITEBYTECODE in the caller's shell would make every
        # run compile them: about 0.3 s)
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        code = args.code or ROOT
        subprocess.run([str(PYTHON), "-m", "compileall", "-q", *(str(code / package) for package in
                        ("pipelines", "transforms", "schemas"))], check=True, env=environment)
        print(f"setting up {', '.join(kinds)} in {folder}", flush=True)
        per_round = setup(folder, kinds, args.repeats, environment)

        variants = plan_variants(kinds, args.compare_with)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        computation: dict[str, list[float]] = {kind: [] for kind in kinds}
        stage_timings: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        loads: list[float] = []
        for round_number in range(args.repeats):
            order = list(variants) if round_number % 2 == 0 else list(reversed(variants))
            loads.append(os.getloadavg()[0])
            configs = per_round[round_number]
            for name in order:
                command, extra, kind = variants[name]
                # cwd: the scratch folder, so `python -c`/`-m` children import the measured code, not this checkout's
                wall, cpu, out = measure(command(configs), {**environment, **extra}, cwd=folder)
                samples[name].append((wall, cpu))
                if kind is not None and name == f"privlake run ({kind})":
                    release_id = json.loads(out.strip().splitlines()[-1])["release_id"]
                    own, timings = computation_seconds(release_id, folder / f"lake-{round_number + 1}", environment)
                    computation[kind].append(own)
                    stage_timings[kind].append(timings)
                print(f"round {round_number + 1}: {name}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)

    results = summarize(samples, computation, stage_timings, kinds)
    results.update(machine=machine, repeats=args.repeats, load_average_per_round=loads, goal_seconds=GOAL_SECONDS)
    harness.write_json(args.results_dir, "fast_start", harness.json_ready(results), indent=1)
    path = harness.write_markdown(args.results_dir, "fast_start", markdown(results))
    print(f"wrote {harness.shown_path(path)}")
    return 0


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(samples: dict[str, list[tuple[float, float]]], computation: dict[str, list[float]],
              stage_timings: dict[str, list[dict[str, float]]], kinds: tuple[str, ...]) -> dict[str, Any]:
    rows = {}
    for name, pairs in samples.items():
        walls = [wall for wall, _ in pairs]
        cpus = [cpu for _, cpu in pairs]
        rows[name] = {"wall": _median(walls), "wall_min": min(walls), "wall_max": max(walls),
                      "cpu": _median(cpus), "cpu_min": min(cpus), "cpu_max": max(cpus), "walls": walls, "cpus": cpus}
    stages = {}
    for kind in kinds:
        names = sorted({stage for timings in stage_timings[kind] for stage in timings})
        stages[kind] = {stage: _median([t.get(stage, 0.0) for t in stage_timings[kind]]) for stage in names}
    return {"variants": rows, "computation": {kind: _median(computation[kind]) for kind in kinds}, "stages": stages}


def markdown(results: dict[str, Any]) -> str:
    rows = results["variants"]
    interpreter = rows["python -c pass"]["wall"]
    cli = rows["privlake --help"]["wall"]
    machine = results["machine"]
    lines = [
        "# Fast start: small releases on the local engine",
        "",
        f"`benchmarks/fast_start.py`, {results['repeats']} interleaved rounds; each row a fresh process, wall from "
        "start to reaping, CPU = user + system of the process and the children it reaped (the validation gate's "
        "worker). Median, range in brackets. Goal: ≤ 3 s wall for `privlake run` of a ≤ 10⁴-row release.",
        "",
        f"Machine: {machine.get('processor') or 'unknown CPU'}, {machine.get('cores')} cores, Python "
        f"{machine.get('python')}; shared with other jobs: 1-minute load average per round "
        + ", ".join(f"{load:.1f}" for load in results["load_average_per_round"]) + ".",
        "",
    ]
    table_rows = []
    for name, row in rows.items():
        kind = name.split("(")[1].split(")")[0] if name.startswith("privlake run") else None
        goal = ("met" if row["wall"] <= GOAL_SECONDS else "not met") if kind else ""
        if name == "privlake run (filter)":
            goal = "(trains and evaluates: not the goal's case)"
        table_rows.append([
            name,
            f"{row['wall']:.2f} [{row['wall_min']:.2f}–{row['wall_max']:.2f}]",
            f"{row['cpu']:.2f} [{row['cpu_min']:.2f}–{row['cpu_max']:.2f}]",
            f"{row['wall'] / interpreter:.1f}",
            f"{row['wall'] / cli:.1f}",
            f"{results['computation'][kind]:.2f}" if kind in results["computation"] and name == f"privlake run ({kind})"
            else "",
            goal,
        ])
    lines += harness.table(
        ["variant", "wall s", "CPU s", "× python -c pass", "× privlake --help", "the kind's computation s", "≤ 3 s"],
        table_rows,
    )
    lines += ["", "Stage timings of the runs (median seconds, from the operator record):", ""]
    for kind, stages in results["stages"].items():
        lines.append(f"- {kind}: " + ", ".join(f"{stage} {seconds:.2f}" for stage, seconds in stages.items()))
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
