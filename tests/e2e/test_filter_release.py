"""The filter release end to end: ``train-encoder`` then ``run`` on local, Spark and Beam give the
identical release, equal to the in-memory privatization (``transforms.filter.privatization``) with
the manifest's filters; owners with opposite choices; the guarantee and the ledger; the model store;
bad input as one line with nothing published."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipelines.cli import main
from pipelines.engines import make_engine
from pipelines.filter import pipeline as filter_pipeline
from pipelines.filter.pipeline import run_filter_release, staged_file_count, train_encoder
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake
from pipelines.platform.ledger import PrivacyLedger
from pipelines.platform.model_store import MODEL_KIND_FILTER_VAE, ModelStore
from pipelines.platform.policy import LakePolicy
from schemas.filter.features import FeatureSpec
from schemas.manifest import missing_manifest_keys
from tests.lake_setup import prepare_for, prepare_lake
from transforms.core.keyed_randomness import secret_from_hex
from transforms.filter.features import decode_features, encode_features
from transforms.filter.latent_filter import LinearLatentFilter
from transforms.filter.privatization import privatize_features
from transforms.filter.vae import VaeArtifact

SECRET_HEX = "f11e" * 16
FEATURES = {
    "features": [
        {"name": "height", "type": "numeric", "bounds": [100, 220]},
        {"name": "years", "type": "numeric", "bounds": [0, 60], "integer": True},
        {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]},
    ]
}


def people(records: int = 600, seed: int = 5) -> pd.DataFrame:
    """Two labels, each predictable from different features: ``group`` from height and colour,
    ``tall`` from years (so each can be the private or the utility label)."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 2, records)
    senior = rng.integers(0, 2, records)
    height = np.clip(rng.normal(160 + 15 * group, 8), 100, 220).round(1)
    years = np.clip(rng.normal(20 + 20 * senior, 6), 0, 60).round().astype(int)
    colour = np.where(rng.random(records) < 0.6 + 0.3 * group, "blue", np.where(rng.random(records) < 0.5, "red", "green"))
    return pd.DataFrame({
        "height": height,
        "years": years,
        "colour": colour,
        "group": np.array(["a", "b"])[group],
        "senior": np.array(["no", "yes"])[senior],
        "choice": np.where(np.arange(records) % 3 == 0, "hide-senior", "hide-group"),
    })


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)


