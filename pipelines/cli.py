"""The ``privlake`` command line.

Every command ends with an exit code of the scheduler contract (``pipelines/platform/errors.py``):
0 success, 2 bad input or config, 3 quarantined, 4 refused by budget or policy, 5 nothing to
release, 75 transient (retry), 1 a bug — every failure one line on standard error (set
``PRIVLAKE_DEBUG=1`` for the traceback of a bug).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from pipelines.platform import log
from pipelines.platform.errors import PrivlakeError, ReleaseNotFound, expected_failure
from pipelines.platform.progress import StageProgress
from pipelines.platform.report import guarantee_words as _guarantee_words
from pipelines.platform.report import shown as _shown

LAKE_HELP = ("a lake folder, or a YAML file with a lake: mapping (catalog, warehouse, staging, properties; "
             "a release config works too): docs/PRODUCTION.md")


def _summary_line(outcome: Any) -> str:
    if outcome.already_published:
        return f"release {outcome.release_id} is already published; nothing to do"
    if outcome.summary:
        return outcome.summary
    from pipelines.kinds import release_kind

    return release_kind(outcome.manifest["kind"]).summary(outcome.manifest)


def _run_release(config: Any, args: argparse.Namespace, engine: Any = None) -> Any:
    from pipelines.kinds import release_kind
    from pipelines.platform.release import ReleaseRequest, run_release

    progress = StageProgress()
    try:
        request = ReleaseRequest(engine_name=args.engine, master=args.master, release_id=args.release_id,
                                 engine=engine, progress=progress)
        return run_release(release_kind(config.kind), config, request)
    finally:
        progress.close()


def _engine_text(request: tuple[str, dict[str, Any]]) -> str:
    """E.g. ``the spark engine on local[2]``, ``the local engine with parallelism 4``."""
    name, options = request
    parts = [f"the {name} engine"]
    if options.get("master"):
        parts.append(f"on {options['master']}")
    if options.get("parallelism"):
        parts.append(f"with parallelism {options['parallelism']}")
    if options.get("spark_conf"):
        parts.append("with Spark settings " + ", ".join(f"{k}={v}" for k, v in sorted(options["spark_conf"].items())))
    if options.get("beam_options"):
        parts.append("with options " + " ".join(options["beam_options"]))
    return " ".join(parts)


def _command_run(args: argparse.Namespace) -> int:
    from pipelines.platform.validation import start_gate_worker

    start_gate_worker()  # GX imports in its own process while this one imports, reads and plans
    from pipelines.platform.config import load_config

    if args.release_id is not None:
        from pipelines.platform.ids import check_release_id

        check_release_id(args.release_id)  # '' is an empty id, not "generate one"

    configs = [load_config(path, args.set) for path in args.config]
    if args.lake is not None:
        from pipelines.platform.config import lake_argument

        lake = lake_argument(args.lake, must_exist=False)
        configs = [config.model_copy(update={"lake": lake}) for config in configs]
    if len(configs) == 1:
        try:
            outcome = _run_release(configs[0], args)
        except Exception as error:
            if args.json:
                _print_failure_json(args.config[0], configs[0], error)
            raise
        _print_outcome(outcome, args)
        return 0
    return _run_several(args, configs)


def _print_outcome(outcome: Any, args: argparse.Namespace) -> None:
    """What ``run`` prints for one release: its summary line and then its id as the last line; with
    ``--json``, one JSON object on one line instead (the only thing on standard output)."""
    if not args.json:
        print(_summary_line(outcome))
        print(outcome.release_id, flush=True)
        return
    manifest = outcome.manifest
    print(json.dumps({
        "release_id": outcome.release_id, "status": "published", "already_published": outcome.already_published,
        "kind": manifest.get("kind"), "dataset": manifest.get("dataset"), "table": manifest.get("table"),
        "epsilon": manifest.get("epsilon"), "delta": manifest.get("delta"),
        "privacy_unit": manifest.get("privacy_unit"), "rows": manifest.get("rows"),
        "test_lake": manifest.get("test_lake"), "summary": _summary_line(outcome),
    }, default=str), flush=True)


def _print_failure_json(path: str, config: Any, error: BaseException) -> None:
    """``run --json``: a failed release is one JSON line too (its exit code and the one error line)."""
    if isinstance(error, PrivlakeError):
        code, line = error.exit_code, str(error)
    else:
        expected = expected_failure(error) if isinstance(error, Exception) else None
        code, line = (expected.exit_code, str(expected)) if expected is not None else (1, f"internal error: {_first_line(error)}")
    print(json.dumps({"config": str(path), "dataset": getattr(config, "dataset", None), "status": "failed",
                      "exit_code": code, "error": line}), flush=True)


def _run_several(args: argparse.Namespace, configs: list[Any]) -> int:
    """Several configs, in order, on one engine started once (one Spark session): what a
    scheduler's batch of releases needs, without paying the engine's start-up per release.
    Every config is loaded and checked first (a bad one stops the batch before anything runs);
    then each release succeeds or fails on its own, and the exit status is the first failure's."""
    from pipelines.platform.release import engine_request, start_engine

    if args.release_id is not None:
        raise PrivlakeError("--release-id names one release: give a single config with it")
    requests = [engine_request(config.engine, args.engine, args.master) for config in configs]
    for path, request in zip(args.config[1:], requests[1:], strict=True):
        if request != requests[0]:
            raise PrivlakeError(
                f"{path}: asks for {_engine_text(request)}, but {args.config[0]} for {_engine_text(requests[0])}; "
                "configs run together share one engine (pass --engine/--master, or run them separately)"
            )
    # no warm-up job: nothing runs beside it here, and the first release's first job warms the workers
    engine = start_engine(*requests[0], (), driver_busy=lambda: False)
    first_failure = 0
    try:
        for path, config in zip(args.config, configs, strict=True):
            try:
                outcome = _run_release(config, args, engine)
            except Exception as error:  # noqa: BLE001 - one release's failure must not stop the batch
                if args.json:
                    _print_failure_json(path, config, error)
                expected = error if isinstance(error, PrivlakeError) else expected_failure(error)
                if expected is not None:
                    log.error(f"{path}: {expected}", exit_code=expected.exit_code, config=str(path))
                    first_failure = first_failure or expected.exit_code
                    continue
                if os.environ.get("PRIVLAKE_DEBUG"):
                    traceback.print_exc()
                log.error(f"{path}: internal error: {_first_line(error)}", exit_code=1, config=str(path))
                first_failure = first_failure or 1
                continue
            _print_outcome(outcome, args)
    finally:
        engine.close()
    return first_failure


