"""Black-box audit of the crowd release through the command line (issue 13): the reviewer's
experiment, 1,000 objects of claims ``[0×5, 20×5]`` against 1,000 of ``[0×6, 20×4]`` (one claim
moved), four fresh secrets each. Objects are released independently (uniform weights: no source
qualities link them), so the 4 × 1,000 × m released claims of each side are independent draws of
one released claim's law, and every interval event of the released values must satisfy the
release's stated per-claim ``P_D(E) ≤ e^{ε_c} P_D'(E) + δ_c`` (``pipelines/platform/audit.py``:
one-sided Clopper–Pearson bounds, Bonferroni over the events, α = 0.01; 40,000 claims a side).

Negative control, so the audit can fail: the same mechanism in memory with the bandwidth fitted to
each object's claims (the old release) and a vanishing fallback is flagged against the same
statement on the same events.
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
from transforms.crowd.guarantee import CrowdMechanism, crowd_guarantee
from transforms.crowd.release import WeightSettings, synthesize_in_memory
from transforms.crowd.synthesis import SynthesisParameters
from transforms.crowd.value_grid import ValueGrid

OBJECTS = 1_000
SECRETS = ("a1" * 32, "b2" * 32, "c3" * 32, "d4" * 32)
EDGES = (-100.0, -20.0, -5.0, -1.0, 1.0, 5.0, 10.0, 15.0, 19.0, 21.0, 25.0, 40.0, 121.0)
PRIVACY = {"k": 5, "gamma": 4.0, "epsilon0": 3.0, "delta": 1e-3, "weight_ratio_cap": 1.0,
           "value_range": [-100.0, 120.0], "fallback_probability": 0.1}
SYNTHESIS = {"mechanism": "priscrowd", "claims_per_object": 10, "precision": 0.5, "bandwidth": {"method": "fixed", "value": 2.0}}


def claims(zeros: int, twenties: int) -> pd.DataFrame:
    rows = [(obj, f"s{j}", 0.0 if j < zeros else 20.0) for obj in range(OBJECTS) for j in range(zeros + twenties)]
    return pd.DataFrame(rows, columns=["object_id", "source_id", "value"])


def released_values(tmp_path: Path, name: str, frame: pd.DataFrame, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> tuple[np.ndarray, dict]:
    data = tmp_path / f"{name}.csv"
    frame.to_csv(data, index=False)
    values, manifest = [], {}
    for number, secret in enumerate(SECRETS):
        lake = tmp_path / f"lake-{name}-{number}"
        config = tmp_path / f"{name}-{number}.yaml"
        document = {
            "kind": "crowd", "dataset": name, "lake": str(lake), "input": {"path": str(data)},
            "privacy": PRIVACY, "synthesis": SYNTHESIS, "weights": {"method": "uniform"},
        }
        config.write_text(yaml.safe_dump(document))
        prepare_for(document)
        monkeypatch.setenv("PRIVLAKE_TEST_SECRET", secret)
        assert main(["run", str(config), "--release-id", f"{name}-{number}"]) == 0, capsys.readouterr().err
        capsys.readouterr()
        out = tmp_path / f"{name}-{number}.parquet"
        assert main(["export", f"{name}-{number}", "--lake", str(lake), "--out", str(out)]) == 0
        assert main(["show", f"{name}-{number}", "--lake", str(lake), "--json"]) == 0
        manifest = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        values.append(pd.read_parquet(out)["value"].to_numpy())
    return np.concatenate(values), manifest


def test_no_event_contradicts_the_stated_per_claim_guarantee(tmp_path: Path, monkeypatch, capsys) -> None:
    first, manifest = released_values(tmp_path, "before", claims(5, 5), monkeypatch, capsys)
    second, _ = released_values(tmp_path, "after", claims(6, 4), monkeypatch, capsys)
    assert first.size == second.size == len(SECRETS) * OBJECTS * SYNTHESIS["claims_per_object"]
    per_claim = manifest["guarantee"]["per_claim"]
    result = audit(interval_events(first, second, EDGES), per_claim["epsilon"], per_claim["delta"])
    assert result.events == 78
    assert result.passed, result.violations
    assert result.proven_epsilon < per_claim["epsilon"]


def test_the_audit_flags_the_data_fitted_bandwidth() -> None:
    """The broken variant, in memory: bandwidth fitted per object (Silverman), fallback 10⁻⁶, eight
    secrets (80,000 claims a side: the variant's excess over the stated ε is a fraction of a nat, so
    the audit needs more draws than the correct release's check)."""
    parameters = SynthesisParameters(claims_per_object=10, k=5, gamma=4.0, epsilon0=3.0,
                                     grid=ValueGrid(-100.0, 120.0, 0.5), fallback_probability=1e-6,
                                     max_attempts_per_claim=219, batch_size=20)
    weights = WeightSettings(method="uniform")
    samples = []
    for frame in (claims(5, 5), claims(6, 4)):
        draws = [synthesize_in_memory(frame, parameters, secret=bytes([number]) * 32, release_id="audit",
                                      bandwidth=None, weights=weights, silverman_floor=0.5)[1].claims["value"]
                 for number in range(8)]
        samples.append(np.concatenate(draws))
    stated = crowd_guarantee(CrowdMechanism(
        k=5, gamma=4.0, epsilon0=3.0, weight_ratio_cap=1.0, local_influence=1.0, fallback_probability=0.1,
        claims_per_object=10, max_attempts_per_claim=219, smallest_object=5), PRIVACY["delta"])["per_claim"]
    result = audit(interval_events(samples[0], samples[1], EDGES), stated["epsilon"], stated["delta"])
    assert not result.passed
    assert any(violation.event == "[5, 15)" for violation in result.violations)
