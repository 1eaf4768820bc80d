"""The filter's Adam (``transforms/filter/adam.py``) gives ``torch.optim.Adam``'s bits on CPU, and
training a filter or a VAE never imports ``torch._dynamo`` (the reason it exists)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

from transforms.filter.adam import Adam

ROOT = Path(__file__).resolve().parents[4]


def train(make_optimizer, steps: int = 60) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    optimizer = make_optimizer(model.parameters())
    loss_function = nn.CrossEntropyLoss()
    for step in range(steps):
        inputs = torch.randn((16, 5), generator=generator)
        labels = torch.randint(0, 3, (16,), generator=generator)
        loss = loss_function(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        if step % 7 == 3:  # a parameter without a gradient this step is left alone by both
            model[2].bias.grad = None
        optimizer.step()
    return [parameter.detach().clone() for parameter in model.parameters()]


def test_the_same_bits_as_torch_optim_adam() -> None:
    for lr in (1e-3, 0.05):
        ours = train(lambda parameters, lr=lr: Adam(parameters, lr=lr))
        theirs = train(lambda parameters, lr=lr: torch.optim.Adam(parameters, lr=lr))
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    # and the check can fail: another learning rate moves the bits
    other = train(lambda parameters: Adam(parameters, lr=0.0011))
    assert not all(torch.equal(a, b) for a, b in zip(other, train(lambda p: torch.optim.Adam(p, lr=1e-3)), strict=True))


def test_training_imports_no_compiler() -> None:
    code = ("import sys, torch\nfrom torch import nn\nfrom transforms.filter.adam import Adam\n"
            "from transforms.filter.vae import configure_deterministic_torch\nconfigure_deterministic_torch(1)\n"
            "model = nn.Linear(3, 2)\noptimizer = Adam(model.parameters(), lr=0.01)\n"
            "model(torch.ones(4, 3)).sum().backward()\noptimizer.step()\n"
            "print(torch.are_deterministic_algorithms_enabled(), 'torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]
