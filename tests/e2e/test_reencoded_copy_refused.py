"""A re-encoded copy of a dataset's input does not buy a fresh budget (issue 32).

The issue's experiment: one test lake, five datasets with a budget each, the same claims read as
``sample`` (the original file), ``copy`` (a byte copy), ``shuffled`` (the rows shuffled, in a new
folder), ``extracol`` (an extra column, the columns reordered) and ``parquet`` (the same claims as
Parquet). Before row prints three of the four copies published. Now the first release publishes
and the four copies are refused (exit 4, one line naming ``sample``), on the local engine, Spark
and Beam; a genuinely different dataset still publishes. The negative control runs the same
experiment with the row check switched off — the byte fingerprints alone — and the shuffled copy
publishes, so the experiment can fail. A release refused for its budget binds nothing: another
dataset's legitimate release from the same folder publishes afterwards.

The tabular, ldp and filter kinds are refused the same way (their canonical rows:
``pipelines/platform/row_prints.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml

from pipelines.cli import main
from pipelines.crowd.pipeline import run_crowd_release
from pipelines.engines import make_engine
from pipelines.ldp.simulation import simulate_ldp_reports
from pipelines.platform.config import load_config
from pipelines.platform.errors import ReleaseRefused
from pipelines.platform.lake import Lake
from pipelines.platform.ledger import PrivacyLedger
from pipelines.platform.policy import (
    FINGERPRINTS_SCHEMA,
    FINGERPRINTS_TABLE,
    LOCATIONS_SCHEMA,
    LOCATIONS_TABLE,
    SKETCHES_SCHEMA,
    SKETCHES_TABLE,
    LakePolicy,
)
from schemas.crowd.config import CrowdConfig
from tests.e2e.crowd_cases import conformance_config
from tests.e2e.test_filter_release import filter_case
from tests.e2e.test_ldp_release import MIXED, ldp_config
from tests.e2e.test_tabular_release import tabular_case
from tests.lake_setup import prepare_lake
from transforms.crowd.sample_data import generate_sample_crowd_data

COPIES = ("copy", "shuffled", "extracol", "parquet")
BUDGET = 1e6


def write_variants(frame: pd.DataFrame, original: Path, root: Path, seed: int = 5) -> dict[str, tuple[Path, str]]:
    """The issue's four copies of ``frame`` (read from ``original``), each in a folder of its own:
    ``{name: (path, format)}``."""
    generator = np.random.default_rng(seed)
    variants: dict[str, tuple[Path, str]] = {}
    for name in COPIES:
        (root / name).mkdir(parents=True)
    fmt = "parquet" if original.suffix == ".parquet" else "csv"
    shutil.copy(original, root / "copy" / original.name)
    variants["copy"] = (root / "copy" / original.name, fmt)
    shuffled = frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    variants["shuffled"] = (root / "shuffled" / "rows.csv", "csv")
    shuffled.to_csv(variants["shuffled"][0], index=False)
    extra = frame.assign(note=generator.integers(0, 10**6, len(frame)).astype(str))
    extra = extra[["note", *reversed(list(frame.columns))]]
    variants["extracol"] = (root / "extracol" / "rows.csv", "csv")
    extra.to_csv(variants["extracol"][0], index=False)
    variants["parquet"] = (root / "parquet" / "rows.parquet", "parquet")
    # another codec and row groups: other bytes than an original Parquet file written by pandas
    frame.to_parquet(variants["parquet"][0], index=False, compression="zstd", row_group_size=997)
    return variants


def lake_rows(lake: Path, name: str, schema: object) -> list[dict]:
    with Lake(lake) as opened:
        return LakePolicy(opened)._read(name, schema).to_pylist()  # type: ignore[arg-type]


# ---- the crowd experiment, on every engine ----------------------------------------------------------

def crowd_claims(seed: int) -> pd.DataFrame:
    """10,000 claims: more distinct rows than a sketch keeps, so the check works on samples."""
    claims = generate_sample_crowd_data(objects=500, claims_per_object=20, sources=80, seed=seed).claims
    return claims[["object_id", "source_id", "value"]]


def crowd_experiment(tmp_path: Path, engine_name: str, spark_session: object = None) -> dict[str, str]:
    """Every dataset's outcome (``published`` or the refusal's line) on ``engine_name``."""
    lake = tmp_path / "lake"
    prepare_lake(lake, "sample", *COPIES, "different", epsilon=BUDGET)
    original = tmp_path / "sample" / "claims.csv"
    original.parent.mkdir()
    claims = crowd_claims(seed=21)
    claims.to_csv(original, index=False)
    different = tmp_path / "different" / "claims.csv"
    different.parent.mkdir()
    crowd_claims(seed=22).to_csv(different, index=False)
    inputs = {"sample": (original, "csv"), **write_variants(pd.read_csv(original), original, tmp_path / "copies"),
              "different": (different, "csv")}
    outcomes: dict[str, str] = {}
    options = {"spark_session": spark_session} if spark_session is not None else {}
    with make_engine(engine_name, **options) as engine:
        for number, (dataset, (path, fmt)) in enumerate(inputs.items()):
            config = conformance_config(path, lake)
            config.update(dataset=dataset, input={"path": str(path), "format": fmt})
            try:
                run_crowd_release(CrowdConfig.model_validate(config), engine=engine, release_id=f"{dataset}-{number}")
                outcomes[dataset] = "published"
            except ReleaseRefused as refusal:
                outcomes[dataset] = str(refusal)
                with Lake(lake) as opened:
                    assert not opened.is_published(f"{dataset}-{number}")
                    event = PrivacyLedger(opened).latest_event(dataset, f"{dataset}-{number}")
                assert event is not None and event["status"] == "refunded", f"{dataset}: a refused release is not charged"
    return outcomes


def assert_one_publication(outcomes: dict[str, str]) -> None:
    assert outcomes["sample"] == "published"
    assert outcomes["different"] == "published", "a genuinely different dataset is accepted"
    assert "identical to one of dataset 'sample'" in outcomes["copy"]
    for name in ("shuffled", "extracol", "parquet"):
        assert "this input's rows are dataset 'sample's" in outcomes[name], (name, outcomes[name])
        assert "about 100% of its 10,000 rows" in outcomes[name]
        assert "privlake budget merge" in outcomes[name]


def test_the_five_datasets_end_with_one_publication_locally(tmp_path: Path) -> None:
    outcomes = crowd_experiment(tmp_path, "local")
    assert_one_publication(outcomes)
    recorded = {row["dataset"] for row in lake_rows(tmp_path / "lake", SKETCHES_TABLE, SKETCHES_SCHEMA)}
    assert recorded == {"sample", "different"}, "a refused release records no rows"
    bound = {row["dataset"] for row in lake_rows(tmp_path / "lake", LOCATIONS_TABLE, LOCATIONS_SCHEMA)}
    assert bound == {"sample", "different"}, "a refused release binds no location"


@pytest.mark.spark
def test_the_five_datasets_end_with_one_publication_on_spark(tmp_path: Path, spark_session: object) -> None:
    assert_one_publication(crowd_experiment(tmp_path, "spark", spark_session))


@pytest.mark.beam
def test_the_five_datasets_end_with_one_publication_on_beam(tmp_path: Path) -> None:
    assert_one_publication(crowd_experiment(tmp_path, "beam"))


def test_negative_control_byte_fingerprints_alone_publish_the_copies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the row check switched off (the policy before issue 32: file digests only), the
    shuffled, extra-column and Parquet copies publish with fresh budgets: the experiment above
    fails on byte fingerprints."""
    monkeypatch.setattr(LakePolicy, "_overlapping", lambda *_: None)
    outcomes = crowd_experiment(tmp_path, "local")
    assert "identical to one of dataset 'sample'" in outcomes["copy"]
    assert [outcomes[name] for name in ("shuffled", "extracol", "parquet")] == ["published"] * 3
    with pytest.raises(AssertionError):
        assert_one_publication(outcomes)


