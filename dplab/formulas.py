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


def warmup_factor(step: int, warmup: int, k: float) -> float:
    """Goyal et al.'s gradual warm-up, as a multiple of the base rate η: 1 + (k − 1)·min(1, s / w).

    Step s = 0, 1, ... runs at η_s = η + (kη − η)·min(1, s / w): η at the first step, a constant
    increment per step, kη from step w on (Goyal et al. 2017, section 2.2). Large-batch chapter.
    """
    if warmup < 1 or k < 1:
        raise ValueError(f"need warmup >= 1 step and k >= 1, got warmup={warmup}, k={k}")
    return 1 + (k - 1) * min(1.0, step / warmup)


def critical_batch_ratios(batch: float, b_noise: float) -> tuple[float, float]:
    """(S / S_min, E / E_min): steps and samples against the fewest, for a global batch (McCandlish et al.)."""
    return 1 + b_noise / batch, 1 + batch / b_noise


def clip_by_norm(g: np.ndarray, c: float) -> np.ndarray:
    """g scaled by min(1, c / ||g||): gradient clipping to the norm c."""
    return g * min(1.0, c / np.linalg.norm(g))


def loss_scale_range(dtype: torch.dtype, scale: float) -> tuple[float, float]:
    """(flush, overflow): a gradient v scaled by `scale` and rounded to `dtype` is 0 iff |v| <= flush,
    and ±inf iff |v| >= overflow (round to nearest, ties to even).

    flush is half the smallest subnormal over scale: exactly half rounds to the even neighbour, 0.
    overflow is the largest finite value plus half its spacing, over scale: from that tie on,
    rounding goes to the next power of two, which does not exist (inf). Large-batch chapter.
    """
    fi = torch.finfo(dtype)
    mantissa = round(-math.log2(fi.eps))              # stored fraction bits
    top_spacing = 2.0 ** (math.floor(math.log2(fi.max)) - mantissa)
    return fi.smallest_normal * fi.eps / 2 / scale, (fi.max + top_spacing / 2) / scale


def dataparallel_link_bytes(k: int, n: float) -> list[tuple[float, float]]:
    """(sent, received) bytes per GPU, GPU 0 first, then ring order, for one step of torch.nn.DataParallel.

    The step broadcasts n bytes of parameters from GPU 0 (replicate) and reduces n bytes of
    gradients to GPU 0 (Broadcast.backward), both as NCCL ring pipelines: the broadcast runs
    0 -> 1 -> ... -> k-1, the reduce 1 -> ... -> k-1 -> 0, each GPU forwarding what it got.
    Inputs scattered from and outputs gathered to GPU 0 come on top (large-batch chapter).
    Sources: torch 2.13 nn/parallel/replicate.py replicate -> comm.broadcast_coalesced;
    nn/parallel/_functions.py Broadcast.backward -> comm.reduce_add -> cuda/nccl.py reduce;
    NCCL src/device/broadcast.h and reduce.h, runRing.
    """
    if k < 1:
        raise ValueError(f"need k >= 1 GPUs, got {k}")
    if k == 1:
        return [(0.0, 0.0)]                        # DataParallel just calls the module
    out = []
    for i in range(k):
        bcast_sent, bcast_recv = (n if i < k - 1 else 0.0), (n if i > 0 else 0.0)
        reduce_sent, reduce_recv = (n if i > 0 else 0.0), (n if i != 1 else 0.0)
        out.append((bcast_sent + reduce_sent, bcast_recv + reduce_recv))
    return out


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
    """Total staleness of G updates at an asynchronous server whose W workers are always busy.

    Assumes a fixed number G of pulls (W at the start, then one after each applied gradient
    until G are issued) and that every pulled gradient is applied: the versions applied are
    0..G-1 and those pulled 0 (W times), 1, ..., G-W, whatever the order of arrival.
    """
    G, W = updates, workers
    return G * (G - 1) // 2 - (G - W) * (G - W + 1) // 2


def local_sgd_rounds(steps: int, H: int) -> int:
    """Averaging rounds of local SGD over `steps` optimizer steps, H local steps per round."""
    return -(-steps // H)


def powersgd_ratio(m: int, n: int, r: int) -> float:
    """How many times fewer numbers a rank-r PowerSGD sends for an m x n matrix: mn / (r(m + n))."""
    return m * n / (r * (m + n))


def parameter_server_bytes(workers: int, n: float, servers: int = 1) -> float:
    """Bytes one server's link receives and sends per synchronous round: 2 W n / S.

    Each of the W workers pushes its n-byte gradient and pulls n bytes of parameters; with the
    parameters sharded evenly over S servers, each server handles 1/S of every message.
    """
    if servers < 1:
        raise ValueError(f"need at least one server, got {servers}")
    return 2 * workers * n / servers
