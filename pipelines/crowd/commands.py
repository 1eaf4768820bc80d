"""The crowd kind's own command: ``privlake generate-crowd`` (the built-in sample data)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _command_generate_crowd(args: argparse.Namespace) -> int:
    from transforms.crowd.sample_data import generate_sample_crowd_data, write_sample_crowd_data

    data = generate_sample_crowd_data(
        objects=args.objects, claims_per_object=args.claims_per_object, sources=args.sources, seed=args.seed
    )
    paths = write_sample_crowd_data(data, Path(args.out))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def add_commands(commands: Any) -> None:
    generate = commands.add_parser("generate-crowd", help="write the built-in sample crowd data")
    generate.add_argument("--out", required=True)
    generate.add_argument("--objects", type=int, default=2000)
    generate.add_argument("--claims-per-object", type=int, default=20)
    generate.add_argument("--sources", type=int, default=200)
    generate.add_argument("--seed", type=int, default=0)
    generate.set_defaults(handler=_command_generate_crowd)
