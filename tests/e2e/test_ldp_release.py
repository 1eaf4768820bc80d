"""The ldp release end to end: simulate reports through the clients' code path, release on every
engine (identical estimates, equal to the estimator run on the simulator's own statistics),
export, and refuse bad input with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipelines.cli import main
from pipelines.ldp.pipeline import run_ldp_release
from pipelines.ldp.simulation import simulate_ldp_reports, simulation_catalog
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake
from pipelines.platform.release import ReleaseOutcome
from schemas.manifest import missing_manifest_keys
from tests.e2e.sources_conformance import engine_for, iceberg_snapshot, iceberg_source, shuffled_partitions
from tests.lake_setup import prepare_for
from transforms.core.keyed_randomness import secret_from_hex
from transforms.ldp.distribution_metrics import earth_movers_distance_line
from transforms.ldp.estimators import (
    channel_report_groups,
    generalized_iterative_bayesian_update,
    krr_closed_form_estimate,
    rappor_estimate,
)
from transforms.ldp.simulation import simulate_reports

SECRET_HEX = "1dbb" * 16
LINE_SIZE = 30


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)


def line_secrets(n: int = 6000, seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).binomial(LINE_SIZE - 1, 0.4, size=n) + 10


def ldp_config(directory: Path, mechanisms: list[dict], *, method: str = "gibu", report_format: str = "parquet",
               **sections: object) -> Path:
    """A line-layout ldp config (secrets 10..39) with a simulation over ``line_secrets``."""
    source = directory / "secrets.csv"
    if not source.exists():
        pd.DataFrame({"age": line_secrets()}).to_csv(source, index=False)
    config: dict = {
        "kind": "ldp",
        "dataset": "ages",
        "lake": str(directory / "lake"),
        "input": {
            "path": str(directory / f"reports.{report_format}"),
            "format": report_format,
            "catalog": str(directory / "catalog.json"),
        },
        "secrets": {"layout": "line", "first_value": 10, "values": LINE_SIZE},
        "estimator": {"method": method},
        "evaluation": {"truth_path": str(directory / "truth.parquet")},
        "simulation": {
            "source": {"path": str(source), "columns": ["age"]},
            "mechanisms": mechanisms,
            "truth_out": str(directory / "truth.parquet"),
        },
    }
    config.update(sections)
    path = directory / "ldp.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_for(config)
    return path


MIXED = [
    {"type": "krr", "epsilon": [0.5, 3.0], "count": 3},
    {"type": "truncated_geometric", "epsilon": [0.3, 1.5], "count": 3, "share": 2.0},
]
RAPPOR = [{"type": "rappor", "epsilon": [0.5, 4.0], "count": 4}]


def simulated_release(tmp_path: Path, mechanisms: list[dict], method: str, engine_name: str, spark_session,
                      release_id: str = "ldp-1") -> tuple[ReleaseOutcome, pd.DataFrame, Path]:
    config_path = ldp_config(tmp_path, mechanisms, method=method)
    config = load_config(config_path)
    simulate_ldp_reports(config)
    with engine_for(engine_name, spark_session) as engine:
        outcome = run_ldp_release(config, release_id=release_id, engine=engine)
    estimate = Lake(config.lake).read_release(release_id).to_pandas().sort_values("value", ignore_index=True)
    return outcome, estimate, config_path


@pytest.fixture(scope="module")
def engine_releases(tmp_path_factory: pytest.TempPathFactory, spark_session) -> dict:
    """(public manifest, estimate, config path) per (case, engine); the operator record (with the
    evaluation against the simulated truth) under ("internal", case, engine)."""
    results: dict = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
        for case, mechanisms, method in (("mixed-gibu", MIXED, "gibu"), ("rappor-rap_m", RAPPOR, "rap_m"),
                                         ("rappor-gibu", RAPPOR, "gibu")):
            for engine_name in ("local", "spark", "beam"):
                directory = tmp_path_factory.mktemp(f"{case}-{engine_name}")
                outcome, estimate, config_path = simulated_release(
                    directory, mechanisms, method, engine_name, spark_session
                )
                results[case, engine_name] = (outcome.manifest, estimate, config_path)
                results["internal", case, engine_name] = outcome.internal
    return results


@pytest.mark.spark
@pytest.mark.beam
@pytest.mark.parametrize("case", ["mixed-gibu", "rappor-rap_m", "rappor-gibu"])
@pytest.mark.parametrize("engine_name", ["spark", "beam"])
def test_every_engine_publishes_the_identical_estimate(engine_releases: dict, case: str, engine_name: str) -> None:
    local_manifest, local_estimate, _ = engine_releases[case, "local"]
    manifest, estimate, _ = engine_releases[case, engine_name]
    assert manifest["engine"] == engine_name
    pd.testing.assert_frame_equal(estimate, local_estimate, check_exact=True)
    for key in ("n", "iterations", "converged", "mechanism_mix", "estimator"):
        assert manifest[key] == local_manifest[key]


def partitioned_release(engine_releases: dict, case: str, directory: Path, engine_name: str, spark_session,
                        files: int, glob: bool = False) -> tuple[dict, pd.DataFrame]:
    """The single-file case's reports shuffled into ``files`` hive partitions (``day=.../``), released."""
    _, _, config_path = engine_releases[case, "local"]
    document = yaml.safe_load(config_path.read_text())
    folder = shuffled_partitions(pd.read_parquet(document["input"]["path"]), directory / "reports", files)
    document["input"]["path"] = str(folder / "day=*" / "*.parquet") if glob else str(folder)
    document["input"].pop("format")
    document["lake"] = str(directory / "lake")
    document.pop("simulation")
    path = directory / "partitioned.yaml"
    path.write_text(yaml.safe_dump(document))
    prepare_for(document)
    with engine_for(engine_name, spark_session) as engine:
        outcome = run_ldp_release(load_config(path), release_id="partitioned-1", engine=engine)
    estimate = Lake(directory / "lake").read_release("partitioned-1").to_pandas().sort_values("value", ignore_index=True)
    return outcome.manifest, estimate