def _lake(args: argparse.Namespace, write: bool = False, must_exist: bool = True):
    """The lake ``--lake`` names (a folder, or a YAML file with a ``lake:`` mapping): opened
    read-only (nothing created, nothing written: the reading commands work on a read-only lake)
    unless the command writes; ``must_exist=False`` for the commands that make a lake."""
    from pipelines.platform.config import lake_argument
    from pipelines.platform.lake import open_lake

    return open_lake(lake_argument(args.lake, must_exist=must_exist), write=write)


def _manifest(lake: Any, release_id: str) -> dict[str, Any]:
    try:
        return lake.manifest(release_id)
    except (KeyError, LookupError):
        raise ReleaseNotFound(f"release {release_id!r} is not published in this lake") from None


def _command_releases(args: argparse.Namespace) -> int:
    """Every published release, newest first. A release whose stored manifest cannot be read is
    listed as unreadable (and named on stderr) instead of failing the listing of the whole lake."""
    published = _lake(args).published_releases()
    for release in published:
        if release.problem:
            log.warning(f"release {release.release_id} ({release.table}): {release.problem}")
    releases = [release.manifest for release in published]
    if args.json:
        print(json.dumps(releases, indent=2, default=str))
        return 0
    if not releases:
        print("no releases")
        return 0
    print(f"{'release_id':48} {'kind':7} {'dataset':16} {'rows':>10} {'epsilon':>9} {'delta':>9}")
    for manifest in releases:
        print(f"{_cell(manifest.get('release_id'), 48)} {_cell(manifest.get('kind'), 7)} "
              f"{_cell(manifest.get('dataset'), 16)} {_cell(manifest.get('rows'), 10, '>')} "
              f"{_cell(manifest.get('epsilon'), 9, '>.4g')} {_cell(manifest.get('delta'), 9, '>.3g')}")
    return 0


