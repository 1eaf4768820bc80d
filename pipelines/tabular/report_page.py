"""The tabular release's part of ``privlake report`` (``pipelines/platform/report.py``).

At release time :func:`marginal_summaries` records a small operator-only summary into the internal
record: every attribute's one-way marginal over its public domain for the original records and for
the released ones (shares per category or bin: a few numbers per attribute, never records), and
the pairwise association (Cramér's V) matrices of both. At report time :func:`report_sections`
draws, on the operator's page, the marginals side by side, the association heatmaps and their
difference, and the evaluation's train-on-synthetic-test-on-real and marginal-distance figures;
on the public page, the released rows' own marginals and associations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipelines.platform.report import Section, bar_chart, figure, heatmap, key_value_table, paragraph

MAX_ATTRIBUTES = 40
"""Attributes beyond this many are left out of the figures (the association matrix grows as m²)."""
MAX_CODES = 60
"""An attribute with a larger domain is summarized by its first ``MAX_CODES`` codes' shares."""
PUBLIC_BINS = 10


def _labels(attribute: Any) -> list[str]:
    from transforms.tabular.encoding import bin_edges

    if getattr(attribute, "categories", None) is not None:
        return [str(category) for category in attribute.categories]
    edges = bin_edges(attribute)
    return [f"[{edges[i]:.4g}, {edges[i + 1]:.4g})" for i in range(len(edges) - 1)]


def _shares(codes: np.ndarray, size: int) -> list[float]:
    counts = np.bincount(codes, minlength=size)[:MAX_CODES].astype(np.float64)
    total = max(codes.size, 1)
    return [float(f"{value:.6g}") for value in counts / total]


def marginal_summaries(schema: Any, original_codes: np.ndarray, released: pd.DataFrame) -> dict[str, Any]:
    """The operator-only summary the report draws (module docstring): ``schema`` the release's
    public schema, ``original_codes`` the input records' codes, ``released`` the released rows."""
    from transforms.tabular.encoding import domain_sizes, encode_records
    from transforms.tabular.evaluation import cramers_v_matrix

    sizes = domain_sizes(schema)[:MAX_ATTRIBUTES]
    attributes = schema.attributes[:MAX_ATTRIBUTES]
    released_codes = encode_records(released, schema).codes[:, : len(sizes)]
    original = original_codes[:, : len(sizes)]
    return {
        "note": "one-way marginals (shares per category or bin) and Cramér's V matrices of the original and the "
                "released records; operator-only, from raw data",
        "attributes": [{"name": attribute.name, "labels": _labels(attribute)[:MAX_CODES],
                        "original": _shares(original[:, index], size), "released": _shares(released_codes[:, index], size)}
                       for index, (attribute, size) in enumerate(zip(attributes, sizes, strict=True))],
        "association": {
            "names": [attribute.name for attribute in attributes],
            "original": np.round(cramers_v_matrix(original, sizes), 4).tolist(),
            "released": np.round(cramers_v_matrix(released_codes, sizes), 4).tolist(),
        },
    }


def marginal_summaries_from_tables(schema: Any, tables: dict[tuple[int, ...], np.ndarray], record_count: int,
                                   released_tables: dict[tuple[int, ...], np.ndarray],
                                   released_count: int) -> dict[str, Any]:
    """:func:`marginal_summaries` with the original and the released records given by their one-way
    and pairwise counts (``tables[(a,)]``, ``tables[(a, b)]`` for ``a < b``; counted on the engine)
    instead of their codes: the same figures."""
    from transforms.tabular.encoding import domain_sizes
    from transforms.tabular.evaluation import cramers_v

    sizes = domain_sizes(schema)[:MAX_ATTRIBUTES]
    attributes = schema.attributes[:MAX_ATTRIBUTES]

    def association(counts: dict[tuple[int, ...], np.ndarray]) -> np.ndarray:
        matrix = np.eye(len(sizes))
        for first in range(len(sizes)):
            for second in range(first + 1, len(sizes)):
                matrix[first, second] = matrix[second, first] = cramers_v(counts[(first, second)])
        return matrix

    def shares(counts: np.ndarray, total: int) -> list[float]:
        return [float(f"{value:.6g}") for value in counts[:MAX_CODES].astype(np.float64) / max(int(total), 1)]

    return {
        "note": "one-way marginals (shares per category or bin) and Cramér's V matrices of the original and the "
                "released records; operator-only, from raw data",
        "attributes": [{"name": attribute.name, "labels": _labels(attribute)[:MAX_CODES],
                        "original": shares(tables[(index,)], record_count),
                        "released": shares(released_tables[(index,)], released_count)}
                       for index, attribute in enumerate(attributes)],
        "association": {
            "names": [attribute.name for attribute in attributes],
            "original": np.round(association(tables), 4).tolist(),
            "released": np.round(association(released_tables), 4).tolist(),
        },
    }


def _public_columns(rows: pd.DataFrame) -> dict[str, pd.Series]:
    """Each released column as categories: numeric columns in ``PUBLIC_BINS`` equal bins between
    their released minimum and maximum (the page has no schema: it reads the released rows alone)."""
    columns = {}
    for name in list(rows.columns)[:MAX_ATTRIBUTES]:
        column = rows[name]
        if pd.api.types.is_numeric_dtype(column) and column.nunique() > PUBLIC_BINS:
            binned = pd.cut(column.astype(np.float64), bins=PUBLIC_BINS, include_lowest=True)
            columns[name] = binned.map(lambda interval: f"[{interval.left:.4g}, {interval.right:.4g}]").astype(str)
        else:
            columns[name] = column.astype(str)
    return columns


