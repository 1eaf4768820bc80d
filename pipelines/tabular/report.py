"""The tabular release's evaluation report for the manifest: utility against held-out real records
and privacy evidence (issue 3, "Evaluation"). Computed from raw data: an internal report, not
privacy-protected, and never an input to the release."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipelines.tabular.input import read_tabular_records
from schemas.tabular.config import TabularConfig
from schemas.tabular.schema import TabularSchema
from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.encoding import domain_sizes, encode_records
from transforms.tabular.evaluation import (
    closest_record_distance_distribution,
    distance_to_closest_record,
    exact_match_rate,
    mean_cramers_v_difference,
    mean_marginal_tvd,
    train_on_synthetic_test_on_real,
)

THREE_WAY_SUBSETS = 200
DISTANCE_SAMPLE = 5000
PURPOSE_HOLDOUT_SAMPLE = "tabular-evaluation-holdout"
"""The keyed stream of the held-out file's sample when it has more than ``sample_records`` rows."""


def _sample(codes: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    if codes.shape[0] <= size:
        return codes
    return codes[np.sort(rng.choice(codes.shape[0], size=size, replace=False))]


def evaluation_report(
    config: TabularConfig,
    schema: TabularSchema,
    released: pd.DataFrame,
    training: pd.DataFrame,
    seeds_codes: np.ndarray,
    secret: bytes,
    release_id: str,
) -> dict[str, Any]:
    evaluation = config.evaluation
    assert evaluation.holdout is not None
    sizes = domain_sizes(schema)
    # The held-out file is read on the driver: at most ``sample_records`` of its rows, a keyed
    # sample of a larger file (issue 15's documented cap on driver-side samples).
    holdout = read_tabular_records(evaluation.holdout, schema, evaluation.sample_records,
                                   keyed_generator(secret, release_id, PURPOSE_HOLDOUT_SAMPLE, 0))
    holdout_codes = holdout.encoded.codes
    released_codes = encode_records(released, schema).codes
    rng = keyed_generator(secret, release_id, "tabular-evaluation", 0)
    report: dict[str, Any] = {
        "note": "computed from raw data against held-out records; an internal report, not privacy-protected",
        "holdout_records": int(holdout_codes.shape[0]),
        "marginal_tvd": {
            f"{way}-way": mean_marginal_tvd(holdout_codes, released_codes, sizes, way,
                                            max_subsets=THREE_WAY_SUBSETS if way == 3 else None, rng=rng)
            for way in (1, 2, 3)
            if way <= len(sizes)
        },
        "cramers_v_mean_abs_difference": mean_cramers_v_difference(holdout_codes, released_codes, sizes),
    }
    sample_released = _sample(released_codes, DISTANCE_SAMPLE, rng)
    sample_holdout = _sample(holdout_codes, DISTANCE_SAMPLE, rng)
    released_distances = distance_to_closest_record(sample_released, seeds_codes, sizes)
    holdout_distances = distance_to_closest_record(sample_holdout, seeds_codes, sizes)
    report["privacy_evidence"] = {
        "exact_match_rate_released_to_seeds": exact_match_rate(released_codes, seeds_codes),
        "exact_match_rate_holdout_to_seeds": exact_match_rate(holdout_codes, seeds_codes),
        "distance_to_closest_seed_released": closest_record_distance_distribution(
            released_distances, len(sizes)).tolist(),
        "distance_to_closest_seed_holdout": closest_record_distance_distribution(
            holdout_distances, len(sizes)).tolist(),
        "note": "Hamming distance on the coded records; compare released with held-out, not with zero",
    }
    if evaluation.target_column is not None:
        if evaluation.positive_above is not None:
            threshold = float(evaluation.positive_above)

            def positive(values: pd.Series) -> pd.Series:
                return pd.to_numeric(values) > threshold
        else:
            accepted = set(evaluation.positive_values)

            def positive(values: pd.Series) -> pd.Series:
                return values.astype(str).isin(accepted)

        report["train_on_synthetic_test_on_real"] = train_on_synthetic_test_on_real(
            released, training, holdout.frame, evaluation.target_column, positive
        )
    return report
