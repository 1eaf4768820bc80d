"""The per-choice linear latent filter, its distortion in closed form, and the objective of its min-max
training (NumPy; the training loop itself, in torch, is ``filter_training.py``).

Issue 5, step 2 (Chen, Navidi, Rajagopal, "Generating private data with user customization": one
small filter per (private label, utility label) choice on top of the frozen shared VAE).

Filter. For a record with latent ``z`` (a draw from the encoder's posterior ``q_e(z|x)``) and
private label ``y ∈ {0, …, c−1}``::

    z̃ = z + A·ε + B·e_y,    ε ~ N(0, I_m),

with ``A`` a ``k × m`` noise matrix, ``B`` a ``k × c`` label-shift matrix (column ``y`` is the shift of
class ``y``) and ``e_y`` the one-hot vector of ``y``. The encoder and decoder stay frozen.

Distortion ``D(q_f ‖ q_e)``, closed form. With the posterior ``q_e(z|x_i) = N(μ_i, Σ_i)``,
``Σ_i = diag σ_i²``, the filtered latent is a sum of independent Gaussians, so
``q_f(z̃|x_i, y_i) = N(μ_i + B e_{y_i}, Σ_i + AAᵀ)``. For Gaussians,
``KL(N(m₁, S₁) ‖ N(m₀, S₀)) = ½[tr(S₀⁻¹S₁) − k + (m₁ − m₀)ᵀS₀⁻¹(m₁ − m₀) + log det S₀ − log det S₁]``.
Substituting ``S₀ = Σ_i``, ``S₁ = Σ_i + AAᵀ``, ``m₁ − m₀ = B e_{y_i}``: ``tr(Σ_i⁻¹(Σ_i + AAᵀ)) = k +
tr(AᵀΣ_i⁻¹A)`` and ``det(Σ_i + AAᵀ)/det Σ_i = det(I_k + Σ_i^{-½}AAᵀΣ_i^{-½}) = det(I_m + AᵀΣ_i⁻¹A)``
(Sylvester's determinant identity). With ``M_i = AᵀΣ_i⁻¹A`` (``m × m``, eigenvalues ``λ_{i,r} ≥ 0``)::

    D_i = ½ [ tr M_i − log det(I_m + M_i) + (B e_{y_i})ᵀ Σ_i⁻¹ (B e_{y_i}) ]
        = ½ [ Σ_r (λ_{i,r} − log(1 + λ_{i,r})) + Σ_j (B_{j,y_i})² / σ_{i,j}² ],

    D(q_f ‖ q_e) = (1/n) Σ_i D_i     (nats, averaged over the records).

Every term is non-negative, and ``D`` is 0 exactly when ``A = 0`` and ``B e_y = 0`` for the labels
present. Scaling ``(A, B) → (tA, tB)`` maps ``λ → t²λ`` and the shift term to ``t²`` times itself;
since ``x − log(1 + x)`` increases on ``x ≥ 0``, ``D(t)`` increases in ``t``.

Budget ``D ≤ b``, enforced by projection: after every filter update, if the estimate of ``D`` on
``projection_sample`` records of the minibatch (an unbiased estimate of the average) exceeds ``b``,
``(A, B)`` is scaled by the ``t ∈ (0, 1)`` that brings it to ``b`` (bisection on the monotone
``D(t)``); at the end of training the same scaling is applied with ``D`` computed exactly over all
training records, keeping the lower bisection end, so the returned filter satisfies ``D ≤ b`` on its
training records (on other records of the same population ``D`` is ``b`` up to sampling error).

Min-max training (the paper's alternating steps). On minibatches of filtered latents ``z̃``:

1. the adversary ``h(z̃) → y`` (a small MLP) takes ``adversary_steps`` gradient steps on its
   cross-entropy ``ℓ_h = CE(h(z̃), y)``, and the utility classifier ``ν(z̃) → u`` one step on
   ``ℓ_ν = CE(ν(z̃), u)`` (``A, B`` fixed);
2. the filter takes one step on ``L_f = −P + β·ℓ_ν`` (``h, ν`` fixed), then is projected on the
   sensitivity cap if there is one (below) and on the budget. ``P`` is the privacy term: with
   ``privacy_objective="adversary_loss"`` (the default, the objective as issue 5 states it)
   ``P = ℓ_h``, the adversary's loss is maximized; with
   ``"prior_matching"`` ``P = −KL(π ‖ h(z̃))`` averaged over records, with ``π`` the private label's
   training frequencies: the filter pushes the adversary's posterior toward the prior. Against a
   best-response adversary both are ideal at independence of ``z̃`` and ``y``; prior matching does not
   reward making the current adversary confidently wrong (a label flip that a re-trained adversary
   undoes);
3. every ``refit_every`` filter steps the adversary is re-initialized and re-fit for
   ``refit_epochs`` epochs on held-out records' filtered latents, so the filter is always tested
   against a fresh best response rather than one it has learned to fool.

Optional label-sensitivity cap (``max_sensitivity``, not in the paper): the Rényi DP of the filter
for the private label is ``ε(α) = (α/2)·s²`` with ``s = max_{y≠y′} ‖(AAᵀ)^{-½}B(e_y − e_{y′})‖``
(``filter_accounting.py``). The adversarial objective alone does not keep ``s`` small, so the
accounted ``ε`` can be very large; the cap makes ``ε(α) ≤ (α/2)·cap²`` a design parameter of the choice.

*Why not scale ``B`` down.* Any filter with ``s ≤ cap`` that shifts two classes apart by ``Δ = d·u``
(``‖u‖ = 1``) needs noise of variance at least ``(d/cap)²`` along ``u``: for ``Δ ∈ range(A)``,
Cauchy–Schwarz in the inner product of ``(AAᵀ)⁺`` gives ``(uᵀu)² ≤ (uᵀ(AAᵀ)⁺u)(uᵀAAᵀu)``, so
``cap² ≥ d²·uᵀ(AAᵀ)⁺u ≥ d²/(uᵀAAᵀu)``. Filters trained without the cap put their shift where they
put almost no noise; scaling ``B`` down after each step (a projection the optimizer does not see)
therefore left a shift of almost nothing, and the capped filter was in effect learned Gaussian noise.

*Parametrization under a cap.* With ``max_sensitivity`` set, the shift is tied to the noise,
``B = A·C`` with ``C`` an ``m × c`` matrix, so

    z̃ = z + A·(ε + C·e_y):

the label moves the mean of the standard normal ``ε`` by column ``y`` of ``C``, and ``A`` maps the
result into the latent space. For ``δ = e_y − e_{y′}``, ``Δ = Bδ = ACδ ∈ range(A) = range(AAᵀ)`` (no
pair is ever mutually singular), and with the thin SVD ``A = U S Vᵀ`` (``S > 0``, ``(AAᵀ)⁺ = U S⁻² Uᵀ``)

    Δᵀ(AAᵀ)⁺Δ = δᵀCᵀ V S Uᵀ · U S⁻² Uᵀ · U S Vᵀ C δ = ‖Vᵀ C δ‖² = ‖P C δ‖²,    P = VVᵀ = Aᵀ(AAᵀ)⁺A,

``P`` the orthogonal projection on the row space of ``A``. Hence

    s = max_{y≠y′} ‖P C (e_y − e_{y′})‖ ≤ s_C := max_{y≠y′} ‖C e_y − C e_{y′}‖,

with equality when ``A`` has full column rank (e.g. the default ``m = k`` with ``A`` non-singular).
Equivalently: ``ε + C e_y`` is the Gaussian mechanism with identity covariance and sensitivity ``s_C``
and ``A`` is post-processing. The bound holds for every ``A``, so the cap holds by construction as
long as the column spread ``s_C`` of ``C`` does: after every step ``C`` is scaled by
``min(1, cap/s_C)`` (``s_C`` is positively homogeneous). Nothing is lost: every filter with ``s ≤ cap``
is of this form up to a translation common to all classes outside ``range(A)`` (irrelevant to the
privacy and to any classifier of ``z̃``) — take ``C = A⁺B``: ``AC = AA⁺B`` differs from ``B`` by
``(I − AA⁺)B``, whose columns are equal since every ``Bδ`` is in ``range(A)``, and
``‖A⁺Bδ‖² = Δᵀ(AAᵀ)⁺Δ``, so ``s_C = s``. The gradient of ``L_f`` now reaches ``A`` through both ``Aε``
and ``AC e_y``, so the optimizer can put noise where a shift is worth it.

Budget projection under the cap: scaling ``A`` by ``t`` with ``C`` fixed scales ``B = AC`` by ``t`` too,
so the bisection on the increasing ``D(t)`` above applies unchanged and leaves ``s_C`` (hence the
cap) untouched; the cap's scaling of ``C`` is done first, since it only lowers ``D`` (the shift term
shrinks, ``A`` is unchanged). At the end, ``C`` is re-projected in float64 onto ``s_C ≤
cap·(1 − 10⁻⁹)`` (the margin absorbs the rounding of recomputing ``s`` through an SVD), ``B = AC`` is
materialized, the exact budget projection scales ``(A, B)``, and ``cap_label_sensitivity`` runs as a
guard. It is a no-op (``s ≤ s_C < cap``) unless ``A`` is numerically rank-deficient — singular values
below NumPy's rank tolerance, which ``label_pair_mahalanobis`` treats as zero — where it can only
shrink ``B``, never loosen the cap.

``filter_training.train_latent_filter`` implements the training; all its draws come from one torch
generator seeded from the caller's keyed generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class LinearLatentFilter:
    """``z̃ = z + A·ε + B·e_y``: ``noise_matrix`` is ``A`` (``k × m``), ``label_shift`` is ``B`` (``k × c``)."""

    noise_matrix: np.ndarray
    label_shift: np.ndarray

    def __post_init__(self) -> None:
        noise = np.asarray(self.noise_matrix, dtype=np.float64)
        shift = np.asarray(self.label_shift, dtype=np.float64)
        if noise.ndim != 2 or shift.ndim != 2 or noise.shape[0] != shift.shape[0]:
            raise ValueError("A must be k × m and B must be k × c with the same k")
        if not (np.isfinite(noise).all() and np.isfinite(shift).all()):
            raise ValueError("the filter's matrices must be finite")
        object.__setattr__(self, "noise_matrix", noise)
        object.__setattr__(self, "label_shift", shift)

    @property
    def latent_dimension(self) -> int:
        return int(self.noise_matrix.shape[0])

    @property
    def noise_dimension(self) -> int:
        return int(self.noise_matrix.shape[1])

    @property
    def private_classes(self) -> int:
        return int(self.label_shift.shape[1])

    def scaled(self, factor: float) -> LinearLatentFilter:
        return LinearLatentFilter(self.noise_matrix * factor, self.label_shift * factor)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the matrices as nested lists of floats (exact round trip)."""
        return {"noise_matrix": self.noise_matrix.tolist(), "label_shift": self.label_shift.tolist()}

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> LinearLatentFilter:
        return cls(
            np.asarray(document["noise_matrix"], dtype=np.float64),
            np.asarray(document["label_shift"], dtype=np.float64),
        )