def _association(columns: dict[str, pd.Series]) -> list[list[float]]:
    from transforms.tabular.evaluation import cramers_v

    names = list(columns)
    matrix = np.eye(len(names))
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            value = cramers_v(pd.crosstab(columns[names[i]], columns[names[j]]).to_numpy())
            matrix[i, j] = matrix[j, i] = value
    return matrix.tolist()


def _public_sections(rows: pd.DataFrame) -> list[Section]:
    columns = _public_columns(rows)
    plots = []
    for name, values in columns.items():
        counts = values.value_counts(sort=False)
        labels = sorted(counts.index, key=_label_order)[:MAX_CODES]
        shares = [float(counts[label]) / max(len(values), 1) for label in labels]
        plots.append(figure(bar_chart(f"{name}: released marginal", labels, {"released": shares}, y_label="share")))
    names = list(columns)
    return [
        Section("Released marginals", [paragraph("Shares of the released records per category; numeric columns in "
                                                 f"{PUBLIC_BINS} equal bins over their released range."), *plots]),
        Section("Associations between released attributes", [
            figure(heatmap("Cramér's V, released records", _association(columns), names, names, 0.0, 1.0,
                           annotate=True)),
        ]),
    ]


def _label_order(label: str) -> tuple[int, float, str]:
    """Bins in numeric order, categories alphabetically."""
    if label.startswith("["):
        try:
            return (0, float(label[1:].split(",")[0]), label)
        except ValueError:
            pass
    return (1, 0.0, label)


def report_sections(manifest: dict[str, Any], released: Any, internal: dict[str, Any] | None) -> list[Section]:
    """The tabular figures: the counts; the released marginals and associations (public page), or
    the released against the original ones, TSTR and the marginal distances (operator's page)."""
    rows = released.to_pandas() if hasattr(released, "to_pandas") else pd.DataFrame(released)
    split = manifest.get("split") or {}
    sections = [Section("Released records", [key_value_table([
        ("released records", manifest.get("rows")), ("target records", manifest.get("target_records")),
        ("omega (attributes resampled)", manifest.get("omega")),
        ("split: seeds / structure / parameters", f"{split.get('seeds')} / {split.get('structure')} / "
                                                  f"{split.get('parameters')}"),
    ])])]
    summary = (internal or {}).get("report") if internal is not None else None
    if internal is None or not summary:
        return sections + (_public_sections(rows) if len(rows) else [])
    plots = [figure(bar_chart(f"{entry['name']}: marginal", entry["labels"],
                              {"released": entry["released"], "original": entry["original"]}, y_label="share"))
             for entry in summary["attributes"]]
    sections.append(Section("Marginals: released vs original", [
        paragraph("Shares per category or bin of the schema's public domain, for the released records and for the "
                  "original input records (operator-only)."), *plots], operator_only=True))
    association = summary["association"]
    names = association["names"]
    original, synthetic = np.asarray(association["original"]), np.asarray(association["released"])
    sections.append(Section("Associations (Cramér's V)", [
        figure(heatmap("original records", original.tolist(), names, names, 0.0, 1.0, annotate=True)),
        figure(heatmap("released records", synthetic.tolist(), names, names, 0.0, 1.0, annotate=True)),
        figure(heatmap("|original − released|", np.abs(original - synthetic).tolist(), names, names, 0.0, 1.0,
                       annotate=True)),
    ], operator_only=True))
    evaluation = internal.get("evaluation") or {}
    parts = []
    tstr = evaluation.get("train_on_synthetic_test_on_real")
    if tstr:
        parts.append(figure(bar_chart(
            "train on released / original, test on held-out real records", ["accuracy", "AUC"],
            {"trained on released": [tstr.get("synthetic_accuracy"), tstr.get("synthetic_auc")],
             "trained on original": [tstr.get("real_accuracy"), tstr.get("real_auc")]}, y_label="score", y_max=1.0),
            f"{int(tstr.get('test_records') or 0)} held-out records"))
    tvd = evaluation.get("marginal_tvd") or {}
    if tvd:
        parts.append(figure(bar_chart("mean total variation distance of marginals (held-out vs released)",
                                      list(tvd), {"TVD": [float(value) for value in tvd.values()]}, y_label="TVD")))
    evidence = evaluation.get("privacy_evidence") or {}
    if evidence.get("distance_to_closest_seed_released"):
        released_distances = evidence["distance_to_closest_seed_released"]
        holdout_distances = evidence.get("distance_to_closest_seed_holdout") or [None] * len(released_distances)
        parts.append(figure(bar_chart(
            "distance to the closest seed record (Hamming)", [str(i) for i in range(len(released_distances))],
            {"released": released_distances, "held-out": holdout_distances}, y_label="share"),
            "Released records should not sit closer to the seeds than held-out real records do."))
    if parts:
        sections.append(Section("Evaluation against held-out records", parts, operator_only=True))
    else:
        sections.append(Section("Evaluation against held-out records",
                                [paragraph("no evaluation.holdout was configured: no TSTR figures")], operator_only=True))
    return sections
