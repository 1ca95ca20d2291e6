"""ZeRO/FSDP memory formulas, ZeRO-1 by hand against Adam, and the collective counter."""

import warnings

import pytest
import torch
import torch.distributed as dist

from dplab.compat import fill_in
from dplab.traffic import count_collectives
from labcode.sharding import STAGES, model_state_bytes

from tests.support.mpi import assert_every_rank_passes

fill_in()  # torch before 2.13: the collectives' current names, which these tests call


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


def test_counter_counts_a_collective_once_by_its_deprecated_name(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        with warnings.catch_warnings(), count_collectives() as calls:
            warnings.simplefilter("ignore", FutureWarning)  # 2.13 deprecates both names
            dist.reduce_scatter_tensor(torch.empty(6), torch.ones(6))
            dist.all_gather_into_tensor(torch.empty(3), torch.ones(3))
    finally:
        dist.destroy_process_group()
    assert [(c.kind, c.nbytes) for c in calls] == [("reduce_scatter", 24), ("all_gather", 12)]


def test_counter_counts_once_on_a_torch_with_only_the_old_names_filled_in_or_shimmed(tmp_path, monkeypatch):
    c10d = dist.distributed_c10d
    for name in ("reduce_scatter_single", "all_gather_single"):  # torch before 2.13
        monkeypatch.delattr(dist, name, raising=False)
    monkeypatch.setattr(dist, "reduce_scatter_tensor", c10d.reduce_scatter_tensor)
    monkeypatch.setattr(dist, "all_gather_into_tensor", c10d.all_gather_into_tensor)
    assert fill_in(dist) == ["reduce_scatter_single", "all_gather_single"]

    def issue():
        dist.reduce_scatter_single(torch.empty(6), torch.ones(6))
        dist.reduce_scatter_tensor(torch.empty(6), torch.ones(6))
        dist.all_gather_single(torch.empty(3), torch.ones(3))
        dist.all_gather_into_tensor(torch.empty(3), torch.ones(3))

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            with count_collectives() as filled:
                issue()
            # A shim that reaches the new name through torch.distributed nests two wrappers.
            monkeypatch.setattr(dist, "reduce_scatter_tensor", lambda *a, **k: dist.reduce_scatter_single(*a, **k))
            monkeypatch.setattr(dist, "all_gather_into_tensor", lambda *a, **k: dist.all_gather_single(*a, **k))
            with count_collectives() as shimmed, count_collectives() as inner:
                issue()
    finally:
        dist.destroy_process_group()
    once = [("reduce_scatter", 24)] * 2 + [("all_gather", 12)] * 2
    assert [(c.kind, c.nbytes) for c in filled] == once
    assert [(c.kind, c.nbytes) for c in shimmed] == once  # nested blocks each count every call
    assert [(c.kind, c.nbytes) for c in inner] == once


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