@pytest.mark.spark
@pytest.mark.beam
@pytest.mark.parametrize("case", ["mixed-gibu", "rappor-rap_m", "rappor-gibu"])
@pytest.mark.parametrize(("engine_name", "files"), [("local", 3), ("spark", 5), ("beam", 7)])
def test_a_partitioned_input_gives_the_single_file_release_on_every_engine(
    engine_releases: dict, tmp_path: Path, spark_session, case: str, engine_name: str, files: int
) -> None:
    """Issue 15: the reports of the single-file release, shuffled into hive partition folders and
    read where they live, give the bit-identical release on every engine and in any split."""
    single_manifest, single_estimate, _ = engine_releases[case, "local"]
    manifest, estimate = partitioned_release(engine_releases, case, tmp_path, engine_name, spark_session, files)
    pd.testing.assert_frame_equal(estimate, single_estimate, check_exact=True)
    for key in ("n", "iterations", "converged", "mechanism_mix", "estimator", "final_change"):
        assert manifest[key] == single_manifest[key], key
    assert manifest["engine"] == engine_name


@pytest.mark.spark
def test_a_glob_over_partitions_gives_the_single_file_release(engine_releases: dict, tmp_path: Path,
                                                              spark_session) -> None:
    single_manifest, single_estimate, _ = engine_releases["mixed-gibu", "local"]
    manifest, estimate = partitioned_release(engine_releases, "mixed-gibu", tmp_path, "local", spark_session, 4,
                                             glob=True)
    pd.testing.assert_frame_equal(estimate, single_estimate, check_exact=True)
    assert manifest["n"] == single_manifest["n"]


def _simulated(config_path: Path):
    """The simulator's clients replayed from the config, with the catalog in sorted-name order
    (the release's mechanism codes): (sorted mechanisms, secrets, per-user sorted code, reports)."""
    config = load_config(config_path)
    named, shares = simulation_catalog(config)
    ages = pd.read_csv(config.simulation.source.path)["age"].to_numpy() - 10
    simulated = simulate_reports(ages, list(named.values()), shares, secret_from_hex(SECRET_HEX), "simulate-ages")
    names = sorted(named)
    sorted_code = np.array([names.index(name) for name in named])[simulated.user_mechanism]
    return [named[name] for name in names], ages, sorted_code, simulated.reports