def test_a_release_refused_for_its_budget_binds_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before issue 32 a release refused for its budget (exit 4) had bound its location: a later,
    legitimate release of another dataset from that folder was refused. Now it changes no policy
    state: no location, no rows, no file digests."""
    lake = tmp_path / "lake"
    prepare_lake(lake, "tight", epsilon=0.5)
    prepare_lake(lake, "legitimate", epsilon=BUDGET)
    data = tmp_path / "shared" / "claims.csv"
    data.parent.mkdir()
    crowd_claims(seed=31).to_csv(data, index=False)
    for dataset in ("tight", "legitimate"):
        config = conformance_config(data, lake)
        config.update(dataset=dataset)
        (tmp_path / f"{dataset}.yaml").write_text(yaml.safe_dump(config))
    assert main(["run", str(tmp_path / "tight.yaml"), "--release-id", "tight-1"]) == 4
    assert "budget" in capsys.readouterr().err
    for name, schema in ((LOCATIONS_TABLE, LOCATIONS_SCHEMA), (SKETCHES_TABLE, SKETCHES_SCHEMA),
                         (FINGERPRINTS_TABLE, FINGERPRINTS_SCHEMA)):
        assert lake_rows(lake, name, schema) == [], f"a release refused for its budget wrote {name}"
    assert main(["run", str(tmp_path / "legitimate.yaml"), "--release-id", "legitimate-1"]) == 0
    assert {row["dataset"] for row in lake_rows(lake, LOCATIONS_TABLE, LOCATIONS_SCHEMA)} == {"legitimate"}


def test_a_merged_dataset_shares_the_budget_and_may_read_the_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``privlake budget merge B --into A``: B's releases read A's rows and are charged to A (a
    refused, refunded release of B spent nothing: B can still be merged)."""
    lake = tmp_path / "lake"
    prepare_lake(lake, "sample", "sample_v2", epsilon=BUDGET)
    original = tmp_path / "sample" / "claims.csv"
    original.parent.mkdir()
    crowd_claims(seed=41).to_csv(original, index=False)
    shuffled = write_variants(pd.read_csv(original), original, tmp_path / "copies")["shuffled"][0]
    for dataset, path in (("sample", original), ("sample_v2", shuffled)):
        config = conformance_config(path, lake)
        config.update(dataset=dataset)
        (tmp_path / f"{dataset}.yaml").write_text(yaml.safe_dump(config))
    assert main(["run", str(tmp_path / "sample.yaml"), "--release-id", "sample-1"]) == 0
    assert main(["run", str(tmp_path / "sample_v2.yaml"), "--release-id", "v2-1"]) == 4
    assert "privlake budget merge sample_v2 --into sample" in capsys.readouterr().err
    assert main(["budget", "merge", "sample_v2", "--into", "sample", "--lake", str(lake)]) == 0
    assert main(["run", str(tmp_path / "sample_v2.yaml"), "--release-id", "v2-2"]) == 0
    with Lake(lake) as opened:
        ledger = PrivacyLedger(opened)
        assert ledger.latest_event("sample", "v2-2")["status"] == "published", "charged to the budget it shares"
        assert ledger.latest_event("sample_v2", "v2-2") is None
        spent_both = ledger.spent("sample", 1e-6).epsilon
        assert spent_both > ledger.entries("sample").iloc[0]["epsilon"]
    capsys.readouterr()
    assert main(["budget", "merge", "sample", "--into", "sample_v2", "--lake", str(lake)]) == 2
    assert "already merged into 'sample'" in capsys.readouterr().err


