"""Generated from chapters/data_parallelism.md, chapters/allreduce_algorithms.md,
chapters/ddp.md, chapters/ddp_inside.md, chapters/large_batch.md,
chapters/mixed_precision.md, chapters/sharding.md, chapters/stragglers.md by
tools/export_labs.py: do not edit.

Change the chapter, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import labcode.costmodel as cm
import math
import numpy as np
import torch
from collections.abc import Sequence


# From chapters/data_parallelism.md, section "Unequal shards".
def shard_weights(sizes: Sequence[int]) -> list[float]:
    """Weight B_r / sum_j B_j of each rank's shard gradient in the batch mean."""
    total = sum(sizes)
    if total <= 0:
        raise ValueError(f"shard sizes must add up to more than 0, got {list(sizes)}")
    return [b / total for b in sizes]


# From chapters/allreduce_algorithms.md, section "Recursive doubling and Rabenseifner's algorithm", "Rabenseifner's algorithm".
def allreduce_rabenseifner(comm, x):
    """Rabenseifner's all-reduce of the 1-D array x, in place; p a power of two."""
    p, r = comm.Get_size(), comm.Get_rank()
    assert p & (p - 1) == 0, "Rabenseifner's algorithm needs p a power of two"
    tmp, lo, hi = np.empty_like(x), 0, x.size  # x[lo:hi]: the part this rank reduces
    swaps = []
    mask = p // 2
    while mask:                 # reduce-scatter: swap half the part, keep and add half
        mid = (lo + hi) // 2
        low, high = slice(lo, mid), slice(mid, hi)
        keep, give = (low, high) if r & mask == 0 else (high, low)
        buf = tmp[: keep.stop - keep.start]
        comm.Sendrecv(x[give], dest=r ^ mask, recvbuf=buf, source=r ^ mask)
        x[keep] += buf
        swaps.append((r ^ mask, keep, give))
        lo, hi, mask = keep.start, keep.stop, mask // 2
    for partner, keep, give in reversed(swaps):  # all-gather: the same swaps, back
        comm.Sendrecv(x[keep], dest=partner, recvbuf=x[give], source=partner)
    return x


# From chapters/allreduce_algorithms.md, section "Chunking, pipelining and switching algorithms".
def pipelined_chain_time(n: float, p: int, k: int, alpha: float, beta: float) -> float:
    """Time to pass n bytes cut into k slices down a chain of p ranks."""
    return (p - 2 + k) * (alpha + n * beta / k)


# From chapters/allreduce_algorithms.md, section "Chunking, pipelining and switching algorithms".
def best_slice_count(n: float, p: int, alpha: float, beta: float) -> float:
    """The k that minimises pipelined_chain_time: sqrt((p - 2) n beta / alpha)."""
    return math.sqrt((p - 2) * n * beta / alpha)


# From chapters/allreduce_algorithms.md, section "Chunking, pipelining and switching algorithms".
def ring_tree_crossover_bytes(p: int, alpha: float, beta: float) -> float:
    """Message size at which ring and binomial-tree all-reduce take equally long."""
    L = (p - 1).bit_length()  # ⌈log2 p⌉
    return (2 * (p - 1) - 2 * L) * alpha / ((2 * L - 2 * (p - 1) / p) * beta)


# From chapters/allreduce_algorithms.md, section "Two speeds: hierarchical all-reduce".
def node_bytes_flat_ring(n: float, p: int, nodes: int) -> float:
    """Bytes a flat ring of p ranks, numbered node after node, sends out of a node."""
    return 2 * (p - 1) / p * n if nodes > 1 else 0.0


# From chapters/allreduce_algorithms.md, section "Two speeds: hierarchical all-reduce".
def node_bytes_hierarchical(n: float, nodes: int) -> float:
    """Bytes a hierarchical all-reduce (reduce-scatter in the node, ring across nodes,
    all-gather in the node) sends out of each node."""
    return 2 * (nodes - 1) / nodes * n