@pytest.mark.spark
def test_mixed_release_equals_gibu_on_the_simulated_clients_statistics(engine_releases: dict) -> None:
    manifest, estimate, config_path = engine_releases["mixed-gibu", "local"]
    mechanisms, ages, codes, reports = _simulated(config_path)
    counts = [np.bincount(reports[codes == code], minlength=m.output_size) for code, m in enumerate(mechanisms)]
    likelihoods, group_counts = channel_report_groups([m.channel_matrix() for m in mechanisms], counts)
    reference = generalized_iterative_bayesian_update(likelihoods, group_counts, tolerance=1e-8, max_iterations=10_000)
    np.testing.assert_allclose(estimate["probability"].to_numpy(), reference.estimate, rtol=0, atol=1e-12)
    assert manifest["iterations"] == reference.iterations and manifest["converged"] == reference.converged
    assert manifest["n"] == len(ages) == sum(entry["users"] for entry in manifest["mechanism_mix"])
    assert [entry["users"] for entry in manifest["mechanism_mix"]] == np.bincount(codes).tolist()
    truth = np.bincount(ages, minlength=LINE_SIZE) / len(ages)
    assert "evaluation" not in manifest, "the evaluation reads the simulated truth: operator-only"
    evaluation = engine_releases["internal", "mixed-gibu", "local"]["evaluation"]
    assert evaluation["emd"] == pytest.approx(earth_movers_distance_line(reference.estimate, truth))


@pytest.mark.spark
def test_rappor_release_equals_rap_m_on_the_simulated_bit_sums(engine_releases: dict) -> None:
    manifest, estimate, config_path = engine_releases["rappor-rap_m", "local"]
    mechanisms, ages, codes, reports = _simulated(config_path)
    users = np.bincount(codes, minlength=len(mechanisms))
    reference = rappor_estimate(reports.sum(axis=0), len(ages), np.array([m.epsilon for m in mechanisms]), users)
    np.testing.assert_allclose(estimate["probability"].to_numpy(), reference, rtol=0, atol=1e-12)
    assert manifest["estimator"] == "rap_m" and manifest["iterations"] == 0


@pytest.mark.spark
def test_gibu_on_rappor_bit_vectors_is_at_least_as_accurate_as_rap_m(engine_releases: dict) -> None:
    rap_m = engine_releases["internal", "rappor-rap_m", "local"]["evaluation"]["emd"]
    gibu = engine_releases["internal", "rappor-gibu", "local"]["evaluation"]["emd"]
    assert gibu <= rap_m * 1.05


def test_all_krr_inv_m_uses_the_closed_form(tmp_path: Path) -> None:
    config_path = ldp_config(tmp_path, [{"type": "krr", "epsilon": [1.0, 3.0], "count": 3}], method="inv_m")
    config = load_config(config_path)
    simulate_ldp_reports(config)
    outcome = run_ldp_release(config, release_id="krr-1")
    manifest = outcome.manifest
    assert outcome.internal["input_fingerprint"].startswith("hmac-sha256:"), "keyed, operator-only"
    assert "input_fingerprint" not in manifest
    mechanisms, ages, codes, reports = _simulated(config_path)
    users = np.bincount(codes, minlength=len(mechanisms))
    reference = krr_closed_form_estimate(np.array([m.epsilon for m in mechanisms]), LINE_SIZE,
                                         np.bincount(reports, minlength=LINE_SIZE), users)
    estimate = Lake(config.lake).read_release("krr-1").to_pandas().sort_values("value")["probability"].to_numpy()
    np.testing.assert_allclose(estimate, reference, rtol=0, atol=1e-12)
    assert manifest["estimator"] == "inv_m (k-RR closed form)"
    assert missing_manifest_keys(manifest) == []


