"""The ldp kind against its peers, multi-freq-ldpy and pure-ldp, side by side in one run, on the
homogeneous cases of issue 4's "Performance" section: k-RR on k = 100 and basic one-time
RAPPOR on k = 20, ε in {0.5, 1, 2, 4}, n in {10^5, 10^6, 10^7}.

    bash benchmarks/peers/setup_ldp_peers.sh           # once: the peers' own venv
    .venv/bin/python benchmarks/ldp_peers.py           # full run
    .venv/bin/python benchmarks/ldp_peers.py --quick   # about a minute

For every case both sides get the very same true secrets (an .npy file in a temporary folder,
binomial(k−1, 1/2) like the paper's linear experiments, drawn from a keyed stream of the fixed
benchmark secret). Ours: the client simulation (``transforms.ldp.simulation.simulate_reports``,
vectorized over the users) and the server estimators (k-RR: INV_M in closed form with either
post-processing, IBU_M, GIBU; RAPPOR: RAP_M with either post-processing, GIBU), each timed from
the reports to the estimate, sufficient statistics included. Peers: driven through their public
per-user client and their server API by ``benchmarks/peers/ldp_peer_worker.py`` inside
``benchmarks/.venv-ldp-peers`` (never privlake's venv), timed inside the worker around their
calls only (their numba compilation excluded). Errors are L1, L2 and the EMD on the line between
each estimate and the empirical distribution of the secrets both sides perturbed.

Ratios are peer time / our time for (a) the clients' perturbation, (b) the server's estimation,
(c) end to end (a + b), each peer estimator against its counterpart: multi-freq-ldpy MI (clip and
renormalize) against INV_M/RAP_M truncate, pure-ldp's simplex projection against INV_M/RAP_M
projection, multi-freq-ldpy IBU against IBU_M (k-RR) or GIBU (RAPPOR).

BLAS runs on one thread on both sides (OPENBLAS_NUM_THREADS=1 and friends, set before numpy is
imported): on the shared 2-core machine a multi-threaded OpenBLAS made GIBU's matrix-vector
products up to 16x slower under load. Writes benchmarks/results/ldp_peers.json and
benchmarks/results/ldp_peers.md. Each case carries ``spark_end_to_end_seconds: null`` for the
pipeline's own end-to-end time on Spark, filled in by the pipeline benchmark.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import harness

os.environ.update(harness.one_thread())

import argparse
import json
import subprocess
import tempfile
import time
from collections.abc import Callable

import numpy as np

from transforms.core.keyed_randomness import keyed_generator
from transforms.ldp.distribution_metrics import (
    earth_movers_distance_line,
    l1_distance,
    l2_distance,
)
from transforms.ldp.estimators import (
    EstimationResult,
    generalized_iterative_bayesian_update,
    iterative_bayesian_update,
    krr_closed_form_estimate,
    rappor_estimate,
)
from transforms.ldp.mechanisms import BasicRappor, Mechanism, RandomizedResponse
from transforms.ldp.simulation import (
    SimulatedReports,
    gibu_groups,
    rappor_bit_sums,
    simulate_reports,
    total_report_counts,
    user_counts_per_mechanism,
)

BENCHMARK_SECRET_HEX = "1d" * 32
BENCHMARK_SECRET = bytes.fromhex(BENCHMARK_SECRET_HEX)
RELEASE = "bench/ldp-peers"
PEER_PYTHON = harness.ROOT / "benchmarks" / ".venv-ldp-peers" / "bin" / "python"
PEER_WORKER = harness.ROOT / "benchmarks" / "peers" / "ldp_peer_worker.py"

ALPHABET = {"krr": 100, "rappor": 20}
EPSILONS = (0.5, 1.0, 2.0, 4.0)
FULL_USERS = (100_000, 1_000_000, 10_000_000)
QUICK_USERS = (10_000, 100_000)
QUICK_EPSILONS = (0.5, 4.0)
REPETITIONS = {10_000: 2, 100_000: 3, 1_000_000: 1, 10_000_000: 1}
GIBU_RAPPOR_MAX_USERS = 100_000
PEER_IBU_MAX_USERS = 10_000_000
PAIRED_MAX_USERS = 1_000_000

COUNTERPARTS = {
    "krr": {
        "multi_freq_ldpy MI": "INV_M truncate",
        "multi_freq_ldpy IBU": "IBU_M",
        "pure_ldp simplex projection": "INV_M projection",
    },
    "rappor": {
        "multi_freq_ldpy MI": "RAP_M truncate",
        "multi_freq_ldpy IBU": "GIBU",
        "pure_ldp simplex projection": "RAP_M projection",
    },
}


def machine() -> dict:
    return {**harness.machine_basics(), "numpy": np.__version__, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}


def true_secrets(k: int, n: int, repetition: int) -> np.ndarray:
    """binomial(k−1, 1/2) secrets, the same for every ε of a (k, n, repetition)."""
    stream = keyed_generator(BENCHMARK_SECRET, RELEASE, "data", (k, n, repetition))
    return stream.binomial(k - 1, 0.5, size=n).astype(np.int64)


def peer_seed(mechanism: str, epsilon: float, n: int, repetition: int) -> int:
    stream = keyed_generator(BENCHMARK_SECRET, RELEASE, "peer-seed", (mechanism, str(epsilon), n, repetition))
    return int(stream.integers(0, 2**31 - 1))


def errors(truth: np.ndarray, estimate: np.ndarray) -> dict[str, float]:
    """L1, L2 and the line EMD; an estimate is renormalized first (its mass off 1 is recorded)."""
    vector = np.clip(np.asarray(estimate, dtype=np.float64), 0.0, None)
    mass = float(vector.sum())
    vector = vector / mass
    return {
        "l1": l1_distance(truth, vector),
        "l2": l2_distance(truth, vector),
        "emd": earth_movers_distance_line(truth, vector),
        "mass_before_renormalizing": mass,
    }


def our_estimators(
    simulated: SimulatedReports, mechanism: Mechanism, run_gibu: bool
) -> dict[str, Callable[[], np.ndarray | EstimationResult]]:
    """Each estimator from the simulated reports to the estimate, sufficient statistics included."""
    k = int(mechanism.input_size)
    epsilons = np.array([float(mechanism.epsilon)])
    if isinstance(mechanism, RandomizedResponse):
        channel = mechanism.channel_matrix()

        def closed_form(post_processing: str) -> Callable[[], np.ndarray]:
            return lambda: krr_closed_form_estimate(
                epsilons, k, total_report_counts(simulated), user_counts_per_mechanism(simulated),
                post_processing,
            )

        return {
            "INV_M projection": closed_form("projection"),
            "INV_M truncate": closed_form("truncate"),
            "IBU_M": lambda: iterative_bayesian_update(channel, total_report_counts(simulated)),
            "GIBU": lambda: generalized_iterative_bayesian_update(*gibu_groups(simulated, [channel])),
        }

    def rappor(post_processing: str) -> Callable[[], np.ndarray]:
        def estimate() -> np.ndarray:
            bit_sums, mechanism_epsilons, users = rappor_bit_sums(simulated)
            return rappor_estimate(bit_sums, simulated.n, mechanism_epsilons, users, post_processing)

        return estimate

    estimators: dict[str, Callable[[], np.ndarray | EstimationResult]] = {
        "RAP_M projection": rappor("projection"),
        "RAP_M truncate": rappor("truncate"),
    }
    if run_gibu:
        estimators["GIBU"] = lambda: generalized_iterative_bayesian_update(*gibu_groups(simulated))
    return estimators


def run_ours(
    values: np.ndarray, mechanism: Mechanism, release_id: str, truth: np.ndarray
) -> tuple[dict, SimulatedReports]:
    run_gibu = isinstance(mechanism, RandomizedResponse) or values.size <= GIBU_RAPPOR_MAX_USERS
    simulated, perturbation = harness.timed(simulate_reports, values, [mechanism], None, BENCHMARK_SECRET, release_id)
    result: dict = {"perturbation_seconds": perturbation.wall_seconds, "estimators": {}}
    for name, estimator in our_estimators(simulated, mechanism, run_gibu).items():
        outcome, timing = harness.timed(estimator)
        entry: dict = {"estimation_seconds": timing.wall_seconds}
        if isinstance(outcome, EstimationResult):
            entry.update(iterations=outcome.iterations, converged=outcome.converged)
            outcome = outcome.estimate
        entry.update(errors(truth, outcome))
        result["estimators"][name] = entry
    return result, simulated


class PeerWorker:
    """The peers' worker process (their venv), fed one JSON job per line."""

    def __init__(self) -> None:
        if not PEER_PYTHON.exists():
            raise SystemExit(f"{PEER_PYTHON} is missing: run bash benchmarks/peers/setup_ldp_peers.sh first")
        self.process = subprocess.Popen(
            [str(PEER_PYTHON), str(PEER_WORKER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ),
        )
        self.versions = self._read()["versions"]

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer worker stopped (exit code {self.process.wait()})")
        return json.loads(line)

    def run(self, job: dict) -> dict:
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def run_peers(worker: PeerWorker, job: dict, truth: np.ndarray) -> tuple[dict, dict]:
    """The peers' own clients and estimators, and (when the job names privlake's reports) the
    peers' estimators on those reports; each as ``{"library estimator": entry}``."""
    raw = worker.run(job)
    paired_raw = raw.pop("on_privlake_reports", {})

    def flatten(outcomes: dict) -> dict:
        result = {}
        for library, outcome in outcomes.items():
            for name, estimator in outcome["estimators"].items():
                entry = {"perturbation_seconds": outcome["perturbation_seconds"],
                         "estimation_seconds": estimator["estimation_seconds"]}
                entry.update(errors(truth, np.asarray(estimator["estimate"])))
                result[f"{library} {name}"] = entry
        return result

    return flatten(raw), flatten(paired_raw)


def summarize(case: dict) -> None:
    """Means of the errors and medians of the times over the repetitions, and the ratios."""
    runs = case["runs"]
    summary: dict = {"ours": {}, "peers": {}}
    our_perturbation = float(np.median([run["ours"]["perturbation_seconds"] for run in runs]))
    for name in runs[0]["ours"]["estimators"]:
        entries = [run["ours"]["estimators"][name] for run in runs if name in run["ours"]["estimators"]]
        summary["ours"][name] = _summary(entries, our_perturbation)
        if "iterations" in entries[0]:
            summary["ours"][name]["iterations"] = int(max(entry["iterations"] for entry in entries))
            summary["ours"][name]["converged"] = bool(all(entry["converged"] for entry in entries))
    for name in runs[0]["peers"]:
        entries = [run["peers"][name] for run in runs]
        perturbation = float(np.median([entry["perturbation_seconds"] for entry in entries]))
        summary["peers"][name] = _summary(entries, perturbation)
    ratios = {}
    for peer, ours in COUNTERPARTS[case["mechanism"]].items():
        if peer not in summary["peers"] or ours not in summary["ours"]:
            continue
        theirs, mine = summary["peers"][peer], summary["ours"][ours]
        ratios[peer] = {
            "against": ours,
            "perturbation": theirs["perturbation_seconds"] / mine["perturbation_seconds"],
            "estimation": theirs["estimation_seconds"] / mine["estimation_seconds"],
            "end_to_end": theirs["end_to_end_seconds"] / mine["end_to_end_seconds"],
            "emd": theirs["emd"] / mine["emd"],
        }
    paired = {}
    for peer, ours in COUNTERPARTS[case["mechanism"]].items():
        runs_with_both = [
            run for run in runs
            if peer in run["peers_on_privlake_reports"] and ours in run["ours"]["estimators"]
        ]
        if runs_with_both:
            paired[peer] = {
                "against": ours,
                "repetitions": len(runs_with_both),
                "peer_emd": float(np.mean([run["peers_on_privlake_reports"][peer]["emd"] for run in runs_with_both])),
                "our_emd": float(np.mean([run["ours"]["estimators"][ours]["emd"] for run in runs_with_both])),
                "peer_l1": float(np.mean([run["peers_on_privlake_reports"][peer]["l1"] for run in runs_with_both])),
                "our_l1": float(np.mean([run["ours"]["estimators"][ours]["l1"] for run in runs_with_both])),
                "peer_estimation_seconds": float(np.median(
                    [run["peers_on_privlake_reports"][peer]["estimation_seconds"] for run in runs_with_both]
                )),
            }
    case["summary"] = summary
    case["ratios_peer_over_ours"] = ratios
    case["same_reports_peer_vs_ours"] = paired


def _summary(entries: list[dict], perturbation: float) -> dict:
    estimation = float(np.median([entry["estimation_seconds"] for entry in entries]))
    return {
        "l1": float(np.mean([entry["l1"] for entry in entries])),
        "l2": float(np.mean([entry["l2"] for entry in entries])),
        "emd": float(np.mean([entry["emd"] for entry in entries])),
        "perturbation_seconds": perturbation,
        "estimation_seconds": estimation,
        "end_to_end_seconds": perturbation + estimation,
        "repetitions": len(entries),
    }


def run_case(
    worker: PeerWorker, folder: Path, mechanism_name: str, epsilon: float, n: int, repetitions: int
) -> dict:
    k = ALPHABET[mechanism_name]
    if mechanism_name == "krr":
        mechanism: Mechanism = RandomizedResponse(epsilon=epsilon, input_size=k)
    else:
        mechanism = BasicRappor(epsilon=epsilon, input_size=k)
    case: dict = {
        "mechanism": mechanism_name, "k": k, "epsilon": epsilon, "n": n, "repetitions": repetitions,
        "runs": [], "spark_end_to_end_seconds": None,
    }
    for repetition in range(repetitions):
        values = true_secrets(k, n, repetition)
        truth = np.bincount(values, minlength=k) / n
        path = folder / f"values-{k}-{n}-{repetition}.npy"
        if not path.exists():
            np.save(path, values)
        release_id = f"{RELEASE}/{mechanism_name}/{epsilon}/{n}/{repetition}"
        seed = peer_seed(mechanism_name, epsilon, n, repetition)
        ours, simulated = run_ours(values, mechanism, release_id, truth)
        job = {
            "values": str(path), "mechanism": mechanism_name, "k": k, "epsilon": epsilon, "seed": seed,
            "ibu": n <= PEER_IBU_MAX_USERS,
        }
        if n <= PAIRED_MAX_USERS:
            job["reports"] = str(folder / "privlake-reports.npy")
            np.save(job["reports"], simulated.reports)
        del simulated
        peers, paired = run_peers(worker, job, truth)
        case["runs"].append(
            {"repetition": repetition, "peer_seed": seed, "ours": ours, "peers": peers,
             "peers_on_privlake_reports": paired}
        )
    summarize(case)
    return case


def times(ratio: float) -> str:
    return harness.number(ratio, ".0f", small=".2g") + "×"


def emd_and_l1(emd: float, l1: float) -> str:
    return f"{emd:.4f} ({l1:.4f})"


def mechanism_tables(title: str, cases: list[dict]) -> list[str]:
    """Errors with each side's own clients, the peers' estimators on privlake's reports, and times."""
    ours_names = list(cases[0]["summary"]["ours"])
    peer_names = list(cases[0]["summary"]["peers"])
    lines = [
        f"### {title}: EMD on the line (L1 in brackets), each side with its own clients",
        "",
        *harness.table(
            ["ε", "n", "r", *(f"ours {name}" for name in ours_names), *peer_names],
            [(case["epsilon"], case["n"], case["repetitions"],
              *("–" if entry is None else emd_and_l1(entry["emd"], entry["l1"])
                for side, names in (("ours", ours_names), ("peers", peer_names))
                for entry in (case["summary"][side].get(name) for name in names)))
             for case in cases],
            align="r" * (3 + len(ours_names) + len(peer_names)),
            formats=["g", ".0e", None, *[None] * (len(ours_names) + len(peer_names))],
        ),
    ]
    paired_cases = [case for case in cases if case["same_reports_peer_vs_ours"]]
    if paired_cases:
        lines += [
            "",
            f"### {title}: the peers' estimators on privlake's own reports (estimator against estimator)",
            "",
            *harness.table(
                ["ε", "n", "peer estimator", "its EMD (L1)", "privlake counterpart", "its EMD (L1)"],
                [(case["epsilon"], case["n"], peer, emd_and_l1(entry["peer_emd"], entry["peer_l1"]),
                  entry["against"], emd_and_l1(entry["our_emd"], entry["our_l1"]))
                 for case in paired_cases for peer, entry in case["same_reports_peer_vs_ours"].items()],
                align="rrlrlr", formats=["g", ".0e", None, None, None, None],
            ),
        ]

    def seconds(case: dict, peer: str, ratio: dict) -> tuple:
        theirs, mine = case["summary"]["peers"][peer], case["summary"]["ours"][ratio["against"]]
        return tuple(
            cell
            for key, ratio_key in (("perturbation_seconds", "perturbation"), ("estimation_seconds", "estimation"),
                                   ("end_to_end_seconds", "end_to_end"))
            for cell in (f"{mine[key]:.3g}", f"{theirs[key]:.3g} ({times(ratio[ratio_key])})")
        )

    lines += [
        "",
        f"### {title}: seconds, and peer time / our time (×)",
        "",
        *harness.table(
            ["ε", "n", "peer estimator (vs ours)", "clients: ours", "clients: peer", "estimation: ours",
             "estimation: peer", "end to end: ours", "end to end: peer"],
            [(case["epsilon"], case["n"], f"{peer} (vs {ratio['against']})", *seconds(case, peer, ratio))
             for case in cases for peer, ratio in case["ratios_peer_over_ours"].items()],
            align="rrl" + "r" * 6, formats=["g", ".0e", *[None] * 7],
        ),
        "",
    ]
    capped = [
        (case, name)
        for case in cases
        for name, entry in case["summary"]["ours"].items()
        if "iterations" in entry and not entry["converged"]
    ]
    if capped:
        lines.append(
            "Stopped at the iteration cap (10,000) before the tolerance (L1 change ≤ 1e-10): "
            + ", ".join(f"{name} at ε = {case['epsilon']:g}, n = {case['n']:.0e}" for case, name in capped)
            + "."
        )
        lines.append("")
    return lines


def markdown(report: dict) -> str:
    lines = [
        "## LDP: privlake vs multi-freq-ldpy and pure-ldp (homogeneous cases)",
        "",
        f"Machine: {report['machine']['processor']} ({report['machine']['cores']} cores, shared), "
        f"BLAS on 1 thread; peers {report['peer_versions']}. Same true data on both sides "
        "(binomial(k−1, 1/2)); errors against the empirical distribution of those data, mean over "
        "the repetitions (r); times are medians, in seconds. `ours` = privlake's vectorized client "
        "simulation and server estimators in one process (no engine); the end-to-end time on Spark "
        "is the pipeline benchmark's. Peers' clients are called once per user, as their API is meant "
        "for devices.",
        "",
    ]
    for mechanism_name, title in (("krr", "k-RR, k = 100"), ("rappor", "basic one-time RAPPOR, k = 20")):
        cases = [case for case in report["cases"] if case["mechanism"] == mechanism_name]
        if cases:
            lines += mechanism_tables(title, cases)
    if any(case["mechanism"] == "rappor" and case["n"] > GIBU_RAPPOR_MAX_USERS for case in report["cases"]):
        lines.append(
            f"GIBU on RAPPOR runs up to n = {GIBU_RAPPOR_MAX_USERS:.0e}: its groups are the distinct "
            "bit vectors (about n at small ε), so an iteration costs O(n·k) there."
        )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small n and two ε (about a minute)")
    parser.add_argument("--largest-n", type=int, default=None, help="leave out the sizes above this n")
    harness.add_results_option(parser)
    arguments = parser.parse_args()
    users = QUICK_USERS if arguments.quick else FULL_USERS
    if arguments.largest_n is not None:
        users = tuple(n for n in users if n <= arguments.largest_n)
    epsilons = QUICK_EPSILONS if arguments.quick else EPSILONS
    report: dict = {
        "description": __doc__.split("\n\n")[0],
        "mode": "quick" if arguments.quick else "full",
        "machine": machine(),
        "benchmark_secret_hex": BENCHMARK_SECRET_HEX,
        "release_id_prefix": RELEASE,
        "data": "binomial(k-1, 1/2) secrets from keyed_generator(secret, release, 'data', (k, n, repetition))",
        "truth": "empirical distribution of the secrets given to both sides",
        "counterparts": COUNTERPARTS,
        "cases": [],
    }
    started = time.perf_counter()
    worker = PeerWorker()
    report["peer_versions"] = worker.versions
    try:
        with tempfile.TemporaryDirectory(prefix="ldp-peers-") as folder:
            for mechanism_name in ("krr", "rappor"):
                for n in users:
                    for epsilon in epsilons:
                        case = run_case(worker, Path(folder), mechanism_name, epsilon, n, REPETITIONS[n])
                        report["cases"].append(case)
                        best = min(case["summary"]["ours"].items(), key=lambda item: item[1]["emd"])
                        print(
                            f"{mechanism_name} eps={epsilon:g} n={n:.0e}: best ours {best[0]} "
                            f"EMD {best[1]['emd']:.4f}; "
                            + "; ".join(
                                f"{peer} EMD {entry['emd']:.4f}"
                                for peer, entry in case["summary"]["peers"].items()
                            )
                            + f" [{time.perf_counter() - started:.0f}s]",
                            flush=True,
                        )
    finally:
        worker.close()
    report["wall_seconds"] = time.perf_counter() - started
    stem = "ldp_peers_quick" if arguments.quick else "ldp_peers"
    harness.write_json(arguments.results_dir, stem, report, indent=2)
    harness.write_markdown(arguments.results_dir, stem, markdown(report) + "\n")
    print(markdown(report))


if __name__ == "__main__":
    main()
