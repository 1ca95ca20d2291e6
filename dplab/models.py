"""The models the labs train, and how big their gradients are."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

MNIST_MLP = (784, 256, 128, 64, 10)


class MLP(nn.Module):
    """A ReLU multilayer perceptron; optional BatchNorm after each hidden layer."""

    def __init__(self, sizes: Sequence[int] = MNIST_MLP, batchnorm: bool = False):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(d_in, d_out))
            if i < len(sizes) - 2:
                if batchnorm:
                    layers.append(nn.BatchNorm1d(d_out))
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        self.sizes = tuple(sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))


def mlp(seed: int = 0, sizes: Sequence[int] = MNIST_MLP, batchnorm: bool = False) -> MLP:
    """Build an MLP whose initial weights depend only on `seed`."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return MLP(sizes, batchnorm)
    finally:
        torch.random.set_rng_state(gen_state)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable values, which is also the number of gradient values."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def gradient_bytes(model: nn.Module) -> int:
    """Bytes one all-reduce of all gradients moves in: sum of nelement * element_size."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def mlp_parameter_count(sizes: Sequence[int] = MNIST_MLP) -> int:
    """Closed form for an MLP: sum over layers of d_in*d_out weights + d_out biases."""
    return sum(d_in * d_out + d_out for d_in, d_out in zip(sizes[:-1], sizes[1:]))


def counted_gradient_bytes(model: nn.Module) -> int:
    """Bytes of the gradients autograd produced: sum of grad.nelement() * grad.element_size()."""
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    if any(g is None for g in grads):
        raise ValueError("some parameters have no .grad yet: run loss.backward() before counting gradient bytes")
    return sum(g.nelement() * g.element_size() for g in grads)


def mlp_step_flops(sizes: Sequence[int] = MNIST_MLP, batch: int = 1) -> dict[str, int]:
    """Floating-point operations of one SGD step of an MLP: matmuls forward and backward, and the update.

    Forward: 2*B*d_in*d_out per layer. Backward: the same again for the weight gradients,
    plus the input gradients of every layer but the first (the images need no gradient).
    Update: one multiply and one subtract per parameter. Biases and ReLUs are left out.
    """
    layers = list(zip(sizes[:-1], sizes[1:]))
    forward = sum(2 * batch * d_in * d_out for d_in, d_out in layers)
    input_grads = sum(2 * batch * d_in * d_out for d_in, d_out in layers[1:])
    return {
        "forward": forward,
        "backward": forward + input_grads,
        "update": 2 * mlp_parameter_count(sizes),
    }
