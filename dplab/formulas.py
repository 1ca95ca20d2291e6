"""Cost formulas that chapters derive in their own cells; the chapters and the Formulas page import them.

Formulas that a lab teaches live in `labcode/` (all-reduce costs, ZeRO memory, straggler
model, Noam); this module holds the ones no lab exports. Each docstring names its chapter.
"""
import math
from collections.abc import Sequence

import numpy as np
import torch

import labcode.costmodel as cm


def shard_weights(sizes: Sequence[int]) -> list[float]:
    """Weight B_r / sum_j B_j of each rank's shard gradient in the batch mean (data parallelism)."""
    total = sum(sizes)
    if total <= 0:
        raise ValueError(f"shard sizes must add up to more than 0, got {list(sizes)}")
    return [b / total for b in sizes]


def ring_tree_crossover_bytes(p: int, alpha: float, beta: float) -> float:
    """Message size at which the ring all-reduce and the binomial tree take equally long (all-reduce)."""
    L = cm.log2_ceil(p)
    return (2 * (p - 1) - 2 * L) * alpha / ((2 * L - 2 * (p - 1) / p) * beta)


def pipelined_chain_time(n: float, p: int, k: int, alpha: float, beta: float) -> float:
    """Time to pass n bytes cut into k slices down a chain of p ranks (all-reduce chapter)."""
    return (p - 2 + k) * (alpha + n * beta / k)


def best_slice_count(n: float, p: int, alpha: float, beta: float) -> float:
    """The k that minimises pipelined_chain_time: sqrt((p - 2) n beta / alpha)."""
    return math.sqrt((p - 2) * n * beta / alpha)


def overlap_step_time(compute: Sequence[float], comm: Sequence[float]) -> float:
    """Backward plus bucketed all-reduces: max over i of r_i + m_i + ... + m_k (DDP chapter)."""
    ready = np.cumsum(compute)
    rest = np.cumsum(np.asarray(comm)[::-1])[::-1]  # m_i + ... + m_k
    return np.max(ready + rest).item()


def scaled_lr(lr: float, k: float, rule: str) -> float:
    """Learning rate for a global batch k times larger: rule "linear" (k·lr) or "sqrt" (√k·lr)."""
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"rule must be 'linear' or 'sqrt', got {rule!r}")
    return lr * (k if rule == "linear" else math.sqrt(k))


def warmup_factor(step: int, warmup: int) -> float:
    """Linear warm-up: the fraction min(1, s / w) of the full rate at step s = 1, 2, ..."""
    return min(1.0, step / warmup)


def critical_batch_ratios(batch: float, b_noise: float) -> tuple[float, float]:
    """(S / S_min, E / E_min): steps and samples against the fewest, for a global batch (McCandlish et al.)."""
    return 1 + b_noise / batch, 1 + batch / b_noise


def clip_by_norm(g: np.ndarray, c: float) -> np.ndarray:
    """g scaled by min(1, c / ||g||): gradient clipping to the norm c."""
    return g * min(1.0, c / np.linalg.norm(g))


def loss_scale_range(dtype: torch.dtype, scale: float) -> tuple[float, float]:
    """(flush, largest): unscaled gradients above flush and up to largest stay nonzero and finite.

    flush is half the smallest subnormal over scale (at or below it, the scaled value rounds to 0);
    largest is the largest finite value over scale.
    """
    fi = torch.finfo(dtype)
    return fi.smallest_normal * fi.eps / 2 / scale, fi.max / scale


def dataparallel_hub_bytes(k: int, n: float) -> float:
    """Bytes through GPU 0 per DataParallel step: parameters out and gradients in (large-batch chapter)."""
    return 2 * (k - 1) * n


def half_ring(n: float, p: int) -> cm.Cost:
    """The reduce-scatter (or all-gather) half of the ring all-reduce: its first p - 1 rounds."""
    rounds = cm.schedule("ring", n, p)[: p - 1]
    return cm.Cost(len(rounds), sum(s.nbytes for s in rounds), 0.0)


def backup_variance_factor(p: int, k: int) -> float:
    """Growth of the gradient's variance when k of p ranks' gradients are dropped: p / (p - k)."""
    if not 0 <= k < p:
        raise ValueError(f"need 0 <= k < p backup workers, got k={k}, p={p}")
    return p / (p - k)


def staleness_total(updates: int, workers: int) -> int:
    """Total staleness of G updates from W always-busy workers of an asynchronous server."""
    G, W = updates, workers
    return G * (G - 1) // 2 - (G - W) * (G - W + 1) // 2


def local_sgd_rounds(steps: int, H: int) -> int:
    """Averaging rounds of local SGD over `steps` optimizer steps, H local steps per round."""
    return -(-steps // H)


def powersgd_ratio(m: int, n: int, r: int) -> float:
    """How many times fewer numbers a rank-r PowerSGD sends for an m x n matrix: mn / (r(m + n))."""
    return m * n / (r * (m + n))


def parameter_server_bytes(workers: int, n: float) -> float:
    """Bytes a single parameter server receives and sends per synchronous round: 2 W n."""
    return 2 * workers * n
