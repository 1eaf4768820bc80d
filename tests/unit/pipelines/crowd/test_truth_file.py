"""The crowd evaluation's truth file is read in chunks on the driver, which keeps only the truths of
the objects evaluated (issue 15: nothing proportional to the input is held on the driver)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import pipelines.crowd.pipeline as crowd_pipeline
from pipelines.platform.errors import InputError
from schemas.crowd.config import CrowdConfig


def config_with_truth(tmp_path: Path, truth: Path, columns: dict[str, str] | None = None) -> CrowdConfig:
    return CrowdConfig.model_validate({
        "kind": "crowd", "dataset": "truth", "lake": str(tmp_path / "lake"),
        "input": {"path": str(tmp_path / "claims.csv")},
        "privacy": {"k": 4, "gamma": 4.0, "epsilon0": 4.0, "delta": 0.01, "weight_ratio_cap": 4.0,
                    "value_range": [0.0, 100.0]},
        "synthesis": {"mechanism": "priscrowd", "claims_per_object": 2, "precision": 0.01, "bandwidth": {"method": "fixed", "value": 2.0}},
        "evaluation": {"truth_path": str(truth), **({"truth_columns": columns} if columns else {})},
    })


def test_only_the_wanted_objects_truths_are_kept_whatever_the_chunking(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    truth = tmp_path / "truth.csv"
    pd.DataFrame({"object_id": np.arange(50_000), "truth": np.arange(50_000) / 2.0}).to_csv(truth, index=False)
    monkeypatch.setattr(crowd_pipeline, "TRUTH_CHUNK_ROWS", 1_000)
    wanted = {7, 12_345, 49_999, 60_000}
    kept = crowd_pipeline._read_truth(config_with_truth(tmp_path, truth), pa.int64(), wanted)
    assert kept.sort_index().to_dict() == {7: 3.5, 12_345: 6172.5, 49_999: 24_999.5}


def test_text_ids_and_a_missing_column_or_file(tmp_path: Path) -> None:
    truth = tmp_path / "truth.csv"
    truth.write_text("question,answer\nq1,1.5\nq2,2.5\nq3,not a number\n")
    config = config_with_truth(tmp_path, truth, {"object_id": "question", "truth": "answer"})
    assert crowd_pipeline._read_truth(config, pa.string(), {"q2", "q3"}).to_dict() == {"q2": 2.5}
    with pytest.raises(InputError, match="truth column is missing"):
        crowd_pipeline._read_truth(config_with_truth(tmp_path, truth), pa.string(), {"q1"})
    with pytest.raises(InputError, match="truth file not found"):
        crowd_pipeline._read_truth(config_with_truth(tmp_path, tmp_path / "none.csv"), pa.string(), {"q1"})
