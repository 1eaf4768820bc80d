"""Adam (Kingma and Ba, "Adam: A method for stochastic optimization", 2015, Algorithm 1), computed
exactly as ``torch.optim.Adam`` computes it for CPU tensors (its single-tensor path, no weight
decay, no AMSGrad): the same operations in the same order, so training gives the same bits.

Why not ``torch.optim.Adam`` itself: the first call of any ``torch.optim`` optimizer imports
``torch._dynamo`` (its ``_disable_dynamo`` wrapper), with SymPy behind it — 1.9 s of a filter
release's start, for a compiler privlake never uses (issue 16, "Fast start").
``tests/unit/transforms/filter/test_adam.py`` checks the bits against ``torch.optim.Adam``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class Adam:
    """``m ← β₁m + (1 − β₁)g``, ``v ← β₂v + (1 − β₂)g²``,
    ``θ ← θ − (lr / (1 − β₁ᵗ))·m / (√v / √(1 − β₂ᵗ) + ε)`` per parameter (Algorithm 1, with
    torch's placement of ``ε``)."""

    def __init__(self, parameters: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.parameters = list(parameters)
        self.lr, (self.beta1, self.beta2), self.eps = float(lr), betas, eps
        self.state: dict[int, tuple[list[float], torch.Tensor, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        """Gradients to ``None`` (as ``torch.optim``'s default ``set_to_none``)."""
        for parameter in self.parameters:
            parameter.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for parameter in self.parameters:
            grad = parameter.grad
            if grad is None:
                continue
            if id(parameter) not in self.state:
                self.state[id(parameter)] = (
                    [0.0],
                    torch.zeros_like(parameter, memory_format=torch.preserve_format),
                    torch.zeros_like(parameter, memory_format=torch.preserve_format),
                )
            step, exp_avg, exp_avg_sq = self.state[id(parameter)]
            step[0] += 1.0
            exp_avg.lerp_(grad, 1 - self.beta1)
            exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
            bias_correction1 = 1 - self.beta1 ** step[0]
            bias_correction2 = 1 - self.beta2 ** step[0]
            step_size = self.lr / bias_correction1
            denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(self.eps)
            parameter.addcdiv_(exp_avg, denom, value=-step_size)
