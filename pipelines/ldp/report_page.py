"""The ldp release's part of ``privlake report`` (``pipelines/platform/report.py``).

The release is itself a distribution, so the page draws it: a line over the values (layout
``line``) or a map of the grid's cells (layout ``grid``). When the config named a true
distribution (``evaluation.truth_path``, read from raw secrets), the release records it — one
probability per secret, at most ``MAX_SECRETS`` numbers — into the operator-only record
(:func:`truth_summary`), and the operator's page draws the truth beside the estimate with the
evaluation's distances. The public page also shows the users' mechanism mix and their local ε.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipelines.platform.report import Section, bar_chart, data_table, figure, heatmap, line_chart, paragraph


def truth_summary(truth: np.ndarray | None) -> dict[str, Any]:
    """The operator-only summary the report draws: the true distribution over the secrets' indices
    (6 significant digits), or nothing when no truth was given."""
    if truth is None:
        return {}
    return {"note": "the true distribution of the raw secrets (evaluation.truth_path), per secret index; "
                    "operator-only",
            "truth": [float(f"{value:.6g}") for value in np.asarray(truth, dtype=np.float64)]}


def _grid_matrix(rows: pd.DataFrame, probabilities: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The released grid as a matrix (rows × columns), its size read from the released cells."""
    height, width = int(rows["row"].max()) + 1, int(rows["col"].max()) + 1
    matrix = np.zeros((height, width))
    matrix[rows["row"].to_numpy(np.int64), rows["col"].to_numpy(np.int64)] = probabilities
    return matrix, height, width


def report_sections(manifest: dict[str, Any], released: Any, internal: dict[str, Any] | None) -> list[Section]:
    """The ldp figures: the estimate (with the truth, for operators), the mechanism mix, the users' ε."""
    rows = released.to_pandas() if hasattr(released, "to_pandas") else pd.DataFrame(released)
    truth = ((internal or {}).get("report") or {}).get("truth") if internal is not None else None
    evaluation = (internal or {}).get("evaluation") or {} if internal is not None else {}
    sections = []
    parts = [paragraph(f"Estimated by {manifest.get('estimator')} from {manifest.get('n')} users' reports over "
                       f"{manifest.get('secrets')} secrets; {manifest.get('iterations')} iterations, "
                       f"{'converged' if manifest.get('converged') else 'NOT converged (iteration cap reached)'}.")]
    if "row" in rows.columns:
        rows = rows.sort_values(["row", "col"], ignore_index=True)
        matrix, height, width = _grid_matrix(rows, rows["probability"].to_numpy(np.float64))
        top = float(matrix.max())
        if truth is not None and len(truth) == height * width:
            truth_matrix = np.asarray(truth).reshape(height, width)
            top = max(top, float(truth_matrix.max()))
            caption = f"{height} rows × {width} columns, row 0 at the top; one colour scale for both maps"
            parts.append(figure(heatmap("estimated distribution", matrix.tolist(), high=top), caption))
            parts.append(figure(heatmap("true distribution (raw secrets)", truth_matrix.tolist(), high=top), caption))
        else:
            parts.append(figure(heatmap("estimated distribution", matrix.tolist(), high=top),
                                f"{height} rows × {width} columns; row 0 at the top"))
    elif len(rows):
        rows = rows.sort_values("value", ignore_index=True)
        series = {"estimate": rows["probability"].tolist()}
        if truth is not None and len(truth) == len(rows):
            series["truth (raw secrets)"] = list(truth)
        parts.append(figure(line_chart("estimated distribution", rows["value"].tolist(), series, x_label="value",
                                       y_label="probability")))
    sections.append(Section("The estimated distribution" + (" beside the truth" if truth is not None else ""), parts,
                            operator_only=truth is not None))
    if internal is not None:
        if evaluation.get("emd") is not None:
            sections.append(Section("Error against the truth", [
                figure(bar_chart("distance of the estimate to the true distribution", ["EMD", "L1", "L2"],
                                 {"distance": [evaluation.get("emd"), evaluation.get("l1"), evaluation.get("l2")]})),
            ], operator_only=True))
        else:
            sections.append(Section("Error against the truth", [paragraph("no evaluation.truth_path was given: no "
                                                                          "truth to compare with")], operator_only=True))
    mix = manifest.get("mechanism_mix") or []
    if mix:
        names = [str(entry.get("name")) for entry in mix]
        sections.append(Section("Mechanisms the users chose", [
            figure(bar_chart("users per mechanism", names, {"users": [float(entry.get("users") or 0) for entry in mix]},
                             y_label="users")),
            figure(bar_chart("worst-case local epsilon per mechanism", names,
                             {"epsilon": [float(entry.get("worst_case_ldp_epsilon") or 0) for entry in mix]},
                             y_label="epsilon")),
            data_table(["mechanism", "type", "epsilon parameter", "worst-case local epsilon", "users"],
                       [[entry.get("name"), entry.get("type"), entry.get("epsilon_parameter"),
                         entry.get("worst_case_ldp_epsilon"), entry.get("users")] for entry in mix]),
        ]))
    return sections
