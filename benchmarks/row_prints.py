"""What row prints cost a release's input pass (issue 32), side by side with the pass without them.

    .venv/bin/python benchmarks/row_prints.py                 # 10^6 claims, 7 alternating runs
    .venv/bin/python benchmarks/row_prints.py --claims 3000000 --repeats 5

One generated CSV of claims (integer object ids, text source ids, two-decimal values), one fragment.
Timed, alternating so that a drift in the machine's load falls on every variant:

* ``pass 1 without row prints``: the crowd kind's pass-1 task (``read_claims_fragment``: read,
  type, check, bucket, stage, file digest) with no row key — the floor;
* ``pass 1 with row prints``: the same task as a release runs it, sketching its canonical claims;
* ``row sketch alone``: ``RowSketch.of_columns`` over the parsed columns (canonical values, SipHash,
  bottom-k), and ``file digest alone``: the HMAC-SHA256 of the file's bytes (the only print before
  issue 32).

Reported: median seconds and µs a claim, and each variant's ratio to the floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness

os.environ.update(harness.one_thread())

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.harness import machine_basics, table, write_json, write_markdown  # noqa: E402

VARIANTS = ("pass 1 without row prints", "pass 1 with row prints", "row sketch alone", "file digest alone")


def claims_file(folder: Path, claims: int) -> Path:
    generator = np.random.default_rng(7)
    frame = pd.DataFrame({"object_id": generator.integers(0, claims // 20, claims),
                          "source_id": pd.Series(generator.integers(0, 5_000, claims)).map("s{:05d}".format),
                          "value": np.round(generator.uniform(0, 100, claims), 2)})
    path = folder / "claims.csv"
    frame.to_csv(path, index=False)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    harness.add_results_option(parser)
    arguments = parser.parse_args()

    from pipelines.crowd.engine_input import ClaimsReading, read_claims_fragment
    from pipelines.platform.row_prints import RowSketch
    from pipelines.platform.sources import fragment_fingerprint, list_fragments
    from schemas.sources import SourceSpec

    machine = machine_basics()
    key = bytes(range(32))
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        path = claims_file(folder, arguments.claims)
        fragment = list_fragments(SourceSpec(path=str(path), format="csv"))[0]
        frame = pd.read_csv(path, dtype={"source_id": object})
        columns = [frame["object_id"].to_numpy(), frame["source_id"].to_numpy(dtype=object),
                   frame["value"].to_numpy()]

        def pass_one(row_key: bytes | None) -> None:
            staging = Path(tempfile.mkdtemp(dir=folder))
            read_claims_fragment(fragment, ClaimsReading("object_id", "source_id", "value", staging, 64, key, row_key))

        work = {
            VARIANTS[0]: lambda: pass_one(None),
            VARIANTS[1]: lambda: pass_one(key),
            VARIANTS[2]: lambda: RowSketch.of_columns(columns, key),
            VARIANTS[3]: lambda: fragment_fingerprint(fragment, key),
        }
        for variant in VARIANTS:  # one warm-up each: imports, page cache
            work[variant]()
        seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        for repeat in range(arguments.repeats):
            for variant in VARIANTS if repeat % 2 == 0 else reversed(VARIANTS):
                started = time.perf_counter()
                work[variant]()
                seconds[variant].append(time.perf_counter() - started)
    floor = statistics.median(seconds[VARIANTS[0]])
    rows = [{"variant": variant, "median_seconds": statistics.median(values),
             "us_per_claim": statistics.median(values) / arguments.claims * 1e6,
             "over_floor": statistics.median(values) / floor, "runs": values} for variant, values in seconds.items()]
    write_json(arguments.results_dir, "row_prints", {"machine": machine, "claims": arguments.claims, "summary": rows})
    lines = table(["variant", "median s", "µs a claim", "× pass 1 without"],
                  [(row["variant"], row["median_seconds"], row["us_per_claim"], row["over_floor"]) for row in rows],
                  align="lrrr", formats=[None, ".3f", ".3f", ".3f"])
    text = ("# Row prints: their cost in the crowd kind's input pass (issue 32)\n\n"
            f"Machine: {machine['processor']}, {machine['cores']} cores, {machine['memory']}; load average at start "
            f"{machine['load_average_at_start'][0]:.2f}. {arguments.claims:,} claims in one CSV fragment, medians of "
            f"{arguments.repeats} alternating runs, one thread (`benchmarks/row_prints.py`).\n\n"
            + "\n".join(lines) + "\n")
    write_markdown(arguments.results_dir, "row_prints", text)
    print(text)


if __name__ == "__main__":
    main()
