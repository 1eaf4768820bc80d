"""``privlake report``: one self-contained HTML page per release, checked in a real headless
browser (Debian's Chromium, ``--no-sandbox --headless``: ``--dump-dom`` for what rendered,
``--screenshot`` for a page that is not blank, the console for errors), for a small release of
every kind made through the command line.

The public page (``--public``) must hold nothing read from ``privlake.internal``: each release's
operator record gets a distinctive marker that the operator's page shows and the public page must
not, and a public page still renders when reading the internal table, the ledger or the budgets
would fail. The command reads the lake only, fails in one line with ``show``'s exit code for an
unknown release and exit 2 for a missing output folder, and never leaves a partial file.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipelines.cli import main
from pipelines.platform.internal import OperatorRecords
from pipelines.platform.lake import Lake
from tests.e2e.conftest import TEST_SECRET_HEX, small_claims, write_config
from tests.e2e.test_read_only_commands import snapshot
from tests.lake_setup import prepare_for

CHROMIUM = "/usr/bin/chromium"
MARKER = "operator-marker-7f3a9c41"
KINDS = ("crowd", "tabular", "ldp", "filter")
# what each kind's page must show (section titles), on every page and on the operator's page only
PUBLIC_SECTIONS = {
    "crowd": ["Released claims", "Sample objects: released density"],
    "tabular": ["Released marginals", "Associations between released attributes"],
    "ldp": ["The estimated distribution", "Mechanisms the users chose"],
    "filter": ["Choices and released records"],
}
OPERATOR_SECTIONS = {
    "crowd": ["Sample objects: released vs learned density", "Truth error"],
    "tabular": ["Marginals: released vs original", "Associations (Cramér's V)", "Evaluation against held-out records"],
    "ldp": ["The estimated distribution beside the truth", "Error against the truth"],
    "filter": ["Adversary and utility accuracy: raw vs privatized"],
}
COMMON_OPERATOR_SECTIONS = ["The ledger before and after", "Timings, in run order", "Operator figures"]


# --- the releases ----------------------------------------------------------------------------------

def _crowd(directory: Path) -> tuple[Path, str]:
    claims = small_claims(objects=30)
    claims.to_csv(directory / "claims.csv", index=False)
    truth = claims.groupby("question")["answer"].median().rename("truth").reset_index()
    truth.to_csv(directory / "truth.csv", index=False)
    config = write_config(directory, directory / "claims.csv", directory / "lake",
                          evaluation={"truth_path": str(directory / "truth.csv"),
                                      "truth_columns": {"object_id": "question", "truth": "truth"}})
    return config, "crowd-1"


def _tabular(directory: Path) -> tuple[Path, str]:
    from tests.e2e.test_tabular_release import census_like, tabular_case

    census_like(800, seed=21).to_csv(directory / "holdout.csv", index=False)
    config = tabular_case(directory, census_like(1500), synthesis__records=600,
                          evaluation={"holdout": {"path": str(directory / "holdout.csv")}, "target_column": "label",
                                      "positive_values": ["high"]})
    return config, "tabular-1"


def _ldp(directory: Path) -> tuple[Path, str]:
    rng = np.random.default_rng(4)
    rows = np.clip(rng.normal(2.5, 1.2, 3000).round(), 0, 5).astype(int)
    columns = np.clip(rng.normal(5, 2.0, 3000).round(), 0, 7).astype(int)
    pd.DataFrame({"row": rows, "col": columns}).to_csv(directory / "cells.csv", index=False)
    config = {
        "kind": "ldp", "dataset": "cells", "lake": str(directory / "lake"),
        "input": {"path": str(directory / "reports.parquet"), "format": "parquet",
                  "catalog": str(directory / "catalog.json")},
        "secrets": {"layout": "grid", "rows": 6, "columns": 8},
        "estimator": {"method": "gibu"},
        "evaluation": {"truth_path": str(directory / "truth.parquet")},
        "simulation": {"source": {"path": str(directory / "cells.csv"), "columns": ["row", "col"]},
                       "mechanisms": [{"type": "planar_geometric", "epsilon": [0.5, 2.0], "count": 3},
                                      {"type": "krr", "epsilon": [1.0, 3.0], "count": 2}],
                       "truth_out": str(directory / "truth.parquet")},
    }
    path = directory / "ldp.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_for(config)
    assert main(["simulate-ldp", str(path)]) == 0
    return path, "ldp-1"


def _filter(directory: Path) -> tuple[Path, str]:
    from tests.e2e.test_filter_release import filter_case

    config = filter_case(directory / "case", two_choices=True)
    assert main(["train-encoder", str(config)]) == 0
    return config, "filter-1"


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One small published release per kind, each in its own lake (made through the CLI), with a
    marker added to its operator record; kind → lake."""
    lakes = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRIVLAKE_TEST_SECRET", TEST_SECRET_HEX)
        for kind, make in (("crowd", _crowd), ("tabular", _tabular), ("ldp", _ldp), ("filter", _filter)):
            directory = tmp_path_factory.mktemp(f"report-{kind}")
            config, release_id = make(directory)
            assert main(["run", str(config), "--release-id", release_id]) == 0, kind
            lake = Path(yaml.safe_load(config.read_text())["lake"])
            with Lake(lake) as opened:
                records = OperatorRecords(opened)
                latest = records.read(release_id)[-1]
                records.record(release_id, latest["dataset"], kind, "published", {**latest["record"], "marker": MARKER})
            lakes[kind] = lake
    return lakes


