"""The filter kind's own command: ``privlake train-encoder`` (phase 1: the shared VAE)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pipelines.platform.errors import PrivlakeError
from pipelines.platform.progress import StageProgress


def _filter_config(path: str):
    from pipelines.platform.config import load_config

    config = load_config(path)
    if config.kind != "filter":
        raise PrivlakeError(f"{path}: train-encoder needs a config with kind: filter (got {config.kind!r})")
    return config


def _command_train_encoder(args: argparse.Namespace) -> int:
    from pipelines.kinds import require_kind

    require_kind("filter")
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


def add_commands(commands: Any) -> None:
    encoder = commands.add_parser(
        "train-encoder", help="train a filter config's shared VAE on its training records and store it in the lake"
    )
    encoder.add_argument("config", help="a filter config (YAML)")
    encoder.add_argument("--json", action="store_true")
    encoder.set_defaults(handler=_command_train_encoder)
