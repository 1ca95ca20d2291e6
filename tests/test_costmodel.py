"""dplab.costmodel: formulas against counted schedules, the fit, and the tail model."""
import numpy as np
import pytest

from dplab import costmodel as cm


# ---- an independent reference: the three schedules played out in one process ----
def emulate(algorithm, vectors):
    """Run naive, tree or ring all-reduce on a list of per-rank arrays; return results and bytes sent."""
    p = len(vectors)
    bufs = [v.copy() for v in vectors]
    sent = [0] * p
    if algorithm == "naive":
        out = []
        for r in range(p):
            acc = bufs[r].copy()
            for s in range(p):
                if s != r:
                    acc += bufs[s]
                    sent[s] += bufs[s].nbytes
            out.append(acc)
        return out, sent
    if algorithm == "tree":
        mask = 1
        while mask < p:  # reduce to rank 0
            for r in range(p):
                if r % (2 * mask) == mask:
                    bufs[r - mask] += bufs[r]
                    sent[r] += bufs[r].nbytes
            mask <<= 1
        while mask > 1:  # broadcast from rank 0
            mask >>= 1
            for r in range(p):
                if r % (2 * mask) == 0 and r + mask < p:
                    bufs[r + mask] = bufs[r].copy()
                    sent[r] += bufs[r].nbytes
        return bufs, sent
    if algorithm == "ring":
        chunks = [np.array_split(b, p) for b in bufs]
        for s in range(p - 1):  # reduce-scatter
            msgs = [(r, (r - s) % p, chunks[r][(r - s) % p].copy()) for r in range(p)]
            for r, c, data in msgs:
                chunks[(r + 1) % p][c] += data
                sent[r] += data.nbytes
        for s in range(p - 1):  # all-gather
            msgs = [(r, (r + 1 - s) % p, chunks[r][(r + 1 - s) % p].copy()) for r in range(p)]
            for r, c, data in msgs:
                chunks[(r + 1) % p][c][...] = data
                sent[r] += data.nbytes
        return [np.concatenate(c) for c in chunks], sent
    raise ValueError(algorithm)


CASES = [(p, count) for p in (1, 2, 3, 4, 5, 7, 8) for count in (0, 1, 2, 3, 10, 97, 1000)]


@pytest.mark.parametrize("algorithm", ["naive", "tree", "ring"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_counted_bytes_equal_formula_for_every_rank_and_uneven_sizes(algorithm, dtype):
    for p, count in CASES:
        rng = np.random.default_rng(p * 1000 + count)
        vecs = [rng.integers(-100, 100, count).astype(dtype) for _ in range(p)]
        out, sent = emulate(algorithm, vecs)
        total = np.sum(vecs, axis=0) if count else np.zeros(0, dtype)
        for r in range(p):
            np.testing.assert_array_equal(out[r], total)
            assert sent[r] == cm.bytes_sent(algorithm, count, np.dtype(dtype).itemsize, p, r), (p, count, r)


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8, 16])
def test_ring_bytes_equal_2_p_minus_1_over_p_n_when_p_divides_n(p):
    count, itemsize = 48 * p, 4
    n = count * itemsize
    for r in range(p):
        assert cm.ring_bytes_sent(count, itemsize, p, r) == cm.cost("ring", n, p).wire_bytes
        assert cm.ring_bytes_sent(count, itemsize, p, r) == cm.bandwidth_lower_bound_bytes(n, p)


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 13, 16])
def test_tree_reaches_every_rank_once_and_root_sends_log_p(p):
    children = [c for r in range(p) for c in cm.tree_children(r, p)]
    assert sorted(children) == list(range(1, p))
    assert len(cm.tree_children(0, p)) == cm.log2_ceil(p)
    total = sum(cm.tree_bytes_sent(10, 8, p, r) for r in range(p))
    assert total == 2 * (p - 1) * 80