def filter_case(directory: Path, data: pd.DataFrame | str | None = None, two_choices: bool = False,
                **sections: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "features.yaml").write_text(yaml.safe_dump(FEATURES))
    training_path = directory / "training.csv"
    people(800, seed=1).to_csv(training_path, index=False)
    input_path = directory / "records.csv"
    if isinstance(data, str):
        input_path.write_text(data)
    else:
        (people() if data is None else data).to_csv(input_path, index=False)
    choices = [{"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0}]
    if two_choices:
        choices.append({"name": "hide-senior", "private": "senior", "utility": "group", "budget": 1.0})
    config: dict = {
        "kind": "filter",
        "dataset": "people",
        "lake": str(directory / "lake"),
        "feature_spec": str(directory / "features.yaml"),
        "training": {"path": str(training_path)},
        "input": {"path": str(input_path), **({"choice_column": "choice"} if two_choices else {})},
        "labels": {"group": {"column": "group", "categories": ["a", "b"]},
                   "senior": {"column": "senior", "categories": ["no", "yes"]}},
        "choices": choices,
        "encoder": {"latent_dimension": 4, "hidden_widths": [16], "training": {"epochs": 4, "batch_size": 128}},
        "filter_training": {"epochs": 3, "batch_size": 128, "refit_every": 5},
        "engine": {"name": "local", "parallelism": 2},
        "evaluation": {"max_records": 400},
    }
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(name), dict):
            config[name] = {**config[name], **value}
        else:
            config[name] = value
    path = directory / "filter.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_for(config)
    return path


def exported(lake: Path, release_id: str) -> pd.DataFrame:
    return Lake(lake).read_release(release_id).to_pandas().sort_values("record", ignore_index=True)


@pytest.fixture(scope="module")
def engine_releases(tmp_path_factory: pytest.TempPathFactory, spark_session) -> dict:
    """Per engine: (public manifest, released rows, config, encoder); under ``"internal"`` each
    engine's operator record (the trained filters, per-choice counts, the evaluation)."""
    results: dict = {}
    internals: dict = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
        patch.setattr(filter_pipeline, "STAGED_FILES_FROM_ROWS", 200)
        for name in ("local", "spark", "beam"):
            directory = tmp_path_factory.mktemp(f"filter-{name}")
            config = load_config(filter_case(directory, two_choices=True))
            encoder = train_encoder(config)
            engine = make_engine("spark", spark_session=spark_session) if name == "spark" else make_engine(name)
            with engine:
                outcome = run_filter_release(config, release_id="filter-1", engine=engine)
            results[name] = (outcome.manifest, exported(directory / "lake", "filter-1"), config, encoder)
            internals[name] = outcome.internal
    results["internal"] = internals
    return results


@pytest.mark.spark
@pytest.mark.beam
@pytest.mark.parametrize("engine_name", ["spark", "beam"])
def test_every_engine_publishes_the_identical_release(engine_releases: dict, engine_name: str) -> None:
    local_manifest, local_rows, _, local_encoder = engine_releases["local"]
    manifest, rows, _, encoder = engine_releases[engine_name]
    assert encoder["artifact_id"] == local_encoder["artifact_id"], "train-encoder is keyed: same secret, same model"
    assert manifest["engine"] == engine_name
    pd.testing.assert_frame_equal(rows, local_rows, check_exact=True)
    for key in ("model_artifact_id", "epsilon", "delta", "epsilon_rdp", "rows"):
        assert manifest[key] == local_manifest[key]
    internal, local_internal = engine_releases["internal"][engine_name], engine_releases["internal"]["local"]
    assert [c["filter"] for c in internal["choices"]] == [c["filter"] for c in local_internal["choices"]]
    assert all("filter" not in choice for choice in manifest["choices"]), "trained filters are operator-only"


def test_staged_input_is_split_for_the_cores_and_in_bounded_files() -> None:
    assert staged_file_count(100, 2) == 1
    assert staged_file_count(10_000, 2) == 2
    assert staged_file_count(10_000, 1) == 1
    assert staged_file_count(1_000_000, 2) == 4
    assert staged_file_count(3, 8) == 1


@pytest.mark.spark
@pytest.mark.beam  # engine_releases publishes on every engine
def test_release_equals_the_in_memory_privatization(engine_releases: dict) -> None:
    manifest, rows, config, _ = engine_releases["local"]
    lake = Lake(config.lake)
    artifact = VaeArtifact.from_bytes(ModelStore(lake).load(manifest["model_artifact_id"]))
    records = pd.read_csv(config.input.path, dtype=str, keep_default_na=False)
    spec = FeatureSpec.model_validate(FEATURES)
    features = encode_features(records, spec).matrix
    choices = (records["choice"] == "hide-senior").to_numpy(np.int64)
    private = np.where(choices == 0, records["group"] == "b", records["senior"] == "yes").astype(np.int64)
    filters = [LinearLatentFilter.from_dict(choice["filter"]) for choice in engine_releases["internal"]["local"]["choices"]]
    decoded = privatize_features(artifact.model, features, np.arange(len(records)), choices, private, filters,
                                 secret_from_hex(SECRET_HEX), "filter-1")
    expected = decode_features(decoded, spec)
    for column in expected.columns:
        np.testing.assert_array_equal(rows[column].to_numpy(), expected[column].to_numpy(), err_msg=column)
    assert (rows["choice"].to_numpy() == np.where(choices == 1, "hide-senior", "hide-group")).all()


@pytest.mark.spark
@pytest.mark.beam  # engine_releases publishes on every engine
def test_each_owner_keeps_only_the_utility_label_of_their_choice(engine_releases: dict) -> None:
    manifest, rows, config, _ = engine_releases["local"]
    records = pd.read_csv(config.input.path, dtype=str, keep_default_na=False)
    assert list(rows.columns) == ["record", "choice", "height", "years", "colour", "senior", "group"]
    hide_group = rows["choice"] == "hide-group"
    assert rows.loc[hide_group, "group"].isna().all(), "the private label of hide-group owners is withheld"
    assert rows.loc[~hide_group, "senior"].isna().all(), "the private label of hide-senior owners is withheld"
    assert (rows.loc[hide_group, "senior"] == records.loc[hide_group.to_numpy(), "senior"].to_numpy()).all()
    assert (rows.loc[~hide_group, "group"] == records.loc[~hide_group.to_numpy(), "group"].to_numpy()).all()
    assert missing_manifest_keys(manifest) == []
    assert manifest["rows"] == len(records) == len(rows)
    internal = engine_releases["internal"]["local"]
    assert [c["records"] for c in internal["choices"]] == [int(hide_group.sum()), int((~hide_group).sum())]
    assert all("records" not in choice for choice in manifest["choices"]), "counts from raw data are operator-only"
    assert manifest["validation"]["output"]["success"] is True


@pytest.mark.spark
@pytest.mark.beam  # engine_releases publishes on every engine
def test_the_guarantee_comes_from_the_caps_and_bounds_every_trained_filter(engine_releases: dict) -> None:
    manifest, _, config, _ = engine_releases["local"]
    for order, value in manifest["epsilon_rdp"].items():
        assert value == pytest.approx(float(order) / 2 * 1.0**2), "epsilon(alpha) = alpha/2 * cap^2 with cap 1"
    for public, choice in zip(manifest["choices"], engine_releases["internal"]["local"]["choices"], strict=True):
        assert choice["privacy"]["sensitivity"] <= 1.0 + 1e-9
        assert choice["distortion_on_training_records"] <= public["budget"] * (1 + 1e-6)
    assert "caps" in manifest["guarantee"]["basis"]
    assert manifest["delta"] == config.privacy.delta
    assert manifest["epsilon"] > 0


@pytest.mark.spark
@pytest.mark.beam  # engine_releases publishes on every engine
def test_evaluation_compares_raw_round_trip_privatized_and_the_gaussian_baseline(engine_releases: dict) -> None:
    manifest = engine_releases["local"][0]
    assert "evaluation" not in manifest, "the evaluation reads raw labels: operator-only"
    report = engine_releases["internal"]["local"]["evaluation"]["choices"]["hide-group"]
    for version in ("raw", "vae_round_trip", "privatized", "gaussian_baseline"):
        for model in ("adversary", "utility"):
            by_classifier = report[version]["by_classifier"]
            assert set(by_classifier) == {"logistic", "gradient_boosting"}
            for scores in by_classifier.values():
                assert 0 <= scores[model]["accuracy"] <= 1
                assert scores[model]["test_rows"] + scores[model]["train_rows"] == report["records"]
            best = max(scores[model]["accuracy"] for scores in by_classifier.values())
            assert report[version]["strongest"][model]["accuracy"] == best
    raw = report["raw"]["strongest"]["adversary"]
    assert raw["accuracy"] > raw["majority_rate"] + 0.1, (
        "on raw records height and colour predict the group well: the evaluation must see it"
    )
    assert 0 < report["distortion_on_evaluated_records"] < 3 * manifest["choices"][0]["budget"]


def test_a_release_without_caps_takes_its_guarantee_from_the_trained_filter(tmp_path: Path) -> None:
    config_path = filter_case(tmp_path, choices=[{"name": "hide-group", "private": "group", "utility": "senior",
                                                  "budget": 1.0, "max_sensitivity": None}],
                              evaluation={"enabled": False})
    config = load_config(config_path)
    train_encoder(config)
    outcome = run_filter_release(config, release_id="uncapped")
    manifest = outcome.manifest
    choice = outcome.internal["choices"][0]
    assert "trained filters" in manifest["guarantee"]["basis"]
    assert manifest["epsilon"] == pytest.approx(min(choice["privacy"]["epsilon"], choice["privacy"]["epsilon_exact_gaussian"]))
    assert outcome.internal["evaluation"] == {} and "evaluation" not in manifest and "filter" not in manifest["choices"][0]
    assert manifest["charged"]["steps"][0]["mechanism"] == "gaussian"
    assert "label" in manifest["charged"]["privacy_unit"] and "not covered" in manifest["charged"]["privacy_unit"]


def test_train_encoder_is_keyed_and_stored_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = filter_case(tmp_path)
    assert main(["train-encoder", str(config_path)]) == 0
    first = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["train-encoder", str(config_path)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == first
    store = ModelStore(Lake(tmp_path / "lake"))
    assert [model.artifact_id for model in store.models(MODEL_KIND_FILTER_VAE)] == [first]
    assert main(["models", "--lake", str(tmp_path / "lake"), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["artifact_id"] == first and listed[0]["data_fingerprint"]["rows"] == 800


def run_cli(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["run", str(config), "--release-id", "bad", *extra])
    return code, capsys.readouterr().err.strip()


def test_run_without_an_encoder_says_to_train_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, error = run_cli(filter_case(tmp_path), capsys)
    assert code == 2 and "privlake train-encoder" in error and len(error.splitlines()) == 1


def set_budget(lake: Path | str, *, epsilon: float, delta: float) -> None:
    """An operator changes the budget of the dataset ``people``."""
    with Lake(lake) as opened:
        LakePolicy(opened).set_budget("people", epsilon, delta)


@pytest.fixture
def trained_case(tmp_path: Path):
    """A lake with an encoder, and a writer of configs over it with another input."""
    base = filter_case(tmp_path / "base")
    train_encoder(load_config(base))

    def case(data: pd.DataFrame | str | None = None, **sections: object) -> Path:
        directory = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        return filter_case(directory, data, lake=str(tmp_path / "base" / "lake"), **sections)

    return case


BAD_INPUTS = [  # error lines name the row and column, never the value (issue 12)
    ("category", lambda d: d.assign(colour=d["colour"].where(d.index != 6, "purple")),
     {}, "row 7, column 'colour': value is not in the feature's category list"),
    ("bounds", lambda d: d.assign(height=d["height"].where(d.index != 3, 400.0)),
     {}, "row 4, column 'height': value is outside the bounds [100.0, 220.0]"),
    ("label", lambda d: d.assign(group=d["group"].where(d.index != 9, "c")),
     {}, "row 10, column 'group': label is not in the label's category list"),
    ("choice", lambda d: d.assign(choice=d["choice"].where(d.index != 2, "hide-everything")),
     {"two_choices": True}, "row 3, column 'choice': unknown choice (choices: hide-group, hide-senior)"),
    ("empty group", lambda d: d.assign(choice="hide-group"),
     {"two_choices": True}, "choice 'hide-senior' has no records (an empty group)"),
    ("missing column", lambda d: d.drop(columns=["years"]), {}, "no column 'years'"),
]


@pytest.mark.parametrize(("case_name", "damage", "options", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_line_and_publishes_nothing(trained_case, capsys: pytest.CaptureFixture[str], case_name: str,
                                                     damage, options: dict, message: str) -> None:
    config = trained_case(damage(people()), **options)
    code, error = run_cli(config, capsys)
    assert code == 2, error
    assert len(error.splitlines()) == 1 and message in error, error
    lake = Lake(load_config(config).lake)
    assert not lake.is_published("bad")


def test_a_private_label_read_from_a_feature_is_refused(trained_case, capsys: pytest.CaptureFixture[str]) -> None:
    config = trained_case(labels={"group": {"column": "colour", "categories": ["red", "green", "blue"]},
                                  "senior": {"column": "senior", "categories": ["no", "yes"]}})
    code, error = run_cli(config, capsys)
    assert code == 2 and "is also a feature" in error


def test_config_errors_name_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "choices": ([{"name": "x", "private": "group", "utility": "nope", "budget": 1.0}], "is not in labels"),
        "labels": ({"group": {"column": "group", "categories": ["a", "b"], "above": 3},
                    "senior": {"column": "senior", "categories": ["no", "yes"]}}, "exactly one of"),
        "encoder": ({"artifact": "newest"}, "encoder.artifact"),
    }
    for key, (value, message) in cases.items():
        code, error = run_cli(filter_case(tmp_path / key, **{key: value}), capsys)
        assert code == 2 and message in error, error


def test_budget_is_refused_before_any_record_is_read(trained_case, capsys: pytest.CaptureFixture[str]) -> None:
    config = trained_case()
    parsed = load_config(config)
    prepare_lake(parsed.lake, "people")
    set_budget(parsed.lake, epsilon=1.0, delta=1e-3)
    Path(parsed.input.path).unlink()
    code, error = run_cli(config, capsys)
    assert code == 4 and "privacy budget of dataset 'people' exceeded" in error, error


def test_derived_labels_by_groups_and_threshold(trained_case) -> None:
    config = load_config(trained_case(
        labels={"group": {"column": "group", "groups": {"first": ["a"], "second": ["b"]}},
                "senior": {"column": "years", "above": 30}},
        evaluation={"enabled": False},
    ))
    manifest = run_filter_release(config, release_id="derived").manifest
    rows = exported(config.lake, "derived")
    records = pd.read_csv(config.input.path)
    assert set(rows["senior"]) == {"<=30", ">30"}
    assert (rows["senior"] == np.where(records["years"] > 30, ">30", "<=30")).all()
    assert manifest["rows"] == len(records)


def test_without_caps_the_budget_is_checked_after_training_and_refused_cleanly(
    trained_case, capsys: pytest.CaptureFixture[str]
) -> None:
    uncapped = [{"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0, "max_sensitivity": None}]
    config = trained_case(choices=uncapped)
    set_budget(load_config(config).lake, epsilon=1e-3, delta=1e-3)
    code, error = run_cli(config, capsys)
    assert code == 4 and "privacy budget of dataset 'people' exceeded" in error, error
    config = trained_case(choices=uncapped, evaluation={"enabled": False})
    set_budget(load_config(config).lake, epsilon=1e9, delta=0.5)
    manifest = run_filter_release(load_config(config), release_id="charged").manifest
    entries = PrivacyLedger(Lake(load_config(config).lake)).entries("people")
    charged = entries[entries["release_id"] == "charged"]
    assert list(charged["status"]) == ["reserved", "published"]
    assert charged["epsilon"].iloc[0] == manifest["epsilon"]
