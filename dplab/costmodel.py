"""The α-β (Hockney) cost of all-reduce algorithms, busbw, a least-squares fit and a tail model.

Notation (the book's): p ranks, n bytes per rank's vector, α seconds per message,
β seconds per byte on the wire, γ seconds per byte reduced. Formulas follow
Thakur, Rabenseifner & Gropp (2005); the ring's bandwidth term 2(p-1)/p·n·β is the
lower bound of Patarasuk & Yuan (2009).

The byte counters below say exactly what the lab's hand-written algorithms send; they
are derived from the schedule (who sends which chunk at which step), not from the
closed forms, so a test can hold one against the other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ALGORITHMS = ("naive", "tree", "ring", "recursive_doubling", "rabenseifner")


def log2_ceil(p: int) -> int:
    """⌈log2 p⌉ for p ≥ 1."""
    if p < 1:
        raise ValueError(f"p must be at least 1, got {p}")
    return (p - 1).bit_length()


def _check_power_of_two(p: int, name: str) -> None:
    """Raise if an algorithm that needs p = 2^k is asked for another p."""
    if p < 1 or p & (p - 1):
        raise ValueError(f"{name} as modelled here needs p a power of two, got p={p}")


@dataclass(frozen=True)
class Cost:
    """One algorithm's time split into its α, β and γ coefficients: t = a·α + b·β + c·γ."""

    messages: float  # a: messages on the critical path
    wire_bytes: float  # b: bytes on the critical path
    reduce_bytes: float  # c: bytes one rank adds on the critical path

    def time(self, alpha: float, beta: float, gamma: float = 0.0) -> float:
        """Seconds under the α-β-γ model."""
        return self.messages * alpha + self.wire_bytes * beta + self.reduce_bytes * gamma


def cost(algorithm: str, n: float, p: int) -> Cost:
    """α-β-γ coefficients of one all-reduce of n bytes over p ranks."""
    if p < 1:
        raise ValueError(f"p must be at least 1, got {p}")
    if p == 1:
        return Cost(0, 0, 0)
    L = log2_ceil(p)
    if algorithm == "naive":
        # every rank sends its whole vector to each of the p-1 others, one after another
        return Cost(p - 1, (p - 1) * n, (p - 1) * n)
    if algorithm == "tree":
        # binomial-tree reduce to rank 0, then binomial-tree broadcast: ⌈log p⌉ rounds each
        return Cost(2 * L, 2 * L * n, L * n)
    if algorithm == "ring":
        # reduce-scatter (p-1 steps) + all-gather (p-1 steps), chunks of n/p
        return Cost(2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n)
    if algorithm == "recursive_doubling":
        _check_power_of_two(p, algorithm)
        return Cost(L, L * n, L * n)
    if algorithm == "rabenseifner":
        _check_power_of_two(p, algorithm)
        return Cost(2 * L, 2 * (p - 1) / p * n, (p - 1) / p * n)
    raise ValueError(f"unknown algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}")


