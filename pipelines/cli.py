"""The ``privlake`` command line.

Every command ends in one of three ways: success (exit 0), an expected failure printed as one
line on standard error (exit 2, or 3 for a quarantined release), or an unexpected failure,
also one line (exit 1; set ``PRIVLAKE_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from pipelines.platform.errors import PrivlakeError, ReleaseNotFound


class StageProgress:
    """A progress bar on standard error over a release's stages (shown on a terminal, or when
    ``PRIVLAKE_PROGRESS`` is set), with the current stage and elapsed time."""

    def __init__(self) -> None:
        from tqdm import tqdm

        enabled = sys.stderr.isatty() or bool(os.environ.get("PRIVLAKE_PROGRESS"))
        self._bar = tqdm(
            total=None, unit="stage", file=sys.stderr, disable=not enabled, leave=False,
            bar_format="privlake: {desc} [{elapsed}]",
        )

    def __call__(self, stage: str) -> None:
        self._bar.set_description_str(stage)
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()


def _release_kind(kind: str) -> tuple[Any, tuple[str, ...]]:
    """The kind's ``run_*_release`` and the modules its engine workers import (warm-up)."""
    if kind == "ldp":
        from pipelines.ldp.pipeline import LDP_WORKER_MODULES, run_ldp_release

        return run_ldp_release, LDP_WORKER_MODULES
    if kind == "tabular":
        from pipelines.tabular.pipeline import TABULAR_WORKER_MODULES, run_tabular_release

        return run_tabular_release, TABULAR_WORKER_MODULES
    if kind == "filter":
        from pipelines.filter.pipeline import FILTER_WORKER_MODULES, run_filter_release

        return run_filter_release, FILTER_WORKER_MODULES
    from pipelines.crowd.pipeline import CROWD_WORKER_MODULES, run_crowd_release

    return run_crowd_release, CROWD_WORKER_MODULES


def _summary_line(outcome: Any) -> str:
    manifest = outcome.manifest
    if outcome.already_published:
        return f"release {outcome.release_id} is already published; nothing to do"
    if manifest["kind"] == "ldp":
        convergence = "converged" if manifest["converged"] else "NOT converged (iteration cap reached)"
        return (
            f"published the estimated distribution over {manifest['rows']} secrets from {manifest['n']} reports "
            f"of {len(manifest['mechanism_mix'])} mechanisms on {manifest['engine']}; estimator "
            f"{manifest['estimator']}, {manifest['iterations']} iterations, {convergence}"
        )
    if manifest["kind"] == "tabular":
        return (
            f"published {manifest['rows']} synthetic records (pass rate {manifest['pass_rate']:.3g}, "
            f"{manifest['candidate_attempts']} candidates) on {manifest['engine']}; "
            f"epsilon={manifest['epsilon']:.4g}, delta={manifest['delta']:.3g} per {manifest['privacy_unit']}"
        )
    if manifest["kind"] == "filter":
        choices = ", ".join(f"{choice['name']} ({choice['records']})" for choice in manifest["choices"])
        return (
            f"published {manifest['rows']} privatized records on {manifest['engine']} with encoder "
            f"{manifest['model_artifact_id'][:12]} and choices {choices}; "
            f"epsilon={manifest['epsilon']:.4g}, delta={manifest['delta']:.3g} per record's private label"
        )
    return (
        f"published {manifest['rows']} synthetic claims for {manifest['objects_released']} objects "
        f"({manifest['objects_suppressed']} suppressed) on {manifest['engine']}; "
        f"epsilon={manifest['epsilon']:.4g}, delta={manifest['delta']:.3g} per {manifest['privacy_unit']}"
    )


