"""Runs a peer tabular synthesizer for benchmarks/tabular_benchmark.py: DataSynthesizer's correlated
attribute mode (PrivBayes) or smartnoise-synth's MST.

Runs inside the peer's own venv (see setup_tabular_peers.sh), never in privlake's venv:
DataSynthesizer in benchmarks/.venv-datasynthesizer (it needs numpy < 2), MST in
benchmarks/.venv-smartnoise. Protocol: one JSON job on stdin; the result is written as JSON to the
job's ``result`` path (the libraries print freely on stdout, which goes to stderr here):

    {"peer": "datasynthesizer" | "mst", "codes": "/tmp/.../train_codes.csv",
     "domain_sizes": [14, 9, ...], "epsilon": 1.0, "delta": 1e-6, "degree": 2,
     "records": 32561, "seed": 3, "output": "/tmp/.../synthetic.npy", "result": "/tmp/.../result.json"}

``codes`` is the training table already encoded over privlake's public domains (a header row with
the attribute names, then one integer code per cell), so every synthesizer models exactly the same
discretized attributes. Each peer is told the full public domain of every attribute (all codes
``0..size-1``), so no domain is read from the data. The synthetic records come back as an ``.npy``
integer code matrix in the same column order.

Timing (``perf_counter``) covers the peer's own work from reading the CSV to the synthetic table in
memory: DataSynthesizer's ``describe_dataset_in_correlated_attribute_mode`` (it reads the file
itself), its description file, and ``generate_dataset_in_correlated_attribute_mode``; MST's
``fit`` and ``sample`` (after ``pandas.read_csv``, timed too). Imports are not timed.
``cpu_seconds`` is the CPU time (all threads, and the reaped pool workers) of the whole job after
the imports, the worker's own small conversions included.

DataSynthesizer: every attribute is a categorical ``String`` whose categories are the codes
written ``v0, v1, …``, given through ``categorical_attribute_domain_file``; ``k`` (the maximum
degree) is the job's ``degree``; ``epsilon`` is its total budget (it spends half on the network,
half on the conditionals). Its greedy search uses a ``multiprocessing.Pool`` over all cores.
MST: ``MSTSynthesizer(epsilon, delta)`` with a ``TableTransformer`` of one ``LabelTransformer`` per
attribute fitted on a public frame that lists every code (so ``preprocessor_eps`` is 0 and the
domains are the public ones).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd


def _label(code: int) -> str:
    return f"v{code}"


def run_datasynthesizer(job: dict) -> dict:
    from DataSynthesizer.DataDescriber import DataDescriber
    from DataSynthesizer.DataGenerator import DataGenerator

    codes = pd.read_csv(job["codes"])
    columns = list(codes.columns)
    sizes = [int(size) for size in job["domain_sizes"]]
    with tempfile.TemporaryDirectory() as folder:
        labelled_file = Path(folder) / "input.csv"
        labelled = pd.DataFrame({column: codes[column].map(_label) for column in columns})
        labelled.to_csv(labelled_file, index=False)
        domain_file = Path(folder) / "domains.json"
        domain_file.write_text(
            json.dumps(
                {
                    column: [_label(code) for code in range(size)]
                    for column, size in zip(columns, sizes, strict=True)
                }
            )
        )
        description_file = Path(folder) / "description.json"
        start = time.perf_counter()
        describer = DataDescriber(category_threshold=max(sizes) + 1)
        describer.describe_dataset_in_correlated_attribute_mode(
            dataset_file=str(labelled_file),
            k=int(job["degree"]),
            epsilon=float(job["epsilon"]),
            attribute_to_datatype={column: "String" for column in columns},
            attribute_to_is_categorical={column: True for column in columns},
            attribute_to_is_candidate_key={column: False for column in columns},
            categorical_attribute_domain_file=str(domain_file),
            seed=int(job["seed"]),
        )
        describer.save_dataset_description_to_file(str(description_file))
        learned = time.perf_counter()
        generator = DataGenerator()
        generator.generate_dataset_in_correlated_attribute_mode(
            int(job["records"]), str(description_file), seed=int(job["seed"])
        )
        synthetic = generator.synthetic_dataset
        finished = time.perf_counter()
        network = describer.data_description["bayesian_network"]
    lookup = {
        column: {_label(code): code for code in range(size)}
        for column, size in zip(columns, sizes, strict=True)
    }
    mapped = pd.DataFrame({column: synthetic[column].map(lookup[column]) for column in columns})
    if mapped.isna().any().any():
        raise ValueError("DataSynthesizer produced values outside the public codes (or missing values)")
    matrix = mapped.to_numpy(dtype=np.int64)
    return {
        "matrix": matrix,
        "fit_seconds": learned - start,
        "sample_seconds": finished - learned,
        "seconds": finished - start,
        "details": {"network": network, "degree": int(job["degree"])},
        "versions": {name: version(name) for name in ("DataSynthesizer", "numpy", "pandas", "scikit-learn")},
    }


def run_mst(job: dict) -> dict:
    from snsynth.mst import MSTSynthesizer
    from snsynth.transform.label import LabelTransformer
    from snsynth.transform.table import TableTransformer

    sizes = [int(size) for size in job["domain_sizes"]]
    start = time.perf_counter()
    codes = pd.read_csv(job["codes"])
    columns = list(codes.columns)
    public_domain = pd.DataFrame(
        {column: np.arange(max(sizes)) % size for column, size in zip(columns, sizes, strict=True)}
    )
    transformer = TableTransformer([LabelTransformer(nullable=False) for _ in columns])
    transformer.fit(public_domain)
    synthesizer = MSTSynthesizer(epsilon=float(job["epsilon"]), delta=float(job["delta"]))
    synthesizer.fit(codes, transformer=transformer, preprocessor_eps=0.0)
    learned = time.perf_counter()
    synthetic = synthesizer.sample(int(job["records"]))
    finished = time.perf_counter()
    frame = pd.DataFrame(synthetic, columns=columns)
    if frame.isna().any().any():
        raise ValueError("MST produced missing values")
    return {
        "matrix": frame.to_numpy(dtype=np.int64),
        "fit_seconds": learned - start,
        "sample_seconds": finished - learned,
        "seconds": finished - start,
        "details": {"delta": float(job["delta"])},
        "versions": {name: version(name) for name in ("smartnoise-synth", "mbi", "jax", "numpy", "pandas")},
    }


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads) and of its reaped children (the
    pool workers of DataSynthesizer's greedy search)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def main() -> None:
    job = json.loads(sys.stdin.read())
    np.random.seed(int(job["seed"]))  # noqa: NPY002 - the peers draw from numpy's global state
    runner = {"datasynthesizer": run_datasynthesizer, "mst": run_mst}[job["peer"]]
    cpu_before = cpu_seconds()
    with contextlib.redirect_stdout(sys.stderr):
        outcome = runner(job)
    outcome["cpu_seconds"] = cpu_seconds() - cpu_before
    matrix = outcome.pop("matrix")
    np.save(job["output"], matrix.astype(np.int32))
    outcome["records"] = int(matrix.shape[0])
    outcome["cpu_count"] = os.cpu_count()
    Path(job["result"]).write_text(json.dumps(outcome))


if __name__ == "__main__":
    main()
