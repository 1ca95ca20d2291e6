"""labcode.costmodel against Lab 3's own all-reduces, played on threads; the fit; the tail model; dplab.localcomm.

The references are independent of the formulas under test: exact sums of integer-valued
vectors (np.sum), bytes and messages counted while the lab's functions run, and closed forms
written out here from p and n.
"""
import time

import numpy as np
import pytest

import labcode.costmodel as cm
from dplab.localcomm import run_ranks
from labcode.allreduce import ALGOS, CountingComm, allreduce_recursive_doubling
from labcode.formulas import allreduce_rabenseifner


def L_of(p):
    """⌈log2 p⌉, written independently of cm.log2_ceil."""
    L = 0
    while 2**L < p:
        L += 1
    return L


# ---- the reference: Lab 3's functions, one thread per rank ----
def play(algorithm, vectors):
    """Run the lab's all-reduce on per-rank arrays: every rank's result, bytes and messages sent."""
    fn = {"recursive_doubling": allreduce_recursive_doubling,
          "rabenseifner": allreduce_rabenseifner}.get(algorithm) or ALGOS[algorithm]

    def rank(comm):
        counted = CountingComm(comm)
        out = fn(counted, vectors[comm.Get_rank()].copy())
        return out, counted.bytes, counted.messages

    results = run_ranks(len(vectors), rank)
    return [o for o, _, _ in results], [b for _, b, _ in results], [m for _, _, m in results]


CASES = [(p, count) for p in (1, 2, 3, 4, 5, 7, 8) for count in (0, 1, 2, 3, 10, 97, 1000)]