def _run_release(config: Any, args: argparse.Namespace, engine: Any = None) -> Any:
    progress = StageProgress()
    try:
        return _release_kind(config.kind)[0](
            config, engine_name=args.engine, master=args.master, release_id=args.release_id, progress=progress,
            engine=engine,
        )
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
    from pipelines.platform.config import load_config

    configs = [load_config(path) for path in args.config]
    if len(configs) == 1:
        outcome = _run_release(configs[0], args)
        print(_summary_line(outcome))
        print(outcome.release_id)
        return 0
    return _run_several(args, configs)


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
    modules = sorted({module for config in configs for module in _release_kind(config.kind)[1]})
    engine = start_engine(*requests[0], modules)
    first_failure = 0
    try:
        for path, config in zip(args.config, configs, strict=True):
            try:
                outcome = _run_release(config, args, engine)
            except PrivlakeError as error:
                print(f"privlake: {path}: {error}", file=sys.stderr)
                first_failure = first_failure or error.exit_code
                continue
            except Exception as error:  # noqa: BLE001 - one release's surprise must not stop the batch
                if os.environ.get("PRIVLAKE_DEBUG"):
                    traceback.print_exc()
                print(f"privlake: {path}: internal error: {_first_line(error)}", file=sys.stderr)
                first_failure = first_failure or 1
                continue
            print(_summary_line(outcome))
            print(outcome.release_id, flush=True)
    finally:
        engine.close()
    return first_failure


def _lake(args: argparse.Namespace):
    from pipelines.platform.lake import Lake

    root = Path(args.lake)
    if not root.exists():
        raise PrivlakeError(f"{root}: no lake here (the folder does not exist)")
    return Lake(root)


def _manifest(lake: Any, release_id: str) -> dict[str, Any]:
    try:
        return lake.manifest(release_id)
    except (KeyError, LookupError):
        raise ReleaseNotFound(f"release {release_id!r} is not published in this lake") from None


def _command_releases(args: argparse.Namespace) -> int:
    releases = _lake(args).list_releases()
    if args.json:
        print(json.dumps(releases, indent=2, default=str))
        return 0
    if not releases:
        print("no releases")
        return 0
    print(f"{'release_id':48} {'kind':7} {'dataset':16} {'rows':>10} {'epsilon':>9} {'delta':>9}")
    for manifest in releases:
        print(
            f"{manifest['release_id']:48} {manifest['kind']:7} {manifest['dataset']:16} "
            f"{manifest['rows']:>10} {manifest['epsilon']:>9.4g} {manifest['delta']:>9.3g}"
        )
    return 0


def _command_show(args: argparse.Namespace) -> int:
    manifest = _manifest(_lake(args), args.release_id)
    if args.json:
        print(json.dumps(manifest, default=str))
        return 0
    kind_keys = {
        "ldp": ("estimator", "n", "iterations", "converged"),
        "tabular": ("epsilon_whole_release", "delta_whole_release", "pass_rate", "candidate_attempts", "omega"),
        "filter": ("model_artifact_id",),
    }.get(manifest.get("kind", "crowd"), ("objects_released", "objects_suppressed"))
    for key in ("release_id", "kind", "dataset", "status", "epsilon", "delta", "privacy_unit", "rows",
                *kind_keys, "engine", "input_fingerprint", "code_version"):
        print(f"{key:20} {manifest.get(key)}")
    print(f"{'timings':20} " + ", ".join(f"{k} {v:.2f}s" for k, v in manifest.get("timings", {}).items()))
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
    from pipelines.platform.ledger import PrivacyLedger

    entries = PrivacyLedger(_lake(args)).entries(args.dataset)
    if args.json:
        print(entries.to_json(orient="records", date_format="iso"))
        return 0
    if len(entries) == 0:
        print("the ledger is empty")
        return 0
    print(entries.to_string(index=False))
    return 0


def _command_generate_crowd(args: argparse.Namespace) -> int:
    from transforms.crowd.sample_data import generate_sample_crowd_data, write_sample_crowd_data

    data = generate_sample_crowd_data(
        objects=args.objects, claims_per_object=args.claims_per_object, sources=args.sources, seed=args.seed
    )
    paths = write_sample_crowd_data(data, Path(args.out))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _filter_config(path: str):
    from pipelines.platform.config import load_config

    config = load_config(path)
    if config.kind != "filter":
        raise PrivlakeError(f"{path}: train-encoder needs a config with kind: filter (got {config.kind!r})")
    return config


