"""Lab 4's overlap code (labcode.overlap): bucketing like DDP's, and gradient averaging with and without overlap."""
import os

import pytest
import torch

from dplab.cluster.jobs import run_job
from dplab.models import mlp
from labcode.overlap import CAPS, WIDE_MLP, reverse_buckets

from tests.support.mpi import assert_every_rank_passes, lines_matching

HERE = os.path.dirname(__file__)


def test_reverse_buckets_start_from_the_last_parameter_and_close_at_the_cap():
    params = [torch.zeros(n) for n in (10, 20, 30, 40)]  # 40, 80, 120, 160 bytes
    buckets = reverse_buckets(params, cap_bytes=200)
    assert [[p.numel() for p in b] for b in buckets] == [[40, 30], [20, 10]]
    assert [[p.numel() for p in b] for b in reverse_buckets(params, 1)] == [[40], [30], [20], [10]]
    assert len(reverse_buckets(params, 10**9)) == 1


def test_reverse_buckets_cover_every_parameter_once():
    params = list(mlp(sizes=WIDE_MLP).parameters())
    for cap in (2**20, 5 * 2**20, 25 * 2**20):
        flat = [p for b in reverse_buckets(params, cap) for p in b]
        assert [id(p) for p in flat] == [id(p) for p in reversed(params)]


def test_every_cap_of_lab_4_gives_the_wide_mlp_another_bucketing():
    """Lab 4 compares the caps in CAPS; that shows something only if each one buckets differently."""
    params = list(mlp(sizes=WIDE_MLP).parameters())
    counts = [len(reverse_buckets(params, cap * 2**20)) for cap in CAPS]
    assert counts == sorted(counts, reverse=True) and len(set(counts)) == len(CAPS), counts
    assert counts[-1] == 1  # the largest cap holds every gradient: no overlap is possible


def test_hook_overlap_and_flat_allreduce_match_ddp_gradients_and_buckets_under_mpiexec():
    out = run_job(os.path.join(HERE, "mpi", "check_overlap.py"), 2, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = lines_matching(out.stdout, r"rank \d+: hook \w+ ddp \w+ buckets \w+ n=\d+")
    assert lines == [f"rank {r}: hook True ddp True buckets True n=2" for r in range(2)], out.stdout + out.stderr


@pytest.mark.parametrize("p", [2, 3])
def test_hand_ddp_trains_what_ddp_and_one_process_train_on_frozen_tied_and_buffered_models_under_mpiexec(p):
    """Ranks seeded differently; bucket caps 0, 4 KiB and unlimited; gradients arriving in another
    order on each rank (which the bare OverlapAllReduce gets wrong); an unused parameter named."""
    caps = [f"{c}{n}" for n in ("0", "4KiB", "unlimited") for c in ("cap", "frozen", "tied")]
    assert_every_rank_passes("check_hand_ddp.py", p, caps + ["caps", "order", "bare_order_wrong", "unused", "twice"])
