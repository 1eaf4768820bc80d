"""``privlake report``: one self-contained HTML page per published release, for people.

A reviewer would rather look at a release than read its manifest's floats, so the page puts the
guarantee in words and numbers on top, then the ledger before and after the release, the stage
timings in run order, and each kind's own figures (released against learned or original data,
estimates against the truth, classifier accuracies). Everything is inline: hand-written SVG and
CSS, no script, no fonts, no fetch (a Content-Security-Policy of ``default-src 'none'`` says so to
the browser), so the file opens anywhere, offline, and the core install needs no plotting library.

Two audiences, two pages (``docs/PRIVACY.md``, "Who may read which table"):

* the operator's page (the default) also shows what was computed from raw data — the
  operator-only record in ``privlake.internal``, the ledger and the budget — and says so at the top;
* ``--public`` shows only what consumers may read: the public manifest and the released rows.
  In that mode this module never opens ``privlake.internal``, the ledger or the budgets, and each
  kind's figure function is handed ``internal=None``, so nothing from them can reach the page.

The platform imports no kind: the command line looks the kind's figure function up in the registry
(``pipelines/kinds.py``, ``KindEntry.report``) and passes it in. The formatting helpers
(:func:`shown`, :func:`guarantee_words`) are the ones ``privlake show`` prints with.
"""

from __future__ import annotations

import html
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipelines.platform.errors import PrivlakeError

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
"""Series colours, in order (the first is the released data's wherever both appear)."""

OPERATOR_NOTICE = (
    "Operator-only: this page shows figures computed from raw data (the operator-only table privlake.internal), "
    "the privacy ledger and the dataset's budget. They are not covered by the release's guarantee: do not share "
    "this page with data consumers (render it with --public for them)."
)
PUBLIC_NOTICE = ("Public report: only the release's public manifest and its released rows; nothing from the "
                 "operator-only tables (privlake.internal, the ledger, the budgets).")


# --- formatting shared with `privlake show` ------------------------------------------------------

def shown(value: Any) -> str:
    """A manifest value for people: floats to 4 significant digits, mappings and lists compact."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{key}={shown(item)}" for key, item in value.items() if key != "steps")
    if isinstance(value, list):
        return "[" + ", ".join(shown(item) for item in value) + "]"
    return str(value)


def guarantee_words(manifest: dict[str, Any]) -> str:
    """The whole-release guarantee in one sentence."""
    epsilon, delta = manifest.get("epsilon"), manifest.get("delta")
    if epsilon is None or delta is None:
        return "no finite guarantee stated"
    scope = manifest.get("headline_scope", "whole release")
    unit = manifest.get("privacy_unit") or "one record"
    return (f"(epsilon={shown(float(epsilon))}, delta={shown(float(delta))})-differential privacy for "
            f"{unit}; scope: {scope}")


def _number(value: float, digits: int = 3) -> str:
    """A number on an axis or in a tick: ``digits`` significant digits, no scientific notation for
    everyday magnitudes."""
    if value is None or not math.isfinite(value):
        return "–"
    if float(value).is_integer() and abs(value) < 1e5:
        return str(int(value))
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}"


# --- page parts -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Section:
    """One titled part of the page: HTML fragments (figures, tables, paragraphs) built with this
    module's helpers. ``operator_only`` marks parts computed from raw data (shown with a badge)."""

    title: str
    parts: list[str] = field(default_factory=list)
    operator_only: bool = False


KindFigures = Callable[[dict[str, Any], Any, "dict[str, Any] | None"], list[Section]]
"""A kind's figures: ``(manifest, released rows as a pyarrow Table, operator record or None)``.
``None`` is the public page: the function must then use the manifest and the rows alone."""


