"""The built-in sample crowd data: claims with known truths and known value densities.

``privlake generate-crowd --out DIR`` (and ``make release``) writes this data so the crowd
release runs on a fresh machine, and the reproduction tests use it because, unlike real data,
it carries the *true density* of every object — the reference PrisCrowd's ISE is measured
against — next to the truth.

The model (all widths are fractions of the public range width ``w = hi − lo``):

* **Objects.** Object ``i`` has a truth ``t_i ~ U(lo + 0.2w, hi − 0.2w)`` and an honest
  opinion density ``p_i``: a Gaussian ``N(t_i, s_i²)`` with ``s_i ~ U(0.01w, 0.04w)``; with
  probability ``bimodal_fraction`` a second, minor component (weight ``U(0.15, 0.35)``, mean
  ``t_i ± U(3, 6)·s_i``, scale ``s_i·U(0.5, 1)``) — a controversial object whose crowd holds
  two opinions. The truth is the mean of the main component (the mode of ``p_i``).
* **Sources.** A fraction ``outlier_fraction`` of the sources are *outliers*: their claims
  are ``U(lo, hi)``, unrelated to the object. Every other source ``s`` has its own noise scale
  ``σ_s``, log-uniform over ``noise_scale_range`` (default 0.005w to 0.25w: fifty-fold
  heterogeneity); it is *reliable* when ``σ_s ≤ reliable_noise_threshold`` (default 0.03w,
  about an opinion spread) and *noisy* otherwise.
* **Claims.** Each object gets ``claims_per_object`` distinct sources, uniformly at random. A
  non-outlier source claims ``y + σ_s·z`` with ``y ~ p_i`` and ``z ~ N(0, 1)``. Claims are
  clipped to the public range (only far noisy draws ever reach a bound) and rounded to
  ``value_decimals`` decimals, as people report rounded numbers.

Values are always inside ``public_range`` (default [0, 100]); the Basic baseline and the
documentation use that range as the stated public range.

Randomness: ``numpy.random.default_rng(seed)``. This is demo and test data, never a release,
so it is meant to be reproducible from a published seed (the release secret rules of
DESIGN.md apply to releases, not to this generator). The generator is vectorized over all
claims: 10^7 claims take about 2 s and 0.7 GB at peak (writing them, about 4 s more).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from transforms.crowd.density_metrics import GaussianMixture

DEFAULT_OBJECTS = 2_000
DEFAULT_CLAIMS_PER_OBJECT = 20
DEFAULT_SOURCES = 400
DEFAULT_PUBLIC_RANGE = (0.0, 100.0)

RELIABLE = "reliable"
NOISY = "noisy"
OUTLIER = "outlier"

CLAIMS_CSV = "claims.csv"
CLAIMS_PARQUET = "claims.parquet"
TRUTH_CSV = "truth.csv"
TRUE_DENSITIES_CSV = "true_densities.csv"
SOURCES_CSV = "sources.csv"
METADATA_JSON = "metadata.json"

_DENSE_BLOCK = 1 << 22


@dataclass(frozen=True, eq=False)
class SampleCrowdData:
    """Sample claims with their ground truth.

    Attributes:
        claims: ``object_id`` (int64), ``source_id`` (str), ``value`` (float64); sorted by
            object id then source id (the canonical claims order).
        truth: ``object_id``, ``truth`` (float64), one row per object.
        true_densities: the opinion density of every object as mixture components, one row
            per component: ``object_id``, ``component`` (0 = main), ``weight``, ``mean``,
            ``scale``; sorted by object id. ``true_density(object_id)`` gives one object's
            ``GaussianMixture``.
        sources: ``source_id``, ``kind`` (``reliable`` | ``noisy`` | ``outlier``),
            ``noise_scale`` (float64, NaN for outliers, whose claims are uniform).
        public_range: ``(lo, hi)``, the bounds every value lies in.
        parameters: the generator arguments, for the metadata file.
    """

    claims: pd.DataFrame
    truth: pd.DataFrame
    true_densities: pd.DataFrame
    sources: pd.DataFrame
    public_range: tuple[float, float]
    parameters: dict[str, Any] = field(default_factory=dict)

    def true_density(self, object_id: int) -> GaussianMixture:
        """The true opinion density of one object."""
        object_column = self.true_densities["object_id"].to_numpy()
        start = int(np.searchsorted(object_column, object_id, side="left"))
        stop = int(np.searchsorted(object_column, object_id, side="right"))
        if start == stop:
            raise KeyError(f"no object {object_id} in the sample data")
        rows = self.true_densities.iloc[start:stop]
        return GaussianMixture(rows["weight"].to_numpy(), rows["mean"].to_numpy(), rows["scale"].to_numpy())

    def true_density_mixtures(self) -> dict[int, GaussianMixture]:
        """Every object's true density, keyed by object id (one Python object per object)."""
        mixtures: dict[int, GaussianMixture] = {}
        for object_id, rows in self.true_densities.groupby("object_id", sort=True):
            mixtures[int(object_id)] = GaussianMixture(
                rows["weight"].to_numpy(), rows["mean"].to_numpy(), rows["scale"].to_numpy()
            )
        return mixtures