def _cell(value: Any, width: int, spec: str = "") -> str:
    """One column of a listing: ``value`` formatted by ``spec`` when it can be, else its text (a
    missing or malformed field never fails the listing)."""
    try:
        text = format(value, spec) if value is not None else "-"
    except (TypeError, ValueError):
        text = str(value)
    return f"{text:{'>' if spec.startswith('>') else '<'}{width}}"


def _command_recover(args: argparse.Namespace) -> int:
    """Settle what crashed releases left (``pipelines/platform/recovery.py``) and say what was done."""
    from pipelines.platform.recovery import recover

    recovery = recover(_lake(args, write=True))
    if args.json:
        print(json.dumps(recovery.to_json(), indent=2))
        return 0
    for line in recovery.lines() or ["nothing to recover"]:
        print(line)
    return 0


def _command_show(args: argparse.Namespace) -> int:
    lake = _lake(args)
    if args.internal:
        return _show_internal(lake, args)
    manifest = _manifest(lake, args.release_id)
    if args.json:
        print(json.dumps(manifest, default=str))
        return 0
    print(f"{'guarantee':20} {_guarantee_words(manifest)}")
    for key, value in _show_rows(manifest):
        print(f"{key:20} {_shown(value)}")
    return 0


def _show_rows(manifest: dict[str, Any]) -> list[tuple[str, Any]]:
    """The manifest keys ``show`` lists (and ``report`` puts under the guarantee), in order: the
    common ones, then the kind's own."""
    from pipelines.kinds import KindUnavailable, release_kind

    try:
        kind_keys = release_kind(manifest.get("kind", "crowd")).show_keys
    except (KindUnavailable, KeyError):  # a kind whose extra is not installed here: its common keys only
        kind_keys = ()
    return [(key, manifest.get(key)) for key in ("release_id", "kind", "dataset", "status", "epsilon", "delta",
                                                 "privacy_unit", "rows", *kind_keys, "engine", "table", "charged",
                                                 "test_lake", "code_version")]


def _command_report(args: argparse.Namespace) -> int:
    """One self-contained HTML page for a release (``pipelines/platform/report.py``): the operator's
    page by default (figures from raw data, the ledger, timings), the public part with ``--public``.
    Reads the lake only; the page is written whole or not at all."""
    from pipelines.kinds import report_figures
    from pipelines.platform.report import build_page, read_inputs, write_atomically

    lake = _lake(args)
    manifest = _manifest(lake, args.release_id)
    out = Path(args.out)
    if not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise PrivlakeError(f"{out}: the folder {out.parent} does not exist")
    inputs = read_inputs(lake, manifest, _show_rows(manifest), public=args.public)
    page = build_page(inputs, report_figures(str(manifest.get("kind"))))
    write_atomically(out, page)
    print(f"wrote the {'public' if args.public else 'operator'} report of {args.release_id} to {out}")
    return 0


def _show_internal(lake: Any, args: argparse.Namespace) -> int:
    """The operator-only record of a release (``privlake.internal``): figures computed from raw data."""
    from pipelines.platform.internal import OperatorRecords

    records = OperatorRecords(lake).read(args.release_id)
    if not records:
        raise ReleaseNotFound(f"release {args.release_id!r} has no internal record in this lake")
    latest = records[-1]
    if args.json:
        print(json.dumps(latest["record"], default=str))
        return 0
    print(f"{'release_id':28} {latest['release_id']}  (operator-only: computed from raw data, not covered by the guarantee)")
    print(f"{'status':28} {latest['status']}")
    for key, value in latest["record"].items():
        print(f"{key:28} {json.dumps(value, default=str) if isinstance(value, dict | list) else value}")
    return 0


