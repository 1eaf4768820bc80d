"""The ldp kind's own command: ``privlake simulate-ldp`` (play the clients of a config's simulation)."""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.platform.errors import PrivlakeError


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


def add_commands(commands: Any) -> None:
    simulate = commands.add_parser(
        "simulate-ldp", help="write ldp reports and their mechanism catalog from raw secrets (config's simulation)"
    )
    simulate.add_argument("config", help="an ldp config with a simulation section (YAML)")
    simulate.set_defaults(handler=_command_simulate_ldp)
