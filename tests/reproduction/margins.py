"""Reproduction thresholds with a measured margin.

A reproduction test asserts claims of the form ``figure >= bound`` or ``figure <= bound`` about
figures a module computes for one *key* (a release secret, a data seed, a training key — every
source of randomness the figure has). The tests run key 0. Floating-point results differ between
machines of the same kind (BLAS and torch kernels pick other instruction paths), so a bound that
sits next to the value measured on one machine stops another machine's CI: every bound must sit
beyond the worst of at least ``MIN_KEYS`` keys by at least ``MIN_STANDARD_DEVIATIONS`` standard
deviations of the figure over those keys. The spread over keys is what a machine's numerics
cannot exceed by much, since a different key changes every draw while a different machine only
changes rounding.

``python -m tests.reproduction.margins [module …]`` measures every registered module's figures
over ``MIN_KEYS`` keys and records them in ``margins.json`` beside this file;
``tests/reproduction/test_margins.py`` checks every registered claim against that record, so a
bound moved next to its figure, or a claim without a measurement, fails the suite.

A module takes part by defining ``CLAIMS`` (a tuple of :class:`Claim`) and ``FIGURES`` (a mapping
from a group name to a function ``key -> {figure name: value}``); figure names are
``"<group>.<name>"``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

MIN_KEYS = 10
MIN_STANDARD_DEVIATIONS = 3.0
RECORD = Path(__file__).with_name("margins.json")
MODULES = (
    "tests.reproduction.test_filter_findings",
    "tests.reproduction.test_priscrowd_findings",
    "tests.reproduction.test_tabular_findings",
)

Figures = dict[str, float]
FigureGroups = Mapping[str, Callable[[int], Figures]]


@dataclass(frozen=True)
class Claim:
    """``figure relation bound``; ``why`` says what the claim means in the paper's terms."""

    figure: str
    relation: Literal[">=", "<="]
    bound: float
    why: str = ""

    @property
    def group(self) -> str:
        return self.figure.split(".", 1)[0]

    def holds(self, value: float) -> bool:
        return value >= self.bound if self.relation == ">=" else value <= self.bound

    def margin(self, values: list[float]) -> tuple[float, float]:
        """(distance of the worst key from the bound, standard deviation over keys); the distance
        is negative when the worst key breaks the claim."""
        worst = min(values) if self.relation == ">=" else max(values)
        distance = worst - self.bound if self.relation == ">=" else self.bound - worst
        return distance, standard_deviation(values)


def standard_deviation(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((value - mean) ** 2 for value in values) / max(len(values) - 1, 1))


def key_secret(key: int, base: bytes) -> bytes:
    """The 32-byte secret of measurement key ``key``: key 0 is the tests' own ``base``, every other
    key a hash of its number (so the tests keep their figures and the keys are unrelated)."""
    if key == 0:
        return base
    return hashlib.sha256(b"privlake reproduction key " + str(key).encode()).digest()


def check_claims(claims: tuple[Claim, ...], group: str, figures: Figures) -> None:
    """Assert every claim of ``group`` on ``figures``, naming each broken one with its value."""
    broken = [
        f"{claim.figure} = {figures[claim.figure]:.4f}, claimed {claim.relation} {claim.bound} ({claim.why})"
        for claim in claims
        if claim.group == group and not claim.holds(figures[claim.figure])
    ]
    assert not broken, "; ".join(broken)


def measure(module_name: str, keys: int) -> dict[str, list[float]]:
    module = importlib.import_module(module_name)
    values: dict[str, list[float]] = {}
    for group, compute in module.FIGURES.items():
        for key in range(keys):
            started = time.perf_counter()
            for name, value in compute(key).items():
                values.setdefault(name, []).append(float(value))
            print(f"{module_name} {group} key {key}: {time.perf_counter() - started:.1f} s", flush=True)
        release = getattr(module, "release_key_caches", None)
        if release is not None:
            release()
    return values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", default=list(MODULES))
    parser.add_argument("--keys", type=int, default=MIN_KEYS)
    arguments = parser.parse_args(argv)
    for module_name in arguments.modules:
        values = measure(module_name, arguments.keys)
        # read again just before writing: another module may have been measured meanwhile
        record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        record[module_name] = values
        RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    record = json.loads(RECORD.read_text())
    for module_name in arguments.modules:
        module = importlib.import_module(module_name)
        for claim in module.CLAIMS:
            values = record[module_name][claim.figure]
            distance, spread = claim.margin(values)
            print(
                f"{claim.figure:60s} {claim.relation} {claim.bound:8.4f}  range {min(values):.4f}–{max(values):.4f}"
                f"  sd {spread:.4f}  margin {distance / spread if spread else math.inf:6.1f} sd"
            )


if __name__ == "__main__":
    main()
