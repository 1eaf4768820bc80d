"""Utility of a crowd release against known truth (the evaluation of PrisCrowd, Section 5):
the ISE of densities against an object's true density, for the learned density ``f_i`` and for
the density of the released synthetic claims. Used by the reproduction tests and the utility
benchmark."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from transforms.crowd.bandwidth import object_bandwidths
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.density_metrics import (
    GaussianMixture,
    integrated_squared_error,
    kde_mixture,
    released_density,
    scaled_integrated_squared_error,
)

TrueDensity = Callable[[object], GaussianMixture]


def released_claims_errors(
    released: pd.DataFrame, true_density: TrueDensity, bandwidth_floor: float, scale: float
) -> tuple[float, float]:
    """Mean over released objects of (ISE, SISE) between the KDE of the object's released claims
    (same robust bandwidth rule as the release) and its true density."""
    block = ClaimsBlock.from_frame(released.assign(source_id=released["claim_index"]))
    bandwidths = object_bandwidths(block, bandwidth_floor)
    ises, sises = [], []
    for i, object_id in enumerate(block.object_ids):
        estimate = released_density(block.values[block.object_slice(i)], bandwidths[i])
        truth = true_density(object_id)
        ises.append(integrated_squared_error(estimate, truth))
        sises.append(scaled_integrated_squared_error(estimate, truth, scale))
    return float(np.mean(ises)), float(np.mean(sises))


def learned_density_errors(
    block: ClaimsBlock, seed_weights: np.ndarray, bandwidths: np.ndarray, true_density: TrueDensity
) -> np.ndarray:
    """(O,) ISE between each object's learned density ``f_i = Σ_s c_is K_h(·, x_is)`` and its
    true density."""
    errors = np.empty(block.number_of_objects)
    for i, object_id in enumerate(block.object_ids):
        claims = block.object_slice(i)
        learned = kde_mixture(block.values[claims], seed_weights[claims], bandwidths[i])
        errors[i] = integrated_squared_error(learned, true_density(object_id))
    return errors