def _command_train_encoder(args: argparse.Namespace) -> int:
    from pipelines.filter.pipeline import train_encoder

    config = _filter_config(args.config)
    progress = StageProgress()
    try:
        summary = train_encoder(config, progress=progress)
    finally:
        progress.close()
    if args.json:
        print(json.dumps(summary, default=str))
        return 0
    final = summary["training"].get("final_epoch", {})
    print(
        f"stored encoder for dataset {summary['dataset']!r} trained on {summary['data_fingerprint']['rows']} records "
        f"(final loss {final.get('loss', float('nan')):.4g}) in {config.lake}"
    )
    print(summary["artifact_id"])
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


def _command_simulate_ldp(args: argparse.Namespace) -> int:
    from pipelines.ldp.simulation import simulate_ldp_reports
    from pipelines.platform.config import load_config

    config = load_config(args.config)
    if config.kind != "ldp":
        raise PrivlakeError(f"{args.config}: simulate-ldp needs a config with kind: ldp (got {config.kind!r})")
    written = simulate_ldp_reports(config, source_config=args.config)
    for name, path in written.items():
        print(f"{name}: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="privlake", description="Privacy-protected data releases into a lake.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run",
        help="run a release from a YAML config (several configs: in order, on one engine started once)",
    )
    run.add_argument("config", nargs="+", help="the release config(s) (YAML)")
    run.add_argument("--engine", choices=["local", "spark", "beam"], help="override the config's engine")
    run.add_argument("--master", help="Spark master URL (spark engine), e.g. spark://host:7077 or local[2]")
    run.add_argument("--release-id", help="the release id (default: generated); re-running an id is a no-op")
    run.set_defaults(handler=_command_run)

    releases = commands.add_parser("releases", help="list published releases")
    releases.add_argument("--lake", required=True)
    releases.add_argument("--json", action="store_true")
    releases.set_defaults(handler=_command_releases)

    show = commands.add_parser("show", help="show a release's manifest")
    show.add_argument("release_id")
    show.add_argument("--lake", required=True)
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_command_show)

    export = commands.add_parser("export", help="write a release's rows to a Parquet file")
    export.add_argument("release_id")
    export.add_argument("--lake", required=True)
    export.add_argument("--out", required=True)
    export.set_defaults(handler=_command_export)

    ledger = commands.add_parser("ledger", help="show the privacy ledger")
    ledger.add_argument("--lake", required=True)
    ledger.add_argument("--dataset")
    ledger.add_argument("--json", action="store_true")
    ledger.set_defaults(handler=_command_ledger)

    simulate = commands.add_parser(
        "simulate-ldp", help="write ldp reports and their mechanism catalog from raw secrets (config's simulation)"
    )
    simulate.add_argument("config", help="an ldp config with a simulation section (YAML)")
    simulate.set_defaults(handler=_command_simulate_ldp)

    encoder = commands.add_parser(
        "train-encoder", help="train a filter config's shared VAE on its training records and store it in the lake"
    )
    encoder.add_argument("config", help="a filter config (YAML)")
    encoder.add_argument("--json", action="store_true")
    encoder.set_defaults(handler=_command_train_encoder)

    models = commands.add_parser("models", help="list the model artifacts stored in a lake")
    models.add_argument("--lake", required=True)
    models.add_argument("--dataset")
    models.add_argument("--json", action="store_true")
    models.set_defaults(handler=_command_models)

    generate = commands.add_parser("generate-crowd", help="write the built-in sample crowd data")
    generate.add_argument("--out", required=True)
    generate.add_argument("--objects", type=int, default=2000)
    generate.add_argument("--claims-per-object", type=int, default=20)
    generate.add_argument("--sources", type=int, default=200)
    generate.add_argument("--seed", type=int, default=0)
    generate.set_defaults(handler=_command_generate_crowd)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except PrivlakeError as error:
        print(f"privlake: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("privlake: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - the one place that turns surprises into one line
        if os.environ.get("PRIVLAKE_DEBUG"):
            traceback.print_exc()
        print(f"privlake: internal error: {_first_line(error)}", file=sys.stderr)
        return 1


def _first_line(error: Exception) -> str:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {message}"


if __name__ == "__main__":
    sys.exit(main())
