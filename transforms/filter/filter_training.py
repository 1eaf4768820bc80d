"""The min-max training of the per-choice linear latent filter (torch, CPU).

Issue 5, step 2 (Chen, Navidi, Rajagopal, "Generating private data with user customization"): the
objective, the budget projection and the sensitivity cap are stated in ``latent_filter.py``'s module
docstring, whose closed forms (``filter_distortion``, ``scale_to_budget``, ``cap_label_sensitivity``)
this training calls. Only training needs torch: the filter itself, its application and its
accounting are NumPy, so a release that uses stored filters (``privlake train-filters``) never
imports torch.

All draws come from one torch generator seeded from the caller's keyed generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn

from transforms.filter.adam import Adam
from transforms.filter.latent_filter import (
    LinearLatentFilter,
    budget_factor,
    cap_column_spread,
    cap_label_sensitivity,
    checked_labels,
    column_spread,
    distortion_parts,
    filter_distortion,
    label_sensitivity,
    scale_to_budget,
)
from transforms.filter.vae import multilayer_perceptron, seeded_torch_generator


@dataclass(frozen=True)
class FilterTrainingConfig:
    """Settings of ``train_latent_filter`` (module docstring): ``budget`` is ``b`` (nats),
    ``utility_weight`` is ``β``; ``noise_dimension`` ``m`` defaults to ``k``."""

    budget: float
    utility_weight: float = 1.0
    privacy_objective: Literal["adversary_loss", "prior_matching"] = "adversary_loss"
    epochs: int = 15
    batch_size: int = 512
    filter_learning_rate: float = 0.02
    classifier_learning_rate: float = 0.01
    classifier_hidden_width: int = 32
    adversary_steps: int = 2
    refit_every: int = 50
    refit_epochs: int = 3
    held_out_fraction: float = 0.25
    noise_dimension: int | None = None
    initial_noise_scale: float = 0.1
    posterior_sampling: bool = True
    projection_sample: int = 128
    max_sensitivity: float | None = None

    def __post_init__(self) -> None:
        if not self.budget >= 0:
            raise ValueError("the distortion budget must be non-negative")
        if self.utility_weight < 0:
            raise ValueError("utility_weight must be non-negative")
        if not 0 < self.held_out_fraction < 1:
            raise ValueError("held_out_fraction must be in (0, 1)")
        if self.max_sensitivity is not None and not self.max_sensitivity >= 0:
            raise ValueError("max_sensitivity must be non-negative")
        if (
            min(self.epochs, self.batch_size, self.adversary_steps, self.refit_every, self.projection_sample)
            < 1
        ):
            raise ValueError(
                "epochs, batch_size, adversary_steps, refit_every and projection_sample must be at least 1"
            )


@dataclass
class TrainedFilter:
    """The trained filter, its exact distortion on the training records, and per-epoch means of the
    adversary's and the utility classifier's training losses and of the projected minibatch ``D``.
    Under a sensitivity cap every epoch also records ``coefficient_spread``, the largest ``s_C`` of
    ``C`` after any of its steps' projections, and ``label_sensitivity``, the exact ``s`` of
    ``(A, AC)`` at the epoch's end (both in float64 from the float32 parameters)."""

    latent_filter: LinearLatentFilter
    distortion: float
    history: list[dict[str, float]] = field(default_factory=list)


def _classifier(inputs: int, classes: int, hidden: int, generator: torch.Generator) -> nn.Sequential:
    widths = [inputs, hidden, classes] if hidden > 0 else [inputs, classes]
    return multilayer_perceptron(widths, generator)


