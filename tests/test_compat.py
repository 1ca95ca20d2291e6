"""dplab.compat: the supported torch range, and the names that moved between its versions."""

import inspect
import re
import tomllib
import types
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from packaging.specifiers import SpecifierSet
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from dplab import compat

TORCH = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_fill_in_gives_a_torch_with_only_the_old_names_the_new_ones_calling_the_old_functions():
    seen = []
    old = types.SimpleNamespace(reduce_scatter_tensor=lambda out, inp, **kw: seen.append(("rs", out, inp)),
                                all_gather_into_tensor=lambda out, inp, **kw: seen.append(("ag", out, inp)))
    assert compat.fill_in(old) == ["reduce_scatter_single", "all_gather_single"]
    old.reduce_scatter_single(1, 2)
    old.all_gather_single(3, 4)
    assert seen == [("rs", 1, 2), ("ag", 3, 4)]
    assert old.reduce_scatter_single is old.reduce_scatter_tensor  # bound, not a shim: no extra call
    assert compat.fill_in(old) == []  # idempotent


def test_fill_in_is_a_no_op_from_2_13_and_before_it_torch_has_only_the_old_names():
    new, old = list(compat.RENAMED_COLLECTIVES), list(compat.RENAMED_COLLECTIVES.values())
    assert all(hasattr(dist, name) for name in old)
    if TORCH >= (2, 13):
        before = [getattr(dist, name) for name in new]
        assert compat.fill_in() == []
        assert [getattr(dist, name) for name in new] == before
    else:  # torch.distributed may be filled in already (tests/test_sharding.py): c10d is not
        assert not any(hasattr(dist.distributed_c10d, name) for name in new)
        compat.fill_in()
        assert all(getattr(dist, n) is getattr(dist, o) for n, o in compat.RENAMED_COLLECTIVES.items())


@pytest.mark.parametrize("parser", ["packaging", "tiny"])
def test_check_supported_accepts_the_range_with_local_tags_and_says_what_to_do_otherwise(parser, monkeypatch):
    if parser == "tiny":
        monkeypatch.setattr(compat, "Version", None)
    for ok in ("2.8.0", "2.11.0+cu130", "2.13.0+cpu", "2.15.2", "2.8.0rc1", torch.__version__):
        assert compat.check_supported(ok) is None, ok
    assert re.fullmatch(r"torch 2\.7\.1 is older than the book supports \(2\.8 to 2\.15\): "
                        r"pip install 'torch>=2\.8,<2\.16'", compat.check_supported("2.7.1"))
    for new in ("2.16.0", "2.16.0.dev20260101+cu130", "3.0"):
        assert "is newer than the book has been checked on (2.8 to 2.15)" in compat.check_supported(new)
    for bad in ("abc", "", "2", "2.x"):
        problem = compat.check_supported(bad)
        assert problem and "is not a torch version: give one like 2.15.0" in problem, bad


def test_the_range_is_pyprojects_torch_requirement():
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    torch_req = [r for r in project["dependencies"] if re.match(r"torch\b", r)]
    assert torch_req == ["torch>=2.8,<2.16"]
    spec = SpecifierSet(torch_req[0][len("torch"):])
    assert SpecifierSet(compat.SUPPORTED[len("torch"):]) == spec, (
        "dplab's installed metadata is stale: run `make setup`")
    low, new = compat.supported_range()
    major, minor = map(int, new.split("."))
    assert f"{low}.0" in spec and f"{new}.99" in spec
    assert f"{major}.{minor + 1}.0" not in spec
    assert "2.7.99" not in spec and (low, new) == ("2.8", "2.15")


def test_the_range_is_read_from_either_source_whatever_the_order_of_its_bounds(monkeypatch):
    def not_installed(name):
        raise compat.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(compat.metadata, "requires", not_installed)  # read pyproject.toml
    assert compat._bounds(compat._torch_requirement()) == ((2, 8), (2, 15))
    monkeypatch.setattr(compat.metadata, "requires", lambda name: ["numpy", "torch<2.16,>=2.8"])
    assert compat._bounds(compat._torch_requirement()) == ((2, 8), (2, 15))


def test_ddp_buffer_sync_names_a_keyword_of_this_ddp_and_its_init_broadcast_is_as_stated(one_rank, monkeypatch):
    params = inspect.signature(DDP).parameters
    for on in (True, False):
        [(name, value)] = compat.ddp_buffer_sync(on).items()
        assert name in params and value is on
    assert compat.syncs_buffers_at_init_when_off() == ("forward_sync_buffers" in params)
    assert compat.syncs_buffers_at_init_when_off() == (TORCH >= (2, 13))

    sent = []  # tensors in DDP's broadcast at construction (what chapters/ddp_inside.md counts)
    real = dist._broadcast_coalesced
    monkeypatch.setattr(dist, "_broadcast_coalesced",
                        lambda group, tensors, *a: (sent.append(len(tensors)), real(group, tensors, *a)))
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))  # 4 parameters, 3 buffers
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the keyword is not the deprecated one
        DDP(model, **compat.ddp_buffer_sync(False))
    assert sent == [7 if compat.syncs_buffers_at_init_when_off() else 4]


def test_default_bucket_cap_mb_is_the_cap_ddp_uses(one_rank):
    assert compat.default_bucket_cap_mb() == 25
    assert DDP(nn.Linear(3, 2)).bucket_bytes_cap == compat.default_bucket_cap_mb() * 2**20


def test_start_cluster_refuses_an_older_torch_before_anything_starts_and_warns_on_a_newer_one():
    import warnings

    import pytest

    from dplab.cluster.errors import ClusterError
    from dplab.cluster.start import check_torch

    with pytest.raises(ClusterError, match="older than the book supports"):
        check_torch("2.7.1")
    with pytest.warns(UserWarning, match="newer than the book has been checked on"):
        check_torch("2.16.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_torch("2.8.0+cu128")
        check_torch("2.15.0")


def test_fsdp_one_rank_collectives_are_those_this_torchs_fsdp2_calls_on_one_rank(one_rank):
    """Lab 7's check at p = 1 expects these; the release table is read from torch's sources
    (dplab.compat's docstring), and this run of FSDP2 holds this torch to it."""
    from torch.distributed.fsdp import fully_shard

    from dplab.traffic import count_collectives

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    with count_collectives() as calls:
        model(torch.ones(3, 4)).sum().backward()
    assert {c.kind for c in calls} == set(compat.fsdp_one_rank_collectives())


def test_fsdp_one_rank_collectives_by_release():
    assert compat.fsdp_one_rank_collectives("2.8.0") == ("all_gather", "reduce_scatter")
    assert compat.fsdp_one_rank_collectives("2.9.1+cu128") == ("reduce_scatter",)
    assert compat.fsdp_one_rank_collectives("2.10.0") == compat.fsdp_one_rank_collectives("2.15.0") == ()