def paragraph(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"


def key_value_table(rows: Sequence[tuple[str, Any]], css_class: str = "kv") -> str:
    """A two-column table of names and values (values through :func:`shown`)."""
    body = "".join(f"<tr><th>{html.escape(str(key))}</th><td>{html.escape(shown(value))}</td></tr>"
                   for key, value in rows)
    return f'<table class="{css_class}">{body}</table>'


def data_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A table with a header row; numbers through :func:`shown`."""
    head = "".join(f"<th>{html.escape(str(name))}</th>" for name in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(shown(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def figure(svg: str, caption: str = "") -> str:
    text = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure class="plot">{svg}{text}</figure>'


def _svg(width: float, height: float, title: str, body: list[str]) -> str:
    label = html.escape(title, quote=True)
    return (f'<svg class="chart" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'role="img" aria-label="{label}"><title>{label}</title>'
            f'<text x="{width / 2:.1f}" y="16" class="title" text-anchor="middle">{html.escape(title)}</text>'
            + "".join(body) + "</svg>")


def _text(x: float, y: float, text: str, anchor: str = "middle", css: str = "tick", rotate: float | None = None,
          length: int = 24) -> str:
    turn = f' transform="rotate({rotate:.0f} {x:.1f} {y:.1f})"' if rotate is not None else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" class="{css}" text-anchor="{anchor}"{turn}>'
            f"{html.escape(_cut(text, length))}</text>")


def _cut(text: str, length: int = 24) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


def _legend(names: Sequence[str], x: float, y: float) -> list[str]:
    parts, offset = [], 0.0
    for index, name in enumerate(names):
        colour = PALETTE[index % len(PALETTE)]
        parts.append(f'<rect x="{x + offset:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{colour}"/>')
        parts.append(_text(x + offset + 14, y, name, anchor="start", css="legend", length=32))
        offset += 24 + 6.5 * min(len(name), 32)
    return parts


def _nice_top(value: float) -> float:
    """A round axis maximum at or above ``value``."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value * (1 - 1e-12):
            return step * power
    return 10 * power


def _y_axis(left: float, top: float, height: float, width: float, low: float, high: float, label: str) -> list[str]:
    parts = [f'<line x1="{left:.1f}" y1="{top:.1f}" x2="{left:.1f}" y2="{top + height:.1f}" class="axis"/>',
             f'<line x1="{left:.1f}" y1="{top + height:.1f}" x2="{left + width:.1f}" y2="{top + height:.1f}" class="axis"/>']
    for tick in range(5):
        value = low + (high - low) * tick / 4
        y = top + height - height * tick / 4
        parts.append(f'<line x1="{left:.1f}" y1="{y:.1f}" x2="{left + width:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(_text(left - 4, y + 4, _number(value), anchor="end"))
    if label:
        parts.append(_text(14, top + height / 2, label, css="axis-label", rotate=-90))
    return parts


def bar_chart(title: str, categories: Sequence[str], series: dict[str, Sequence[float]], y_label: str = "",
              y_max: float | None = None) -> str:
    """Grouped vertical bars: one group per category, one bar per series (legend on top)."""
    names = list(series)
    count = max(len(categories), 1)
    group = max(18.0, min(70.0, 520.0 / count))
    left, top, plot_height = 56.0, 44.0, 200.0
    rotate = count > 8 or max((len(str(c)) for c in categories), default=0) * 6.5 > group
    bottom = 110.0 if rotate else 36.0
    width = left + group * count + 20
    width = max(width, 360.0)
    values = [v for values in series.values() for v in values if v is not None and math.isfinite(v)]
    high = y_max if y_max is not None else _nice_top(max(values, default=1.0))
    parts = _y_axis(left, top, plot_height, group * count, 0.0, high, y_label)
    bar = (group * 0.8) / max(len(names), 1)
    for index, category in enumerate(categories):
        x0 = left + group * index + group * 0.1
        for position, name in enumerate(names):
            value = series[name][index]
            if value is None or not math.isfinite(value):
                continue
            bar_height = plot_height * min(max(value, 0.0), high) / high
            colour = PALETTE[position % len(PALETTE)]
            parts.append(f'<rect x="{x0 + bar * position:.1f}" y="{top + plot_height - bar_height:.1f}" '
                         f'width="{max(bar - 1, 1):.1f}" height="{bar_height:.1f}" fill="{colour}" class="bar">'
                         f"<title>{html.escape(f'{category} — {name}: {_number(value, 4)}')}</title></rect>")
        centre = left + group * index + group / 2
        y = top + plot_height + 14
        parts.append(_text(centre, y, str(category), anchor="end", rotate=-45, length=18) if rotate
                     else _text(centre, y, str(category)))
    parts += _legend(names, left, 34)
    return _svg(width, top + plot_height + bottom, title, parts)


def line_chart(title: str, x: Sequence[float], series: dict[str, Sequence[float]], x_label: str = "",
               y_label: str = "", marks: dict[str, float] | None = None) -> str:
    """Lines over a shared x axis (a density, a distribution on a line); ``marks`` draws labelled
    vertical lines (a known truth)."""
    names = list(series)
    left, top, plot_width, plot_height = 56.0, 44.0, 420.0, 180.0
    xs = [float(v) for v in x]
    low_x, high_x = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if high_x <= low_x:
        high_x = low_x + 1.0
    values = [v for values in series.values() for v in values if v is not None and math.isfinite(v)]
    high = _nice_top(max(values, default=1.0))
    parts = _y_axis(left, top, plot_height, plot_width, 0.0, high, y_label)

    def to_x(value: float) -> float:
        return left + plot_width * (value - low_x) / (high_x - low_x)

    for tick in range(5):
        value = low_x + (high_x - low_x) * tick / 4
        parts.append(_text(to_x(value), top + plot_height + 14, _number(value)))
    if x_label:
        parts.append(_text(left + plot_width / 2, top + plot_height + 32, x_label, css="axis-label"))
    for position, name in enumerate(names):
        points = " ".join(f"{to_x(xv):.1f},{top + plot_height - plot_height * min(max(yv, 0.0), high) / high:.1f}"
                          for xv, yv in zip(xs, series[name], strict=True) if yv is not None and math.isfinite(yv))
        colour = PALETTE[position % len(PALETTE)]
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2" class="line"/>')
    for name, value in (marks or {}).items():
        if value is None or not math.isfinite(value) or not low_x <= value <= high_x:
            continue
        parts.append(f'<line x1="{to_x(value):.1f}" y1="{top:.1f}" x2="{to_x(value):.1f}" y2="{top + plot_height:.1f}" '
                     'class="mark"/>')
        parts.append(_text(to_x(value) + 3, top + 10, name, anchor="start", css="legend"))
    parts += _legend(names, left, 34)
    return _svg(left + plot_width + 20, top + plot_height + 42, title, parts)


def _colour_scale(fraction: float) -> str:
    """White to deep blue (sequential, readable in grey)."""
    fraction = min(max(fraction, 0.0), 1.0)
    red = round(247 - (247 - 8) * fraction)
    green = round(251 - (251 - 48) * fraction)
    blue = round(255 - (255 - 107) * fraction)
    return f"#{red:02x}{green:02x}{blue:02x}"


def heatmap(title: str, matrix: Sequence[Sequence[float]], row_labels: Sequence[str] | None = None,
            column_labels: Sequence[str] | None = None, low: float = 0.0, high: float | None = None,
            cell: float | None = None, annotate: bool = False) -> str:
    """A matrix as coloured cells (an association matrix, a distribution over a grid), with a
    colour bar; labels are drawn when given."""
    rows = len(matrix)
    columns = len(matrix[0]) if rows else 0
    values = [v for row in matrix for v in row if v is not None and math.isfinite(v)]
    top_value = high if high is not None else max(values, default=1.0)
    if not top_value > low:
        top_value = low + 1.0
    size = cell or max(4.0, min(36.0, 360.0 / max(rows, columns, 1)))
    left = 8.0 + (7.0 * min(max((len(label) for label in row_labels), default=0), 16) if row_labels else 0.0)
    top = 28.0
    bottom = (7.0 * min(max((len(label) for label in column_labels), default=0), 16) + 12) if column_labels else 8.0
    parts = []
    for r, row in enumerate(matrix):
        for c, value in enumerate(row):
            if value is None or not math.isfinite(value):
                continue
            x, y = left + c * size, top + r * size
            colour = _colour_scale((value - low) / (top_value - low))
            label = (f"{row_labels[r]} × {column_labels[c]}" if row_labels and column_labels else f"row {r}, column {c}")
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{size:.2f}" height="{size:.2f}" fill="{colour}" '
                         f'class="cell"><title>{html.escape(f"{label}: {_number(value, 4)}")}</title></rect>')
            if annotate and size >= 26:
                dark = (value - low) / (top_value - low) > 0.55
                parts.append(f'<text x="{x + size / 2:.1f}" y="{y + size / 2 + 3:.1f}" text-anchor="middle" '
                             f'class="cell-text{" light" if dark else ""}">{value:.2f}</text>')
    for r, label in enumerate(row_labels or ()):
        parts.append(_text(left - 4, top + r * size + size / 2 + 4, label, anchor="end"))
    for c, label in enumerate(column_labels or ()):
        x, y = left + c * size + size / 2 + 3, top + rows * size + 6
        parts.append(_text(x, y, label, anchor="end", rotate=-60))
    bar_x = left + columns * size + 16
    for step in range(20):
        fraction = 1 - step / 19
        parts.append(f'<rect x="{bar_x:.1f}" y="{top + step * 8:.1f}" width="12" height="8" '
                     f'fill="{_colour_scale(fraction)}"/>')
    parts.append(_text(bar_x + 16, top + 8, _number(top_value), anchor="start"))
    parts.append(_text(bar_x + 16, top + 160, _number(low), anchor="start"))
    width = bar_x + 70
    height = max(top + rows * size + bottom, top + 170)
    return _svg(width, height, title, parts)


def budget_bar(title: str, before: float, charge: float, budget: float) -> str:
    """One horizontal bar of a dataset's budget: spent before the release, the release's own
    charge, and what remains after it."""
    left, top, plot_width = 10.0, 44.0, 520.0
    total = max(budget, before + charge, 1e-12)
    parts = []
    x = left
    legend = []
    for index, (name, value) in enumerate((("spent before", before), ("this release", charge),
                                           ("remaining", max(budget - before - charge, 0.0)))):
        width = plot_width * max(value, 0.0) / total
        colour = ("#9e9e9e", PALETTE[3], "#c8e6c9")[index]
        parts.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="{width:.2f}" height="28" fill="{colour}" class="bar">'
                     f"<title>{html.escape(f'{name}: epsilon {_number(value, 4)}')}</title></rect>")
        legend.append((name, colour, value))
        x += width
    parts.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{plot_width:.1f}" height="28" fill="none" class="frame"/>')
    offset = left
    for name, colour, value in legend:
        parts.append(f'<rect x="{offset:.1f}" y="{top + 40:.1f}" width="10" height="10" fill="{colour}"/>')
        text = f"{name}: {_number(value, 4)}"
        parts.append(_text(offset + 14, top + 49, text, anchor="start", css="legend"))
        offset += 30 + 7 * len(text)
    return _svg(left + plot_width + 20, top + 64, title, parts)


