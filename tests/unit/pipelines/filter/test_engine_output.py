"""The filter's output gate on engine metrics (issue 15): the privatized files read where they
were written, the record numbers checked for repeats by the bucketed reduce; a good release passes,
and each problem the row-level gate catches fails it with the row-level gate's words."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engines import make_engine
from pipelines.filter.blocks import PrivatizationSide, output_schema
from pipelines.filter.pipeline import _read_spec, _withheld, check_output_on_engine
from pipelines.filter.validation import validate_filter_output
from pipelines.platform.config import load_config
from tests.e2e.test_filter_release import filter_case


def released(rows: int, start: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    choice = np.where(np.arange(rows) % 3 == 0, "hide-senior", "hide-group")
    return pd.DataFrame({
        "record": np.arange(start, start + rows, dtype=np.int64), "choice": choice,
        "height": rng.uniform(100, 220, rows), "years": rng.integers(0, 61, rows).astype(np.int64),
        "colour": rng.choice(["red", "green", "blue"], rows),
        "senior": np.where(choice == "hide-group", rng.choice(["no", "yes"], rows), None),
        "group": np.where(choice == "hide-senior", rng.choice(["a", "b"], rows), None),
    })


@pytest.fixture
def setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", "ab" * 32)
    config = load_config(filter_case(tmp_path / "case", two_choices=True))
    spec = _read_spec(config)
    labels = ["senior", "group"]
    side = PrivatizationSide(b"", "x", (), tuple(config.choice_names), ("senior", "group"),
                             {label: config.labels[label].classes for label in labels}, b"", "r")
    context = SimpleNamespace(config=config, staging=tmp_path / "staging")
    return context, spec, side, output_schema(spec, labels)


def check(setting, frames: list[pd.DataFrame], rows: int, folder: Path):
    context, spec, side, schema = setting
    files = []
    for number, frame in enumerate(frames):
        files.append(folder / f"part-{number}.parquet")
        pq.write_table(pa.Table.from_pandas(frame[schema.names], preserve_index=False), files[-1])
    with make_engine("local") as engine:
        return check_output_on_engine(context, engine, files, spec, side, rows)


def test_a_good_release_passes_as_on_the_rows(setting, tmp_path: Path) -> None:
    frames = [released(40, 0, 1), released(0, 40, 2), released(35, 40, 3)]
    count, result = check(setting, frames, 75, tmp_path)
    assert count == 75 and result.success, result.first_line()
    context, spec, side, _ = setting
    kept = {choice.name: choice.utility for choice in context.config.choices}
    assert validate_filter_output(pd.concat(frames, ignore_index=True), spec, side.utility_classes, kept,
                                  _withheld(context.config), 75).success


@pytest.mark.parametrize(("change", "message"), [
    (lambda frame: frame.assign(record=frame["record"].where(frame.index != 5, 2)), "a record is released twice"),
    (lambda frame: frame.assign(colour=frame["colour"].where(frame.index != 3, "purple")),
     "category outside the spec's list"),
    (lambda frame: frame.assign(height=frame["height"].where(frame.index != 4, 500.0)),
     "value outside the spec's bounds [100.0, 220.0]"),
    (lambda frame: frame.assign(senior=frame["senior"].where(frame.index != 1, None)),
     "utility label missing for choice 'hide-group'"),
    (lambda frame: frame.assign(group=frame["group"].where(frame.index != 1, "a")),
     "private label released for choice 'hide-group'"),
    (lambda frame: frame.iloc[:-1], "the release must have 80 records"),
])
def test_each_problem_fails_the_gate_with_the_row_level_words(setting, tmp_path: Path, change, message: str) -> None:
    frames = [released(40, 0, 4), change(released(40, 40, 5))]
    count, result = check(setting, frames, 80, tmp_path)
    assert not result.success
    assert message in result.first_line(), result.first_line()
