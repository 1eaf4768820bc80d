"""The bad-input corpus (issue 14): table-driven cases over the four kinds, each run through the
command line in process. Every case must end with the exit code of the scheduler contract (never
1), exactly one line on standard error and no traceback, without echoing the raw bad value (issue
12: error lines never carry raw data), without publishing anything (``privlake releases --lake`` is
empty) and with every input file left byte for byte as it was.

A case writes its files into its own folder: the data, the config, and a lake prepared as an
operator would (``write_config`` of ``tests/e2e/conftest.py`` prepares the lake of the config it
writes, whatever kind reads it). The filter cases share one lake holding one trained encoder
(training it is the slow part) and release under distinct ids. Every case names the local engine
(no Spark, no Beam: nothing to mark), and every bad input is refused on the driver.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.cli import main
from tests.e2e.conftest import small_claims, write_config


@dataclass(frozen=True)
class Built:
    """What a case wrote: the config to run and the lake it names."""

    config: Path
    lake: Path


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    build: Callable[[Path], Built]
    code: int = 2
    says: tuple[str, ...] = ()
    raw: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    patch: Callable[[pytest.MonkeyPatch, Built], None] | None = field(default=None)


def _yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def prepared_lake(directory: Path, dataset: str) -> Path:
    """The case's lake, prepared for ``dataset`` by ``write_config`` (which prepares the lake of the
    config it writes; its crowd config itself is not used)."""
    lake = directory / "lake"
    (directory / "operator").mkdir(parents=True, exist_ok=True)
    write_config(directory / "operator", directory / "operator" / "unused.csv", lake, dataset=dataset)
    return lake


def _edit_yaml(path: Path, **changes: object) -> None:
    document = yaml.safe_load(path.read_text())
    document.update(changes)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


# ---------------------------------------------------------------------------------------- crowd

def _claims() -> pd.DataFrame:
    return small_claims(objects=12, claims_per_object=6).astype(object)


def crowd(data: pd.DataFrame | str | bytes | None = None, file_format: str = "csv", **overrides: object):
    def build(directory: Path) -> Built:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"claims.{file_format}"
        frame = _claims() if data is None else data
        if isinstance(frame, pd.DataFrame):
            if file_format == "csv":
                frame.to_csv(path, index=False)
            else:
                pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
        elif isinstance(frame, bytes):
            path.write_bytes(frame)
        else:
            path.write_text(frame)
        if file_format == "parquet":
            overrides.setdefault("input__format", "parquet")
        config = write_config(directory, path, directory / "lake", **overrides)
        return Built(config, directory / "lake")

    return build


def crowd_cell(row: int, column: str, value: object, **overrides: object):
    frame = _claims()
    frame.loc[row, column] = value
    return crowd(frame, **overrides)


def crowd_text(body: str | bytes):
    return crowd(body)


def crowd_config_text(text: str | bytes):
    """A config file with exactly this text (hostile YAML); the lake it would name is never made."""
    def build(directory: Path) -> Built:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "config.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return Built(path, directory / "lake")

    return build


def crowd_lake_at(where: Callable[[Path], Path]):
    """A good crowd config whose ``lake`` is ``where(directory)`` (an unusable path)."""
    def build(directory: Path) -> Built:
        built = crowd()(directory)
        lake = where(directory)
        _edit_yaml(built.config, lake=str(lake))
        return Built(built.config, lake)

    return build


def _file_at(directory: Path) -> Path:
    (directory / "afile").write_text("a file, not a lake\n")
    return directory / "afile"


def _read_only_lake(monkeypatch: pytest.MonkeyPatch, built: Built) -> None:
    """The lake's folder refuses writes (as on a read-only mount; the tests run as root here, so a
    permission bit would not stop them)."""
    built.lake.mkdir(parents=True, exist_ok=True)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if Path(path) == built.lake and mode & os.W_OK
                        else real(path, mode, *a, **k))


def _full_disk(monkeypatch: pytest.MonkeyPatch, built: Built) -> None:
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: usage(10**12, 10**12 - 1024, 1024))


BILLION_LAUGHS = "kind: crowd\n" + "\n".join(
    ['lol0: &lol0 ["laughsecret", "laughsecret", "laughsecret", "laughsecret", "laughsecret"]',
     *(f"lol{level}: &lol{level} [{', '.join([f'*lol{level - 1}'] * 10)}]" for level in range(1, 9))]
)

CROWD_CASES = [
    # files
    Case("missing file", "crowd", lambda d: Built(write_config(d, d / "nope.csv", d / "lake"), d / "lake"),
         says=("nope.csv", "file or folder not found")),
    Case("input is an empty folder", "crowd",
         lambda d: (d / "folder.csv").mkdir() or Built(write_config(d, d / "folder.csv", d / "lake"), d / "lake"),
         says=("folder.csv", "no data files in the folder")),
    Case("empty file", "crowd", crowd_text(""), says=("claims.csv", "empty file")),
    Case("blank lines only", "crowd", crowd_text("\n\n\n"), says=("claims.csv", "empty file")),
    Case("header only", "crowd", crowd_text("question,worker,answer\n"), says=("no rows",)),
    Case("mapped column missing", "crowd", crowd(_claims().rename(columns={"worker": "annotator"})),
         says=("'worker'", "source_id", "missing", "the file has: question, annotator, answer")),
    Case("no header row", "crowd", crowd_text("1,Jane Roe,5\n1,b,6\n"),
         says=("mapped column 'question'", "a CSV without a header row"), raw=("Jane Roe",)),
    Case("ragged row", "crowd", crowd_text("question,worker,answer\n1,a,5\n1,b,6\n2,Jane Roe,7,extra-secret\n"),
         says=("row 3", "a row has 4 fields where the header has 3"), raw=("Jane Roe", "extra-secret")),
    Case("short row", "crowd", crowd_text("question,worker,answer\n1,a,5\n1,Jane Roe\n"),
         says=("row 2", "a row has 2 fields"), raw=("Jane Roe",)),
    Case("not utf-8", "crowd", crowd_text("question,worker,answer\n1,Jos\xe9 Secreto,5\n".encode("latin-1")),
         says=("not valid UTF-8",), raw=("Jos", "xe9")),
    Case("binary garbage", "crowd", crowd_text(bytes(range(256)) * 8), says=("claims.csv",)),
    Case("parquet that is text", "crowd", crowd("question,worker,answer\n1,secret-worker,5\n", "parquet"),
         says=("cannot be read as PARQUET", "not a Parquet file"), raw=("secret-worker",)),
    Case("parquet missing column", "crowd", crowd(_claims().drop(columns=["answer"]).astype(str), "parquet"),
         says=("'answer'", "missing")),
    Case("parquet boolean values", "crowd",
         crowd(_claims().assign(answer=[True, False] * 36), "parquet"), says=("not booleans",)),
    Case("parquet fractional object ids", "crowd",
         crowd(_claims().assign(question=[4.75321] + list(range(71))).astype({"question": float,
                                                                                "answer": float}), "parquet"),
         says=("row 1", "fractional"), raw=("4.75321",)),
    Case("parquet infinite value", "crowd",
         crowd(_claims().assign(answer=[float("inf")] + [1.0] * 71).astype({"answer": float, "question": int}),
               "parquet"), says=("row 1", "infinite")),
    # values
    Case("text value", "crowd", crowd_cell(16, "answer", "twelve-secret"),
         says=("row 17", "column 'answer'", "value is not a number"), raw=("twelve-secret",)),
    Case("hex value", "crowd", crowd_cell(3, "answer", "0x1F9A"), says=("row 4", "not a number"), raw=("0x1F9A",)),
    Case("decimal comma", "crowd", crowd_cell(5, "answer", "3,14159"), says=("row 6", "not a number"),
         raw=("3,14159", "14159")),
    Case("value with a unit", "crowd", crowd_cell(7, "answer", "77.5kg"), says=("row 8", "not a number"),
         raw=("77.5kg",)),
    Case("nan value", "crowd", crowd_cell(4, "answer", "nan"), says=("row 5", "answer", "missing")),
    Case("-nan value", "crowd", crowd_cell(4, "answer", "-nan"), says=("row 5", "answer", "missing")),
    Case("inf value", "crowd", crowd_cell(9, "answer", "inf"), says=("row 10", "answer", "infinite")),
    Case("-inf value", "crowd", crowd_cell(9, "answer", "-inf"), says=("row 10", "infinite")),
    Case("overflowing value", "crowd", crowd_cell(11, "answer", "1e999"), says=("row 12", "column 'answer'")),
    Case("NA value", "crowd", crowd_cell(2, "answer", "NA"), says=("row 3", "answer", "missing")),
    Case("null value", "crowd", crowd_cell(2, "answer", "null"), says=("row 3", "missing")),
    Case("NULL value", "crowd", crowd_cell(2, "answer", "NULL"), says=("row 3", "missing")),
    Case("N/A value", "crowd", crowd_cell(2, "answer", "N/A"), says=("row 3", "missing")),
    Case("#N/A value", "crowd", crowd_cell(2, "answer", "#N/A"), says=("row 3", "missing")),
    Case("empty value", "crowd", crowd_cell(2, "answer", ""), says=("row 3", "missing")),
    Case("quoted empty value", "crowd", crowd_text("question,worker,answer\n1,a,5\n1,b,\"\"\n"),
         says=("row 2", "missing")),
    Case("value outside range, reject", "crowd", crowd_cell(6, "answer", 987654.25, privacy__out_of_range="reject"),
         says=("row 7", "outside privacy.value_range"), raw=("987654",)),
    # identifiers
    Case("empty object id", "crowd", crowd_cell(9, "question", ""), says=("row 10", "question", "null")),
    Case("NA source id", "crowd", crowd_cell(9, "worker", "NA"), says=("row 10", "worker", "null")),
    Case("null source id", "crowd", crowd_cell(3, "worker", "null"), says=("row 4", "worker", "null")),
    Case("NaN object id", "crowd", crowd_cell(3, "question", "NaN"), says=("row 4", "question", "null")),
    Case("duplicate claim", "crowd",
         crowd(pd.concat([_claims(), _claims().iloc[[7]]], ignore_index=True)), says=("row 73", "duplicate", "row 8")),
    Case("duplicate claim with private ids", "crowd",
         crowd(pd.DataFrame({"question": ["patient-0071"] * 3 + ["patient-0072"] * 3,
                             "worker": ["nurse-Ann", "nurse-Bo", "nurse-Ann", "a", "b", "c"],
                             "answer": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})),
         says=("row 3", "duplicate", "row 1"), raw=("patient-0071", "nurse-Ann")),
    # the config
    Case("unknown top-level key", "crowd", crowd(colour="blue"), says=("config.yaml", "colour: unknown key")),
    Case("unknown nested key", "crowd", crowd(input__colour="blue"), says=("input.colour: unknown key",)),
    Case("required key missing", "crowd", crowd(privacy=None), says=("privacy: required key is missing",)),
    Case("k zero", "crowd", crowd(privacy__k=0), says=("privacy.k",)),
    Case("k as a word", "crowd", crowd(privacy__k="four"), says=("privacy.k",)),
    Case("gamma one", "crowd", crowd(privacy__gamma=1.0), says=("privacy.gamma",)),
    Case("epsilon0 infinite", "crowd", crowd(privacy__epsilon0=float("inf")), says=("privacy.epsilon0",)),
    Case("epsilon0 nan", "crowd", crowd(privacy__epsilon0=float("nan")), says=("privacy.epsilon0",)),
    Case("delta above one", "crowd", crowd(privacy__delta=1.5), says=("privacy.delta",)),
    Case("value range reversed", "crowd", crowd(privacy__value_range=[200.0, -100.0]), says=("value_range",)),
    Case("claims per object absurd", "crowd", crowd(synthesis__claims_per_object=10**9),
         says=("synthesis.claims_per_object", "less than or equal to 10000")),
    Case("batch size absurd", "crowd", crowd(synthesis__batch_size=10**12), says=("synthesis.batch_size",)),
    Case("parallelism absurd", "crowd", crowd(engine={"name": "local", "parallelism": 10**6}),
         says=("engine.parallelism", "less than or equal to 4096")),
    Case("unknown kind", "crowd", crowd(kind="histogram"), says=("kind: must be one of",)),
    Case("dataset name too long", "crowd", crowd(dataset="x" * 5000), says=("dataset", "at most 100 characters")),
    Case("a long bad value is cut", "crowd", crowd(input__format="q" * 5000), says=("input.format", "...)")),
    Case("config is a list", "crowd", crowd_config_text("- kind\n- crowd\n"), says=("must be a YAML mapping",)),
    Case("config not yaml", "crowd", crowd_config_text("kind: crowd\nprivacy: {k: 4\n  gamma: [\n"),
         says=("not valid YAML", "line")),
    Case("config not utf-8", "crowd", crowd_config_text("kind: crowd\ndataset: caf\xe9\n".encode("latin-1")),
         says=("not valid YAML",)),
    Case("config missing", "crowd", lambda d: Built(d / "absent.yaml", d / "lake"), says=("absent.yaml", "not found")),
    Case("yaml alias bomb", "crowd", crowd_config_text(BILLION_LAUGHS),
         says=("expands to more than 100,000 values",), raw=("laughsecret",)),
    Case("yaml self-reference", "crowd", crowd_config_text("kind: crowd\nloop: &loop [1, *loop]\n"),
         says=("refers to itself",)),
    Case("yaml nested too deeply", "crowd", crowd_config_text("kind: crowd\nx: " + "[" * 5000 + "]" * 5000 + "\n"),
         says=("nested too deeply",)),
    Case("config file too large", "crowd", crowd_config_text("kind: crowd\n" + "#" * (2 << 20) + "\n"),
         says=("at most 1,048,576", "refused unread")),
    # the lake path and the device
    Case("lake is a file", "crowd", crowd_lake_at(_file_at), says=("lake:", "is a file, not a folder")),
    Case("lake under a file", "crowd", crowd_lake_at(lambda d: _file_at(d) / "lake"),
         says=("lake:", "cannot be created", "is a file")),
    Case("lake cannot be created", "crowd", crowd_lake_at(lambda d: Path("/proc/privlake-corpus-lake")),
         says=("lake: /proc/privlake-corpus-lake", "cannot be created")),
    Case("lake read-only", "crowd", crowd_lake_at(lambda d: d / "readonly-lake"), patch=_read_only_lake,
         says=("lake:", "read-only")),
    Case("disk full", "crowd", crowd(), code=75, patch=_full_disk, says=("no space left",)),
    # release ids
    Case("release id with a trailing newline", "crowd", crowd(), args=("--release-id", "batch-7\n"),
         says=("release id",)),
    Case("release id with a path", "crowd", crowd(), args=("--release-id", "../../etc/passwd"), says=("release id",)),
    Case("release id too long", "crowd", crowd(), args=("--release-id", "r" * 129), says=("release id",)),
    Case("release id with a space", "crowd", crowd(), args=("--release-id", "batch 7"), says=("release id",)),
]


# -------------------------------------------------------------------------------------- tabular

TABULAR_SCHEMA = {
    "attributes": [
        {"name": "age", "type": "numeric", "bounds": [0, 100], "bins": 5, "integer": True},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
        {"name": "education", "type": "categorical", "categories": ["none", "school", "degree"]},
        {"name": "income", "type": "numeric", "bounds": [0, 100000], "bins": 4},
        {"name": "label", "type": "categorical", "categories": ["low", "high"]},
    ]
}


def census(records: int = 120, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 90, records),
        "sex": np.array(["F", "M"])[rng.integers(0, 2, records)],
        "education": np.array(["none", "school", "degree"])[rng.integers(0, 3, records)],
        "income": rng.integers(0, 100000, records),
        "label": np.array(["low", "high"])[rng.integers(0, 2, records)],
    }).astype(object)


def tabular(data: pd.DataFrame | str | bytes | None = None, schema: dict | str | None = None,
            file_format: str = "csv", **sections: object):
    def build(directory: Path) -> Built:
        directory.mkdir(parents=True, exist_ok=True)
        schema_path = directory / "schema.yaml"
        if isinstance(schema, str):
            schema_path.write_text(schema)
        else:
            _yaml(schema_path, schema or TABULAR_SCHEMA)
        path = directory / f"records.{file_format}"
        frame = census() if data is None else data
        if isinstance(frame, pd.DataFrame):
            if file_format == "csv":
                frame.to_csv(path, index=False)
            else:
                pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
        elif isinstance(frame, bytes):
            path.write_bytes(frame)
        else:
            path.write_text(frame)
        config: dict = {
            "kind": "tabular",
            "dataset": "census",
            "lake": str(prepared_lake(directory, "census")),
            "input": {"path": str(path), "schema": str(schema_path), "format": file_format},
            "privacy": {"epsilon": 2.0, "delta": 1e-4, "k": 12, "gamma": 2.0},
            "model": {"max_degree": 2, "complexity_cap": 64},
            "synthesis": {"omega": 3, "records": 100, "batch_size": 256},
        }
        for dotted, value in sections.items():
            section = config
            parts = dotted.split("__")
            for part in parts[:-1]:
                section = section.setdefault(part, {})
            section[parts[-1]] = value
        return Built(_yaml(directory / "tabular.yaml", config), directory / "lake")

    return build


def tabular_cell(row: int, column: str, value: object, **sections: object):
    frame = census()
    frame.loc[row, column] = value
    return tabular(frame, **sections)


TABULAR_CASES = [
    Case("category not in the schema", "tabular", tabular_cell(6, "education", "phd-secret"),
         says=("row 7", "'education'", "not one of the schema's categories"), raw=("phd-secret",)),
    Case("text in a number", "tabular", tabular_cell(9, "income", "lots-of-money"),
         says=("row 10", "'income'", "not a number"), raw=("lots-of-money",)),
    Case("number out of bounds", "tabular", tabular_cell(3, "age", 987),
         says=("row 4", "'age'", "outside the bounds [0.0, 100.0]"), raw=("987",)),
    Case("negative number", "tabular", tabular_cell(3, "income", -31337),
         says=("row 4", "outside the bounds"), raw=("31337",)),
    Case("infinite number", "tabular", tabular_cell(5, "income", "inf"), says=("row 6", "'income'")),
    Case("empty category", "tabular", tabular_cell(2, "sex", ""), says=("row 3", "'sex'", "missing value")),
    Case("spaces only", "tabular", tabular_cell(2, "sex", "   "), says=("row 3", "'sex'", "missing value")),
    Case("NA category", "tabular", tabular_cell(2, "education", "NA"), says=("row 3", "missing value")),
    Case("spaced NA", "tabular", tabular_cell(2, "education", " NA "), says=("row 3", "missing value")),
    Case("null number", "tabular", tabular_cell(4, "age", "null"), says=("row 5", "'age'", "missing value")),
    Case("NaN number", "tabular", tabular_cell(4, "income", "NaN"), says=("row 5", "missing value")),
    Case("#N/A label", "tabular", tabular_cell(8, "label", "#N/A"), says=("row 9", "'label'", "missing value")),
    Case("column not in the schema", "tabular", tabular(census().assign(zip_code="90210")),
         says=("not in the schema", "zip_code"), raw=("90210",)),
    Case("column missing", "tabular", tabular(census().drop(columns=["label"])), says=("not in the data", "label")),
    Case("no header row", "tabular", tabular("30,F,none,100,low-secret\n31,M,none,100,low\n"),
         says=("a CSV without a header row", "input.header: false"), raw=("low-secret",)),
    Case("header only", "tabular", tabular("age,sex,education,income,label\n"), says=("no rows",)),
    Case("empty file", "tabular", tabular(""), says=("empty file",)),
    Case("ragged row", "tabular", tabular("age,sex,education,income,label\n30,F,none,100,low\n\n"
                                          "31,M,none,100,low,Jane Roe\n"),
         says=("row 2", "a row has 6 fields where the header has 5"), raw=("Jane Roe",)),
    Case("short row", "tabular", tabular("age,sex,education,income,label\n30,F,none,100,low\n31,M\n"),
         says=("row 2", "missing value")),
    Case("not utf-8", "tabular", tabular("age,sex,education,income,label\n30,F,caf\xe9,100,low\n".encode("latin-1")),
         says=("not valid UTF-8",), raw=("caf",)),
    Case("headerless with an extra field", "tabular",
         tabular("30,F,none,100,low\n31,M,none,100,low,secret-extra\n", input__header=False),
         says=("row 2", "a row has 6 fields where 5 columns are named"), raw=("secret-extra",)),
    Case("parquet that is text", "tabular", tabular("age,sex\n1,secret\n", file_format="parquet"),
         says=("cannot be read as PARQUET",), raw=("secret",)),
    Case("parquet value out of bounds", "tabular",
         tabular(census().astype({"age": float, "income": float}).assign(age=[101.5] + [30.0] * 119),
                 file_format="parquet"),
         says=("row 1", "'age'", "outside the bounds"), raw=("101.5", "np.float64")),
    Case("parquet integer category", "tabular",
         tabular(census().astype({"age": int, "income": int}).assign(label=[7] + [0] * 119),
                 file_format="parquet"),
         says=("row 1", "'label'"), raw=("np.int64",)),
    Case("records file missing", "tabular", lambda d: _tabular_without_records(d), says=("records.csv", "not found")),
    Case("schema file missing", "tabular", lambda d: _tabular_without_schema(d), says=("schema", "not found")),
    Case("schema not yaml", "tabular", tabular(schema="attributes: [\n"), says=("schema.yaml",)),
    Case("schema alias bomb", "tabular", tabular(schema=BILLION_LAUGHS.replace("kind: crowd", "attributes: []")),
         says=("schema.yaml", "expands to more than"), raw=("laughsecret",)),
    Case("schema with absurd bins", "tabular",
         tabular(schema={"attributes": [{"name": "age", "type": "numeric", "bounds": [0, 100], "bins": 10**12},
                                        *TABULAR_SCHEMA["attributes"][1:]]}),
         says=("attributes.0.bins", "at most 1048576")),
    Case("schema unknown type", "tabular",
         tabular(schema={"attributes": [{"name": "age", "type": "date"}, *TABULAR_SCHEMA["attributes"][1:]]}),
         says=("schema.yaml",)),
    Case("recode of a column not in the file", "tabular", tabular(input__recode={"salary": {"a": "b"}}),
         says=("recode", "salary")),
    Case("too few records", "tabular", tabular(census(6)), says=("6 records",)),
    Case("records absurd", "tabular", tabular(synthesis__records=10**12), says=("synthesis.records",)),
    Case("max attempts absurd", "tabular", tabular(synthesis__max_attempts=10**15), says=("synthesis.max_attempts",)),
    Case("batch size absurd", "tabular", tabular(synthesis__batch_size=10**12), says=("synthesis.batch_size",)),
    Case("complexity cap absurd", "tabular", tabular(model__complexity_cap=10**15), says=("model.complexity_cap",)),
    Case("max degree absurd", "tabular", tabular(model__max_degree=50), says=("model.max_degree",)),
    Case("omega above the attributes", "tabular", tabular(synthesis__omega=9), says=("omega",)),
    Case("k one", "tabular", tabular(privacy__k=1), says=("privacy.k",)),
    Case("split above one", "tabular", tabular(split={"seeds": 0.6, "structure": 0.3, "parameters": 0.3}),
         says=("split",)),
]


def _tabular_without_records(directory: Path) -> Built:
    built = tabular()(directory)
    (directory / "records.csv").unlink()
    return built


def _tabular_without_schema(directory: Path) -> Built:
    built = tabular()(directory)
    (directory / "schema.yaml").unlink()
    return built


# ------------------------------------------------------------------------------------------ ldp

CATALOG = {
    "krr_a": {"type": "krr", "epsilon": 1.0, "input_size": 4},
    "krr_b": {"type": "krr", "epsilon": 2.0, "input_size": 4},
}
RAPPOR = {"r1": {"type": "rappor", "epsilon": 1.0, "input_size": 4}}


def reports(users: int = 12) -> pd.DataFrame:
    return pd.DataFrame({"user_id": np.arange(1, users + 1), "mechanism": ["krr_a", "krr_b"] * (users // 2),
                         "report": np.arange(users) % 4}).astype(object)


def ldp(data: pd.DataFrame | str | bytes | None = None, catalog: dict | str | bytes | None = None,
        file_format: str = "csv", **sections: object):
    def build(directory: Path) -> Built:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"reports.{file_format}"
        frame = reports() if data is None else data
        if isinstance(frame, pd.DataFrame):
            if file_format == "csv":
                frame.to_csv(path, index=False)
            else:
                pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
        elif isinstance(frame, bytes):
            path.write_bytes(frame)
        else:
            path.write_text(frame)
        catalog_path = directory / "catalog.json"
        chosen = CATALOG if catalog is None else catalog
        if isinstance(chosen, bytes):
            catalog_path.write_bytes(chosen)
        else:
            catalog_path.write_text(chosen if isinstance(chosen, str) else json.dumps(chosen))
        config: dict = {
            "kind": "ldp",
            "dataset": "checkins",
            "lake": str(prepared_lake(directory, "checkins")),
            "input": {"path": str(path), "format": file_format, "catalog": str(catalog_path)},
            "estimator": {"method": "gibu"},
        }
        config.update(sections)
        return Built(_yaml(directory / "ldp.yaml", config), directory / "lake")

    return build


def ldp_cell(row: int, column: str, value: object, catalog: dict | None = None, **sections: object):
    frame = reports()
    frame.loc[row, column] = value
    return ldp(frame, catalog, **sections)


def bits(*vectors: str) -> pd.DataFrame:
    return pd.DataFrame({"user_id": range(1, len(vectors) + 1), "mechanism": ["r1"] * len(vectors),
                         "report": list(vectors)})


LDP_CASES = [
    Case("unknown mechanism", "ldp", ldp_cell(2, "mechanism", "krr_secret_z"),
         says=("row 3", "'mechanism'", "unknown mechanism"), raw=("krr_secret_z",)),
    Case("report outside the alphabet", "ldp", ldp_cell(3, "report", 7),
         says=("row 4", "'report'", "outside mechanism 'krr_b'", "0..3")),
    Case("negative report", "ldp", ldp_cell(0, "report", -9), says=("row 1", "outside"), raw=("-9",)),
    Case("text report", "ldp", ldp_cell(1, "report", "three-secret"),
         says=("row 2", "report is not an integer"), raw=("three-secret",)),
    Case("fractional report", "ldp", ldp_cell(1, "report", "2.75"), says=("row 2", "not an integer"), raw=("2.75",)),
    Case("duplicate user", "ldp", ldp(reports().assign(user_id=[918273] * 2 + list(range(10)))),
         says=("row 2", "more than one report", "row 1"), raw=("918273",)),
    Case("empty report", "ldp", ldp_cell(1, "report", ""), says=("row 2", "report is missing")),
    Case("NA report", "ldp", ldp_cell(1, "report", "NA"), says=("row 2", "report is missing")),
    Case("null user id", "ldp", ldp_cell(5, "user_id", "null"), says=("row 6", "user id is missing")),
    Case("N/A mechanism", "ldp", ldp_cell(5, "mechanism", "N/A"), says=("row 6", "mechanism is missing")),
    Case("missing column", "ldp", ldp(reports().drop(columns=["report"])), says=("'report'", "missing")),
    Case("header only", "ldp", ldp("user_id,mechanism,report\n"), says=("no rows",)),
    Case("empty file", "ldp", ldp(""), says=("empty file",)),
    Case("ragged row", "ldp", ldp("user_id,mechanism,report\n1,krr_a,0\n2,krr_b,1,Jane Roe\n"),
         says=("row 2", "a row has 4 fields"), raw=("Jane Roe",)),
    Case("not utf-8", "ldp", ldp("user_id,mechanism,report\n1,krr_\xe9,0\n".encode("latin-1")),
         says=("not valid UTF-8",)),
    Case("reports file missing", "ldp", lambda d: _ldp_without_reports(d), says=("reports.csv", "not found")),
    Case("parquet that is text", "ldp", ldp("user_id,mechanism,report\n1,secret,0\n", file_format="parquet"),
         says=("cannot be read as PARQUET",), raw=("secret",)),
    Case("parquet fractional report", "ldp",
         ldp(reports().astype({"report": float, "user_id": int}).assign(report=[2.5] + [0.0] * 11),
             file_format="parquet"),
         says=("row 1", "report is not an integer"), raw=("2.5", "np.float64")),
    Case("catalog not json", "ldp", ldp(catalog="{not json"), says=("catalog.json", "not valid JSON")),
    Case("catalog missing", "ldp", lambda d: _ldp_without_catalog(d), says=("catalog.json", "not found")),
    Case("catalog empty", "ldp", ldp(catalog={}), says=("catalog.json", "non-empty")),
    Case("catalog epsilon zero", "ldp", ldp(catalog={**CATALOG, "krr_b": {"type": "krr", "epsilon": 0.0,
                                                                           "input_size": 4}}),
         says=("catalog.json", "mechanism 'krr_b'", "epsilon")),
    Case("catalog unknown type", "ldp", ldp(catalog={**CATALOG, "krr_b": {"type": "laplace", "epsilon": 1.0}}),
         says=("unknown mechanism type",)),
    Case("catalog different alphabets", "ldp",
         ldp(catalog={**CATALOG, "krr_b": {"type": "krr", "epsilon": 1.0, "input_size": 5}}),
         says=("different secret alphabets",)),
    Case("catalog absurd alphabet", "ldp",
         ldp(catalog={"krr_a": {"type": "krr", "epsilon": 1.0, "input_size": 10**9},
                      "krr_b": {"type": "krr", "epsilon": 1.0, "input_size": 10**9}}),
         says=("1000000000 secrets", "at most 4096")),
    Case("catalog too large", "ldp", ldp(catalog=json.dumps(CATALOG) + " " * (17 << 20)),
         says=("larger than 16 MiB",)),
    Case("catalog nested too deeply", "ldp", ldp(catalog="[" * 100_000 + "]" * 100_000),
         says=("not valid JSON",)),
    Case("rappor mixed with krr", "ldp", ldp(catalog={**CATALOG, "r1": {"type": "rappor", "epsilon": 1.0,
                                                                         "input_size": 4}}),
         says=("RAPPOR",)),
    Case("bit vector of the wrong length", "ldp", ldp(bits("0100", "01000"), RAPPOR),
         says=("row 2", "length 5", "4 bits"), raw=("01000",)),
    Case("bit vector with other characters", "ldp", ldp(bits("0100", "01x0"), RAPPOR),
         says=("row 2", "not a bit vector"), raw=("01x0",)),
    Case("estimator needs rappor", "ldp", ldp(estimator={"method": "rap_m"}), says=("rap_m", "needs RAPPOR")),
    Case("secrets do not match the catalog", "ldp", ldp(secrets={"layout": "line", "values": 5}),
         says=("4 secrets", "5")),
    Case("secrets absurd", "ldp", ldp(secrets={"layout": "line", "values": 10**9}), says=("secrets.values",)),
    Case("grid absurd", "ldp", ldp(secrets={"layout": "grid", "rows": 4000, "columns": 4000}),
         says=("secrets", "at most 4096 cells")),
    Case("max iterations absurd", "ldp", ldp(estimator={"method": "gibu", "max_iterations": 10**12}),
         says=("estimator.max_iterations",)),
    Case("max vector cells absurd", "ldp", ldp(estimator={"method": "gibu", "max_vector_cells": 1 << 40}),
         says=("estimator.max_vector_cells",)),
    Case("rappor bit vectors above the driver's cap", "ldp",
         ldp(bits("0100", "0010", "0001"), RAPPOR, estimator={"method": "gibu", "max_vector_cells": 11}),
         says=("3 of 4 bits (12 cells)", "max_vector_cells", "rap_m"), raw=("0100", "0010")),
]


def _ldp_without_reports(directory: Path) -> Built:
    built = ldp()(directory)
    (directory / "reports.csv").unlink()
    return built


def _ldp_without_catalog(directory: Path) -> Built:
    built = ldp()(directory)
    (directory / "catalog.json").unlink()
    return built


# --------------------------------------------------------------------------------------- filter

FEATURES = {
    "features": [
        {"name": "height", "type": "numeric", "bounds": [100, 220]},
        {"name": "years", "type": "numeric", "bounds": [0, 60], "integer": True},
        {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]},
    ]
}


def people(records: int = 60, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 2, records)
    return pd.DataFrame({
        "height": np.clip(rng.normal(160 + 15 * group, 8), 100, 220).round(1),
        "years": rng.integers(0, 60, records),
        "colour": np.array(["red", "green", "blue"])[rng.integers(0, 3, records)],
        "group": np.array(["a", "b"])[group],
        "senior": np.array(["no", "yes"])[rng.integers(0, 2, records)],
        "capital": rng.integers(0, 5000, records),
        "choice": np.where(np.arange(records) % 3 == 0, "hide-senior", "hide-group"),
    }).astype(object)


def filter_config(directory: Path, lake: Path, input_path: Path, training_path: Path, spec_path: Path,
                  **sections: object) -> dict:
    config: dict = {
        "kind": "filter",
        "dataset": "people",
        "lake": str(lake),
        "feature_spec": str(spec_path),
        "training": {"path": str(training_path)},
        "input": {"path": str(input_path), "choice_column": "choice"},
        "labels": {"group": {"column": "group", "categories": ["a", "b"]},
                   "senior": {"column": "senior", "categories": ["no", "yes"]}},
        "choices": [{"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0},
                    {"name": "hide-senior", "private": "senior", "utility": "group", "budget": 1.0}],
        "encoder": {"latent_dimension": 2, "hidden_widths": [8], "training": {"epochs": 1, "batch_size": 64}},
        "filter_training": {"epochs": 1, "batch_size": 64, "refit_every": 5, "max_records": 64},
        "engine": {"name": "local", "parallelism": 1},
        "evaluation": {"enabled": False},
    }
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(name), dict):
            config[name] = {**config[name], **value}
        else:
            config[name] = value
    return config


@pytest.fixture(scope="module")
def filter_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One lake with one trained encoder for every filter case (nothing is ever published in it)."""
    directory = tmp_path_factory.mktemp("filter-lake")
    _yaml(directory / "features.yaml", FEATURES)
    people(200, seed=1).to_csv(directory / "training.csv", index=False)
    people().to_csv(directory / "records.csv", index=False)
    lake = prepared_lake(directory, "people")
    config = _yaml(directory / "filter.yaml", filter_config(directory, lake, directory / "records.csv",
                                                            directory / "training.csv", directory / "features.yaml"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRIVLAKE_TEST_SECRET", "5eed" * 16)
        assert main(["train-encoder", str(config)]) == 0
    return lake


def filter_case(data: pd.DataFrame | str | bytes | None = None, training: pd.DataFrame | str | None = None,
                features: dict | str | None = None, **sections: object):
    def build(directory: Path, lake: Path) -> Built:
        directory.mkdir(parents=True, exist_ok=True)
        spec_path = directory / "features.yaml"
        if isinstance(features, str):
            spec_path.write_text(features)
        else:
            _yaml(spec_path, features or FEATURES)
        training_path = directory / "training.csv"
        chosen_training = people(200, seed=1) if training is None else training
        if isinstance(chosen_training, str):
            training_path.write_text(chosen_training)
        else:
            chosen_training.to_csv(training_path, index=False)
        input_path = directory / "records.csv"
        frame = people() if data is None else data
        if isinstance(frame, pd.DataFrame):
            frame.to_csv(input_path, index=False)
        elif isinstance(frame, bytes):
            input_path.write_bytes(frame)
        else:
            input_path.write_text(frame)
        config = filter_config(directory, lake, input_path, training_path, spec_path, **sections)
        return Built(_yaml(directory / "filter.yaml", config), lake)

    return build


def filter_cell(row: int, column: str, value: object, **sections: object):
    frame = people()
    frame.loc[row, column] = value
    return filter_case(frame, **sections)


FILTER_CASES = [
    Case("category not in the list", "filter", filter_cell(6, "colour", "purple-secret"),
         says=("row 7", "'colour'", "not in the feature's category list"), raw=("purple-secret",)),
    Case("number out of bounds", "filter", filter_cell(3, "height", 987.5),
         says=("row 4", "'height'", "outside the bounds [100.0, 220.0]"), raw=("987.5",)),
    Case("text in a number", "filter", filter_cell(3, "years", "many-years"),
         says=("row 4", "'years'", "not a finite number"), raw=("many-years",)),
    Case("label not in the categories", "filter", filter_cell(9, "group", "c-secret"),
         says=("row 10", "'group'", "label is not in the label's category list"), raw=("c-secret",)),
    Case("empty label", "filter", filter_cell(9, "senior", ""), says=("row 10", "'senior'", "missing label")),
    Case("NA label", "filter", filter_cell(9, "senior", "NA"), says=("row 10", "missing label")),
    Case("null feature", "filter", filter_cell(2, "height", "null"), says=("row 3", "'height'")),
    Case("NaN category", "filter", filter_cell(2, "colour", "NaN"), says=("row 3", "'colour'", "missing value")),
    Case("unknown choice", "filter", filter_cell(2, "choice", "hide-everything-secret"),
         says=("row 3", "'choice'", "unknown choice"), raw=("hide-everything-secret",)),
    Case("missing choice", "filter", filter_cell(2, "choice", ""), says=("row 3", "'choice'", "no choice")),
    Case("missing column", "filter", filter_case(people().drop(columns=["years"])), says=("no column 'years'",)),
    Case("no header row", "filter", filter_case("150,20,red,a,no,hide-group\n151,21,Jane Roe,a,no,hide-group\n"),
         says=("no column 'height'", "a CSV without a header row"), raw=("Jane Roe",)),
    Case("header only", "filter", filter_case("height,years,colour,group,senior,choice\n"), says=("no rows",)),
    Case("empty file", "filter", filter_case(""), says=("empty file",)),
    Case("ragged row", "filter",
         filter_case("height,years,colour,group,senior,choice\n150,20,red,a,no,hide-group\n"
                     "150,20,red,a,no,hide-group,Jane Roe\n"),
         says=("row 2", "a row has 7 fields"), raw=("Jane Roe",)),
    Case("not utf-8", "filter",
         filter_case("height,years,colour,group,senior,choice\n150,20,r\xe9d,a,no,hide-group\n".encode("latin-1")),
         says=("not valid UTF-8",)),
    Case("empty choice group", "filter", filter_case(people().assign(choice="hide-group")),
         says=("choice 'hide-senior' has no records",)),
    Case("bad training record", "filter", filter_case(training=people(200, seed=1).assign(
        height=[555.5] + [150.0] * 199)), says=("training.csv", "row 1", "'height'"), raw=("555.5",)),
    Case("feature spec alias bomb", "filter",
         filter_case(features=BILLION_LAUGHS.replace("kind: crowd", "features: []")),
         says=("features.yaml", "expands to more than"), raw=("laughsecret",)),
    Case("hidden widths absurd", "filter", filter_case(encoder={"hidden_widths": [10**6]}),
         says=("encoder.hidden_widths",)),
    Case("latent dimension absurd", "filter", filter_case(encoder={"latent_dimension": 10**6}),
         says=("encoder.latent_dimension",)),
    Case("vae weights absurd", "filter", filter_case(encoder={"hidden_widths": [8192, 8192, 8192]}),
         says=("encoder", "weights")),
    Case("filter epochs absurd", "filter", filter_case(filter_training={"epochs": 10**9}),
         says=("filter_training.epochs",)),
    Case("training records absurd", "filter", filter_case(filter_training={"max_records": 10**12}),
         says=("filter_training.max_records",)),
    Case("evaluation records absurd", "filter", filter_case(evaluation={"enabled": False, "max_records": 10**12}),
         says=("evaluation.max_records",)),
    Case("too many choices", "filter", filter_case(choices=[
        {"name": f"c{index}", "private": "group", "utility": "senior", "budget": 1.0} for index in range(300)]),
         says=("choices",)),
    Case("private label read from a feature", "filter",
         filter_case(labels={"group": {"column": "colour", "categories": ["red", "green", "blue"]},
                             "senior": {"column": "senior", "categories": ["no", "yes"]}}),
         says=("is also a feature",)),
    Case("label in none of the groups", "filter",
         filter_case(people().assign(group=["z-secret"] + ["a"] * 59),
                     labels={"group": {"column": "group", "groups": {"first": ["a"], "second": ["b"]}},
                             "senior": {"column": "senior", "categories": ["no", "yes"]}}),
         says=("row 1", "'group'", "in none of the label's groups"), raw=("z-secret",)),
    Case("threshold label not a number", "filter",
         filter_case(people().assign(capital=["rich-secret"] + [20] * 59),
                     labels={"group": {"column": "group", "categories": ["a", "b"]},
                             "senior": {"column": "capital", "above": 1000}}),
         says=("row 1", "'capital'", "not a finite number"), raw=("rich-secret",)),
    # the reliability issue's row 1: these published a release with "epsilon": null (exit 1)
    Case("infinite sensitivity cap", "filter", filter_case(choices=[
        {"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0,
         "max_sensitivity": float("inf")}]), says=("max_sensitivity",)),
    Case("huge sensitivity cap", "filter", filter_case(choices=[
        {"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0, "max_sensitivity": 1e300}]),
         says=("max_sensitivity",)),
]

CASES = [*CROWD_CASES, *TABULAR_CASES, *LDP_CASES, *FILTER_CASES]


def _digests(directory: Path, lake: Path) -> dict[str, str]:
    """Every input-side file of a case (everything but its lake) by content."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and lake not in path.parents:
            found[str(path.relative_to(directory))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_the_corpus_is_large_and_spans_every_kind() -> None:
    kinds = collections.Counter(case.kind for case in CASES)
    assert len(CASES) >= 100 and set(kinds) == {"crowd", "tabular", "ldp", "filter"}, kinds
    assert len({(case.kind, case.name) for case in CASES}) == len(CASES), "case names are unique per kind"
    assert all(case.code in (2, 3, 4, 5, 75) for case in CASES), "exit 1 is only for bugs"


@pytest.mark.parametrize("case", CASES, ids=[f"{case.kind}-{case.name}" for case in CASES])
def test_bad_input_is_one_line_with_its_exit_code_and_publishes_nothing(
    case: Case, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if case.kind == "filter":
        built = case.build(tmp_path, request.getfixturevalue("filter_lake"))  # type: ignore[call-arg]
    else:
        built = case.build(tmp_path)
    before = _digests(tmp_path, built.lake)
    if case.patch is not None:
        case.patch(monkeypatch, built)
    release_id = "corpus-" + hashlib.sha256(f"{case.kind}/{case.name}".encode()).hexdigest()[:12]
    argv = ["run", str(built.config), *(case.args or ("--release-id", release_id))]
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    monkeypatch.undo()

    assert code == case.code, captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err and lines[0].startswith("privlake: ")
    for fragment in case.says:
        assert fragment in lines[0], (fragment, lines[0])
    for raw in case.raw:
        assert raw not in captured.err and raw not in captured.out, (raw, lines[0])
    assert len(lines[0]) <= 400, "one line of bounded length"
    assert _digests(tmp_path, built.lake) == before, "an input file was modified"
    if built.lake.is_dir():
        assert main(["releases", "--lake", str(built.lake), "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == [], "a failed release published"
        staged = built.lake / "staging"
        assert not staged.exists() or not any(path.is_file() for path in staged.rglob("*"))