# --- what the page reads from the lake -----------------------------------------------------------

def ledger_summary(lake: Any, dataset: str, release_id: str) -> dict[str, Any] | None:
    """The dataset's ledger around this release (operator-only: the ledger and the budget): what
    the releases still charged before it composed to, its own charge, both together, and the
    budget left after it — plus what every charged release of the dataset composes to now. None
    when the ledger has no event for this release."""
    from pipelines.platform.ledger import ACTIVE, PrivacyLedger, row_steps
    from pipelines.platform.policy import LakePolicy
    from transforms.core.accounting import compose

    entries = PrivacyLedger(lake).entries(dataset)
    mine = entries[entries["release_id"] == release_id]
    if mine.empty:
        return None
    first = int(mine["sequence"].min())
    latest = entries.drop_duplicates(["dataset", "release_id"], keep="last")
    charged = latest[latest["status"].isin(ACTIVE)]
    firsts = entries.groupby("release_id")["sequence"].min()
    before_rows = [row for _, row in charged.iterrows()
                   if row["release_id"] != release_id and int(firsts[row["release_id"]]) < first]
    own = mine.iloc[-1]
    budget = LakePolicy(lake).budget(dataset)
    delta = budget.delta if budget is not None else float(own["total_delta"])
    before = compose([step for row in before_rows for step in row_steps(row)], delta)
    after = compose([*(step for row in before_rows for step in row_steps(row)), *row_steps(own)], delta)
    now = compose([step for _, row in charged.iterrows() for step in row_steps(row)], delta)
    total = budget.epsilon if budget is not None else float(own["total_epsilon"])
    return {
        "dataset": dataset, "status": str(own["status"]), "unit": own.get("unit") or "release",
        "budget_epsilon": total, "budget_delta": delta,
        "releases_before": len(before_rows),
        "spent_before": before.epsilon, "charge_epsilon": float(own["epsilon"]), "charge_delta": float(own["delta"]),
        "spent_after": after.epsilon, "remaining_after": max(total - after.epsilon, 0.0),
        "spent_now": now.epsilon, "remaining_now": max(total - now.epsilon, 0.0), "composition": after.method,
    }