# ---- the other kinds ---------------------------------------------------------------------------

def _retarget(config_path: Path, target: Path, dataset: str, path: Path, fmt: str) -> Path:
    config = yaml.safe_load(config_path.read_text())
    config["dataset"] = dataset
    config["input"] = {**config["input"], "path": str(path), "format": fmt}
    target.write_text(yaml.safe_dump(config))
    return target


def kind_case(kind: str, root: Path) -> tuple[Path, Path]:
    """A config of dataset ``<kind>-a`` in ``root / 'lake'`` and its input file."""
    first = root / "first"
    first.mkdir()
    lake = root / "lake"
    if kind == "tabular":
        config = tabular_case(first)
        data = first / "records.csv"
    elif kind == "ldp":
        config = ldp_config(first, MIXED)
        simulate_ldp_reports(load_config(config))
        data = first / "reports.parquet"
    else:
        config = filter_case(first)
        data = first / "records.csv"
    raw = yaml.safe_load(config.read_text())
    raw.update(dataset=f"{kind}-a", lake=str(lake))
    config.write_text(yaml.safe_dump(raw))
    return config, data


@pytest.mark.parametrize("kind", ["tabular", "ldp", "filter"])
def test_every_kind_refuses_a_reencoded_copy(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, data = kind_case(kind, tmp_path)
    lake = tmp_path / "lake"
    unit = "record" if kind == "tabular" else "release"
    frame = pd.read_parquet(data) if data.suffix == ".parquet" else pd.read_csv(data, dtype=str, keep_default_na=False)
    variants = write_variants(frame, data, tmp_path / "copies")
    # a tabular input may hold no column its schema does not name (exit 2 for the extra-column copy,
    # before anything is read); the filter's variants each train an encoder, so it runs two
    names = {"tabular": ["shuffled", "parquet"], "ldp": ["shuffled", "extracol", "parquet"],
             "filter": ["extracol", "parquet"]}[kind]
    prepare_lake(lake, f"{kind}-a", *(f"{kind}-{name}" for name in names), epsilon=BUDGET, unit=unit)
    if kind == "filter":
        assert main(["train-encoder", str(config)]) == 0
    assert main(["run", str(config), "--release-id", f"{kind}-a-1"]) == 0
    for name in names:
        path, fmt = variants[name]
        copied = _retarget(config, tmp_path / f"{name}.yaml", f"{kind}-{name}", path, fmt)
        if kind == "filter":
            assert main(["train-encoder", str(copied)]) == 0
        capsys.readouterr()
        assert main(["run", str(copied), "--release-id", f"{kind}-{name}-1"]) == 4, name
        error = capsys.readouterr().err
        assert f"this input's rows are dataset '{kind}-a's" in error, (name, error)
    assert {row["dataset"] for row in lake_rows(lake, SKETCHES_TABLE, SKETCHES_SCHEMA)} == {f"{kind}-a"}


def test_the_lakes_overlap_rule_decides_a_partial_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Half of another dataset's rows (5,000 of its 10,000, shuffled among 5,000 others) is refused
    by the default rule; an operator who raises the rule above that share lets it through."""
    lake = tmp_path / "lake"
    prepare_lake(lake, "sample", "partial", epsilon=BUDGET)
    original = tmp_path / "sample" / "claims.csv"
    original.parent.mkdir()
    claims = crowd_claims(seed=51)
    claims.to_csv(original, index=False)
    partial = tmp_path / "partial" / "claims.csv"
    partial.parent.mkdir()
    others = crowd_claims(seed=52).iloc[:5_000].assign(object_id=lambda frame: frame["object_id"] + 10_000)
    mixed = pd.concat([claims.iloc[:5_000], others]).sample(frac=1.0, random_state=1)
    mixed.to_csv(partial, index=False)
    for dataset, path in (("sample", original), ("partial", partial)):
        config = conformance_config(path, lake)
        config.update(dataset=dataset)
        (tmp_path / f"{dataset}.yaml").write_text(yaml.safe_dump(config))
    assert main(["run", str(tmp_path / "sample.yaml"), "--release-id", "sample-1"]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "partial.yaml"), "--release-id", "partial-1"]) == 4
    error = capsys.readouterr().err
    assert "this input's rows are dataset 'sample's" in error
    share = float(error.split("about ")[1].split("%")[0]) / 100
    assert 0.4 < share < 0.6, error
    assert main(["budget", "overlap", "--lake", str(lake), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"rows": 100, "fraction": 0.01}
    assert main(["budget", "overlap", "--lake", str(lake), "--rows", "1000000", "--fraction", "0.9"]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "partial.yaml"), "--release-id", "partial-2"]) == 0
    assert main(["budget", "overlap", "--lake", str(lake), "--fraction", "0"]) == 2
    assert "fraction must be in (0, 1]" in capsys.readouterr().err


def test_an_iceberg_table_of_the_same_rows_is_refused(tmp_path: Path) -> None:
    """Iceberg inputs by their rows too: a table written anew with another dataset's rows shuffled
    (other data files, other bytes) is refused, read whole or through a row filter that keeps part
    of them; a table of other rows is accepted."""
    from tests.e2e.crowd_cases import release_on_engine

    claims = crowd_claims(seed=61)
    inputs = tmp_path / "input-lake"
    with Lake(inputs) as lake:
        lake.catalog.create_namespace("db")
        for name, frame in (("claims", claims), ("rewritten", claims.sample(frac=1.0, random_state=2)),
                            ("other", crowd_claims(seed=62))):
            rows = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
            lake.catalog.create_table(f"db.{name}", schema=rows.schema).append(rows)

    def release(dataset: str, source: dict, release_id: str) -> None:
        config = conformance_config(tmp_path / "unused.csv", tmp_path / "lake")
        config.update(dataset=dataset, input=source)
        with make_engine("local") as engine:
            release_on_engine(engine, config, release_id)

    release("first", {"table": "db.claims", "lake": str(inputs)}, "t-1")
    for number, (dataset, source) in enumerate([
        ("second", {"table": "db.rewritten", "lake": str(inputs)}),
        ("third", {"table": "db.rewritten", "lake": str(inputs), "row_filter": "object_id < 250"}),
    ], start=2):
        with pytest.raises(ReleaseRefused, match="this input's rows are dataset 'first's"):
            release(dataset, source, f"t-{number}")
    release("fourth", {"table": "db.other", "lake": str(inputs)}, "t-4")
