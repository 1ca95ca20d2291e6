"""The torch versions the book supports, and the names that moved between them.

The range is the torch requirement in pyproject.toml (the installed metadata when it has one).
Names checked between 2.8 and 2.13 (torch sources of both): only those below moved. torch is
imported lazily, so `python -m dplab.compat VERSION` checks a version before torch is installed.
"""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

try:
    from packaging.version import InvalidVersion, Version
except ImportError:  # a tiny parser below does without it
    Version = None

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

# New name -> its name before torch 2.13 (distributed_c10d.py: the old ones are now deprecated
# wrappers that call the new ones).
RENAMED_COLLECTIVES = {"reduce_scatter_single": "reduce_scatter_tensor",
                       "all_gather_single": "all_gather_into_tensor"}


def _torch_requirement() -> str:
    """The torch requirement, e.g. "torch>=2.8,<2.16": installed metadata, else pyproject.toml."""
    try:
        requires = metadata.requires("dplab") or []
    except metadata.PackageNotFoundError:
        requires = []
    found = [r for r in requires if re.match(r"torch\b", r)]
    if not found and PYPROJECT.exists():
        found = re.findall(r'"(torch\b[^"]*)"', PYPROJECT.read_text())
    if not found:
        raise RuntimeError("no torch requirement in dplab's metadata or pyproject.toml: "
                           'add dependencies = ["torch>=X.Y,<X.Z"] under [project]')
    return found[0]


def _bounds(requirement: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(lowest, newest) (major, minor) from "torch>=A.B,<C.D" in any order; the newest is C.(D-1)."""
    low = re.search(r">=\s*(\d+)\.(\d+)", requirement)
    high = re.search(r"<\s*(\d+)\.(\d+)", requirement)
    if not (low and high) or int(high[2]) == 0:
        raise RuntimeError(f"cannot read a range from {requirement!r}: write it as torch>=A.B,<C.D")
    return (int(low[1]), int(low[2])), (int(high[1]), int(high[2]) - 1)


_LOW, _NEW = _bounds(_torch_requirement())
SUPPORTED = f"torch>={_LOW[0]}.{_LOW[1]},<{_NEW[0]}.{_NEW[1] + 1}"  # one spelling: metadata reorders


def supported_range() -> tuple[str, str]:
    """The lowest and the newest supported torch, as "major.minor" text: ("2.8", "2.15")."""
    return f"{_LOW[0]}.{_LOW[1]}", f"{_NEW[0]}.{_NEW[1]}"


def _release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string, or None if it is not one. Local tags (+cu130) go."""
    if Version is not None:
        try:
            release = Version(version).release
        except InvalidVersion:
            return None
        return release[:2] if len(release) >= 2 else None
    m = re.fullmatch(r"\s*v?(\d+)\.(\d+)(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?"
                     r"(\+[A-Za-z0-9.]+)?\s*", version)
    return (int(m[1]), int(m[2])) if m else None


def at_least(since: str, version: str) -> bool:
    """Whether torch `version` (2.11.0+cu130) is release `since` (X.Y) or a later one."""
    return (_release(version) or (0, 0)) >= _release(since)


def check_supported(version: str) -> str | None:
    """None when torch `version` is in the supported range, else what is wrong and what to do."""
    low, new = supported_range()
    install = f"pip install '{SUPPORTED}'"
    release = _release(version)
    if release is None:
        return (f"{version!r} is not a torch version: give one like {new}.0 "
                "(a local tag such as +cu130 or +cpu is fine)")
    if release < _LOW:
        return f"torch {version} is older than the book supports ({low} to {new}): {install}"
    if release > _NEW:
        return (f"torch {version} is newer than the book has been checked on ({low} to {new}): "
                f"{install}, or widen the range in pyproject.toml once the labs pass on it")
    return None


def fill_in(dist_module=None) -> list[str]:
    """Give torch before 2.13 the collectives' current names, bound to the old functions.

    Code written for `dist.reduce_scatter_single` / `dist.all_gather_single` then runs on 2.8 to
    2.12, where they are `reduce_scatter_tensor` / `all_gather_into_tensor` (same arguments).
    A no-op where the names exist (2.13 on); idempotent. Returns the names it set.
    """
    if dist_module is None:
        import torch.distributed as dist_module
    filled = []
    for new, old in RENAMED_COLLECTIVES.items():
        if not hasattr(dist_module, new) and hasattr(dist_module, old):
            setattr(dist_module, new, getattr(dist_module, old))  # the function itself: no extra call
            filled.append(new)
    return filled


def _ddp_parameters() -> set[str]:
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    return set(inspect.signature(DistributedDataParallel).parameters)


def syncs_buffers_at_init_when_off() -> bool:
    """Whether `DDP(**ddp_buffer_sync(False))` still broadcasts rank 0's buffers at construction."""
    return "forward_sync_buffers" in _ddp_parameters()


def ddp_buffer_sync(each_forward: bool) -> dict:
    """DDP's keyword that turns the buffer broadcast before each forward on or off, on this torch.

    torch 2.13 calls it `forward_sync_buffers` and deprecates `broadcast_buffers`; before 2.13
    only `broadcast_buffers` exists. They differ when False (nn/parallel/distributed.py, DDP's
    __init__): `broadcast_buffers=False` also skips the buffers in the broadcast at construction,
    `forward_sync_buffers=False` still sends them there, and 2.13 has no keyword for "never" (its
    warning promises an `init_sync_buffers`). `syncs_buffers_at_init_when_off()` says which.
    """
    name = "forward_sync_buffers" if syncs_buffers_at_init_when_off() else "broadcast_buffers"
    return {name: each_forward}


def fsdp_one_rank_collectives(version: str | None = None) -> tuple[str, ...]:
    """The collectives FSDP2 (`fully_shard`) still calls on a group of one rank, where there is
    nothing to gather or scatter, on torch `version` (default: this torch's).

    torch 2.8 calls both. 2.9 skips the all-gather (`_fsdp_param_group.py`, `if world_size == 1`
    in unshard) but still reduce-scatters (`_fsdp_collectives.py`, `foreach_reduce`); from 2.10
    `foreach_reduce` copies the gradient instead (`if world_size > 1`), so it calls neither.
    """
    if version is None:
        import torch

        version = torch.__version__
    if at_least("2.10", version):
        return ()
    if at_least("2.9", version):
        return ("reduce_scatter",)
    return ("all_gather", "reduce_scatter")


def default_bucket_cap_mb() -> int:
    """DDP's default bucket cap in MiB: 25 on every supported torch."""
    from torch.nn.parallel import distributed

    # Private, and only from 2.12 or 2.13 (absent in 2.8 and 2.11, which write 25 inline in
    # DDP's __init__).
    return getattr(distributed, "_DEFAULT_BUCKET_CAP_MB", 25)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit(f"usage: python -m dplab.compat TORCH_VERSION  (supported: {SUPPORTED})")
    problem = check_supported(sys.argv[1])
    if problem:
        sys.exit(problem)