def _ledger_section(summary: dict[str, Any] | None) -> Section:
    if summary is None:
        return Section("The ledger before and after", [paragraph("The ledger has no event for this release.")], True)
    parts = [
        figure(budget_bar(f"dataset {summary['dataset']}: budget epsilon {_number(summary['budget_epsilon'], 4)}",
                          summary["spent_before"], max(summary["spent_after"] - summary["spent_before"], 0.0),
                          summary["budget_epsilon"]),
               "The charge is drawn as what it adds to the composed spending (composition can add less than the "
               "release's own epsilon)."),
        key_value_table([
            ("spent before this release", f"epsilon {_number(summary['spent_before'], 4)} "
                                          f"({summary['releases_before']} earlier charged releases)"),
            ("this release's charge", f"epsilon {_number(summary['charge_epsilon'], 4)}, "
                                      f"delta {_number(summary['charge_delta'], 3)} (per {summary['unit']}, "
                                      f"{summary['status']})"),
            ("spent after", f"epsilon {_number(summary['spent_after'], 4)} at delta "
                            f"{_number(summary['budget_delta'], 3)} ({summary['composition']})"),
            ("budget remaining after", f"epsilon {_number(summary['remaining_after'], 4)} of "
                                       f"{_number(summary['budget_epsilon'], 4)}"),
            ("spent now, all releases", f"epsilon {_number(summary['spent_now'], 4)}; remaining "
                                        f"{_number(summary['remaining_now'], 4)}"),
        ]),
    ]
    return Section("The ledger before and after", parts, operator_only=True)


