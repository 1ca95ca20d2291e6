"""labcode.formulas, which the chapters export, against independent references: simulations,
torch's own functions, counted bytes."""
import math

import numpy as np
import pytest
import torch

import labcode.costmodel as cm
from labcode import formulas as f


def test_shard_weights_make_the_mean_of_shard_means_the_batch_mean():
    rng = np.random.default_rng(0)
    sizes = [3, 8, 21]
    losses = rng.normal(size=sum(sizes))
    shards = np.split(losses, np.cumsum(sizes)[:-1])
    weighted = sum(w * s.mean() for w, s in zip(f.shard_weights(sizes), shards))
    assert math.isclose(weighted, losses.mean())
    with pytest.raises(ValueError, match="add up"):
        f.shard_weights([0, 0])


@pytest.mark.parametrize("p", [8, 16, 64])
def test_ring_and_tree_take_equally_long_at_the_crossover(p):
    alpha, beta = 5e-6, 1 / 50e9
    n = f.ring_tree_crossover_bytes(p, alpha, beta)
    ring, tree = (cm.allreduce_time(a, n, p, alpha, beta) for a in ("ring", "tree"))
    assert math.isclose(ring, tree)
    assert cm.allreduce_time("ring", 2 * n, p, alpha, beta) < cm.allreduce_time("tree", 2 * n, p, alpha, beta)


def chain_by_events(n, p, k, alpha, beta):
    """Slice j leaves rank i once rank i has it and has sent slice j - 1: earliest times, hop by hop."""
    step = alpha + n * beta / k
    arrive = [[0.0] * k] + [[None] * k for _ in range(p - 1)]
    for i in range(1, p):
        for j in range(k):
            start = max(arrive[i - 1][j], arrive[i][j - 1] if j else 0.0)
            arrive[i][j] = start + step
    return arrive[p - 1][k - 1]


@pytest.mark.parametrize("p,k", [(2, 1), (3, 4), (8, 1), (16, 7)])
def test_pipelined_chain_time_matches_an_event_simulation(p, k):
    n, alpha, beta = 1e6, 1e-5, 1e-9
    assert math.isclose(f.pipelined_chain_time(n, p, k, alpha, beta), chain_by_events(n, p, k, alpha, beta))


def test_best_slice_count_is_the_brute_force_minimum():
    n, p, alpha, beta = 64e6, 16, 5e-6, 1 / 50e9
    ks = np.arange(1, 3000)
    best = ks[np.argmin([f.pipelined_chain_time(n, p, k, alpha, beta) for k in ks])]
    assert abs(best - f.best_slice_count(n, p, alpha, beta)) <= 1


def test_overlap_step_time_matches_the_bucket_recursion():
    rng = np.random.default_rng(1)
    for _ in range(200):
        k = int(rng.integers(1, 9))
        compute, comm = rng.integers(1, 20, k), rng.integers(1, 20, k)
        ready, end = np.cumsum(compute), 0  # e_i = max(r_i, e_{i-1}) + m_i
        for r, m in zip(ready, comm):
            end = max(r, end) + m
        assert f.overlap_step_time(compute, comm) == end


def test_scaled_lr_keeps_what_each_rule_promises():
    lr, b, k = 0.1, 32, 8
    assert math.isclose(f.scaled_lr(lr, k, "linear") / (k * b), lr / b)  # step per sample
    assert math.isclose(f.scaled_lr(lr, k, "sqrt") ** 2 / (k * b), lr**2 / b)  # noise per step
    with pytest.raises(ValueError, match="linear"):
        f.scaled_lr(lr, k, "cubic")


