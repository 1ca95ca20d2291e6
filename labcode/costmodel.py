"""Generated from labs/03_allreduce_algorithms.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import numpy as np
from dataclasses import dataclass


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
@dataclass(frozen=True)
class Step:
    # One round of a schedule: `senders` ranks each send a message of `nbytes` at once.
    nbytes: float
    senders: int
    reduces: bool        # True: receivers add what arrives; False: they copy it


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
@dataclass(frozen=True)
class Cost:
    # t = messages·α + wire_bytes·β + reduce_bytes·γ, all counted on the critical path.
    messages: float
    wire_bytes: float
    reduce_bytes: float

    def time(self, alpha, beta, gamma=0.0):
        return (
            self.messages * alpha + self.wire_bytes * beta + self.reduce_bytes * gamma
        )


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
def log2_ceil(p):
    return (p - 1).bit_length()


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
def pairs(p, m):
    # ranks r < p with r mod 2m = m: the senders of a binomial-tree round at distance m
    return (p - m - 1) // (2 * m) + 1 if p > m else 0


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
SCHEDULES = {  # (n bytes, p ranks, L = ⌈log2 p⌉) -> the rounds, in order
    "naive": lambda n, p, L: [Step(n, p, True)] * (p - 1),
    "tree": lambda n, p, L: (
        [Step(n, pairs(p, 2**k), True) for k in range(L)]
        + [Step(n, pairs(p, 2**k), False) for k in reversed(range(L))]
    ),
    "ring": lambda n, p, L: (
        [Step(n / p, p, True)] * (p - 1) + [Step(n / p, p, False)] * (p - 1)
    ),
    "recursive_doubling": lambda n, p, L: [Step(n, p, True)] * L,
    "rabenseifner": lambda n, p, L: (
        [Step(n / 2 ** (k + 1), p, True) for k in range(L)]
        + [Step(n / 2 ** (k + 1), p, False) for k in reversed(range(L))]
    ),
}


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
POWER_OF_TWO_ONLY = ("recursive_doubling", "rabenseifner")


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
def schedule(algorithm, n, p):
    if algorithm not in SCHEDULES:
        raise ValueError(
            f"unknown algorithm {algorithm!r}: use one of {', '.join(SCHEDULES)}"
        )
    if p < 1:
        raise ValueError(f"p must be at least 1, got {p}")
    if algorithm in POWER_OF_TWO_ONLY and p & (p - 1):
        raise ValueError(f"{algorithm} needs p a power of two, got p={p}")
    return SCHEDULES[algorithm](n, p, log2_ceil(p))


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
def cost(algorithm, n, p):
    # every round is on the critical path: one message, its bytes, and (if it
    # reduces) its additions
    rounds = schedule(algorithm, n, p)
    return Cost(
        len(rounds),
        sum(s.nbytes for s in rounds),
        sum(s.nbytes for s in rounds if s.reduces),
    )


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
def allreduce_time(algorithm, n, p, alpha, beta, gamma=0.0):
    return cost(algorithm, n, p).time(alpha, beta, gamma)


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
def bandwidth_lower_bound_bytes(n, p):
    # Patarasuk & Yuan (2009): what any all-reduce must send per rank
    return 2 * (p - 1) / p * n


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
def algbw(n, t):
    return n / t


# From labs/03_allreduce_algorithms.ipynb, section "Steps", "The cost model, as code".
def busbw(n, t, p):
    return algbw(n, t) * 2 * (p - 1) / p


# From labs/03_allreduce_algorithms.ipynb, section "Measure", "Fit α and β".
@dataclass(frozen=True)
class Fit:
    # t(n) ≈ intercept + slope·n, and α, β read off it with one algorithm's coefficients
    intercept: float
    slope: float
    alpha: float
    beta: float                          # γ folded in
    median_rel_err: float
    max_rel_err: float

    def predict(self, n):
        return self.intercept + self.slope * np.asarray(n, dtype=float)


# From labs/03_allreduce_algorithms.ipynb, section "Measure", "Fit α and β".
def fit_alpha_beta(n, t, algorithm, p):
    n, t = np.asarray(n, dtype=float), np.asarray(t, dtype=float)
    # Least squares on t = a + b·n with every row divided by t: relative error, so the
    # smallest message weighs as much as the largest.
    A = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    rel = np.abs(a + b * n - t) / t
    unit = cost(algorithm, 1.0, p)       # a = messages·α and b = wire bytes per byte·β
    return Fit(float(a), float(b), float(a / unit.messages), float(b / unit.wire_bytes),
               float(np.median(rel)), float(rel.max()))


# From labs/03_allreduce_algorithms.ipynb, section "Measure".
@dataclass(frozen=True)
class Fabric:
    alpha: float                         # seconds per message
    beta: float                          # seconds per byte
    gamma: float = 0.0                   # seconds per byte reduced
    p_loss: float = 0.0                  # probability that one packet is lost
    rto: float = 0.2                     # first retransmission timeout (s), doubled
                                         # after each loss in a row
    max_losses: int = 6                  # at most this many losses in a row of a packet
    mtu: int = 1500                      # bytes per packet

    def p_message_loss(self, nbytes):
        # at least one of the message's ceil(nbytes / mtu) packets (at least 1) is lost
        packets = np.maximum(1, np.ceil(np.asarray(nbytes, dtype=float) / self.mtu))
        return -np.expm1(packets * np.log1p(-self.p_loss))


# From labs/03_allreduce_algorithms.ipynb, section "Measure".
def worst_delay(lost, fab, rng):
    # Worst retransmission delay among `lost` messages that each lost a packet once.
    # Each resend is lost again with probability q, so extra losses J ≥ j with
    # probability q^j, and the max over m messages has P(max ≤ j) = (1 - q^(j+1))^m:
    # draw it by inverting that CDF.
    u = rng.random(lost.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = 1.0 - u ** (1.0 / np.maximum(lost, 1))
        j = np.ceil(np.log(np.maximum(x, 1e-300)) / np.log(fab.p_loss) - 1.0)
    k = 1 + np.clip(j, 0, fab.max_losses - 1)
    # k losses in a row delay the message by rto + 2·rto + ... + 2^(k-1)·rto
    return np.where(lost > 0, fab.rto * (2.0 ** k - 1.0), 0.0)


# From labs/03_allreduce_algorithms.ipynb, section "Measure".
def simulate(algorithm, n, p, fab, trials, seed=0):
    # Every round lasts α + bytes·β plus the worst retransmission delay among its
    # messages, and the next round waits for it (bulk-synchronous).
    rng = np.random.default_rng(seed)
    rounds = schedule(algorithm, n, p)
    base = cost(algorithm, n, p).time(fab.alpha, fab.beta, fab.gamma)
    if fab.p_loss <= 0 or not rounds:
        return np.full(trials, base)
    nbytes = np.array([s.nbytes for s in rounds])
    senders = np.array([s.senders for s in rounds])
    p_lost = fab.p_message_loss(nbytes)
    lost = rng.binomial(senders[None, :], p_lost[None, :], size=(trials, len(rounds)))
    return base + worst_delay(lost, fab, rng).sum(axis=1)


# From labs/03_allreduce_algorithms.ipynb, section "Measure".
def p_any_loss(algorithm, n, p, fab):
    # probability that at least one packet of one all-reduce is lost
    rounds = schedule(algorithm, n, p)
    log_ok = sum(s.senders * np.log1p(-fab.p_message_loss(s.nbytes)) for s in rounds)
    return float(-np.expm1(log_ok))


# From labs/03_allreduce_algorithms.ipynb, section "Measure".
WHAT_IF = Fabric(alpha=50e-6, beta=1 / 125e6, p_loss=1e-7, rto=0.2, max_losses=5)