def _timings_section(record: dict[str, Any]) -> Section | None:
    timings = record.get("timings") or {}
    if not timings:
        return None
    names = list(timings)  # the record keeps the stages in run order
    seconds = [float(timings[name]) for name in names]
    chart = horizontal_bars("stage wall time (seconds), in run order", names, seconds)
    parts = [figure(chart), paragraph(f"started at {record.get('started_at', 'unknown')}; "
                                      f"total {_number(sum(seconds), 4)} s over {len(names)} stages")]
    return Section("Timings, in run order", parts, operator_only=True)


def horizontal_bars(title: str, labels: Sequence[str], values: Sequence[float]) -> str:
    """One horizontal bar per label, top to bottom in the given order, its value at its end."""
    left = 10.0 + 7.0 * min(max((len(label) for label in labels), default=0), 24)
    top, row, plot_width = 30.0, 20.0, 360.0
    high = max((v for v in values if math.isfinite(v)), default=1.0) or 1.0
    parts = []
    for index, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + index * row
        width = plot_width * max(value, 0.0) / high
        parts.append(_text(left - 6, y + 14, label, anchor="end"))
        parts.append(f'<rect x="{left:.1f}" y="{y + 3:.1f}" width="{max(width, 0.5):.1f}" height="{row - 6:.1f}" '
                     f'fill="{PALETTE[0]}" class="bar"><title>{html.escape(f"{label}: {value:.4g}")}</title></rect>')
        parts.append(_text(left + width + 4, y + 14, _number(value, 3), anchor="start"))
    return _svg(left + plot_width + 70, top + row * len(labels) + 10, title, parts)


def _operator_summary(record: dict[str, Any]) -> Section:
    """The operator record's plain figures (counts, rates), as a table."""
    rows = [(key, value) for key, value in record.items()
            if key not in ("timings", "started_at", "note") and (value is None or isinstance(value, int | float | str))]
    parts = [paragraph(str(record.get("note") or "computed from raw data: not covered by the guarantee"))]
    if rows:
        parts.append(key_value_table(rows))
    return Section("Operator figures", parts, operator_only=True)


@dataclass(frozen=True)
class ReportInputs:
    """What a page is made of: the public manifest, the released rows, the ``show`` rows, and —
    on an operator's page only — the operator record and the ledger summary."""

    manifest: dict[str, Any]
    released: Any
    show_rows: list[tuple[str, Any]]
    internal: dict[str, Any] | None = None
    ledger: dict[str, Any] | None = None
    public: bool = False


def read_inputs(lake: Any, manifest: dict[str, Any], show_rows: list[tuple[str, Any]], public: bool) -> ReportInputs:
    """Read what the page needs. With ``public`` only the release's own table (rows and manifest);
    otherwise also its latest operator record and the ledger around it."""
    released = lake.read_release(manifest["release_id"])
    if public:
        return ReportInputs(manifest, released, show_rows, public=True)
    from pipelines.platform.internal import OperatorRecords

    records = OperatorRecords(lake).read(manifest["release_id"])
    published = [record for record in records if record.get("status") == "published"] or records
    internal = published[-1]["record"] if published else {}
    ledger = ledger_summary(lake, str(manifest.get("dataset")), manifest["release_id"])
    return ReportInputs(manifest, released, show_rows, internal=internal, ledger=ledger)


