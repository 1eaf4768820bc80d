"""Runs the peer LDP libraries (multi-freq-ldpy, pure-ldp) for benchmarks/ldp_peers.py.

Runs inside benchmarks/.venv-ldp-peers (see setup_ldp_peers.sh), never in privlake's venv.
Protocol: one JSON job per line on stdin, one JSON result per line on stdout (anything the
libraries print goes to stderr). A job names an .npy file of true secrets ``0..k-1`` written by
the driver, so both sides perturb the very same data:

    {"values": "/tmp/.../values.npy", "mechanism": "krr" | "rappor", "k": 100,
     "epsilon": 1.0, "seed": 7, "ibu": true, "reports": "/tmp/.../reports.npy" (optional)}

With ``reports`` (privlake's own simulated reports of the same secrets), the peers' estimators
also run on those reports, so that estimator can be compared with estimator on identical input.

Each library is driven through its public client and server API, one call per user as the
libraries are meant to be used on devices; only those calls are timed (``perf_counter``), not
the loading of the data. numba's just-in-time compilation is done once, before any timing.

Mechanisms: ``krr`` is k-RR (multi-freq-ldpy ``GRR``, pure-ldp ``DirectEncoding``), ``rappor``
is basic one-time RAPPOR, i.e. symmetric unary encoding with bit-flip probability
``1/(1+e^{ε/2})`` (multi-freq-ldpy ``UE`` with ``optimal=False``, pure-ldp ``UE`` with
``use_oue=False``). pure-ldp's own ``RAPPOR`` class is the Bloom-filter/cohort variant fitted by
regularized regression, a different protocol, so it is not used.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import warnings
from importlib.metadata import version

import numpy as np
from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_IBU, GRR_Aggregator_MI, GRR_Client
from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Aggregator_IBU, UE_Aggregator_MI, UE_Client
from numba import njit
from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
from pure_ldp.frequency_oracles.unary_encoding import UEClient, UEServer

PROJECT_ON_SIMPLEX = 2


@njit(cache=False)
def _seed_numba(seed: int) -> None:
    np.random.seed(seed)  # noqa: NPY002 - the peers draw from numba's global state


def _identity(value: int) -> int:
    return value


def _warm_up() -> None:
    """Compile the numba clients and IBU once, so that no timing includes compilation."""
    GRR_Aggregator_IBU([GRR_Client(1, 4, 1.0) for _ in range(10)], 4, 1.0, nb_iter=5)
    UE_Aggregator_IBU([UE_Client(1, 4, 1.0, False) for _ in range(10)], 4, 1.0, False, nb_iter=5)


def _timed(function, *arguments, **keywords):
    start = time.perf_counter()
    result = function(*arguments, **keywords)
    return result, time.perf_counter() - start


def multi_freq_ldpy_estimators(reports: list, mechanism: str, k: int, epsilon: float, ibu: bool) -> dict:
    """multi-freq-ldpy's server side on the clients' reports: MI (clip, renormalize) and IBU."""
    if mechanism == "krr":
        estimators = {"MI": _timed(GRR_Aggregator_MI, reports, k, epsilon)}
        if ibu:
            estimators["IBU"] = _timed(GRR_Aggregator_IBU, reports, k, epsilon)
    else:
        estimators = {"MI": _timed(UE_Aggregator_MI, reports, epsilon, False)}
        if ibu:
            estimators["IBU"] = _timed(UE_Aggregator_IBU, reports, k, epsilon, False)
    return estimators


def pure_ldp_server(mechanism: str, k: int, epsilon: float) -> DEServer | UEServer:
    if mechanism == "krr":
        return DEServer(epsilon, k, index_mapper=_identity)
    return UEServer(epsilon, k, use_oue=False, index_mapper=_identity)


def pure_ldp_estimators(reports: list, mechanism: str, k: int, epsilon: float) -> dict:
    """pure-ldp's server side on the clients' reports, projected on the simplex by pure-ldp."""
    server = pure_ldp_server(mechanism, k, epsilon)

    def estimate() -> np.ndarray:
        server.aggregate_all(reports)
        counts = server.estimate_all(range(k), suppress_warnings=True, normalization=PROJECT_ON_SIMPLEX)
        return np.asarray(counts, dtype=np.float64) / server.n

    return {"simplex projection": _timed(estimate)}


def multi_freq_ldpy(values: list[int], mechanism: str, k: int, epsilon: float, ibu: bool) -> dict:
    if mechanism == "krr":
        reports, perturbation = _timed(lambda: [GRR_Client(value, k, epsilon) for value in values])
    else:
        reports, perturbation = _timed(lambda: [UE_Client(value, k, epsilon, False) for value in values])
    return _result(perturbation, multi_freq_ldpy_estimators(reports, mechanism, k, epsilon, ibu))


def pure_ldp(values: list[int], mechanism: str, k: int, epsilon: float) -> dict:
    if mechanism == "krr":
        client = DEClient(epsilon, k, index_mapper=_identity)
    else:
        client = UEClient(epsilon, k, use_oue=False, index_mapper=_identity)
    reports, perturbation = _timed(lambda: [client.privatise(value) for value in values])
    return _result(perturbation, pure_ldp_estimators(reports, mechanism, k, epsilon))


def on_given_reports(path: str, mechanism: str, k: int, epsilon: float, ibu: bool) -> dict:
    """The peers' estimators on privlake's own reports (same reports, so estimator against
    estimator), each library given the reports in the form its clients produce."""
    reports = np.load(path)
    if mechanism == "krr":
        as_multi_freq = as_pure_ldp = reports.astype(np.int64).tolist()
    else:
        as_multi_freq = list(reports.astype(np.float64))
        as_pure_ldp = list(reports.astype(np.int64))
    return {
        "multi_freq_ldpy": _result(None, multi_freq_ldpy_estimators(as_multi_freq, mechanism, k, epsilon, ibu)),
        "pure_ldp": _result(None, pure_ldp_estimators(as_pure_ldp, mechanism, k, epsilon)),
    }


def _result(perturbation: float | None, estimators: dict) -> dict:
    return {
        "perturbation_seconds": perturbation,
        "estimators": {
            name: {"estimate": np.asarray(estimate, dtype=np.float64).tolist(), "estimation_seconds": seconds}
            for name, (estimate, seconds) in estimators.items()
        },
    }


def run(job: dict) -> dict:
    values = np.load(job["values"]).astype(np.int64).tolist()
    k, epsilon, seed = int(job["k"]), float(job["epsilon"]), int(job["seed"])
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the peers draw from NumPy's and Python's global state
    _seed_numba(seed)
    results = {"multi_freq_ldpy": multi_freq_ldpy(values, job["mechanism"], k, epsilon, bool(job["ibu"]))}
    random.seed(seed + 1)
    np.random.seed(seed + 1)  # noqa: NPY002
    results["pure_ldp"] = pure_ldp(values, job["mechanism"], k, epsilon)
    if job.get("reports"):
        results["on_privlake_reports"] = on_given_reports(
            job["reports"], job["mechanism"], k, epsilon, bool(job["ibu"])
        )
    return results


def main() -> None:
    output = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")
    _warm_up()
    versions = {name: version(name) for name in ("multi-freq-ldpy", "pure-ldp", "numba", "numpy")}
    output.write(json.dumps({"ready": True, "versions": versions}) + "\n")
    output.flush()
    for line in sys.stdin:
        if line.strip():
            output.write(json.dumps(run(json.loads(line))) + "\n")
            output.flush()


if __name__ == "__main__":
    main()
