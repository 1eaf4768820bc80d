"""The crowd release's part of ``privlake report`` (``pipelines/platform/report.py``).

Two halves:

* at release time, :func:`learned_density_samples` records a small operator-only summary into the
  release's internal record: for the first few released objects (in object-id order, so the public
  page picks the same ones), the *learned* density ``f_i = Σ_s c_is K_h(·, x_is)`` — the weighted
  kernel density the synthesizer draws from, computed from the object's raw claims — on a grid of
  ``DENSITY_POINTS`` evenly spaced values, and the object's true value when a truth file is given. A curve per
  object, never the claims themselves.
* at report time, :func:`report_sections` draws the released density of those objects (a kernel
  density of their released claims with the release's public bandwidth) and, on the operator's page,
  the learned density beside it, the truth, and the truth error of the release's evaluation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipelines.platform.report import Section, bar_chart, figure, key_value_table, line_chart, paragraph

SAMPLE_OBJECTS = 3
DENSITY_POINTS = 120
HISTOGRAM_BINS = 24
_SPAN_BANDWIDTHS = 3.0


def _sample_ids(object_ids: Any) -> list[Any]:
    """The first ``SAMPLE_OBJECTS`` distinct released object ids, in order (public: ids are released)."""
    return sorted(pd.unique(pd.Series(object_ids)))[:SAMPLE_OBJECTS]


def _grid(values: np.ndarray, bandwidth: float, value_range: tuple[float, float] | None) -> np.ndarray:
    low, high = float(np.min(values)) - _SPAN_BANDWIDTHS * bandwidth, float(np.max(values)) + _SPAN_BANDWIDTHS * bandwidth
    if value_range is not None:
        low, high = max(low, value_range[0]), min(high, value_range[1])
    if not high > low:
        high = low + bandwidth
    return np.linspace(low, high, DENSITY_POINTS)


def _rounded(values: np.ndarray) -> list[float]:
    return [float(f"{value:.6g}") for value in values]


def learned_density_samples(claims: Any, released: pd.DataFrame, weights_of: Any, bandwidth: float,
                            value_range: tuple[float, float], truth: pd.Series | None) -> dict[str, Any]:
    """The operator-only summary the report draws (module docstring). ``claims`` are the raw claims
    as a pyarrow Table (``object_id``, ``source_id``, ``value``), ``released`` the released claims, ``weights_of(block)``
    the per-claim seed weights the synthesis used for a :class:`ClaimsBlock` of one object."""
    import pyarrow.compute as pc

    from transforms.crowd.claims_block import ClaimsBlock
    from transforms.crowd.density_metrics import kde_mixture

    samples = []
    for object_id in _sample_ids(released["object_id"]):
        own = claims.filter(pc.equal(claims["object_id"], object_id)).to_pandas()
        if own.empty:
            continue
        block = ClaimsBlock.from_frame(own[["object_id", "source_id", "value"]])
        weights = np.asarray(weights_of(block), dtype=np.float64)
        learned = kde_mixture(block.values, weights, bandwidth)
        out = released.loc[released["object_id"] == object_id, "value"].to_numpy(np.float64)
        grid = _grid(np.concatenate([block.values, out]), bandwidth, value_range)
        entry: dict[str, Any] = {"object_id": str(object_id), "claims": int(block.number_of_claims),
                                 "grid": {"low": float(grid[0]), "high": float(grid[-1]), "points": int(grid.size)},
                                 "learned_density": _rounded(learned.pdf(grid))}
        if truth is not None and object_id in truth.index:
            entry["truth"] = float(truth.loc[object_id])
        samples.append(entry)
    return {
        "note": "per sample object, the learned density (the weighted kernel density of its raw claims that the "
                "synthesis draws from) on a grid; operator-only, from raw data",
        "bandwidth": float(bandwidth),
        "sample_objects": samples,
    }


def _released_density(values: np.ndarray, grid: np.ndarray, bandwidth: float) -> np.ndarray:
    from transforms.crowd.density_metrics import released_density

    return released_density(values, bandwidth).pdf(grid) if values.size else np.zeros_like(grid)


def report_sections(manifest: dict[str, Any], released: Any, internal: dict[str, Any] | None) -> list[Section]:
    """The crowd figures: counts, the released values, released (and, for operators, learned)
    densities of sample objects, and the truth error when a truth was given."""
    rows = released.to_pandas() if hasattr(released, "to_pandas") else pd.DataFrame(released)
    bandwidth = float(manifest.get("bandwidth") or 1.0)
    value_range = tuple((manifest.get("config") or {}).get("privacy", {}).get("value_range") or ()) or None
    counts = Section("Released claims", [
        key_value_table([("objects released", manifest.get("objects_released")),
                         ("objects suppressed (fewer than k claims)", manifest.get("objects_suppressed")),
                         ("claims per released object", manifest.get("claims_per_object")),
                         ("released claims", manifest.get("rows")), ("kernel bandwidth (public)", bandwidth)]),
    ])
    if len(rows):
        values = rows["value"].to_numpy(np.float64)
        edges = np.histogram_bin_edges(values, bins=HISTOGRAM_BINS)
        histogram, _ = np.histogram(values, bins=edges)
        counts.parts.append(figure(
            bar_chart("released values, all objects", [f"{edges[i]:.4g}" for i in range(len(histogram))],
                      {"released claims": [float(count) for count in histogram]}, y_label="claims"),
            "Each bar is labelled with its lower edge."))
    sections = [counts]
    recorded = {entry["object_id"]: entry for entry in ((internal or {}).get("report") or {}).get("sample_objects", [])}
    plots = []
    for object_id in _sample_ids(rows["object_id"]) if len(rows) else []:
        out = rows.loc[rows["object_id"] == object_id, "value"].to_numpy(np.float64)
        entry = recorded.get(str(object_id)) if internal is not None else None
        if entry is not None:
            grid = np.linspace(entry["grid"]["low"], entry["grid"]["high"], entry["grid"]["points"])
            series = {"released": list(_released_density(out, grid, bandwidth)), "learned (raw claims)": entry["learned_density"]}
            marks = {"truth": entry["truth"]} if entry.get("truth") is not None else None
            caption = f"object {object_id}: {entry['claims']} input claims, {out.size} released"
        else:
            grid = _grid(out, bandwidth, value_range)
            series, marks = {"released": list(_released_density(out, grid, bandwidth))}, None
            caption = f"object {object_id}: {out.size} released claims"
        plots.append(figure(line_chart(f"object {object_id}: density", list(grid), series, x_label="value",
                                       y_label="density", marks=marks), caption))
    text = ("The released density is a kernel density of the object's released claims with the public bandwidth."
            + (" The learned density is the weighted kernel density of its raw claims that the synthesis drew from "
               "(operator-only)." if internal is not None else ""))
    sections.append(Section("Sample objects: released" + (" vs learned" if internal is not None else "") + " density",
                            [paragraph(text), *plots], operator_only=internal is not None))
    if internal is not None:
        evaluation = internal.get("evaluation") or {}
        if "truth_mae_released_median" in evaluation:
            released_mae = evaluation["truth_mae_released_median"]
            raw_mae = evaluation.get("truth_mae_raw_median_same_objects")
            sections.append(Section("Truth error", [
                figure(bar_chart("mean absolute error of the per-object median against the truth",
                                 ["released claims", "raw claims"], {"MAE": [released_mae, raw_mae]},
                                 y_label="MAE"),
                       f"over {evaluation.get('truth_objects')} objects with a known truth"),
            ], operator_only=True))
        else:
            sections.append(Section("Truth error", [paragraph("no truth file was given (evaluation.truth_path): "
                                                              "no truth error")], operator_only=True))
    return sections