@pytest.fixture(scope="module")
def pages(releases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(kind, "operator" | "public") → the report written by ``privlake report``."""
    folder = tmp_path_factory.mktemp("pages")
    written = {}
    for kind, lake in releases.items():
        for audience in ("operator", "public"):
            out = folder / f"{kind}-{audience}.html"
            extra = ["--public"] if audience == "public" else []
            assert main(["report", f"{kind}-1", "--lake", str(lake), "--out", str(out), *extra]) == 0
            written[kind, audience] = out
    return written


# --- the browser -----------------------------------------------------------------------------------

def chromium(page: Path, *action: str, window: str = "1280,1800") -> subprocess.CompletedProcess[bytes]:
    """Debian's Chromium on ``page``, headless, as root (``--no-sandbox``), with a fresh profile and a
    timeout; its console goes to standard error (``--enable-logging=stderr``)."""
    with tempfile.TemporaryDirectory(prefix="privlake-chromium-") as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
             f"--window-size={window}", "--force-device-scale-factor=0.5", *action, page.resolve().as_uri()],
            capture_output=True, timeout=90, check=False, cwd=profile,
        )


def console_problems(stderr: bytes) -> list[str]:
    """The page's console messages (the page has no script: any message is a problem — a script
    error, a blocked fetch, a Content-Security-Policy violation)."""
    return [line for line in stderr.decode(errors="replace").splitlines()
            if ":CONSOLE" in line or "Uncaught" in line]


def png_pixels(data: bytes) -> np.ndarray:
    """The pixels of an 8-bit RGB or RGBA PNG (what Chromium writes) as an (h, w, channels) array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, chunks, header = 8, [], None
    while position < len(data):
        length, name = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if name == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif name == b"IDAT":
            chunks.append(body)
        position += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), dtype=np.uint8).reshape(height, 1 + width * channels)
    out = np.zeros((height, width * channels), dtype=np.int32)
    previous = np.zeros(width * channels, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 0:
            current = line
        elif kind == 1:  # Sub: a running sum along the row, per channel
            current = (np.cumsum(line.reshape(width, channels), axis=0) % 256).reshape(-1)
        elif kind == 2:
            current = (line + previous) % 256
        else:  # Average and Paeth need the decoded pixel to the left: one pixel at a time
            current = np.zeros_like(line)
            for x in range(line.size):
                left = current[x - channels] if x >= channels else 0
                up, corner = previous[x], previous[x - channels] if x >= channels else 0
                if kind == 3:
                    predictor = (left + up) // 2
                else:
                    estimate = left + up - corner
                    distances = (abs(estimate - left), abs(estimate - up), abs(estimate - corner))
                    predictor = (left, up, corner)[distances.index(min(distances))]
                current[x] = (line[x] + predictor) % 256
        out[y] = previous = current
    return out.reshape(height, width, channels)


def test_the_png_reader_tells_a_blank_screenshot_from_a_drawn_one(tmp_path: Path) -> None:
    """The non-blank check can fail: a page with nothing on it renders as one colour."""
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body style='background:#fff'></body></html>")
    shot = tmp_path / "blank.png"
    chromium(blank, f"--screenshot={shot}", window="400,300")
    pixels = png_pixels(shot.read_bytes())
    assert len(np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0)) == 1