# From chapters/allreduce_algorithms.md, section "Two speeds: hierarchical all-reduce".
def two_level_times(n: float, p: int, nodes: int, alpha: float, beta_node: float,
                    beta_link: float) -> tuple[float, float]:
    """(flat ring, hierarchical) all-reduce times on nodes of p/nodes ranks, each node
    with one link (beta_link s/byte) that its ranks share, beta_node s/byte inside."""
    L = p // nodes
    flat = 2 * (p - 1) * alpha + node_bytes_flat_ring(n, p, nodes) * beta_link
    inside = 2 * (L - 1) * alpha + 2 * (L - 1) / L * n * beta_node
    across = 2 * (nodes - 1) * alpha + node_bytes_hierarchical(n, nodes) * beta_link
    return flat, inside + across


# From chapters/ddp.md, section "DataParallel in bytes".
def dataparallel_link_bytes(k: int, n: float) -> list[tuple[float, float]]:
    """(sent, received) bytes of each GPU in a step of torch.nn.DataParallel on k GPUs.

    GPU 0 comes first, then the others in ring order; n is the model's size in bytes.
    The step broadcasts n bytes of parameters from GPU 0 (replicate) and reduces n
    bytes of gradients to GPU 0 (Broadcast.backward), both as NCCL ring pipelines: the
    broadcast runs 0 -> 1 -> ... -> k-1, the reduce 1 -> ... -> k-1 -> 0, each GPU
    forwarding what it got. Inputs scattered from GPU 0 and outputs gathered to it come
    on top. Sources: torch 2.13 nn/parallel/replicate.py replicate ->
    comm.broadcast_coalesced; nn/parallel/_functions.py Broadcast.backward ->
    comm.reduce_add -> cuda/nccl.py reduce; NCCL src/device/broadcast.h and reduce.h,
    runRing.
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


# From chapters/ddp_inside.md, section "Overlap: sync and async `all_reduce`".
def overlap_step_time(compute: Sequence[float], comm: Sequence[float]) -> float:
    """Backward plus bucketed all-reduces: max over i of r_i + m_i + ... + m_k."""
    ready = np.cumsum(compute)                     # r_i
    rest = np.cumsum(np.asarray(comm)[::-1])[::-1]  # m_i + ... + m_k
    return np.max(ready + rest).item()


# From chapters/large_batch.md, section "Learning-rate scaling rules".
def scaled_lr(lr: float, k: float, rule: str) -> float:
    """Learning rate for a global batch k times larger: "linear" k·lr, "sqrt" √k·lr."""
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"rule must be 'linear' or 'sqrt', got {rule!r}")
    return lr * (k if rule == "linear" else math.sqrt(k))


# From chapters/large_batch.md, section "Learning-rate scaling rules".
def critical_batch_ratios(batch: float, b_noise: float) -> tuple[float, float]:
    """(S / S_min, E / E_min) at a global batch: steps and samples over the fewest."""
    return 1 + b_noise / batch, 1 + batch / b_noise


# From chapters/large_batch.md, section "Warm-up and the Noam schedule".
def warmup_factor(step: int, warmup: int, k: float) -> float:
    """Goyal et al.'s gradual warm-up, as a multiple of the base rate η.

    Step s = 0, 1, ... runs at η_s = η + (kη − η)·min(1, s / w): η at the first step, a
    constant increment per step, kη from step w on (Goyal et al. 2017, section 2.2).
    """
    if warmup < 1 or k < 1:
        raise ValueError(f"need warmup >= 1 step and k >= 1, "
                         f"got warmup={warmup}, k={k}")
    return 1 + (k - 1) * min(1.0, step / warmup)


# From chapters/large_batch.md, section "Gradient clipping under DDP".
def clip_by_norm(g: np.ndarray, c: float) -> np.ndarray:
    """g scaled by min(1, c / ||g||): gradient clipping to the norm c."""
    return g * min(1.0, c / np.linalg.norm(g))


# From chapters/mixed_precision.md, section "Why fp16 gradients underflow, and loss scaling".
def loss_scale_range(dtype: torch.dtype, scale: float) -> tuple[float, float]:
    """(flush, overflow) of a gradient v scaled by `scale`, then rounded to `dtype`.

    v becomes 0 iff |v| <= flush, and ±inf iff |v| >= overflow (round to nearest, ties
    to even). flush is half the smallest subnormal over scale: exactly half rounds to
    the even neighbour, 0. overflow is the largest finite value plus half its spacing,
    over scale: from that tie on, rounding goes to the next power of two, which does
    not exist (inf).
    """
    fi = torch.finfo(dtype)
    mantissa = round(-math.log2(fi.eps))              # stored fraction bits
    top_spacing = 2.0 ** (math.floor(math.log2(fi.max)) - mantissa)
    return fi.smallest_normal * fi.eps / 2 / scale, (fi.max + top_spacing / 2) / scale


# From chapters/mixed_precision.md, section "Why fp16 gradients underflow, and loss scaling".
def cast_fractions(values: torch.Tensor, dtype: torch.dtype,
                   scale: float = 1.0) -> dict[str, float]:
    """Shares of the nonzero values that, times `scale` and rounded to `dtype`, become
    zero, subnormal, normal or infinite."""
    cast = (values[values != 0].double() * scale).to(dtype).double().abs()
    tiny = torch.finfo(dtype).smallest_normal
    kinds = {"zero": cast == 0, "subnormal": (cast > 0) & (cast < tiny),
             "normal": (cast >= tiny) & torch.isfinite(cast), "inf": torch.isinf(cast)}
    return {kind: int(is_kind.sum()) / len(cast) for kind, is_kind in kinds.items()}


# From chapters/mixed_precision.md, section "Why fp16 gradients underflow, and loss scaling".
FP16_GRAD_SAMPLES = 256


# From chapters/sharding.md, section "Traffic".
def half_ring(n: float, p: int) -> cm.Cost:
    """Half a ring all-reduce (reduce-scatter or all-gather): its first p - 1 rounds."""
    rounds = cm.schedule("ring", n, p)[: p - 1]
    return cm.Cost(len(rounds), sum(s.nbytes for s in rounds), 0.0)


# From chapters/stragglers.md, section "Mitigations, and what each one costs".
def backup_variance_factor(p: int, k: int) -> float:
    """Variance growth p / (p - k) when k of the p ranks' gradients are dropped."""
    if not 0 <= k < p:
        raise ValueError(f"need 0 <= k < p backup workers, got k={k}, p={p}")
    return p / (p - k)


