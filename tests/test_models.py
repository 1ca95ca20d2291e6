"""Tests for dplab.models: the MLP, and three independent counts of its gradient size."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dplab.models import (
    MNIST_MLP,
    count_parameters,
    counted_gradient_bytes,
    gradient_bytes,
    mlp,
    mlp_parameter_count,
    mlp_step_flops,
)

# Seed 004's "collective data size" for this MLP, in bytes: a published value to check against.
SEED_004_BYTES = 971_048


def _backward(model: nn.Module, batch: int = 8) -> None:
    x = torch.randn(batch, 784, generator=torch.Generator().manual_seed(0))
    y = torch.arange(batch) % 10
    nn.functional.cross_entropy(model(x), y).backward()


def test_parameter_count_agrees_counted_and_in_closed_form():
    model = mlp()
    assert count_parameters(model) == mlp_parameter_count(MNIST_MLP)
    assert mlp_parameter_count(MNIST_MLP) * 4 == SEED_004_BYTES


@pytest.mark.parametrize("sizes", [MNIST_MLP, (10, 3), (5, 7, 2), (784, 512, 512, 10)])
def test_closed_form_matches_counted_parameters_for_other_shapes(sizes):
    assert mlp_parameter_count(sizes) == count_parameters(mlp(sizes=sizes))


def test_gradient_bytes_counted_after_backward_match_formula_and_seed_004():
    model = mlp()
    with pytest.raises(ValueError, match="backward"):
        counted_gradient_bytes(model)
    _backward(model)
    by_hand = sum(p.grad.nelement() * p.grad.element_size() for p in model.parameters())
    assert counted_gradient_bytes(model) == by_hand == gradient_bytes(model) == 4 * mlp_parameter_count()
    assert by_hand == SEED_004_BYTES


def test_gradient_bytes_double_in_float64():
    model = mlp().double()
    assert gradient_bytes(model) == 8 * mlp_parameter_count()


def test_mlp_weights_depend_only_on_the_seed_and_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a, b, c = mlp(seed=0), mlp(seed=0), mlp(seed=1)
    assert torch.equal(torch.rand(3), expected_next)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_mlp_maps_flat_or_square_images_to_ten_logits():
    model = mlp()
    assert model(torch.zeros(5, 784)).shape == (5, 10)
    assert model(torch.zeros(5, 1, 28, 28)).shape == (5, 10)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == list(zip(MNIST_MLP[:-1], MNIST_MLP[1:]))


def test_batchnorm_variant_adds_scale_and_shift_per_hidden_unit():
    model = mlp(batchnorm=True)
    assert sum(isinstance(m, nn.BatchNorm1d) for m in model.modules()) == 3
    assert count_parameters(model) == mlp_parameter_count() + 2 * sum(MNIST_MLP[1:-1])


@pytest.mark.parametrize("batch", [1, 64])
def test_step_flops_match_torch_flop_counter(batch):
    model = mlp()
    x, y = torch.randn(batch, 784), torch.arange(batch) % 10
    with FlopCounterMode(display=False) as fwd:
        loss = nn.functional.cross_entropy(model(x), y)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    flops = mlp_step_flops(batch=batch)
    assert flops["forward"] == fwd.get_total_flops()
    assert flops["backward"] == bwd.get_total_flops()
    assert flops["update"] == 2 * count_parameters(model)