def test_message_counts_follow_each_schedule():
    p = 8
    assert [cm.messages_sent("ring", p, r) for r in range(p)] == [14] * p
    assert sum(cm.messages_sent("naive", p, r) for r in range(p)) == p * (p - 1)
    assert sum(cm.messages_sent("tree", p, r) for r in range(p)) == 2 * (p - 1)
    assert cm.messages_sent("tree", p, 0) == 3


def emulate_rabenseifner(vectors):
    """Recursive-halving reduce-scatter, then recursive-doubling all-gather (p = 2^k); results, bytes, messages."""
    p, n = len(vectors), len(vectors[0])
    bufs = [v.copy() for v in vectors]
    sent, messages = [0] * p, [0] * p
    seg = [(0, n)] * p  # the part of the vector each rank is responsible for
    mask = p // 2
    while mask:  # halve: keep one half of the segment, send the other half to the partner r ^ mask
        snap, new = [b.copy() for b in bufs], []
        for r in range(p):
            lo, hi = seg[r]
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if r < r ^ mask else ((mid, hi), (lo, mid))
            a, b = give
            bufs[r ^ mask][a:b] += snap[r][a:b]
            sent[r] += snap[r][a:b].nbytes
            messages[r] += 1
            new.append(keep)
        seg, mask = new, mask // 2
    mask = 1
    while mask < p:  # double: swap finished segments with the partner, which hold adjacent halves
        snap = [b.copy() for b in bufs]
        for r in range(p):
            a, b = seg[r]
            bufs[r ^ mask][a:b] = snap[r][a:b]
            sent[r] += snap[r][a:b].nbytes
            messages[r] += 1
        seg = [(min(seg[r][0], seg[r ^ mask][0]), max(seg[r][1], seg[r ^ mask][1])) for r in range(p)]
        mask *= 2
    return bufs, sent, messages


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_closed_form_wire_bytes_equal_the_emulated_schedules(p):
    """cost()'s bandwidth term is what the slowest rank of each played-out schedule sends."""
    vecs = [np.full(48 * p, r + 1, dtype=np.float32) for r in range(p)]
    n = vecs[0].nbytes
    for algorithm in ("naive", "ring"):
        _, sent = emulate(algorithm, vecs)
        assert max(sent) == cm.cost(algorithm, n, p).wire_bytes, (algorithm, p)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_rabenseifner_sends_ring_bytes_in_tree_messages(p):
    rng = np.random.default_rng(p)
    vecs = [rng.integers(-100, 100, 24 * p).astype(np.float64) for _ in range(p)]
    out, sent, messages = emulate_rabenseifner(vecs)
    for r in range(p):
        np.testing.assert_array_equal(out[r], np.sum(vecs, axis=0))
    want = cm.cost("rabenseifner", vecs[0].nbytes, p)
    assert set(sent) == {want.wire_bytes} and set(messages) == {want.messages}
    with pytest.raises(ValueError, match="power of two"):
        cm.cost("recursive_doubling", 1e6, 6)


@pytest.mark.parametrize("p", [2, 3, 4, 16])
def test_busbw_of_a_ring_that_streams_at_beta_is_the_link_bandwidth(p):
    """nccl-tests' busbw: a ring whose slowest rank sends its bytes at β has busbw 1/β, whatever p."""
    beta = 1 / 10e9
    vecs = [np.zeros(1000 * p, dtype=np.float32) for _ in range(p)]
    t = max(emulate("ring", vecs)[1]) * beta  # counted bytes, not the formula
    assert cm.busbw(vecs[0].nbytes, t, p) == pytest.approx(1 / beta, rel=1e-12)
    assert (cm.algbw(vecs[0].nbytes, t) < cm.busbw(vecs[0].nbytes, t, p)) == (p > 2)  # equal at p = 2


def test_fit_recovers_alpha_and_beta_from_noisy_ring_times():
    rng = np.random.default_rng(1)
    alpha, beta, p = 20e-6, 1 / 3e9, 4
    n = 8 * 4.0 ** np.arange(13)
    t = np.array([cm.allreduce_time("ring", x, p, alpha, beta) for x in n]) * rng.uniform(0.97, 1.03, n.size)
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
    fast = cm._max_delay_given_lost(lost, fab, rng)
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