# From chapters/stragglers.md, section "Mitigations, and what each one costs".
def staleness_total(updates: int, workers: int) -> int:
    """Total staleness of G updates at an asynchronous server, W workers always busy.

    Assumes a fixed number G of pulls (W at the start, then one after each applied
    gradient until G are issued) and that every pulled gradient is applied: the versions
    applied are 0..G-1 and those pulled 0 (W times), 1, ..., G-W, whatever the order of
    arrival.
    """
    G, W = updates, workers
    return G * (G - 1) // 2 - (G - W) * (G - W + 1) // 2


# From chapters/stragglers.md, section "Mitigations, and what each one costs".
def local_sgd_rounds(steps: int, H: int) -> int:
    """Averaging rounds of local SGD over `steps` optimizer steps, H steps per round."""
    return -(-steps // H)


# From chapters/stragglers.md, section "Mitigations, and what each one costs".
def powersgd_ratio(m: int, n: int, r: int) -> float:
    """mn / (r(m + n)): how many times fewer numbers rank-r PowerSGD sends for m x n."""
    return m * n / (r * (m + n))


# From chapters/stragglers.md, section "Parameter servers versus all-reduce, and `torch.distributed.rpc`".
def parameter_server_bytes(workers: int, n: float, servers: int = 1) -> float:
    """Bytes one server's link receives and sends per synchronous round: 2 W n / S.

    Each of the W workers pushes its n-byte gradient and pulls n bytes of parameters;
    with the parameters sharded evenly over S servers, each server handles 1/S of every
    message.
    """
    if servers < 1:
        raise ValueError(f"need at least one server, got {servers}")
    return 2 * workers * n / servers