def build_page(inputs: ReportInputs, kind_figures: KindFigures | None) -> str:
    """The whole HTML page."""
    manifest = inputs.manifest
    release_id = str(manifest.get("release_id"))
    sections = [Section("The guarantee", [
        f'<p class="guarantee">{html.escape(guarantee_words(manifest))}</p>',
        key_value_table(inputs.show_rows),
    ])]
    if not inputs.public:
        sections.append(_ledger_section(inputs.ledger))
        timings = _timings_section(inputs.internal or {})
        if timings is not None:
            sections.append(timings)
        sections.append(_operator_summary(inputs.internal or {}))
    if kind_figures is None:
        sections.append(Section(f"The {manifest.get('kind')} release",
                                [paragraph("this kind's figures are not available in this installation")]))
    else:
        sections += kind_figures(manifest, inputs.released, None if inputs.public else (inputs.internal or {}))
    return _page(release_id, manifest, sections, inputs.public)


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;color:#222;background:#fafafa}
header{padding:16px 28px;background:#263238;color:#fff}
header h1{margin:0;font-size:22px;font-weight:600}
header p{margin:4px 0 0;color:#cfd8dc;font-size:13px}
.notice{margin:0;padding:12px 28px;font-weight:600;font-size:14px}
.notice.operator{background:#fff3cd;color:#6d4c00;border-bottom:2px solid #e0a800}
.notice.public{background:#e3f2fd;color:#0d47a1;border-bottom:2px solid #64b5f6}
main{padding:8px 28px 40px;max-width:1200px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;margin:18px 0;padding:12px 18px}
section h2{font-size:17px;margin:4px 0 10px}
section p{font-size:14px;margin:6px 0}
.badge{font-size:11px;font-weight:600;background:#fff3cd;color:#6d4c00;border:1px solid #e0a800;border-radius:3px;
 padding:1px 6px;margin-left:8px;vertical-align:middle}
.guarantee{font-size:16px;font-weight:600}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
table.kv th{text-align:left;font-weight:500;color:#555;padding:2px 14px 2px 0;vertical-align:top}
table.kv td{padding:2px 0;word-break:break-word}
table.data th,table.data td{border:1px solid #ddd;padding:3px 8px;text-align:right}
table.data th{background:#f5f5f5}
figure.plot{display:inline-block;margin:8px 16px 8px 0;vertical-align:top}
figure.plot figcaption{font-size:12px;color:#555;max-width:520px}
svg.chart{background:#fff;font-size:11px}
svg .title{font-size:13px;font-weight:600;fill:#222}
svg .tick{fill:#444;font-size:10px}
svg .legend{fill:#333;font-size:11px}
svg .axis-label{fill:#444;font-size:11px}
svg .axis{stroke:#444;stroke-width:1}
svg .grid{stroke:#eee;stroke-width:1}
svg .mark{stroke:#d62728;stroke-width:1.5;stroke-dasharray:4 3}
svg .frame{stroke:#666;stroke-width:1}
svg .cell-text{font-size:9px;fill:#222}
svg .cell-text.light{fill:#fff}
"""


def _page(release_id: str, manifest: dict[str, Any], sections: list[Section], public: bool) -> str:
    notice = (f'<p class="notice public" id="audience" data-audience="public">{html.escape(PUBLIC_NOTICE)}</p>' if public
              else f'<p class="notice operator" id="audience" data-audience="operator">{html.escape(OPERATOR_NOTICE)}</p>')
    body = []
    for index, section in enumerate(sections):
        badge = '<span class="badge">operator-only: from raw data</span>' if section.operator_only else ""
        body.append(f'<section id="section-{index}" data-operator-only="{str(section.operator_only).lower()}">'
                    f"<h2>{html.escape(section.title)}{badge}</h2>{''.join(section.parts)}</section>")
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"privlake release {release_id}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>{html.escape(str(manifest.get('kind')))} release of dataset "
        f"{html.escape(str(manifest.get('dataset')))}; {'public' if public else 'operator'} report made {made}</p>"
        f"</header>{notice}<main>{''.join(body)}</main></body></html>\n"
    )


def write_atomically(out: Path, text: str) -> None:
    """Write ``text`` to ``out`` through a temporary file in the same folder and a rename, so a
    failure never leaves a partial report (the folder must exist: else one line, exit 2)."""
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise PrivlakeError(f"{out}: the folder {folder} does not exist")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(temporary, 0o666 & ~mask)  # mkstemp's 0600 would differ from any other file the user writes
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