def test_the_console_check_catches_a_script_error_and_a_blocked_fetch(tmp_path: Path) -> None:
    """The console check can fail: a script error, and (under the report's Content-Security-Policy)
    an outside image."""
    from pipelines.platform.report import ReportInputs, build_page

    page = build_page(ReportInputs({"release_id": "r", "kind": "crowd"}, None, [], public=True), None)
    bad = tmp_path / "bad.html"
    bad.write_text(page.replace("<main>", '<main><img src="http://127.0.0.1:9/x.png"><script>nothing()</script>'))
    assert len(console_problems(chromium(bad, "--dump-dom").stderr)) >= 2
    script = tmp_path / "script.html"
    script.write_text("<!DOCTYPE html><html><body><script>undefinedFunction()</script></body></html>")
    assert any("Uncaught" in line for line in console_problems(chromium(script, "--dump-dom").stderr))


@pytest.mark.parametrize("audience", ["operator", "public"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_page_renders_in_chromium_with_its_sections_and_no_console_error(
        pages: dict, kind: str, audience: str, tmp_path: Path) -> None:
    page = pages[kind, audience]
    dumped = chromium(page, "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    assert console_problems(dumped.stderr) == []
    dom = dumped.stdout.decode()
    assert f'data-audience="{audience}"' in dom
    titles = re.findall(r"<h2>(.*?)(?:<span|</h2>)", dom)
    expected = ["The guarantee", *PUBLIC_SECTIONS[kind]] if audience == "public" else \
        ["The guarantee", *COMMON_OPERATOR_SECTIONS, *OPERATOR_SECTIONS[kind]]
    for title in expected:
        assert title in titles, (title, titles)
    if audience == "public":
        assert not set(titles) & {*COMMON_OPERATOR_SECTIONS, *OPERATOR_SECTIONS[kind]}
        assert 'data-operator-only="true"' not in dom
    assert dom.count("<svg") >= 2 and ("<rect" in dom or "<polyline" in dom)
    assert "differential privacy for" in dom  # the guarantee in words
    if audience == "operator":  # only the operator's page is screenshot: the public one is the same machinery
        shot = tmp_path / "page.png"
        taken = chromium(page, f"--screenshot={shot}")
        assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
        pixels = png_pixels(shot.read_bytes())
        colours = np.unique(pixels.reshape(-1, pixels.shape[2])[::7], axis=0)
        assert len(colours) > 20, "the screenshot is (nearly) one colour"


@pytest.mark.parametrize("kind", KINDS)
def test_the_page_is_self_contained(pages: dict, kind: str) -> None:
    """No script, no fetch: every src/href is a data: URI, and the page forbids any other load."""
    for audience in ("operator", "public"):
        text = pages[kind, audience].read_text()
        assert "<script" not in text.lower()
        assert "default-src 'none'" in text
        for reference in re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", text):
            assert reference.startswith("data:"), reference
        assert "url(" not in text and "@import" not in text


@pytest.mark.parametrize("kind", KINDS)
def test_the_public_page_holds_nothing_from_the_operator_record(pages: dict, kind: str) -> None:
    operator, public = pages[kind, "operator"].read_text(), pages[kind, "public"].read_text()
    assert MARKER in operator
    assert MARKER not in public
    assert "Operator-only: this page shows figures computed from raw data" in operator
    assert "Operator-only" not in public and "Public report" in public
    assert "1.000e+09" in operator and "1.000e+09" not in public  # the dataset's budget (operator policy)


def test_the_public_page_never_reads_the_operator_tables(releases: dict, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Structural: with the internal table, the ledger and the budgets unreadable, --public still
    renders (it never opens them); the operator's page then fails in one line."""
    from pipelines.platform import internal, ledger, policy

    def refuse(*_args, **_kwargs):
        raise AssertionError("an operator-only table was read")

    monkeypatch.setattr(internal.OperatorRecords, "read", refuse)
    monkeypatch.setattr(ledger.PrivacyLedger, "entries", refuse)
    monkeypatch.setattr(policy.LakePolicy, "budget", refuse)
    for kind, lake in releases.items():
        assert main(["report", f"{kind}-1", "--lake", str(lake), "--out", str(tmp_path / f"{kind}.html"),
                     "--public"]) == 0
    assert main(["report", "crowd-1", "--lake", str(releases["crowd"]), "--out", str(tmp_path / "op.html")]) == 1
    assert not (tmp_path / "op.html").exists()


def test_the_operator_page_shows_the_ledger_and_timings_in_run_order(releases: dict, pages: dict) -> None:
    text = pages["crowd", "operator"].read_text()
    for words in ("spent before this release", "this release&#x27;s charge", "spent after", "budget remaining after"):
        assert words in text
    with Lake(releases["crowd"]) as opened:
        timings = list(OperatorRecords(opened).read("crowd-1")[0]["record"]["timings"])
    drawn = re.search(r"stage wall time.*?</svg>", text, re.S).group(0)
    positions = [drawn.index(f">{stage}<") for stage in timings]
    assert positions == sorted(positions) and len(timings) > 3


def test_report_reads_the_lake_only(releases: dict, tmp_path: Path) -> None:
    lake = releases["tabular"]
    before = snapshot(lake)
    for extra in ([], ["--public"]):
        assert main(["report", "tabular-1", "--lake", str(lake), "--out", str(tmp_path / "r.html"), *extra]) == 0
    assert snapshot(lake) == before


def test_bad_arguments_are_one_line_with_the_reading_commands_codes(releases: dict, tmp_path: Path, capsys) -> None:
    lake = str(releases["crowd"])
    capsys.readouterr()
    show_code = main(["show", "no-such-release", "--lake", lake])
    show_error = capsys.readouterr().err
    assert show_code not in (0, 1)
    assert main(["report", "no-such-release", "--lake", lake, "--out", str(tmp_path / "r.html")]) == show_code
    error = capsys.readouterr().err
    assert error.strip().count("\n") == 0 and "no-such-release" in error and error == show_error
    missing = tmp_path / "no-folder" / "r.html"
    assert main(["report", "crowd-1", "--lake", lake, "--out", str(missing)]) == 2
    error = capsys.readouterr().err
    assert error.strip().count("\n") == 0 and "does not exist" in error
    assert not missing.parent.exists() and not (tmp_path / "r.html").exists()


def test_a_failed_report_leaves_no_partial_file(releases: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page is written to a temporary file and renamed: a failure while writing leaves the
    previous report as it was and no temporary file behind."""
    from pipelines.platform import report

    out = tmp_path / "r.html"
    out.write_text("the previous report")

    def full_disk(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    real_replace = report.os.replace
    monkeypatch.setattr(report.os, "replace", full_disk)
    assert main(["report", "crowd-1", "--lake", str(releases["crowd"]), "--out", str(out)]) == 75
    assert out.read_text() == "the previous report"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r.html"]
    monkeypatch.setattr(report.os, "replace", real_replace)
    assert main(["report", "crowd-1", "--lake", str(releases["crowd"]), "--out", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r.html"]


def test_chromium_is_there() -> None:
    """The browser tests need Debian's Chromium (``make system-deps`` installs it)."""
    assert shutil.which(CHROMIUM) or Path(CHROMIUM).is_file()
