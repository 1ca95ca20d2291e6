"""What the chapters say about PyTorch's internals, checked on the installed torch.

chapters/mixed_precision.md states who refuses `bf16_compress_hook`, and chapters/ddp.md
("DataParallel in bytes") how `DataParallel` moves its bytes; these tests hold those
sentences to the source they cite, so an upgrade that changes either fails here rather than
leaving the prose wrong.
"""
import importlib
import inspect

import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


@pytest.fixture
def gloo_group():
    """A one-rank Gloo group on an in-memory store: no sockets, no other process."""
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    dist.destroy_process_group()


def fake_build(monkeypatch, cuda, nccl):
    """Make this process look like a build for CUDA `cuda` (None: none) with NCCL `nccl`."""
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: nccl is not None)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: nccl)
    monkeypatch.setattr(dist, "is_xccl_available", lambda: False)


@pytest.mark.parametrize("cuda,nccl,accepted", [
    ("12.8", (2, 21, 5), True),   # a CUDA build with NCCL >= 2.10: accepted on Gloo
    ("12.8", (2, 9, 9), False),   # NCCL too old
    (None, None, False),          # a CPU-only build, like this book's: refused on Gloo too
])
def test_ddp_checks_the_build_for_bf16_compress_hook_not_the_backend(
        gloo_group, monkeypatch, cuda, nccl, accepted):
    """torch/nn/parallel/distributed.py, DistributedDataParallel._check_comm_hook."""
    model = DDP(torch.nn.Linear(4, 4))
    fake_build(monkeypatch, cuda, nccl)
    assert dist.get_backend() == "gloo"
    if accepted:
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    else:
        with pytest.raises(TypeError, match="NCCL 2.10"):
            model.register_comm_hook(None, default_hooks.bf16_compress_hook)


def test_ddp_recognises_the_bf16_hook_by_its_name(gloo_group, monkeypatch):
    """The same function under another name passes on a CPU-only build (what Lab 6 relies on)."""
    fake_build(monkeypatch, None, None)

    def my_bf16_hook(state, bucket):
        return default_hooks.bf16_compress_hook(state, bucket)

    model = DDP(torch.nn.Linear(4, 4))
    model.register_comm_hook(None, my_bf16_hook)
    model(torch.randn(2, 4)).sum().backward()  # the hook runs on Gloo
    assert model.module.weight.grad is not None


def source(obj) -> str:
    return inspect.getsource(obj)


def test_dataparallel_replicates_by_broadcast_and_reduces_after_the_whole_backward():
    """The chain the chapter cites, function by function, in the installed torch."""
    # the package's names shadow these modules with functions of the same name
    _functions, comm, data_parallel, parallel_apply, replicate = (
        importlib.import_module(f"torch.nn.parallel.{m}")
        for m in ("_functions", "comm", "data_parallel", "parallel_apply", "replicate"))

    forward = source(data_parallel.DataParallel.forward)
    for step in ("self.scatter(", "self.replicate(", "self.parallel_apply(", "self.gather("):
        assert step in forward  # every forward replicates the module again
    assert "comm.broadcast_coalesced(" in source(_functions.Broadcast.forward)
    assert "Broadcast.apply(devices, *tensors)" in source(replicate._broadcast_coalesced_reshape)
    # all parameters go through ONE Broadcast node, so its backward (the reduce) runs once,
    # after the gradient of every parameter on every replica exists
    assert "param_copies = _broadcast_coalesced_reshape(params, devices, detach)" in source(
        replicate.replicate)
    assert "ReduceAddCoalesced.apply(" in source(_functions.Broadcast.backward)
    assert "comm.reduce_add_coalesced(" in source(_functions.ReduceAddCoalesced.forward)
    assert "nccl.reduce(" in source(comm.reduce_add)
    assert "torch._C._broadcast_coalesced(" in source(comm.broadcast_coalesced)
    assert "threading.Thread(" in source(parallel_apply.parallel_apply)
    assert "comm.gather(" in source(_functions.Gather.forward)
