"""Which GPU each rank takes (no GPU needed: what each rank sees is given), and that a rank
stuck forever behind a comm-hook future is ended within the bound."""
import time
from pathlib import Path

import pytest

import dplab
from dplab.cluster import engine
from dplab.cluster.engine import gpu_for

A, B, C, D = "GPU-a", "GPU-b", "GPU-c", "GPU-d"


@pytest.mark.parametrize(
    "node_gpus, expected",
    [
        ([[A, B, C, D]] * 4, [0, 1, 2, 3]),  # every rank sees every GPU: local rank r takes GPU r
        ([[A, B, C, D]] * 2, [0, 1]),
        ([[A], [B], [C], [D]], [0, 0, 0, 0]),  # SLURM --gpus-per-task=1: each sees only its own
        ([[B, A], [A]], [0, 0]),  # rank 1 sees A only, so it takes A and rank 0 gets B
    ],
)
def test_each_rank_takes_a_gpu_of_its_own_for_nccl(node_gpus, expected):
    assert [gpu_for(r, r, "nccl", node_gpus) for r in range(len(node_gpus))] == [(g, None) for g in expected]


@pytest.mark.parametrize("node_gpus", [[[A]] * 2, [[A, B]] * 3, [[A], [A]], [[A, B], [B], [A]]])
def test_nccl_is_refused_when_ranks_share_fewer_gpus_than_they_are(node_gpus):
    choices = [gpu_for(r, r, "nccl", node_gpus) for r in range(len(node_gpus))]
    refused = [r for r, (gpu, why) in enumerate(choices) if gpu is None]
    assert refused, choices
    why = choices[refused[0]][1]
    assert "NCCL needs a GPU of its own per rank" in why and "use gloo" in why


def test_gloo_shares_the_gpus_ranks_see_when_there_are_too_few():
    assert [gpu_for(r, r, "gloo", [[A]] * 4)[0] for r in range(4)] == [0, 0, 0, 0]
    assert [gpu_for(r, r, "gloo", [[A, B]] * 3)[0] for r in range(3)] == [0, 1, 0]


def test_a_rank_that_sees_no_gpu_is_told_so():
    gpu, why = gpu_for(3, 1, "nccl", [[A], []])
    assert gpu is None and "rank 3 sees no GPU" in why


def test_nccl_keeps_its_watchdog_and_ends_a_timed_out_rank():
    """TORCH_NCCL_BLOCKING_WAIT=1 would start no watchdog: then a hang behind a stream wait never ends."""
    env = engine.backend_environment("nccl")
    assert env == {"TORCH_NCCL_BLOCKING_WAIT": "0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    assert engine.backend_environment("gloo") == {}
    source = Path(engine.__file__).read_text()
    assert source.index("os.environ.update(backend_environment(") < source.index("dist.init_process_group(")


TIMEOUT_S = 2  # the collectives' timeout of the cluster below

HOOK_NEVER_RETURNS = """\
import torch, torch.distributed as dist, torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(torch.nn.Linear(4, 2))
def hook(state, bucket):
    if rank == 1:
        return torch.futures.Future()  # never completed: a wait that never returns
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])
model.register_comm_hook(None, hook)
F.mse_loss(model(torch.ones(8, 4)), torch.zeros(8, 2)).backward()
"""


def test_a_rank_stuck_behind_a_comm_hook_future_is_ended_within_the_bound(leaves_nothing):
    """Rank 1's backward waits forever on its hook's future; rank 0's all-reduce, reached through
    `fut.then`, has no partner. The collective's timeout fails rank 0, then the stuck-rank watch
    stops the cluster: timeout + stuck_after + a few seconds, not never (stuck_after=1: sooner)."""
    with dplab.start_cluster(2, timeout=TIMEOUT_S, stuck_after=1) as c:
        bound = TIMEOUT_S + c.settings.stuck_after + 10
        t0 = time.perf_counter()
        with pytest.raises(dplab.StuckRanksError) as info:
            c.view.execute(HOOK_NEVER_RETURNS)
        seconds = time.perf_counter() - t0
        assert seconds < bound, (seconds, str(info.value))
        err = info.value
        assert sorted(err.failed) == [0] and sorted(err.stuck) == [1], str(err)
        assert "idle inside torch's backward()" in err.stuck[1].text, str(err)
        assert not c.running
