"""Black-box audit of the crowd kind's ``histogram`` mechanism through the command line (issue 29).

4,000 objects of claims ``[0×5, 20×5]`` against 4,000 of ``[0×5, 20×4, 120]`` (one claim moved to
the far edge of the public range [−100, 120]), each side one release under its own secret. Every
object is released from its own keyed streams and its own claims only (uniform weights: nothing
links objects), so the objects of a side are independent draws of one object's output law: the
trials are objects inside one run. The statistic of an object's release is how many of its m = 10
released claims lie at 76 or above (the top bin's share), and every interval event of it must
satisfy the manifest's whole-release ``P_D(E) ≤ e^ε P_D'(E) + δ`` (``pipelines/platform/audit.py``:
one-sided Clopper–Pearson bounds, Bonferroni over events and directions, α = 0.01).

Negative control, so the audit can fail: the same mechanism in memory with its noise calibrated to
ε = 10 while the statement is ε = 1 (an unnoised density, in effect) is flagged on the same events.
How tight the audit is at this size (measured in memory, one pair of secrets): the correct release
proves ε ≥ 0.33 of its 1; a density noised for ε = 2 proves 0.86 and is *not* caught; noised for
ε = 10 it proves 3.6 and is. The exact enumeration (``tests/unit/transforms/crowd/
test_private_density_enumeration.py``) is what catches a factor-of-two error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipelines.cli import main
from pipelines.platform.audit import audit, interval_events
from tests.lake_setup import prepare_for
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.private_density import DensityParameters, synthesize_density_block
from transforms.crowd.value_grid import ValueGrid

OBJECTS = 4_000
EPSILON = 1.0
M = 10
TOP = 76.0
EDGES = (0, 1, 2, 3, 5, M + 1)
PRIVACY = {"epsilon": EPSILON, "value_range": [-100.0, 120.0]}
SYNTHESIS = {"mechanism": "histogram", "claims_per_object": M, "precision": 1.0}


def claims(moved: bool) -> pd.DataFrame:
    values = [0.0] * 5 + [20.0] * 4 + [120.0 if moved else 20.0]
    rows = [(obj, f"s{j}", value) for obj in range(OBJECTS) for j, value in enumerate(values)]
    return pd.DataFrame(rows, columns=["object_id", "source_id", "value"])


def top_shares(released: pd.DataFrame) -> np.ndarray:
    """Per object, its released claims at or above ``TOP``."""
    return released.assign(top=released["value"] >= TOP).groupby("object_id")["top"].sum().to_numpy()


def released_tops(tmp_path: Path, name: str, frame: pd.DataFrame, secret: str, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str]) -> tuple[np.ndarray, dict]:
    data = tmp_path / f"{name}.csv"
    frame.to_csv(data, index=False)
    lake = tmp_path / f"lake-{name}"
    config = tmp_path / f"{name}.yaml"
    document = {"kind": "crowd", "dataset": name, "lake": str(lake), "input": {"path": str(data)},
                "privacy": PRIVACY, "synthesis": SYNTHESIS}
    config.write_text(yaml.safe_dump(document))
    prepare_for(document)
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", secret)
    assert main(["run", str(config), "--release-id", name]) == 0, capsys.readouterr().err
    capsys.readouterr()
    out = tmp_path / f"{name}.parquet"
    assert main(["export", name, "--lake", str(lake), "--out", str(out)]) == 0
    assert main(["show", name, "--lake", str(lake), "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return top_shares(pd.read_parquet(out)), manifest


def test_no_event_contradicts_the_stated_whole_release_guarantee(tmp_path: Path, monkeypatch, capsys) -> None:
    first, manifest = released_tops(tmp_path, "before", claims(False), "a1" * 32, monkeypatch, capsys)
    second, _ = released_tops(tmp_path, "after", claims(True), "b2" * 32, monkeypatch, capsys)
    assert manifest["mechanism"] == "histogram"
    assert manifest["epsilon"] == EPSILON and manifest["delta"] == 0.0
    assert first.size == second.size == OBJECTS
    result = audit(interval_events(first, second, EDGES), manifest["epsilon"], manifest["delta"])
    assert result.events == 15
    assert result.passed, result.violations
    assert result.proven_epsilon < EPSILON


def in_memory_tops(frame: pd.DataFrame, noise_epsilon: float, secret: bytes) -> np.ndarray:
    coded = frame.assign(source_id=pd.factorize(frame["source_id"], sort=True)[0])
    parameters = DensityParameters(ValueGrid(-100.0, 120.0, 1.0), claims_per_object=M, epsilon=noise_epsilon)
    return top_shares(synthesize_density_block(ClaimsBlock.from_frame(coded), parameters, secret, "audit").claims)


def test_the_audit_flags_a_density_noised_for_a_larger_epsilon() -> None:
    first = in_memory_tops(claims(False), 10.0, b"c" * 32)
    second = in_memory_tops(claims(True), 10.0, b"d" * 32)
    result = audit(interval_events(first, second, EDGES), EPSILON, 0.0)
    assert not result.passed
    assert result.proven_epsilon > 2 * EPSILON
