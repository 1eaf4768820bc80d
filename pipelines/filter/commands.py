"""The filter kind's own commands: ``privlake train-encoder`` (phase 1: the shared VAE) and
``privlake train-filters`` (each choice's filter, stored for releases with ``filters: {artifact: latest}``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pipelines.platform.errors import PrivlakeError
from pipelines.platform.progress import StageProgress


def _filter_config(path: str, command: str = "train-encoder"):
    from pipelines.platform.config import load_config

    config = load_config(path)
    if config.kind != "filter":
        raise PrivlakeError(f"{path}: {command} needs a config with kind: filter (got {config.kind!r})")
    return config


def _trained(args: argparse.Namespace, command: str, function_name: str) -> tuple[Any, dict[str, Any] | None]:
    """Run ``pipelines.filter.pipeline.<function_name>`` on the command's config with progress;
    the config and the summary (``None`` once printed as JSON for ``--json``)."""
    from pipelines.kinds import require_kind

    require_kind("filter")
    from pipelines.filter import pipeline

    config = _filter_config(args.config, command)
    progress = StageProgress()
    try:
        summary = getattr(pipeline, function_name)(config, progress=progress)
    finally:
        progress.close()
    if args.json:
        print(json.dumps(summary, default=str))
        return config, None
    return config, summary


def _command_train_encoder(args: argparse.Namespace) -> int:
    config, summary = _trained(args, "train-encoder", "train_encoder")
    if summary is None:
        return 0
    final = summary["training"].get("final_epoch", {})
    print(
        f"stored encoder for dataset {summary['dataset']!r} trained on {summary['data_fingerprint']['rows']} records "
        f"(final loss {final.get('loss', float('nan')):.4g}) in {config.lake}"
    )
    print(summary["artifact_id"])
    return 0


def _command_train_filters(args: argparse.Namespace) -> int:
    config, summary = _trained(args, "train-filters", "train_filters")
    if summary is None:
        return 0
    choices = ", ".join(
        f"{choice['name']} (epsilon {_epsilon(choice['privacy'])})" for choice in summary["choices"]
    )
    print(f"stored filters for dataset {summary['dataset']!r} against encoder "
          f"{summary['encoder_artifact_id'][:12]}: {choices} in {config.lake}")
    if not summary["stored_now"]:
        print(f"this set was already in the lake (trained at {summary['trained_at']}); filters.artifact: latest "
              "names the newest set trained for these choices, so name this id to pin it")
    print(summary["artifact_id"])
    return 0


def _epsilon(privacy: dict[str, Any]) -> str:
    values = [value for value in (privacy.get("epsilon"), privacy.get("epsilon_exact_gaussian")) if value is not None]
    return f"{min(values):.4g}" if values else "unbounded"


def add_commands(commands: Any) -> None:
    encoder = commands.add_parser(
        "train-encoder", help="train a filter config's shared VAE on its training records and store it in the lake"
    )
    encoder.add_argument("config", help="a filter config (YAML)")
    encoder.add_argument("--json", action="store_true")
    encoder.set_defaults(handler=_command_train_encoder)
    filters = commands.add_parser(
        "train-filters",
        help="train each choice's filter against the config's stored encoder and store the set in the lake "
             "(releases with filters: {artifact: latest} then need no training and no torch)",
    )
    filters.add_argument("config", help="a filter config (YAML)")
    filters.add_argument("--json", action="store_true")
    filters.set_defaults(handler=_command_train_filters)