def test_warmup_factor_is_goyal_ramp_as_pytorch_linearlr_runs_it():
    """PyTorch's LinearLR from η = kη/k to kη over w steps is Goyal et al.'s gradual warm-up."""
    eta, k, w = 0.1, 8, 5
    ours = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=eta)
    theirs = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=k * eta)
    scheds = (torch.optim.lr_scheduler.LambdaLR(ours, lambda s: f.warmup_factor(s, w, k)),
              torch.optim.lr_scheduler.LinearLR(theirs, start_factor=1 / k, total_iters=w))
    for _ in range(w + 3):
        assert math.isclose(ours.param_groups[0]["lr"], theirs.param_groups[0]["lr"])
        for opt, sched in zip((ours, theirs), scheds):
            opt.step()
            sched.step()
    assert math.isclose(f.warmup_factor(0, w, k) * eta, eta)  # starts at η, not at 0
    with pytest.raises(ValueError, match="warmup"):
        f.warmup_factor(0, 0, k)


def test_critical_batch_ratios_match_one_best_step_on_a_noisy_quadratic():
    """McCandlish et al.: at the best step size a batch-b gradient gains ΔL_max / (1 + B_noise/b).

    Monte Carlo on a quadratic with Hessian H whose batch gradient is G plus Gaussian noise of
    covariance Σ/b; the best fixed step maximises the mean gain, E[Gᵀg]²/(2 E[gᵀHg]).
    """
    rng = np.random.default_rng(4)
    h = np.logspace(-2, 0, 6)                     # H = diag(h): anisotropic
    G, sigma = rng.normal(size=6), 1 / h          # most noise where the loss is flat
    b_noise = (h * sigma).sum() / (G * h * G).sum()
    b_simple = sigma.sum() / (G @ G)
    gain_max = (G @ G) ** 2 / (2 * (G * h * G).sum())
    for b in (b_noise / 4, b_noise, 4 * b_noise):
        g = G + rng.normal(size=(400_000, 6)) * np.sqrt(sigma / b)
        gain = (g @ G).mean() ** 2 / (2 * ((g * h * g).sum(1)).mean())
        steps, samples = f.critical_batch_ratios(b, b_noise)
        assert abs(gain_max / gain / steps - 1) < 0.02
        assert math.isclose(samples, steps * b / b_noise)  # E = S·b against E_min = S_min·B_noise
        # trΣ/‖G‖² ignores H: here it is far off, so the check tells the two apart
        assert abs(gain_max / gain / f.critical_batch_ratios(b, b_simple)[0] - 1) > 0.2


@pytest.mark.parametrize("c", [0.1, 1.0, 100.0])
def test_clip_by_norm_agrees_with_torch(c):
    g = np.array([3.0, -4.0, 12.0])
    t = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    t.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_norm_([t], c)
    assert np.allclose(f.clip_by_norm(g, c), t.grad.numpy(), rtol=1e-5)


def test_fp16_flushes_at_and_below_two_to_the_minus_25_by_a_real_cast():
    assert torch.tensor(2.0**-25).half() == 0  # exactly half the smallest subnormal: ties to even, 0
    above = np.nextafter(np.float32(2.0**-25), np.float32(1))  # the next float32
    assert torch.tensor(above).half() == 2.0**-24
    assert torch.isinf(torch.tensor(65520.0).half())  # the tie above 65504 goes to 2^16: inf
    assert torch.tensor(np.nextafter(np.float32(65520), np.float32(0))).half() == 65504


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [1.0, 2.0**16])
def test_loss_scale_range_is_where_real_casts_flush_and_overflow(dtype, scale):
    flush, overflow = f.loss_scale_range(dtype, scale)
    # the scaled value, exactly representable in float32, cast as autocast's outputs are
    cast = lambda v: torch.tensor(np.float32(v)).to(dtype).item()
    up = lambda v: np.nextafter(np.float32(v), np.float32(np.inf))
    down = lambda v: np.nextafter(np.float32(v), np.float32(0))
    assert cast(flush * scale) == 0 and cast(up(flush * scale)) > 0
    assert math.isinf(cast(overflow * scale)) and math.isfinite(cast(down(overflow * scale)))


