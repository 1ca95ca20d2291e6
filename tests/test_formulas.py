"""dplab.formulas against independent references: simulations, torch's own functions, counted bytes."""
import math

import numpy as np
import pytest
import torch

import labcode.costmodel as cm
from dplab import formulas as f


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


def test_warmup_factor_drives_lambdalr_linearly_to_the_full_rate():
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: f.warmup_factor(s + 1, 5))
    seen = []
    for _ in range(8):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert np.allclose(seen, [0.08, 0.16, 0.24, 0.32, 0.4, 0.4, 0.4, 0.4])


def test_critical_batch_ratios_trade_steps_for_samples():
    for batch in (1.0, 10.0, 1e4):
        s, e = f.critical_batch_ratios(batch, 100.0)
        assert math.isclose((s - 1) * (e - 1), 1)
    assert f.critical_batch_ratios(100.0, 100.0) == (2.0, 2.0)


@pytest.mark.parametrize("c", [0.1, 1.0, 100.0])
def test_clip_by_norm_agrees_with_torch(c):
    g = np.array([3.0, -4.0, 12.0])
    t = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    t.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_norm_([t], c)
    assert np.allclose(f.clip_by_norm(g, c), t.grad.numpy(), rtol=1e-5)


def test_loss_scale_range_is_what_fp16_keeps():
    scale = 2.0**16
    flush, largest = f.loss_scale_range(torch.float16, scale)
    to16 = lambda v: torch.tensor(v * scale, dtype=torch.float64).to(torch.float16)
    assert to16(flush * 1.01) > 0 and to16(flush) == 0
    assert torch.isfinite(to16(largest)) and torch.isinf(to16(largest * 1.01))


def test_dataparallel_hub_moves_k_times_a_ring_rank():
    for k in (2, 4, 8):
        assert math.isclose(f.dataparallel_hub_bytes(k, 1e9) / cm.bandwidth_lower_bound_bytes(1e9, k), k)


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
    received = sum(nbytes for _ in range(W))  # one gradient from each worker
    sent_back = sum(nbytes for _ in range(W))  # new parameters to each
    assert f.parameter_server_bytes(W, nbytes) == received + sent_back