def _check_arguments(
    objects: int,
    claims_per_object: int,
    sources: int,
    outlier_fraction: float,
    public_range: tuple[float, float],
    noise_scale_range: tuple[float, float],
    bimodal_fraction: float,
) -> None:
    if objects < 1 or claims_per_object < 1 or sources < 1:
        raise ValueError("objects, claims_per_object and sources must be at least 1")
    if claims_per_object > sources:
        raise ValueError(
            f"each object needs {claims_per_object} distinct sources but there are only {sources}"
        )
    if not 0.0 <= outlier_fraction < 1.0:
        raise ValueError("outlier_fraction must be in [0, 1)")
    if not 0.0 <= bimodal_fraction <= 1.0:
        raise ValueError("bimodal_fraction must be in [0, 1]")
    low, high = public_range
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError("public_range must be two finite numbers lo < hi")
    if not 0.0 < noise_scale_range[0] <= noise_scale_range[1]:
        raise ValueError("noise_scale_range must be 0 < low <= high")


def _distinct_sources(generator: np.random.Generator, objects: int, k: int, sources: int) -> np.ndarray:
    """(objects, k) source indices, distinct within each row and sorted, uniformly at random.

    Sparse case (``k`` small against ``sources``): draw with replacement, then redraw the
    duplicates of the rows that have any until none is left; with ``2k ≤ sources`` a redrawn
    entry collides with probability below one half, so a few passes over ever fewer rows
    suffice. Dense case: the ``k`` smallest of ``sources`` uniform keys per row, in blocks.
    """
    if 2 * k > sources:
        result = np.empty((objects, k), dtype=np.int64)
        block = max(1, _DENSE_BLOCK // sources)
        for start in range(0, objects, block):
            stop = min(objects, start + block)
            keys = generator.random((stop - start, sources))
            chosen = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < sources else np.argsort(keys, axis=1)
            result[start:stop] = np.sort(chosen, axis=1)
        return result
    chosen = generator.integers(0, sources, size=(objects, k), dtype=np.int64)
    chosen.sort(axis=1)
    rows = np.flatnonzero(np.any(chosen[:, 1:] == chosen[:, :-1], axis=1)) if k > 1 else np.empty(0, np.int64)
    while rows.size:
        part = chosen[rows]
        duplicate = np.zeros(part.shape, dtype=bool)
        duplicate[:, 1:] = part[:, 1:] == part[:, :-1]
        part[duplicate] = generator.integers(0, sources, size=int(duplicate.sum()), dtype=np.int64)
        part.sort(axis=1)
        chosen[rows] = part
        rows = rows[np.any(part[:, 1:] == part[:, :-1], axis=1)]
    return chosen


def source_names(sources: int) -> np.ndarray:
    """Source ids ``source_0000`` … zero-padded, so string order equals index order."""
    width = len(str(sources - 1))
    return np.array([f"source_{index:0{width}d}" for index in range(sources)], dtype=object)


def generate_sample_crowd_data(
    objects: int = DEFAULT_OBJECTS,
    claims_per_object: int = DEFAULT_CLAIMS_PER_OBJECT,
    sources: int = DEFAULT_SOURCES,
    seed: int = 0,
    outlier_fraction: float = 0.1,
    public_range: tuple[float, float] = DEFAULT_PUBLIC_RANGE,
    noise_scale_range: tuple[float, float] = (0.005, 0.25),
    reliable_noise_threshold: float = 0.03,
    bimodal_fraction: float = 0.3,
    value_decimals: int | None = 4,
) -> SampleCrowdData:
    """Generate ``objects × claims_per_object`` claims from ``sources`` sources (model above).

    Args:
        objects: number of objects (ids ``0 … objects−1``).
        claims_per_object: claims per object, each from a different source (≤ ``sources``).
        sources: number of sources.
        seed: the seed of ``numpy.random.default_rng``; the same arguments give the same data.
        outlier_fraction: share of sources that are outliers (rounded to a whole number).
        public_range: ``(lo, hi)``; every truth and claim lies inside.
        noise_scale_range: log-uniform range of non-outlier noise scales, as fractions of
            ``hi − lo``.
        reliable_noise_threshold: noise scale (fraction of ``hi − lo``) up to which a source
            is labelled reliable rather than noisy.
        bimodal_fraction: share of objects whose opinion density has a second component.
        value_decimals: claims are rounded to this many decimals (``None``: no rounding).
    """
    _check_arguments(
        objects,
        claims_per_object,
        sources,
        outlier_fraction,
        public_range,
        noise_scale_range,
        bimodal_fraction,
    )
    low, high = float(public_range[0]), float(public_range[1])
    width = high - low
    generator = np.random.default_rng(seed)

    outlier_count = int(round(outlier_fraction * sources))
    is_outlier = np.zeros(sources, dtype=bool)
    is_outlier[generator.permutation(sources)[:outlier_count]] = True
    log_low, log_high = math.log(noise_scale_range[0] * width), math.log(noise_scale_range[1] * width)
    noise_scale = np.exp(generator.uniform(log_low, log_high, size=sources))
    noise_scale[is_outlier] = np.nan
    kind = np.where(
        is_outlier, OUTLIER, np.where(noise_scale <= reliable_noise_threshold * width, RELIABLE, NOISY)
    )

    truth = generator.uniform(low + 0.2 * width, high - 0.2 * width, size=objects)
    spread = generator.uniform(0.01 * width, 0.04 * width, size=objects)
    bimodal = generator.random(objects) < bimodal_fraction
    minor_weight = np.where(bimodal, generator.uniform(0.15, 0.35, size=objects), 0.0)
    minor_side = np.where(generator.random(objects) < 0.5, -1.0, 1.0)
    minor_mean = truth + minor_side * generator.uniform(3.0, 6.0, size=objects) * spread
    minor_scale = spread * generator.uniform(0.5, 1.0, size=objects)

    chosen = _distinct_sources(generator, objects, claims_per_object, sources).reshape(-1)
    claim_count = objects * claims_per_object
    object_of_claim = np.repeat(np.arange(objects, dtype=np.int64), claims_per_object)
    from_minor = generator.random(claim_count) < minor_weight[object_of_claim]
    opinion = np.where(from_minor, minor_mean[object_of_claim], truth[object_of_claim])
    opinion += np.where(
        from_minor, minor_scale[object_of_claim], spread[object_of_claim]
    ) * generator.standard_normal(claim_count)
    del from_minor
    claim_noise = noise_scale[chosen]
    outlying = np.isnan(claim_noise)
    value = opinion + np.where(outlying, 0.0, claim_noise) * generator.standard_normal(claim_count)
    del opinion, claim_noise
    value[outlying] = generator.uniform(low, high, size=int(outlying.sum()))
    if value_decimals is not None:
        np.round(value, value_decimals, out=value)
    np.clip(value, low, high, out=value)

    names = source_names(sources)
    claims = pd.DataFrame({"object_id": object_of_claim, "source_id": names[chosen], "value": value})
    truth_frame = pd.DataFrame({"object_id": np.arange(objects, dtype=np.int64), "truth": truth})
    densities = _density_components(truth, spread, bimodal, minor_weight, minor_mean, minor_scale)
    sources_frame = pd.DataFrame(
        {"source_id": names, "kind": kind.astype(object), "noise_scale": noise_scale}
    )
    parameters = {
        "objects": objects,
        "claims_per_object": claims_per_object,
        "sources": sources,
        "seed": seed,
        "outlier_fraction": outlier_fraction,
        "public_range": [low, high],
        "noise_scale_range": list(noise_scale_range),
        "reliable_noise_threshold": reliable_noise_threshold,
        "bimodal_fraction": bimodal_fraction,
        "value_decimals": value_decimals,
    }
    return SampleCrowdData(claims, truth_frame, densities, sources_frame, (low, high), parameters)


def _density_components(
    truth: np.ndarray,
    spread: np.ndarray,
    bimodal: np.ndarray,
    minor_weight: np.ndarray,
    minor_mean: np.ndarray,
    minor_scale: np.ndarray,
) -> pd.DataFrame:
    objects = len(truth)
    main = pd.DataFrame(
        {
            "object_id": np.arange(objects, dtype=np.int64),
            "component": np.zeros(objects, dtype=np.int64),
            "weight": 1.0 - minor_weight,
            "mean": truth,
            "scale": spread,
        }
    )
    second = np.flatnonzero(bimodal)
    minor = pd.DataFrame(
        {
            "object_id": second.astype(np.int64),
            "component": np.ones(len(second), dtype=np.int64),
            "weight": minor_weight[second],
            "mean": minor_mean[second],
            "scale": minor_scale[second],
        }
    )
    frame = pd.concat([main, minor], ignore_index=True)
    return frame.sort_values(["object_id", "component"], kind="mergesort", ignore_index=True)


def write_sample_crowd_data(
    data: SampleCrowdData,
    directory: str | Path,
    claim_formats: tuple[str, ...] = ("csv", "parquet"),
) -> dict[str, Path]:
    """Write the sample data into ``directory`` (created if missing) and return the paths.

    Files (keys of the returned mapping in brackets):

    * ``claims.csv`` [``claims_csv``] and ``claims.parquet`` [``claims_parquet``]: the claims,
      columns ``object_id, source_id, value`` (``claim_formats`` picks which are written);
    * ``truth.csv`` [``truth``]: ``object_id, truth``;
    * ``true_densities.csv`` [``true_densities``]: ``object_id, component, weight, mean,
      scale``, one row per Gaussian component (long format, so any tool can read it);
    * ``sources.csv`` [``sources``]: ``source_id, kind, noise_scale``;
    * ``metadata.json`` [``metadata``]: the generator parameters, the public range and the
      file names.

    Written through Arrow (fast at 10^7 rows); floats keep their shortest round-trip text.
    """
    unknown = set(claim_formats) - {"csv", "parquet"}
    if unknown or not claim_formats:
        raise ValueError(
            f"claim_formats must be a non-empty subset of ('csv', 'parquet'), got {claim_formats}"
        )
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    claims_table = pa.Table.from_pandas(data.claims, preserve_index=False)
    if "csv" in claim_formats:
        paths["claims_csv"] = target / CLAIMS_CSV
        pa_csv.write_csv(claims_table, paths["claims_csv"])
    if "parquet" in claim_formats:
        paths["claims_parquet"] = target / CLAIMS_PARQUET
        pq.write_table(claims_table, paths["claims_parquet"])
    for key, name, frame in (
        ("truth", TRUTH_CSV, data.truth),
        ("true_densities", TRUE_DENSITIES_CSV, data.true_densities),
        ("sources", SOURCES_CSV, data.sources),
    ):
        paths[key] = target / name
        pa_csv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), paths[key])
    paths["metadata"] = target / METADATA_JSON
    metadata = {
        "generator": "transforms.crowd.sample_data.generate_sample_crowd_data",
        "parameters": data.parameters,
        "public_range": list(data.public_range),
        "rows": {"claims": len(data.claims), "objects": len(data.truth), "sources": len(data.sources)},
        "files": {key: path.name for key, path in paths.items()},
    }
    paths["metadata"].write_text(json.dumps(metadata, indent=2) + "\n")
    return paths


def read_sample_crowd_data(directory: str | Path) -> SampleCrowdData:
    """Read back what ``write_sample_crowd_data`` wrote (Parquet claims when present)."""
    source = Path(directory)
    metadata = json.loads((source / METADATA_JSON).read_text())
    if (source / CLAIMS_PARQUET).exists():
        claims = pq.read_table(source / CLAIMS_PARQUET).to_pandas()
    else:
        claims = pa_csv.read_csv(source / CLAIMS_CSV).to_pandas()
    claims = claims.astype({"object_id": np.int64, "source_id": object, "value": np.float64})
    truth = pd.read_csv(source / TRUTH_CSV)
    densities = pd.read_csv(source / TRUE_DENSITIES_CSV)
    sources = pd.read_csv(source / SOURCES_CSV, dtype={"source_id": object, "kind": object})
    low, high = metadata["public_range"]
    return SampleCrowdData(
        claims, truth, densities, sources, (float(low), float(high)), metadata["parameters"]
    )