def nccl_ring_bytes(ring, n, root=0):
    """(sent, received) per GPU for NCCL's ring broadcast from root, then its ring reduce to root.

    Transcribes the roles of runRing in NCCL's src/device/broadcast.h (root: send; the GPU
    whose next is root: recv; others: recvCopySend) and src/device/reduce.h (the GPU whose
    prev is root: send; root: recvReduceCopy; others: recvReduceSend).
    """
    k, count = len(ring), {g: [0.0, 0.0] for g in ring}
    for pos, g in enumerate(ring):
        prev, nxt = ring[pos - 1], ring[(pos + 1) % k]
        bcast = "send" if g == root else "recv" if nxt == root else "recv+send"
        reduce = "send" if prev == root else "recv" if g == root else "recv+send"
        for role in (bcast, reduce):
            count[g][0] += n * ("send" in role)
            count[g][1] += n * ("recv" in role)
    return count


@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_dataparallel_link_bytes_match_nccl_ring_broadcast_and_reduce(k):
    rng = np.random.default_rng(k)
    ring = [int(g) for g in rng.permutation(k)]  # NCCL picks the ring from the topology
    counted = nccl_ring_bytes(ring, 1e9)
    start = ring.index(0)
    in_ring_order = [tuple(counted[g]) for g in ring[start:] + ring[:start]]
    assert in_ring_order == f.dataparallel_link_bytes(k, 1e9)
    assert f.dataparallel_link_bytes(1, 1e9) == [(0.0, 0.0)]  # one GPU: no copies at all
    if k > 2:  # the old hub model, 2(k - 1)·n through GPU 0, is not what the rings move
        assert sum(counted[0]) != 2 * (k - 1) * 1e9


@pytest.mark.parametrize("p", [2, 5, 8])
def test_half_ring_is_half_the_ring(p):
    half, ring = f.half_ring(1e6, p), cm.cost("ring", 1e6, p)
    assert half.messages == p - 1 and 2 * half.wire_bytes == ring.wire_bytes


def test_backup_variance_factor_matches_the_variance_of_a_mean():
    rng = np.random.default_rng(2)
    p, k = 16, 4
    draws = rng.normal(size=(200_000, p))
    ratio = draws[:, : p - k].mean(1).var() / draws.mean(1).var()
    assert abs(ratio / f.backup_variance_factor(p, k) - 1) < 0.02
    with pytest.raises(ValueError, match="backup"):
        f.backup_variance_factor(4, 4)


def test_staleness_total_matches_an_asynchronous_server_in_any_order():
    """Lab 8's protocol: G pulls in all, W at the start; each applied gradient frees its worker to pull."""
    rng = np.random.default_rng(3)
    for W, G in ((1, 10), (4, 50), (7, 200)):
        pulled = {w: 0 for w in range(W)}  # worker -> version it computes on
        version, issued, total = 0, W, 0
        while version < G:
            w = int(rng.choice(list(pulled)))  # any busy worker may arrive next
            total += version - pulled.pop(w)
            version += 1
            if issued < G:
                pulled[w], issued = version, issued + 1
        assert total == f.staleness_total(G, W)


def test_local_sgd_rounds_and_powersgd_and_ps_bytes_count_what_they_say():
    assert f.local_sgd_rounds(100, 1) == 100 and f.local_sgd_rounds(100, 16) == 7
    m, n, r = 256, 784, 2
    sent = torch.zeros(m, r).numel() + torch.zeros(n, r).numel()  # P and Q
    assert math.isclose(f.powersgd_ratio(m, n, r), torch.zeros(m, n).numel() / sent)
    W, nbytes = 16, 1000
    for S in (1, 4, W):  # the parameters cut into S equal shards, one per server
        shard = nbytes / S
        received = sum(shard for _ in range(W))  # each worker's gradient slice for this server
        sent_back = sum(shard for _ in range(W))  # this server's parameter slice to each
        assert f.parameter_server_bytes(W, nbytes, S) == received + sent_back
    with pytest.raises(ValueError, match="server"):
        f.parameter_server_bytes(W, nbytes, 0)
