"""The filter release's files are a function of public quantities only (issue 15 review, F1).

The release's data files are cut by record ranges: ``staged_file_count(n, parallelism)`` files of
contiguous positions (``pipelines/filter/pipeline.py``, ``release_file_tasks``), never one set per
input fragment. So two inputs of the same ``n`` — one file, the same records split into public
``day=`` partition folders, or a neighbour with one private label changed — give the same files
(the same number, each holding the same range of ``record``); the records themselves do not change
(each record's noise is keyed by its position: ``test_filter_sources.py``). A private label in the folder
names is refused before any row is read (``tests/e2e/test_input_selection.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.cli import main
from pipelines.filter.blocks import release_file_pieces
from pipelines.filter.pipeline import staged_file_count
from pipelines.platform.lake import Lake
from tests.e2e.test_filter_release import SECRET_HEX, filter_case, people


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)


def layout(lake_folder: Path, release_id: str) -> list[tuple[int, int, int]]:
    """The release's data files in path order: (first record, last record, rows) each."""
    with Lake(lake_folder) as lake:
        table = lake._release_table(release_id)
        assert table is not None
        paths = sorted(task.file.file_path for task in table.scan().plan_files())
    files = []
    for path in paths:
        records = pq.read_table(path.removeprefix("file://"), columns=["record"])["record"].to_numpy()
        files.append((int(records.min()), int(records.max()), len(records)))
    return files


def test_one_file_partition_folders_and_a_neighbour_give_the_same_release_files(tmp_path: Path) -> None:
    data = people(600, seed=7)
    config = filter_case(tmp_path, evaluation={"enabled": False}, engine={"name": "local", "parallelism": 4})
    assert main(["train-encoder", str(config)]) == 0
    document = yaml.safe_load(config.read_text())

    def release(release_id: str, source: str) -> list[tuple[int, int, int]]:
        document["input"] = {"path": source}
        config.write_text(yaml.safe_dump(document))
        assert main(["run", str(config), "--release-id", release_id]) == 0
        return layout(tmp_path / "lake", release_id)

    data.to_csv(tmp_path / "one.csv", index=False)
    for day, part in enumerate(np.array_split(np.arange(len(data)), 3)):  # a public partitioning, in order
        (tmp_path / "days" / f"day={day + 1}").mkdir(parents=True)
        data.iloc[part].to_csv(tmp_path / "days" / f"day={day + 1}" / "part-0.csv", index=False)
    neighbour = data.copy()
    neighbour.loc[0, "group"] = "b" if data.loc[0, "group"] == "a" else "a"
    neighbour.to_csv(tmp_path / "neighbour.csv", index=False)

    one = release("files-one", "one.csv")
    assert one == [(0, 599, 600)], "n = 600 at parallelism 4: one file (staged_file_count)"
    assert release("files-days", "days") == one, "the input's fragments do not reach the release's files"
    assert release("files-neighbour", "neighbour.csv") == one


@pytest.mark.parametrize("staged", [[10_000, 0, 5_000, 20_000], [35_000], [1] * 7 + [34_993], [17_500, 17_500]])
def test_the_files_are_record_ranges_set_by_n_and_the_parallelism_alone(staged: list[int]) -> None:
    n = sum(staged)
    count = staged_file_count(n, 4)
    assert count == 4
    pieces = release_file_pieces(staged, count)
    starts = np.concatenate([[0], np.cumsum(staged)])
    ranges = []
    for file in pieces:
        positions = [(int(starts[index]) + first, int(starts[index]) + stop) for index, first, stop in file]
        assert all(a[1] == b[0] for a, b in zip(positions, positions[1:], strict=False)), "contiguous"
        ranges.append((positions[0][0], positions[-1][1]))
    assert ranges == [(0, 8750), (8750, 17500), (17500, 26250), (26250, 35000)], "the same for every split of n"