def checked_labels(labels: np.ndarray, classes: int, name: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-d array of integer codes")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"{name} must be codes in [0, {classes})")
    return labels.astype(np.int64)


def sample_posterior(mean: np.ndarray, log_variance: np.ndarray, standard_normal: np.ndarray) -> np.ndarray:
    """``z = μ + σ·ε₀``: a draw from the encoder's posterior given standard normal draws ``ε₀``."""
    return np.asarray(mean) + np.exp(0.5 * np.asarray(log_variance)) * np.asarray(standard_normal)


def apply_latent_filter(
    latents: np.ndarray,
    private_labels: np.ndarray,
    latent_filter: LinearLatentFilter,
    standard_normal: np.ndarray,
) -> np.ndarray:
    """``z̃ = z + A·ε + B·e_y`` for every row, given the ``(n, m)`` standard normal draws ``ε``.

    ``A·ε`` is an unoptimized ``einsum`` (a fixed summation order per row, no BLAS kernel chosen by
    the batch's shape), so a record's output does not depend on the other records in its batch.
    """
    labels = checked_labels(private_labels, latent_filter.private_classes, "private_labels")
    noise = np.asarray(standard_normal, dtype=np.float64)
    if noise.shape != (len(labels), latent_filter.noise_dimension):
        raise ValueError(f"standard_normal must have shape ({len(labels)}, {latent_filter.noise_dimension})")
    noise_term = np.einsum("nr,kr->nk", noise, latent_filter.noise_matrix, optimize=False)
    return np.asarray(latents, dtype=np.float64) + noise_term + latent_filter.label_shift[:, labels].T


def privatize_latents(
    mean: np.ndarray,
    log_variance: np.ndarray,
    private_labels: np.ndarray,
    latent_filter: LinearLatentFilter,
    rng: np.random.Generator,
    posterior_sampling: bool = True,
) -> np.ndarray:
    """Filtered latents of records: ``z ~ q_e(z|x)`` (or ``z = μ`` without posterior sampling), then
    the filter. Draws, in this order, an ``(n, k)`` then an ``(n, m)`` standard normal block from
    ``rng``."""
    mean = np.asarray(mean, dtype=np.float64)
    latents = mean
    if posterior_sampling:
        latents = sample_posterior(mean, log_variance, rng.standard_normal(mean.shape))
    noise = rng.standard_normal((mean.shape[0], latent_filter.noise_dimension))
    return apply_latent_filter(latents, private_labels, latent_filter, noise)


def label_pair_mahalanobis(latent_filter: LinearLatentFilter, null_tolerance: float = 1e-9) -> np.ndarray:
    """The squared Mahalanobis distance ``Δᵀ(AAᵀ)⁺Δ`` for every label pair ``(y, y′)`` (``c × c``, symmetric, zero diagonal), ``∞`` where
    ``Δ = B(e_y − e_{y′})`` has a component outside ``range(AAᵀ)`` larger than ``null_tolerance·‖Δ‖``
    or when the computation overflows (a pair's value is never NaN).

    The range is spanned by the left singular vectors of ``A`` whose singular values exceed
    ``s_max · max(k, m) · eps`` (NumPy's rank convention).
    """
    noise = latent_filter.noise_matrix
    shift = latent_filter.label_shift
    left, singular, _ = np.linalg.svd(noise, full_matrices=False)
    rank_tolerance = (singular.max() if singular.size else 0.0) * max(noise.shape) * np.finfo(np.float64).eps
    keep = singular > rank_tolerance
    basis, kept = left[:, keep], singular[keep]
    classes = latent_filter.private_classes
    result = np.zeros((classes, classes))
    for first in range(classes):
        for second in range(first + 1, classes):
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow is caught below, as ∞
                difference = shift[:, first] - shift[:, second]
                norm, coordinates, residual = _pair_parts(difference, basis)
                if norm == 0.0:
                    continue
                value = math.inf if residual > null_tolerance * norm else float(((coordinates / kept) ** 2).sum())
            if not math.isfinite(norm) or math.isnan(residual) or math.isnan(value):
                value = math.inf  # an overflowing shift is no bound at all: never a NaN that compares False
            result[first, second] = result[second, first] = value
    return result


def _pair_parts(difference: np.ndarray, basis: np.ndarray) -> tuple[float, np.ndarray, float]:
    """``‖Δ‖``, ``Δ``'s coordinates in the range basis and the norm of its component outside it."""
    coordinates = basis.T @ difference
    return float(np.linalg.norm(difference)), coordinates, float(np.linalg.norm(difference - basis @ coordinates))


def label_sensitivity(latent_filter: LinearLatentFilter) -> float:
    """``s = max_{y≠y′} √(Δᵀ(AAᵀ)⁺Δ)``, the filter's Mahalanobis sensitivity to the private label
    (``filter_accounting``); ``∞`` if some pair is mutually singular, 0 for one class."""
    pairs = label_pair_mahalanobis(latent_filter)
    return math.sqrt(float(pairs.max())) if pairs.size else 0.0


def _noise_eigenvalues(noise_matrix: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """Eigenvalues of ``M_i = AᵀΣ_i⁻¹A`` per record, ``(n, m)``, clipped at 0."""
    gram = np.einsum("kr,nk,ks->nrs", noise_matrix, precision, noise_matrix)
    return np.clip(np.linalg.eigvalsh(gram), 0.0, None)


def distortion_parts(
    latent_filter: LinearLatentFilter, latent_log_variance: np.ndarray, private_labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    log_variance = np.asarray(latent_log_variance, dtype=np.float64)
    labels = checked_labels(private_labels, latent_filter.private_classes, "private_labels")
    if log_variance.ndim != 2 or log_variance.shape != (len(labels), latent_filter.latent_dimension):
        raise ValueError(
            f"latent_log_variance must have shape ({len(labels)}, {latent_filter.latent_dimension})"
        )
    precision = np.exp(-log_variance)
    chunks = [np.zeros((0, latent_filter.noise_dimension))]
    for start in range(0, len(labels), 65536):
        chunks.append(_noise_eigenvalues(latent_filter.noise_matrix, precision[start : start + 65536]))
    eigenvalues = np.concatenate(chunks)
    shift_term = (latent_filter.label_shift[:, labels].T ** 2 * precision).sum(axis=1)
    return eigenvalues, shift_term


def _distortion_from_parts(
    eigenvalues: np.ndarray, shift_term: np.ndarray, factor: float = 1.0
) -> np.ndarray:
    scaled = eigenvalues * factor**2
    return 0.5 * ((scaled - np.log1p(scaled)).sum(axis=1) + factor**2 * shift_term)


def filter_distortion_per_record(
    latent_filter: LinearLatentFilter, latent_log_variance: np.ndarray, private_labels: np.ndarray
) -> np.ndarray:
    """``D_i = KL(q_f(·|x_i, y_i) ‖ q_e(·|x_i))`` of every record (nats; module docstring)."""
    return _distortion_from_parts(*distortion_parts(latent_filter, latent_log_variance, private_labels))


def filter_distortion(
    latent_filter: LinearLatentFilter, latent_log_variance: np.ndarray, private_labels: np.ndarray
) -> float:
    """``D(q_f ‖ q_e)``: the closed-form KL averaged over the records (nats)."""
    per_record = filter_distortion_per_record(latent_filter, latent_log_variance, private_labels)
    if per_record.size == 0:
        raise ValueError("no records to average the distortion over")
    return float(per_record.mean())


def budget_factor(
    eigenvalues: np.ndarray, shift_term: np.ndarray, budget: float, iterations: int
) -> tuple[float, float]:
    """The scale ``t`` of ``scale_to_budget`` and the distortion at ``t``, from the filter's parts."""

    def distortion_at(factor: float) -> float:
        return float(_distortion_from_parts(eigenvalues, shift_term, factor).mean())

    full = distortion_at(1.0)
    if full <= budget:
        return 1.0, full
    target = budget * (1.0 - 1e-9)
    low, high = 0.0, 1.0
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        if distortion_at(middle) <= target:
            low = middle
        else:
            high = middle
    return low, distortion_at(low)


def scale_to_budget(
    latent_filter: LinearLatentFilter,
    latent_log_variance: np.ndarray,
    private_labels: np.ndarray,
    budget: float,
    iterations: int = 80,
) -> tuple[LinearLatentFilter, float]:
    """The filter scaled by the largest ``t ∈ [0, 1]`` (to bisection precision, from below) with
    ``D(tA, tB) ≤ budget·(1 − 10⁻⁹)`` (the margin absorbs the rounding of recomputing ``D`` from the
    scaled matrices), and ``t``. A filter already within the budget is returned unchanged."""
    if not budget >= 0:
        raise ValueError("the distortion budget must be non-negative")
    parts = distortion_parts(latent_filter, latent_log_variance, private_labels)
    factor, _ = budget_factor(*parts, budget, iterations)
    return (latent_filter if factor == 1.0 else latent_filter.scaled(factor)), factor


def cap_label_sensitivity(latent_filter: LinearLatentFilter, max_sensitivity: float) -> LinearLatentFilter:
    """The filter with ``B`` scaled down so that its label sensitivity is at most ``max_sensitivity``
    (``s`` is linear in ``B``; a mutually singular pair, ``s = ∞``, gets ``B = 0``). ``D`` only
    decreases, since the shift term of ``D`` shrinks and ``A`` is unchanged."""
    sensitivity = label_sensitivity(latent_filter)
    if sensitivity <= max_sensitivity:
        return latent_filter
    factor = max_sensitivity / sensitivity if math.isfinite(sensitivity) else 0.0
    return LinearLatentFilter(latent_filter.noise_matrix, latent_filter.label_shift * factor)


def column_spread(coefficients: np.ndarray) -> float:
    """``s_C = max_{y≠y′} ‖C e_y − C e_{y′}‖``, the largest distance between two columns of ``C``
    (0 for one column): under ``B = A·C`` an upper bound on the label sensitivity for every ``A``
    (module docstring)."""
    matrix = np.asarray(coefficients, dtype=np.float64)
    differences = matrix[:, :, None] - matrix[:, None, :]
    return float(np.sqrt((differences**2).sum(axis=0)).max()) if matrix.shape[1] else 0.0


def cap_column_spread(coefficients: np.ndarray, max_spread: float) -> np.ndarray:
    """``C`` scaled by ``min(1, max_spread/s_C)``, so that its column spread is at most ``max_spread``."""
    matrix = np.asarray(coefficients, dtype=np.float64)
    spread = column_spread(matrix)
    return matrix * (max_spread / spread) if spread > max_spread else matrix
