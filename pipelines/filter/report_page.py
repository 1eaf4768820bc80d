"""The filter release's part of ``privlake report`` (``pipelines/platform/report.py``).

Light on purpose (numpy and pandas, no torch): a filter release's page renders where the filter
extra is not installed. Everything it needs is recorded already: the public manifest (choices,
the Rényi curve, the guarantee) and the released rows (records per choice); on the operator's
page, the release's evaluation (``pipelines/filter/report.py``: classifiers retrained on the raw,
round-tripped, privatized and Gaussian-baseline versions of each choice's records), drawn as the
adversary's and the utility classifier's accuracy side by side per version.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pipelines.platform.report import Section, bar_chart, data_table, figure, line_chart, paragraph

VERSION_NAMES = {"raw": "raw", "vae_round_trip": "VAE round trip", "privatized": "privatized (released)",
                 "gaussian_baseline": "Gaussian baseline"}


def _rdp_curve(manifest: dict[str, Any]) -> str | None:
    curve = manifest.get("epsilon_rdp") or {}
    points = []
    for order, value in curve.items():
        try:
            alpha = float(order)
        except (TypeError, ValueError):
            continue
        if value is not None and math.isfinite(alpha) and math.isfinite(float(value)):
            points.append((alpha, float(value)))
    if len(points) < 2:
        return None
    points.sort()
    return figure(line_chart("Rényi DP of the private label: epsilon per order", [alpha for alpha, _ in points],
                             {"epsilon(alpha)": [value for _, value in points]}, x_label="order alpha",
                             y_label="epsilon"),
                  "The release's (epsilon, delta) is converted from this curve.")


def report_sections(manifest: dict[str, Any], released: Any, internal: dict[str, Any] | None) -> list[Section]:
    """The filter figures: records per choice and the Rényi curve (public); adversary and utility
    accuracy on raw against privatized records, per choice (operator's page)."""
    rows = released.to_pandas() if hasattr(released, "to_pandas") else pd.DataFrame(released)
    choices = manifest.get("choices") or []
    parts = [data_table(["choice", "private label", "utility label", "distortion budget", "sensitivity cap"],
                        [[choice.get("name"), choice.get("private"), choice.get("utility"), choice.get("budget"),
                          choice.get("max_sensitivity")] for choice in choices])]
    if "choice" in rows.columns and len(rows):
        counts = rows["choice"].astype(str).value_counts()
        names = [str(choice.get("name")) for choice in choices] or sorted(counts.index)
        parts.append(figure(bar_chart("released records per choice", names,
                                      {"records": [float(counts.get(name, 0)) for name in names]}, y_label="records")))
    curve = _rdp_curve(manifest)
    if curve:
        parts.append(curve)
    sections = [Section("Choices and released records", parts)]
    if internal is None:
        return sections
    evaluation = internal.get("evaluation") or {}
    plots = []
    for name, report in (evaluation.get("choices") or {}).items():
        if "skipped" in report:
            plots.append(paragraph(f"choice {name}: {report['skipped']}"))
            continue
        versions = [version for version in VERSION_NAMES if version in report]
        adversary = [report[version]["strongest"]["adversary"]["accuracy"] for version in versions]
        utility = [report[version]["strongest"]["utility"]["accuracy"] for version in versions]
        majority = report[versions[0]]["strongest"]["adversary"].get("majority_rate") if versions else None
        plots.append(figure(
            bar_chart(f"choice {name}: held-out accuracy", [VERSION_NAMES[version] for version in versions],
                      {"adversary (private label)": adversary, "utility label": utility}, y_label="accuracy",
                      y_max=1.0),
            f"{report.get('test_records')} held-out records; strongest of {', '.join(evaluation.get('classifiers', []))}; "
            f"guessing the private label's majority class scores {majority if majority is None else f'{majority:.3f}'}. "
            "The privatized adversary bar should drop toward that while the utility bar stays up."))
    if not plots:
        plots.append(paragraph("the evaluation is switched off (evaluation.enabled) or found nothing to score"))
    sections.append(Section("Adversary and utility accuracy: raw vs privatized", [
        paragraph("Classifiers retrained on each version of a sample of the choice's records and scored on held-out "
                  "records, from raw labels (operator-only)."), *plots], operator_only=True))
    return sections