def train_latent_filter(
    latent_mean: np.ndarray,
    latent_log_variance: np.ndarray,
    private_labels: np.ndarray,
    utility_labels: np.ndarray,
    private_classes: int,
    utility_classes: int,
    config: FilterTrainingConfig,
    rng: np.random.Generator,
) -> TrainedFilter:
    """Train ``(A, B)`` min-max against an adversary and with a utility classifier, under ``D ≤ b``
    (and, with ``max_sensitivity``, as ``(A, C)`` with ``B = A·C`` under ``s_C ≤ cap``).

    Inputs are the frozen encoder's posterior parameters of the records (``inference.encode_latents``)
    and their label codes. ``rng`` is a keyed generator; it draws the held-out split and the seed
    of the torch generator that makes every other draw.
    """
    mean = np.asarray(latent_mean, dtype=np.float64)
    log_variance = np.asarray(latent_log_variance, dtype=np.float64)
    private = checked_labels(private_labels, private_classes, "private_labels")
    utility = checked_labels(utility_labels, utility_classes, "utility_labels")
    rows, latent_dimension = mean.shape
    if log_variance.shape != mean.shape or len(private) != rows or len(utility) != rows:
        raise ValueError("latent means, log-variances and labels must describe the same records")
    held_out_rows = int(round(config.held_out_fraction * rows))
    if held_out_rows < 1 or rows - held_out_rows < 1:
        raise ValueError("too few records to split into training and held-out parts")
    order = rng.permutation(rows)
    held_out, training = order[:held_out_rows], np.sort(order[held_out_rows:])
    generator = seeded_torch_generator(rng)

    noise_dimension = config.noise_dimension or latent_dimension
    initial = LinearLatentFilter(
        config.initial_noise_scale * np.eye(latent_dimension, noise_dimension),
        np.zeros((latent_dimension, private_classes)),
    )
    initial, _ = scale_to_budget(initial, log_variance[training], private[training], config.budget)
    noise_matrix = nn.Parameter(torch.tensor(initial.noise_matrix, dtype=torch.float32))
    cap = config.max_sensitivity
    if cap is None:
        label_shift = nn.Parameter(torch.tensor(initial.label_shift, dtype=torch.float32))
        filter_parameters = [noise_matrix, label_shift]

        def shift_matrix() -> torch.Tensor:
            return label_shift

    else:
        coefficients = nn.Parameter(torch.zeros((noise_dimension, private_classes), dtype=torch.float32))
        filter_parameters = [noise_matrix, coefficients]

        def shift_matrix() -> torch.Tensor:
            return noise_matrix @ coefficients

        def current_filter() -> LinearLatentFilter:
            noise = noise_matrix.detach().double().numpy()
            return LinearLatentFilter(noise, noise @ coefficients.detach().double().numpy())

    tensors = {
        "mean": torch.tensor(mean, dtype=torch.float32),
        "std": torch.tensor(np.exp(0.5 * log_variance), dtype=torch.float32),
        "private": torch.tensor(private),
        "utility": torch.tensor(utility),
    }
    prior = np.bincount(private[training], minlength=private_classes) / len(training)
    log_prior = torch.tensor(np.log(np.clip(prior, 1e-12, None)), dtype=torch.float32)
    prior_tensor = torch.tensor(prior, dtype=torch.float32)

    def filtered(indices: torch.Tensor) -> torch.Tensor:
        latents = tensors["mean"][indices]
        if config.posterior_sampling:
            latents = latents + tensors["std"][indices] * torch.randn(latents.shape, generator=generator)
        noise = torch.randn((len(indices), noise_dimension), generator=generator)
        return latents + noise @ noise_matrix.T + shift_matrix()[:, tensors["private"][indices]].T

    hidden = config.classifier_hidden_width
    adversary = _classifier(latent_dimension, private_classes, hidden, generator)
    utility_classifier = _classifier(latent_dimension, utility_classes, hidden, generator)
    adversary_optimizer = Adam(adversary.parameters(), lr=config.classifier_learning_rate)
    utility_optimizer = Adam(utility_classifier.parameters(), lr=config.classifier_learning_rate)
    filter_optimizer = Adam(filter_parameters, lr=config.filter_learning_rate)
    cross_entropy = nn.CrossEntropyLoss()

    def refit_adversary() -> tuple[nn.Sequential, Adam]:
        fresh = _classifier(latent_dimension, private_classes, hidden, generator)
        optimizer = Adam(fresh.parameters(), lr=config.classifier_learning_rate)
        held = torch.tensor(held_out)
        for _ in range(config.refit_epochs):
            shuffled = held[torch.randperm(len(held), generator=generator)]
            for start in range(0, len(shuffled), config.batch_size):
                indices = shuffled[start : start + config.batch_size]
                with torch.no_grad():
                    inputs = filtered(indices)
                loss = cross_entropy(fresh(inputs), tensors["private"][indices])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return fresh, optimizer

    training_tensor = torch.tensor(training)
    history: list[dict[str, float]] = []
    steps = 0
    for _ in range(config.epochs):
        shuffled = training_tensor[torch.randperm(len(training_tensor), generator=generator)]
        sums = {"adversary_loss": 0.0, "utility_loss": 0.0, "distortion": 0.0, "batches": 0.0}
        largest_spread = 0.0
        for start in range(0, len(shuffled), config.batch_size):
            indices = shuffled[start : start + config.batch_size]
            private_batch = tensors["private"][indices]
            utility_batch = tensors["utility"][indices]
            latents = filtered(indices)
            detached = latents.detach()
            for _ in range(config.adversary_steps):
                adversary_loss = cross_entropy(adversary(detached), private_batch)
                adversary_optimizer.zero_grad()
                adversary_loss.backward()
                adversary_optimizer.step()
            utility_loss = cross_entropy(utility_classifier(detached), utility_batch)
            utility_optimizer.zero_grad()
            utility_loss.backward()
            utility_optimizer.step()

            adversary_logits = adversary(latents)
            if config.privacy_objective == "adversary_loss":
                privacy_term = cross_entropy(adversary_logits, private_batch)
            else:
                log_posterior = torch.log_softmax(adversary_logits, dim=1)
                privacy_term = -(prior_tensor * (log_prior - log_posterior)).sum(dim=1).mean()
            filter_loss = -privacy_term + config.utility_weight * cross_entropy(
                utility_classifier(latents), utility_batch
            )
            filter_optimizer.zero_grad()
            filter_loss.backward()
            filter_optimizer.step()
            with torch.no_grad():
                sample_rows = indices[: config.projection_sample].numpy()
                if cap is None:
                    current = LinearLatentFilter(noise_matrix.double().numpy(), label_shift.double().numpy())
                    parts = distortion_parts(current, log_variance[sample_rows], private[sample_rows])
                    factor, sample_distortion = budget_factor(*parts, config.budget, iterations=30)
                    if factor < 1.0:
                        noise_matrix.mul_(factor)
                        label_shift.mul_(factor)
                else:
                    spread = column_spread(coefficients.double().numpy())
                    if spread > cap:
                        coefficients.mul_(cap / spread)
                    largest_spread = max(largest_spread, column_spread(coefficients.double().numpy()))
                    parts = distortion_parts(current_filter(), log_variance[sample_rows], private[sample_rows])
                    factor, sample_distortion = budget_factor(*parts, config.budget, iterations=30)
                    if factor < 1.0:
                        noise_matrix.mul_(factor)
            steps += 1
            if steps % config.refit_every == 0:
                adversary, adversary_optimizer = refit_adversary()
            sums["adversary_loss"] += float(adversary_loss.detach())
            sums["utility_loss"] += float(utility_loss.detach())
            sums["distortion"] += sample_distortion
            sums["batches"] += 1
        epoch = {name: value / sums["batches"] for name, value in sums.items() if name != "batches"}
        if cap is not None:
            epoch["coefficient_spread"] = largest_spread
            epoch["label_sensitivity"] = label_sensitivity(current_filter())
        history.append(epoch)

    if cap is None:
        final = LinearLatentFilter(
            noise_matrix.detach().double().numpy(), label_shift.detach().double().numpy()
        )
        final, _ = scale_to_budget(final, log_variance[training], private[training], config.budget)
    else:
        noise = noise_matrix.detach().double().numpy()
        capped = cap_column_spread(coefficients.detach().double().numpy(), cap * (1.0 - 1e-9))
        final = LinearLatentFilter(noise, noise @ capped)
        final, _ = scale_to_budget(final, log_variance[training], private[training], config.budget)
        final = cap_label_sensitivity(final, cap)
    return TrainedFilter(final, filter_distortion(final, log_variance[training], private[training]), history)
