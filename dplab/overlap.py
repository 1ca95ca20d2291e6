"""Gradient all-reduce with and without overlap, for the DDP lab and benchmark.

Lab 4 writes the same two techniques in its own cells; this module is the copy the
benchmark and the tests import, so that `benchmarks/ddp.py` times the code the tests check.
"""
from __future__ import annotations

import functools
from typing import Sequence

import torch
import torch.distributed as dist
from torch import nn

from .models import mlp

#: A deep, wide MLP: about 10 M parameters, 39 MiB (41 MB) of fp32 gradients in 4 MiB
#: layers, so that bucket caps between 1 and 50 MiB give different bucketings.
WIDE_MLP = (784,) + (1024,) * 10 + (10,)


def wide_mlp(seed: int = 0, sizes: Sequence[int] = WIDE_MLP) -> nn.Module:
    """Build the overlap-benchmark MLP whose initial weights depend only on `seed`."""
    return mlp(seed=seed, sizes=sizes)


def reverse_buckets(params: Sequence[torch.Tensor], cap_bytes: int) -> list[list[torch.Tensor]]:
    """Group parameters last-registered first; close a bucket once it holds >= cap_bytes (DDP's rule)."""
    buckets: list[list[torch.Tensor]] = []
    current: list[torch.Tensor] = []
    size = 0
    for p in reversed(list(params)):
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= cap_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


def allreduce_after_backward(model: nn.Module) -> None:
    """Average all gradients across ranks with one flat all-reduce (no overlap)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


class HookAllReduce:
    """Launch one async all-reduce per bucket from gradient hooks; `wait()` finishes them."""

    def __init__(self, model: nn.Module, cap_bytes: int):
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets = reverse_buckets(params, cap_bytes)
        self.world_size = dist.get_world_size()
        self.remaining = [len(b) for b in self.buckets]
        self.in_flight: list[tuple[int, torch.Tensor, dist.Work]] = []
        self.hooks = [
            p.register_post_accumulate_grad_hook(functools.partial(self._grad_ready, i))
            for i, bucket in enumerate(self.buckets)
            for p in bucket
        ]

    def _grad_ready(self, i: int, param: torch.Tensor) -> None:
        """Called by autograd when param.grad is final; launch the bucket when it is full."""
        self.remaining[i] -= 1
        if self.remaining[i] == 0:
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[i]])
            self.in_flight.append((i, flat, dist.all_reduce(flat, async_op=True)))

    def wait(self) -> None:
        """Wait for every bucket's all-reduce, write the averages back, reset for the next step."""
        for i, flat, work in self.in_flight:
            work.wait()
            flat /= self.world_size
            offset = 0
            for p in self.buckets[i]:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        if len(self.in_flight) != len(self.buckets):
            raise RuntimeError(
                f"only {len(self.in_flight)} of {len(self.buckets)} buckets were launched: "
                "every parameter must get a gradient in each backward pass"
            )
        self.in_flight = []
        self.remaining = [len(b) for b in self.buckets]

    def remove(self) -> None:
        """Unregister the gradient hooks."""
        for h in self.hooks:
            h.remove()
        self.hooks = []