def test_cli_simulate_run_show_export_on_csv_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = ldp_config(tmp_path, MIXED, report_format="csv")
    assert main(["simulate-ldp", str(config_path)]) == 0
    reports = pd.read_csv(tmp_path / "reports.csv")
    assert list(reports.columns) == ["user_id", "mechanism", "report"] and len(reports) == 6000
    assert main(["run", str(config_path), "--release-id", "cli-1"]) == 0
    assert "converged" in capsys.readouterr().out
    assert main(["show", "cli-1", "--lake", str(tmp_path / "lake"), "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert missing_manifest_keys(manifest) == []
    assert manifest["kind"] == "ldp" and manifest["delta"] == 0.0
    mix = {entry["name"]: entry for entry in manifest["mechanism_mix"]}
    assert manifest["epsilon"] == max(entry["worst_case_ldp_epsilon"] for entry in mix.values())
    assert mix["krr_eps0.5"]["worst_case_ldp_epsilon"] == pytest.approx(0.5)
    assert mix["truncated_geometric_eps0.3"]["worst_case_ldp_epsilon"] == pytest.approx(0.3 * (LINE_SIZE - 1))
    assert set(manifest["catalog"]) == set(mix)
    out = tmp_path / "estimate.parquet"
    assert main(["export", "cli-1", "--lake", str(tmp_path / "lake"), "--out", str(out)]) == 0
    exported = pd.read_parquet(out)
    assert list(exported.columns) == ["value", "probability"]
    assert exported["value"].tolist() == list(range(10, 10 + LINE_SIZE))
    assert exported["probability"].sum() == pytest.approx(1.0) and (exported["probability"] >= 0).all()


def test_gibu_on_rappor_above_the_driver_cap_is_refused_before_the_bit_vectors_are_collected(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15: GIBU on RAPPOR holds the distinct bit vectors on the driver, at most min(reports,
    mechanisms · 2^k) of them; above ``estimator.max_vector_cells`` that bound times k is refused
    with one line naming rap_m (exit 2), and nothing is published; at the bound the release runs.
    6,000 reports of 30 bits: the bound is 180,000 cells (the simulated vectors are all distinct,
    so a check on the distinct count would refuse too — the test pins the bound, checked first)."""
    cells = 6000 * LINE_SIZE
    config_path = ldp_config(tmp_path, RAPPOR, estimator={"method": "gibu", "max_vector_cells": cells - 1})
    assert main(["simulate-ldp", str(config_path)]) == 0
    capsys.readouterr()
    assert main(["run", str(config_path), "--release-id", "capped-1"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "6,000 of 30 bits (180,000 cells)" in lines[0] and "rap_m" in lines[0] and "max_vector_cells" in lines[0]
    assert main(["show", "capped-1", "--lake", str(tmp_path / "lake")]) != 0
    document = yaml.safe_load(config_path.read_text())
    document["estimator"]["max_vector_cells"] = cells
    config_path.write_text(yaml.safe_dump(document))
    assert main(["run", str(config_path), "--release-id", "capped-2"]) == 0
    capsys.readouterr()
    assert main(["show", "capped-2", "--lake", str(tmp_path / "lake"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["estimator"] == "gibu"


GOWALLA = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "gowalla_sf" / "checkins_sf_grid.csv"


def test_gowalla_example_config_runs_and_recovers_the_check_in_distribution(tmp_path: Path) -> None:
    assert GOWALLA.is_file(), f"the shared Gowalla data set is missing at {GOWALLA}"
    example = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "ldp_gowalla.yaml").read_text())
    example["lake"] = str(tmp_path / "lake")
    example["input"]["path"] = str(tmp_path / "reports.parquet")
    example["input"]["catalog"] = str(tmp_path / "catalog.json")
    example["evaluation"]["truth_path"] = example["simulation"]["truth_out"] = str(tmp_path / "truth.parquet")
    example["simulation"]["source"]["path"] = str(GOWALLA)
    config_path = tmp_path / "gowalla.yaml"
    config_path.write_text(yaml.safe_dump(example))
    prepare_for(example)
    assert main(["simulate-ldp", str(config_path)]) == 0
    assert main(["run", str(config_path), "--release-id", "gowalla-1"]) == 0
    manifest = Lake(tmp_path / "lake").manifest("gowalla-1")
    assert manifest["n"] == 123_026 and manifest["converged"]
    truth = pd.read_parquet(tmp_path / "truth.parquet")["probability"].to_numpy()
    # The uniform distribution is what an estimator that learned nothing returns; GIBU must be far closer.
    from transforms.ldp.distribution_metrics import earth_movers_distance_grid

    uniform_emd = earth_movers_distance_grid(np.full(384, 1 / 384), truth, 16, 24, 0.5)
    from pipelines.platform.internal import OperatorRecords

    assert "evaluation" not in manifest, "the evaluation reads the raw secrets: operator-only"
    from pipelines.platform.ledger import PrivacyLedger
    from schemas.manifest import operator_keys_in

    assert operator_keys_in(manifest) == []
    charged = PrivacyLedger(Lake(tmp_path / "lake")).entries("gowalla_sf")
    assert list(charged["status"]) == ["reserved", "published"] and set(charged["epsilon"]) == {0.0}
    assert manifest["charged"]["epsilon"] == 0.0 and manifest["charged"]["steps"] == []
    evaluation = OperatorRecords(Lake(tmp_path / "lake")).read("gowalla-1")[-1]["record"]["evaluation"]
    assert evaluation["emd"] < 0.25 * uniform_emd
    exported = tmp_path / "estimate.parquet"
    assert main(["export", "gowalla-1", "--lake", str(tmp_path / "lake"), "--out", str(exported)]) == 0
    assert list(pd.read_parquet(exported).columns) == ["row", "col", "probability"]


def test_an_iceberg_table_snapshot_with_a_row_filter_gives_the_release_of_those_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15: ``input.table`` + ``input.lake`` (+ ``snapshot_id``, ``row_filter``) read on the
    engine: the same release as a file holding exactly the rows the snapshot and filter select."""
    import pyarrow as pa

    rng = np.random.default_rng(8)
    catalog = {"krr_a": {"type": "krr", "epsilon": 1.0, "input_size": 6},
               "krr_b": {"type": "krr", "epsilon": 3.0, "input_size": 6}}
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))

    def reports(first: int, rows: int) -> pa.Table:
        return pa.table({"user_id": pa.array(np.arange(first, first + rows), pa.int64()),
                         "mechanism": rng.choice(sorted(catalog), rows).tolist(),
                         "report": pa.array(rng.integers(0, 6, rows), pa.int64()),
                         "region": rng.choice(["eu", "us"], rows).tolist()})

    first_batch, second_batch = reports(0, 700), reports(700, 300)
    snapshot = iceberg_snapshot(tmp_path / "input-lake", "reports", [first_batch.slice(0, 400), first_batch.slice(400)],
                                second_batch)
    selected = first_batch.filter(pa.compute.equal(first_batch["region"], "eu")).to_pandas()
    selected.to_parquet(tmp_path / "selected.parquet", index=False)

    def release(name: str, source: dict, lake: str) -> dict:
        config = {"kind": "ldp", "dataset": name, "lake": lake, "input": {**source, "catalog": "catalog.json"},
                  "engine": {"name": "local", "parallelism": 3}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        prepare_for({**config, "lake": str(tmp_path / lake)})
        assert main(["run", str(tmp_path / f"{name}.yaml"), "--release-id", f"{name}-1"]) == 0, capsys.readouterr().err
        return Lake(tmp_path / lake).manifest(f"{name}-1")

    from_table = release("table", iceberg_source("db.reports", "input-lake", snapshot, "region = 'eu'"), "lake")
    # the file holds the snapshot's selected rows: in the same lake it would be refused as dataset
    # 'table''s input (issue 32), so the file's release goes to a lake of its own
    from_file = release("file", {"path": "selected.parquet"}, "file-lake")
    assert from_table["n"] == from_file["n"] == len(selected)
    for key in ("mechanism_mix", "iterations", "final_change"):
        assert from_table[key] == from_file[key], key
    with Lake(tmp_path / "lake") as lake, Lake(tmp_path / "file-lake") as file_lake:
        pd.testing.assert_frame_equal(lake.read_release("table-1").to_pandas().sort_values("value", ignore_index=True),
                                      file_lake.read_release("file-1").to_pandas().sort_values("value", ignore_index=True),
                                      check_exact=True)
