"""ZeRO/FSDP memory formulas, ZeRO-1 by hand against Adam, and the collective counter."""

import pytest
import torch
import torch.distributed as dist

from dplab.traffic import count_collectives
from labcode.sharding import STAGES, model_state_bytes

from conftest import assert_every_rank_passes


def test_seven_billion_parameters_need_112_gb_under_ddp_and_a_sixteenth_per_rank_fully_sharded():
    assert model_state_bytes(7e9) == 112e9
    assert model_state_bytes(7e9, 8, 1) == 28e9 + 12 * 7e9 / 8
    assert model_state_bytes(7e9, 8, 2) == 14e9 + 14 * 7e9 / 8
    assert model_state_bytes(7e9, 8, 3) == 14e9
    assert all(model_state_bytes(1e6, 1, s) == model_state_bytes(1e6) for s in STAGES)  # p = 1: nothing to shard


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="stage must be one of"):
        model_state_bytes(1e6, 4, stage=4)


def test_counter_records_each_collective_with_its_full_buffer_and_restores_torch(tmp_path):
    originals = (dist.all_reduce, dist.reduce_scatter_single, dist.all_gather_single)
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        with count_collectives() as calls:
            t = torch.ones(6)
            dist.all_reduce(t)
            out = torch.empty(6, dtype=torch.float64)
            dist.reduce_scatter_single(out, torch.ones(6, dtype=torch.float64))
            dist.all_gather_single(torch.empty(3), torch.ones(3))
    finally:
        dist.destroy_process_group()
    assert [(c.kind, c.nbytes, c.ranks) for c in calls] == [
        ("all_reduce", 24, 1), ("reduce_scatter", 48, 1), ("all_gather", 12, 1)]
    assert (dist.all_reduce, dist.reduce_scatter_single, dist.all_gather_single) == originals


def test_zero1_by_hand_equals_ddp_adam_shards_its_state_and_sends_two_collectives_and_replays_them_under_mpiexec():
    assert_every_rank_passes("check_sharding.py", 3, ['same', 'state', 'calls', 'hooked', 'sizes', 'replay'])


@pytest.mark.parametrize("p", [2, 3])
def test_zero1_wraps_any_optimizer_as_a_torch_optimizer_with_a_scheduler_and_a_checkpoint_under_mpiexec(p):
    """Adam, AdamW and SGD with momentum against ZeroRedundancyOptimizer and one process, ranks
    seeded differently, a frozen layer, a parameter without gradient and one with a gradient every
    other step; a scheduler; a resumed checkpoint; find_unused; a rank with an empty slice; what it
    cannot do refused."""
    names = [n for o in ("adam", "adamw", "sgd") for n in (o, f"{o}_skips")]
    assert_every_rank_passes("check_zero1.py", p, names + [
        "scheduler", "resume", "wrong_rank", "find_unused", "default_skips", "tiny", "refuses_lbfgs",
        "refuses_mixed", "refuses_unfrozen", "refuses_new_group"])


def test_collectives_of_sees_ddp_buckets_through_a_hook_and_later_steps_do_not_change_its_list(tmp_path):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from dplab.models import mlp
    from dplab.traffic import collectives_of

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        model = DDP(mlp(sizes=(6, 4, 2)))
        x = torch.randn(3, 6)

        def step():
            model.zero_grad()
            model(x).sum().backward()
        calls = collectives_of(step, model)
        step()
        plain = collectives_of(lambda: dist.all_reduce(torch.ones(5)))
    finally:
        dist.destroy_process_group()
    psi = 6 * 4 + 4 + 4 * 2 + 2
    assert [(c.kind, c.nbytes, c.ranks) for c in calls] == [("all_reduce", 4 * psi, 1)]
    assert [(c.kind, c.nbytes) for c in plain] == [("all_reduce", 20)]