def allreduce_time(algorithm: str, n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Predicted seconds for one all-reduce of n bytes over p ranks."""
    return cost(algorithm, n, p).time(alpha, beta, gamma)


def bandwidth_lower_bound_bytes(n: float, p: int) -> float:
    """Bytes each rank must send at least in any all-reduce (Patarasuk & Yuan 2009): 2(p-1)/p·n."""
    return 2 * (p - 1) / p * n


# ---- busbw -----------------------------------------------------------------
def algbw(n: float, t: float) -> float:
    """Algorithm bandwidth in bytes/s: message size over time."""
    return n / t


def busbw(n: float, t: float, p: int) -> float:
    """Bus bandwidth in bytes/s for all-reduce: algbw·2(p-1)/p, comparable across p."""
    return algbw(n, t) * 2 * (p - 1) / p


# ---- exact byte counts of the lab's schedules ----------------------------------
def ring_chunk_counts(count: int, p: int) -> np.ndarray:
    """Element counts of the p ring chunks (np.array_split's rule: the first count % p get one more)."""
    q, r = divmod(count, p)
    return np.array([q + 1 if i < r else q for i in range(p)], dtype=np.int64)


def ring_bytes_sent(count: int, itemsize: int, p: int, rank: int) -> int:
    """Bytes rank sends in ring all-reduce: every chunk but (rank+1)%p, then every chunk but (rank+2)%p."""
    if p == 1:
        return 0
    c = ring_chunk_counts(count, p)
    return int((2 * count - c[(rank + 1) % p] - c[(rank + 2) % p]) * itemsize)


def tree_children(rank: int, p: int) -> list[int]:
    """Children of rank in the binomial tree rooted at 0: rank + 2^k for 2^k below rank's lowest set bit."""
    low = rank & -rank if rank else 1 << log2_ceil(p)
    out, mask = [], 1
    while mask < low and rank + mask < p:
        out.append(rank + mask)
        mask <<= 1
    return out


def tree_bytes_sent(count: int, itemsize: int, p: int, rank: int) -> int:
    """Bytes rank sends in binomial reduce + broadcast: n once to its parent, n to each child."""
    n = count * itemsize
    return (n if rank else 0) + n * len(tree_children(rank, p))


def naive_bytes_sent(count: int, itemsize: int, p: int, rank: int) -> int:
    """Bytes rank sends when it sends its whole vector to every other rank."""
    return (p - 1) * count * itemsize


def messages_sent(algorithm: str, p: int, rank: int) -> int:
    """Messages rank sends in one all-reduce with the lab's schedules."""
    if p == 1:
        return 0
    if algorithm == "naive":
        return p - 1
    if algorithm == "ring":
        return 2 * (p - 1)
    if algorithm == "tree":
        return (1 if rank else 0) + len(tree_children(rank, p))
    raise ValueError(f"no schedule for {algorithm!r}: use naive, tree or ring")


def bytes_sent(algorithm: str, count: int, itemsize: int, p: int, rank: int) -> int:
    """Bytes rank sends in one all-reduce of count elements with the lab's schedules."""
    f = {"naive": naive_bytes_sent, "tree": tree_bytes_sent, "ring": ring_bytes_sent}
    if algorithm not in f:
        raise ValueError(f"no schedule for {algorithm!r}: use naive, tree or ring")
    return f[algorithm](count, itemsize, p, rank)


# ---- least-squares fit ---------------------------------------------------------
@dataclass(frozen=True)
class Fit:
    """t(n) ≈ intercept + slope·n, and α, β read off it for one algorithm and p."""

    intercept: float  # seconds
    slope: float  # seconds per byte of message
    alpha: float  # seconds per message
    beta: float  # seconds per byte on the wire (γ folded in)
    median_rel_err: float
    max_rel_err: float

    def predict(self, n) -> np.ndarray:
        """Predicted seconds for message sizes n."""
        return self.intercept + self.slope * np.asarray(n, dtype=float)


def fit_alpha_beta(n, t, algorithm: str = "ring", p: int = 2) -> Fit:
    """Least-squares fit of t = a + b·n in relative error, then α = a/messages, β = b/(wire bytes per byte)."""
    n = np.asarray(n, dtype=float)
    t = np.asarray(t, dtype=float)
    if n.shape != t.shape or n.size < 2:
        raise ValueError("need at least two (size, time) pairs of equal length")
    # divide each row by t: minimises relative error, so 8 B and 64 MB weigh the same
    A = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    rel = np.abs(a + b * n - t) / t
    unit = cost(algorithm, 1.0, p)
    return Fit(
        float(a),
        float(b),
        float(a / unit.messages),
        float(b / unit.wire_bytes),
        float(np.median(rel)),
        float(rel.max()),
    )


# ---- Monte-Carlo tail model ------------------------------------------------------
def schedule(algorithm: str, n: float, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step: bytes per message and how many messages run at once, for the tail model."""
    if p == 1:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    L = log2_ceil(p)
    if algorithm == "ring":
        steps = 2 * (p - 1)
        return np.full(steps, n / p), np.full(steps, p, dtype=np.int64)
    if algorithm == "rabenseifner":
        _check_power_of_two(p, algorithm)
        halves = n / 2.0 ** np.arange(1, L + 1)
        return np.concatenate([halves, halves[::-1]]), np.full(2 * L, p, dtype=np.int64)
    if algorithm == "tree":
        _check_power_of_two(p, algorithm)
        senders = p // 2 ** np.arange(1, L + 1)
        return np.full(2 * L, float(n)), np.concatenate([senders, senders[::-1]]).astype(np.int64)
    if algorithm == "recursive_doubling":
        _check_power_of_two(p, algorithm)
        return np.full(L, float(n)), np.full(L, p, dtype=np.int64)
    raise ValueError(f"no tail schedule for {algorithm!r}: use ring, rabenseifner, tree or recursive_doubling")


@dataclass(frozen=True)
class Fabric:
    """A network: α, β, γ, and how often a packet is lost and must wait for a retransmission."""

    alpha: float  # seconds per message
    beta: float  # seconds per byte
    gamma: float = 0.0  # seconds per byte reduced
    p_loss: float = 0.0  # probability that one packet is lost
    rto: float = 0.2  # first retransmission timeout, seconds (doubles after each loss in a row)
    max_losses: int = 6  # cap on losses in a row of one packet
    mtu: int = 1500  # bytes per packet; a message of b bytes is ceil(b / mtu) packets (at least 1)

    def p_message_loss(self, nbytes) -> np.ndarray:
        """Probability that at least one packet of a message of nbytes is lost."""
        packets = np.maximum(1, np.ceil(np.asarray(nbytes, dtype=float) / self.mtu))
        return -np.expm1(packets * np.log1p(-self.p_loss))


def simulate(algorithm: str, n: float, p: int, fab: Fabric, trials: int, seed: int = 0) -> np.ndarray:
    """Monte-Carlo all-reduce times: each step lasts α + bytes·β + the worst retransmit delay among its messages.

    A message is delayed when one of its packets is lost; the lost packet is resent after
    rto, 2·rto, 4·rto, ... (TCP-style backoff) until one copy gets through. Steps are
    bulk-synchronous: the next step waits for the slowest message of this one.
    """
    rng = np.random.default_rng(seed)
    msg_bytes, concurrent = schedule(algorithm, n, p)
    base = float(np.sum(fab.alpha + msg_bytes * fab.beta)) + cost(algorithm, n, p).reduce_bytes * fab.gamma
    if fab.p_loss <= 0 or len(concurrent) == 0:
        return np.full(trials, base)
    # how many of each step's messages lose their first transmission, then the worst of those
    q_msg = fab.p_message_loss(msg_bytes)
    lost = rng.binomial(concurrent[None, :], q_msg[None, :], size=(trials, len(concurrent)))
    delay = _max_delay_given_lost(lost, fab, rng)
    return base + delay.sum(axis=1)


def _max_delay_given_lost(lost: np.ndarray, fab: Fabric, rng: np.random.Generator) -> np.ndarray:
    """Worst delay among `lost` messages that each lost a packet once (each resend is lost again w.p. p_loss)."""
    q = fab.p_loss
    u = rng.random(lost.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        # given a first loss, extra losses j ≥ 0 with P(j ≥ J) = q^J; max over m: P(max ≤ J) = (1-q^(J+1))^m
        x = 1.0 - u ** (1.0 / np.maximum(lost, 1))
        j = np.ceil(np.log(np.maximum(x, 1e-300)) / math.log(q) - 1.0)
    k = 1 + np.clip(j, 0, fab.max_losses - 1)
    return np.where(lost > 0, fab.rto * (2.0 ** k - 1.0), 0.0)


def p_any_loss(algorithm: str, n: float, p: int, fab: Fabric) -> float:
    """Probability that at least one packet of one all-reduce is lost."""
    msg_bytes, concurrent = schedule(algorithm, n, p)
    log_ok = np.sum(concurrent * np.log1p(-fab.p_message_loss(msg_bytes)))
    return float(-np.expm1(log_ok))