@pytest.mark.parametrize("algorithm", ["naive", "tree", "ring"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lab_allreduce_sums_exactly_and_sends_the_closed_form_counts(algorithm, dtype):
    for p, count in CASES:
        rng = np.random.default_rng(p * 1000 + count)
        vecs = [rng.integers(-100, 100, count).astype(dtype) for _ in range(p)]
        out, sent, msgs = play(algorithm, vecs)
        total = np.sum(vecs, axis=0) if count else np.zeros(0, dtype)
        for r in range(p):
            assert out[r].dtype == dtype
            np.testing.assert_array_equal(out[r], total)
        n, item, L, case = count * np.dtype(dtype).itemsize, np.dtype(dtype).itemsize, L_of(p), (p, count)
        if algorithm == "naive":
            assert sent == [(p - 1) * n] * p, case
            assert msgs == [p - 1] * p, case
        if algorithm == "ring":
            assert msgs == [2 * (p - 1)] * p, case
            assert sum(sent) == 2 * (p - 1) * n, case
            for b in sent:  # uneven chunks: one element more or less per phase
                assert abs(b - 2 * (p - 1) / p * n) <= 2 * item, case
            if count % p == 0:
                assert sent == [2 * (p - 1) * n // p] * p, case
        if algorithm == "tree":
            assert sum(sent) == 2 * (p - 1) * n and sum(msgs) == 2 * (p - 1), case
            assert sent[0] == L * n and msgs[0] == L, case


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 64])
def test_cost_equals_the_table_closed_forms(p):
    n = 12345.0
    L = L_of(p)
    table = {  # (messages, wire bytes, reduced bytes) on the critical path, as in the chapter's table
        "naive": (p - 1, (p - 1) * n, (p - 1) * n),
        "tree": (2 * L, 2 * L * n, L * n),
        "ring": (2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n),
        "recursive_doubling": (L, L * n, L * n),
        "rabenseifner": (2 * L, 2 * (p - 1) / p * n, (p - 1) / p * n),
    }
    for algorithm, (messages, wire, reduced) in table.items():
        if algorithm in ("recursive_doubling", "rabenseifner") and p & (p - 1):
            with pytest.raises(ValueError, match="power of two"):
                cm.cost(algorithm, n, p)
            continue
        c = cm.cost(algorithm, n, p)
        assert c.messages == messages, (algorithm, p)
        assert c.wire_bytes == pytest.approx(wire, rel=1e-12, abs=1e-9), (algorithm, p)
        assert c.reduce_bytes == pytest.approx(reduced, rel=1e-12, abs=1e-9), (algorithm, p)
        alpha, beta, gamma = 3e-6, 1e-10, 2e-11
        assert cm.allreduce_time(algorithm, n, p, alpha, beta, gamma) == pytest.approx(
            messages * alpha + wire * beta + reduced * gamma, rel=1e-12, abs=1e-18)
    assert cm.log2_ceil(p) == L
    assert cm.bandwidth_lower_bound_bytes(n, p) == pytest.approx(2 * (p - 1) / p * n)


class SendLog:
    """A communicator wrapper that records the signed distance dest - rank of every Send."""

    def __init__(self, comm):
        self.comm, self.sends = comm, []

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def Send(self, buf, dest):
        self.sends.append(dest - self.comm.Get_rank())
        self.comm.Send(buf, dest=dest)


@pytest.mark.parametrize("p", [1, 2, 3, 5, 6, 8, 13, 16])
def test_tree_schedule_senders_equal_the_lab_trees_senders_per_round(p):
    """Round k of the reduce sends at distance -2^k, of the broadcast at +2^k: count the lab's senders."""
    def rank(comm):
        log = SendLog(comm)
        ALGOS["tree"](log, np.full(3, comm.Get_rank(), dtype=np.int64))
        return log.sends

    sends = run_ranks(p, rank)
    L = L_of(p)
    rounds = cm.schedule("tree", 8.0, p)
    assert len(rounds) == 2 * L
    for k in range(L):
        m = 2**k
        reduce_senders = sum(d == -m for s in sends for d in s)
        bcast_senders = sum(d == m for s in sends for d in s)
        assert rounds[k].senders == reduce_senders and rounds[k].reduces
        assert rounds[2 * L - 1 - k].senders == bcast_senders and not rounds[2 * L - 1 - k].reduces
        assert cm.pairs(p, m) == sum(1 for r in range(p) if r % (2 * m) == m) == reduce_senders
    assert sorted(r + d for r, s in enumerate(sends) for d in s if d > 0) == list(range(1, p))  # each once


@pytest.mark.parametrize("p", [1, 2, 4, 8, 16])
def test_recursive_doubling_sends_log_p_whole_vectors(p):
    rng = np.random.default_rng(p)
    vecs = [rng.integers(-100, 100, 37).astype(np.float64) for _ in range(p)]
    out, sent, msgs = play("recursive_doubling", vecs)
    n, L = vecs[0].nbytes, L_of(p)
    for r in range(p):
        np.testing.assert_array_equal(out[r], np.sum(vecs, axis=0))
    assert sent == [L * n] * p and msgs == [L] * p
    assert cm.cost("recursive_doubling", n, p).wire_bytes == L * n


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_closed_form_wire_bytes_equal_the_played_schedules(p):
    """cost()'s bandwidth term is what the slowest rank of the lab's naive and ring sends."""
    vecs = [np.full(48 * p, r + 1, dtype=np.float32) for r in range(p)]
    n = vecs[0].nbytes
    for algorithm in ("naive", "ring"):
        _, sent, msgs = play(algorithm, vecs)
        assert max(sent) == cm.cost(algorithm, n, p).wire_bytes, (algorithm, p)
        assert max(msgs) == cm.cost(algorithm, n, p).messages, (algorithm, p)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_rabenseifner_sends_ring_bytes_in_tree_messages(p):
    rng = np.random.default_rng(p)
    vecs = [rng.integers(-100, 100, 24 * p).astype(np.float64) for _ in range(p)]
    out, sent, messages = play("rabenseifner", vecs)
    for r in range(p):
        np.testing.assert_array_equal(out[r], np.sum(vecs, axis=0))
    n, L = vecs[0].nbytes, L_of(p)
    assert set(sent) == {2 * (p - 1) * n // p} and set(messages) == {2 * L}
    want = cm.cost("rabenseifner", n, p)
    assert set(sent) == {want.wire_bytes} and set(messages) == {want.messages}
    with pytest.raises(ValueError, match="power of two"):
        cm.cost("recursive_doubling", 1e6, 6)


@pytest.mark.parametrize("p", [2, 3, 4, 16])
def test_busbw_of_a_ring_that_streams_at_beta_is_the_link_bandwidth(p):
    """nccl-tests' busbw: a ring whose slowest rank sends its bytes at β has busbw 1/β, whatever p."""
    beta = 1 / 10e9
    vecs = [np.zeros(1000 * p, dtype=np.float32) for _ in range(p)]
    t = max(play("ring", vecs)[1]) * beta  # bytes counted while the lab's ring ran, not the formula
    assert cm.busbw(vecs[0].nbytes, t, p) == pytest.approx(1 / beta, rel=1e-12)
    assert cm.algbw(vecs[0].nbytes, t) == pytest.approx(vecs[0].nbytes / t, rel=1e-12)
    assert (cm.algbw(vecs[0].nbytes, t) < cm.busbw(vecs[0].nbytes, t, p)) == (p > 2)  # equal at p = 2


def test_fit_recovers_alpha_and_beta_from_noisy_ring_times():
    rng = np.random.default_rng(1)
    alpha, beta, p = 20e-6, 1 / 3e9, 4
    n = 8 * 4.0 ** np.arange(13)
    t = (2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta) * rng.uniform(0.97, 1.03, n.size)
    fit = cm.fit_alpha_beta(n, t, "ring", p)
    assert fit.alpha == pytest.approx(alpha, rel=0.05)
    assert fit.beta == pytest.approx(beta, rel=0.05)
    assert fit.max_rel_err < 0.06
    np.testing.assert_allclose(fit.predict(n), t, rtol=0.06)


def test_simulation_without_loss_equals_closed_form():
    fab = cm.Fabric(alpha=30e-6, beta=8e-9, gamma=1e-10)
    for alg in ("ring", "rabenseifner", "tree", "recursive_doubling"):
        for p in (2, 4, 64):
            t = cm.simulate(alg, 971048, p, fab, trials=5)
            assert t == pytest.approx(np.full(5, cm.allreduce_time(alg, 971048, p, fab.alpha, fab.beta, fab.gamma)))


def test_worst_delay_sampler_matches_brute_force():
    fab = cm.Fabric(alpha=0, beta=0, p_loss=0.3, rto=1.0, max_losses=6)
    rng = np.random.default_rng(0)
    trials, m = 200_000, 5
    # brute force: each of m messages retries until a transmission gets through
    losses = np.minimum(rng.geometric(1 - fab.p_loss, size=(trials, m)) - 1, fab.max_losses)
    brute = (fab.rto * (2.0 ** losses - 1)).max(axis=1)
    lost = rng.binomial(m, fab.p_loss, size=trials)
    fast = cm.worst_delay(lost, fab, rng)
    for q in (0.5, 0.9, 0.99):
        assert np.quantile(fast, q) == np.quantile(brute, q)
    assert fast.mean() == pytest.approx(brute.mean(), rel=0.03)


def test_message_loss_probability_counts_packets():
    fab = cm.Fabric(alpha=0, beta=0, p_loss=1e-3, mtu=1000)
    assert fab.p_message_loss(1) == pytest.approx(1e-3)
    assert fab.p_message_loss(2500) == pytest.approx(1 - (1 - 1e-3) ** 3)


def test_tail_grows_with_p_while_median_stays():
    fab = cm.Fabric(alpha=5e-6, beta=1 / 12.5e9, p_loss=1e-7, rto=0.2)
    n = 971048
    med, tail = [], []
    for p in (4, 16, 64, 128):
        t = cm.simulate("ring", n, p, fab, trials=20000, seed=p)
        med.append(np.median(t))
        tail.append(np.quantile(t, 0.999))
    assert max(med) < 0.01  # no retransmission in the median
    assert tail[0] < 0.01 < tail[-1]  # but the 99.9th percentile meets a 200 ms timeout at p=128
    assert cm.p_any_loss("ring", n, 128, fab) > 0.01 > 0.001 > cm.p_any_loss("ring", n, 4, fab)
    t = cm.simulate("ring", n, 128, fab, trials=20000, seed=1)
    assert np.mean(t > 0.1) == pytest.approx(cm.p_any_loss("ring", n, 128, fab), rel=0.15)


# ---- dplab.localcomm itself ----
def test_run_ranks_returns_results_in_rank_order_and_sends_copies():
    def rank(comm):
        r, p = comm.Get_rank(), comm.Get_size()
        x = np.full(2, r, dtype=np.int64)
        got = np.empty_like(x)
        comm.Sendrecv(x, dest=(r + 1) % p, recvbuf=got, source=(r - 1) % p)
        x[:] = -1  # after the send: the receiver must still see r
        return int(got[0])

    assert run_ranks(5, rank) == [4, 0, 1, 2, 3]


def test_a_receive_with_no_sender_fails_within_the_timeout():
    start = time.monotonic()
    with pytest.raises((TimeoutError, RuntimeError)) as info:
        run_ranks(2, lambda comm: comm.Recv(np.empty(1), source=1 - comm.Get_rank()), timeout=0.5)
    assert time.monotonic() - start < 5
    err = info.value
    assert isinstance(err, TimeoutError) or isinstance(err.__cause__, TimeoutError)
    assert "rank" in str(err)


def test_an_error_on_one_rank_is_raised_naming_the_rank():
    def rank(comm):
        if comm.Get_rank() == 2:
            raise ZeroDivisionError("boom")
        return comm.Get_rank()

    with pytest.raises(RuntimeError, match=r"rank 2\b.*boom") as info:
        run_ranks(4, rank, timeout=0.5)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_shape_mismatch_raises():
    def rank(comm):
        if comm.Get_rank() == 0:
            comm.Send(np.zeros(3), dest=1)
        else:
            comm.Recv(np.empty(2), source=0)

    with pytest.raises(RuntimeError, match="rank 1") as info:
        run_ranks(2, rank, timeout=0.5)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize("p", [1, 4, 6])
def test_hierarchical_allreduce_equals_mpi_and_sends_what_the_formulas_say_under_mpiexec(p):
    from tests.support.mpi import assert_every_rank_passes

    assert_every_rank_passes("check_hierarchical.py", p, ["equal", "counted", "caught"])