def _command_export(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    lake = _lake(args)
    _manifest(lake, args.release_id)
    table = lake.read_release(args.release_id)
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        raise PrivlakeError(f"{out}: the folder {out.parent} does not exist")
    order = next(
        (columns for columns in (("object_id", "claim_index"), ("row", "col"), ("record",), ("value",))
         if all(column in table.column_names for column in columns)),
        (),
    )
    if order:
        table = table.sort_by([(column, "ascending") for column in order])
    pq.write_table(table, out)
    print(f"wrote {table.num_rows} rows to {out}")
    return 0


def _command_ledger(args: argparse.Namespace) -> int:
    """Every ledger event (``--json``: a list of objects with ``release_id``, ``dataset``, ``kind``,
    ``status``, ``epsilon``, ``delta``, ``unit``, ``privacy_unit``, ``steps`` and the budget), then, per
    dataset, what its reserved and published releases compose to at its budget's δ."""
    from pipelines.platform.ledger import PrivacyLedger
    from pipelines.platform.policy import LakePolicy

    lake = _lake(args)
    ledger = PrivacyLedger(lake)
    entries = ledger.entries(args.dataset)
    budgets = {budget.dataset: budget for budget in LakePolicy(lake).budgets()}
    if args.json:
        rows = entries.to_dict(orient="records")
        for row in rows:
            row["steps"] = json.loads(row["steps"]) if row.get("steps") else []
            row["recorded_at"] = row["recorded_at"].isoformat()
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if len(entries) == 0:
        print("the ledger is empty")
        return 0
    print(f"{'release_id':44} {'dataset':16} {'kind':7} {'status':9} {'unit':7} {'epsilon':>9} {'delta':>9}")
    for _, row in entries.iterrows():
        print(f"{row['release_id']:44} {row['dataset']:16} {row['kind']:7} {row['status']:9} "
              f"{row['unit'] or 'release':7} {row['epsilon']:>9.4g} {row['delta']:>9.3g}")
    for dataset in sorted(set(entries["dataset"])):
        budget = budgets.get(dataset)
        if budget is None:
            print(f"dataset {dataset}: no budget set")
            continue
        spent = ledger.spent(dataset, budget.delta)
        remaining = max(budget.epsilon - spent.epsilon, 0.0)
        print(f"dataset {dataset}: spent epsilon={spent.epsilon:.4g} at delta={budget.delta:.3g} "
              f"({spent.method}; summed: {spent.basic_epsilon:.4g}) of budget epsilon={budget.epsilon:.4g}, "
              f"remaining epsilon={remaining:.4g}, charged per {budget.unit}")
    return 0


def _command_budget(args: argparse.Namespace) -> int:
    from pipelines.platform.ledger import PrivacyLedger
    from pipelines.platform.policy import LakePolicy

    if args.budget_command == "set":
        with _lake(args, write=True, must_exist=False) as lake:
            budget = LakePolicy(lake).set_budget(args.dataset, args.epsilon, args.delta, args.unit, args.location or ())
            spent = PrivacyLedger(lake).spent(args.dataset, budget.delta)
        print(f"dataset {budget.dataset}: budget epsilon={budget.epsilon:g} at delta={budget.delta:g}, charged per "
              f"{budget.unit}; spent so far epsilon={spent.epsilon:.4g}")
        if spent.epsilon > budget.epsilon:
            log.warning(f"dataset {budget.dataset} has already spent more than this budget; "
                        "its next releases will be refused")
        return 0
    if args.budget_command == "merge":
        with _lake(args, write=True) as lake:
            policy = LakePolicy(lake)
            policy.merge(args.dataset, args.into)
            target = policy.budget_dataset(args.dataset)
        print(f"dataset {args.dataset}: merged into {target}; its releases are charged to {target}'s budget "
              "and may read its inputs")
        return 0
    if args.budget_command == "overlap":
        return _command_overlap_rule(args)
    lake = _lake(args)
    policy = LakePolicy(lake)
    budgets = policy.budgets()
    merges = policy.merges()
    if args.budget_command == "show":
        shown = policy.budget_dataset(args.dataset)
        budgets = [budget for budget in budgets if budget.dataset == shown]
        if not budgets:
            raise PrivlakeError(f"dataset {args.dataset!r} has no budget in this lake")
        if shown != args.dataset:
            log.info(f"dataset {args.dataset} is merged into {shown}: it is charged to {shown}'s budget")
    ledger = PrivacyLedger(lake)
    locations = policy.locations()
    rows = []
    for budget in budgets:
        spent = ledger.spent(budget.dataset, budget.delta)
        rows.append({**budget.to_json(), "spent_epsilon": spent.epsilon, "composition": spent.method,
                     "locations": locations.get(budget.dataset, []),
                     "merged": sorted(name for name in merges if policy.budget_dataset(name) == budget.dataset)})
    if args.json:
        print(json.dumps(rows[0] if args.budget_command == "show" else rows, indent=2))
        return 0
    if not rows:
        print("no budgets in this lake")
        return 0
    for row in rows:
        print(f"{row['dataset']:20} epsilon {row['spent_epsilon']:.4g} of {row['epsilon']:g} at delta {row['delta']:g}, "
              f"per {row['unit']}; inputs: {', '.join(row['locations']) or 'none yet'}"
              + (f"; merged: {', '.join(row['merged'])}" if row["merged"] else ""))
    return 0


def _command_overlap_rule(args: argparse.Namespace) -> int:
    """``privlake budget overlap``: the lake's rule for when an input's rows are another dataset's
    (``policy.OverlapRule``), set when ``--rows`` or ``--fraction`` is given."""
    from pipelines.platform.policy import LakePolicy, OverlapRule

    changing = args.rows is not None or args.fraction is not None
    with _lake(args, write=changing) as lake:
        policy = LakePolicy(lake)
        rule = policy.overlap_rule()
        if changing:
            rule = OverlapRule(args.rows if args.rows is not None else rule.rows,
                               args.fraction if args.fraction is not None else rule.fraction)
            policy.set_overlap_rule(rule)
    if args.json:
        print(json.dumps({"rows": rule.rows, "fraction": rule.fraction}))
    else:
        print(f"an input is another dataset's when it shares at least {rule.rows} rows or {rule.fraction:.4g} of its "
              "rows with that dataset's recorded inputs")
    return 0


def _command_init_lake(args: argparse.Namespace) -> int:
    from pipelines.platform.policy import LakePolicy

    with _lake(args, write=True, must_exist=False) as lake:
        key = LakePolicy(lake).initialize(test=args.test, key_file=Path(args.key_file) if args.key_file else None,
                                          key_variable=args.key_env)
        where = lake.description
    print(f"{'test' if args.test else 'production'} lake at {where}; fingerprint key: {key}")
    return 0


def _command_models(args: argparse.Namespace) -> int:
    from pipelines.platform.model_store import ModelStore

    models = [model.summary() for model in ModelStore(_lake(args)).models(dataset=args.dataset)]
    if args.json:
        print(json.dumps(models, default=str))
        return 0
    if not models:
        print("no models in this lake")
        return 0
    print(f"{'artifact_id':64} {'kind':10} {'dataset':16} {'records':>8} {'trained_at':25}")
    for model in models:
        rows = model.get("data_fingerprint", {}).get("rows", "")
        print(f"{model['artifact_id']:64} {model['model_kind']:10} {model['dataset']:16} {rows:>8} {model['trained_at']:25}")
    return 0


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors are one line on standard error and exit 2, like every other failure."""

    def error(self, message: str) -> None:  # type: ignore[override]
        log.error(message.splitlines()[0] if message else "bad arguments", exit_code=2)
        raise SystemExit(2)


def _version() -> str:
    """The installed package version and, from a checkout, the code's commit."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("privlake")
    except PackageNotFoundError:
        installed = "unknown"
    from pipelines.platform.release import code_version

    commit = code_version()
    return installed if commit in (installed, "unknown") else f"{installed} ({commit})"


class _VersionAction(argparse.Action):
    """``--version``: worked out only when asked (it imports the release code, seconds of imports
    every other command would pay while building the parser)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"privlake {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="privlake", description="Privacy-protected data releases into a lake.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="--log-format text|json (anywhere; or PRIVLAKE_LOG_FORMAT): json puts one object per line on stderr\n"
               "(ts, level, release_id, stage, exit_code, message).\nexit codes: 0 success (or already published), 2 bad input/config/arguments/lake path, "
               "3 quarantined,\n4 refused by budget or policy, 5 nothing to release, 75 transient failure (retry), "
               "1 a bug",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and the code's commit")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run",
        help="run a release from a YAML config (several configs: in order, on one engine started once)",
    )
    run.add_argument("config", nargs="+", help="the release config(s) (YAML)")
    run.add_argument("--engine", choices=["local", "spark", "beam"], help="override the config's engine")
    run.add_argument("--master", help="Spark master URL (spark engine), e.g. spark://host:7077 or local[2]")
    run.add_argument("--release-id", help="the release id (default: generated); re-running an id is a no-op")
    run.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                     help="override one config key (repeatable), e.g. --set engine.name=spark --set lake=/data/lake")
    run.add_argument("--lake", help="override the config's lake: " + LAKE_HELP)
    run.add_argument("--json", action="store_true",
                     help="standard output: one JSON object per release (id, table, status, guarantee, rows), nothing else")
    run.set_defaults(handler=_command_run)

    releases = commands.add_parser("releases", help="list published releases")
    releases.add_argument("--lake", required=True, help=LAKE_HELP)
    releases.add_argument("--json", action="store_true")
    releases.set_defaults(handler=_command_releases)

    show = commands.add_parser("show", help="show a release's manifest")
    show.add_argument("release_id")
    show.add_argument("--lake", required=True, help=LAKE_HELP)
    show.add_argument("--json", action="store_true")
    show.add_argument("--internal", action="store_true",
                      help="the operator-only record (figures from raw data; not covered by the guarantee)")
    show.set_defaults(handler=_command_show)

    export = commands.add_parser("export", help="write a release's rows to a Parquet file")
    export.add_argument("release_id")
    export.add_argument("--lake", required=True, help=LAKE_HELP)
    export.add_argument("--out", required=True)
    export.set_defaults(handler=_command_export)

    report = commands.add_parser(
        "report", help="write one self-contained HTML page about a release (operator-only figures unless --public)")
    report.add_argument("release_id")
    report.add_argument("--lake", required=True, help=LAKE_HELP)
    report.add_argument("--out", required=True, help="the HTML file to write (its folder must exist)")
    report.add_argument("--public", action="store_true",
                        help="only the public part: the manifest and the released rows, nothing from privlake.internal, "
                             "the ledger or the budgets")
    report.set_defaults(handler=_command_report)

    ledger = commands.add_parser("ledger", help="show the privacy ledger")
    ledger.add_argument("--lake", required=True, help=LAKE_HELP)
    ledger.add_argument("--dataset")
    ledger.add_argument("--json", action="store_true")
    ledger.set_defaults(handler=_command_ledger)

    recover = commands.add_parser(
        "recover", help="refund crashed releases' reservations, delete their staging and orphan files (also run "
                        "at the start of every `run`)")
    recover.add_argument("--lake", required=True, help=LAKE_HELP)
    recover.add_argument("--json", action="store_true")
    recover.set_defaults(handler=_command_recover)

    budget = commands.add_parser("budget", help="set or read datasets' privacy budgets (lake policy)")
    budget_commands = budget.add_subparsers(dest="budget_command", required=True)
    budget_set = budget_commands.add_parser("set", help="set a dataset's total budget (an operator's decision)")
    budget_set.add_argument("dataset")
    budget_set.add_argument("--epsilon", type=float, required=True)
    budget_set.add_argument("--delta", type=float, required=True)
    budget_set.add_argument("--unit", choices=["release", "record"], default="release",
                            help="charge each release's whole-release bound (default) or, as an explicit policy, "
                                 "its per-record figure")
    budget_set.add_argument("--location", action="append",
                            help="an input file or folder this dataset reads (repeatable; else bound on first use)")
    budget_set.add_argument("--lake", required=True, help=LAKE_HELP)
    for name, text in (("show", "one dataset's budget and spending"), ("list", "every dataset's budget and spending")):
        reader = budget_commands.add_parser(name, help=text)
        if name == "show":
            reader.add_argument("dataset")
        reader.add_argument("--lake", required=True, help=LAKE_HELP)
        reader.add_argument("--json", action="store_true")
    merge = budget_commands.add_parser(
        "merge", help="an operator's statement that DATASET holds OTHER's people: its releases are charged to "
                      "OTHER's budget and may read OTHER's inputs (only a dataset that never released)")
    merge.add_argument("dataset")
    merge.add_argument("--into", required=True, help="the dataset whose budget DATASET shares")
    merge.add_argument("--lake", required=True, help=LAKE_HELP)
    overlap = budget_commands.add_parser(
        "overlap", help="show or set when an input's rows count as another dataset's (default: 100 rows or 1%%)")
    overlap.add_argument("--rows", type=int, help="shared rows at which an input is refused")
    overlap.add_argument("--fraction", type=float, help="or the share of its rows at which it is refused")
    overlap.add_argument("--lake", required=True, help=LAKE_HELP)
    overlap.add_argument("--json", action="store_true")
    budget.set_defaults(handler=_command_budget)

    init_lake = commands.add_parser("init-lake", help="make a lake (a test lake with --test) and name its key")
    init_lake.add_argument("lake", help=LAKE_HELP)
    init_lake.add_argument("--test", action="store_true",
                           help="a test lake: the only kind that accepts releases made with PRIVLAKE_TEST_SECRET")
    init_lake.add_argument("--key-file", help="the fingerprint key file, outside the lake (created if missing)")
    init_lake.add_argument("--key-env", help="or: the environment variable that holds the key (hex)")
    init_lake.set_defaults(handler=_command_init_lake)

    models = commands.add_parser("models", help="list the model artifacts stored in a lake")
    models.add_argument("--lake", required=True, help=LAKE_HELP)
    models.add_argument("--dataset")
    models.add_argument("--json", action="store_true")
    models.set_defaults(handler=_command_models)

    from pipelines.kinds import add_kind_commands

    add_kind_commands(commands)

    return parser


def _take_log_format(argv: list[str]) -> tuple[list[str], str]:
    """``--log-format text|json`` may stand anywhere on the command line (or come from
    ``PRIVLAKE_LOG_FORMAT``); it is taken out before the commands are parsed, so that even an
    argument error is logged in the chosen format."""
    chosen = os.environ.get("PRIVLAKE_LOG_FORMAT") or "text"
    rest: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--log-format":
            chosen = next(items, "")
        elif item.startswith("--log-format="):
            chosen = item.partition("=")[2]
        else:
            rest.append(item)
    return rest, chosen


def main(argv: list[str] | None = None) -> int:
    argv, log_format = _take_log_format(list(sys.argv[1:] if argv is None else argv))
    if log_format not in log.FORMATS:
        log.configure("text")
        log.error(f"--log-format: must be one of {', '.join(log.FORMATS)}", exit_code=2)
        return 2
    log.configure(log_format)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help (0) or an argument error, already logged as one line (2)
        return int(stop.code or 0)
    try:
        return args.handler(args)
    except PrivlakeError as error:
        log.error(str(error), exit_code=error.exit_code)
        return error.exit_code
    except KeyboardInterrupt:
        log.error("interrupted", exit_code=130)
        return 130
    except Exception as error:  # noqa: BLE001 - the one place that turns surprises into one line
        expected = expected_failure(error)
        if expected is not None:
            log.error(str(expected), exit_code=expected.exit_code)
            return expected.exit_code
        if os.environ.get("PRIVLAKE_DEBUG"):
            traceback.print_exc()
        log.error(f"internal error: {_first_line(error)}", exit_code=1)
        return 1


def _first_line(error: Exception) -> str:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {message}"


def command() -> None:
    """The ``privlake`` command (console script, ``python -m pipelines``): :func:`main`, then a
    quick exit. Everything a command writes is closed or committed before :func:`main` returns;
    the exit then flushes standard output and error, shuts logging down and runs the ``atexit``
    handlers (the gate's worker is stopped there), and skips the interpreter's teardown of every
    loaded module — about 0.3 s after a release, a tenth of a small release's time."""
    code = main()
    quick_exit(code)


def quick_exit(code: int) -> None:
    import atexit
    import logging

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass

    flush()
    logging.shutdown()
    atexit._run_exitfuncs()
    flush()  # what the handlers wrote
    os._exit(code)


if __name__ == "__main__":
    command()
