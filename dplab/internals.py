"""The private names of torch (and one of Python's) that the book's code uses, in one place.

ipyparallel's have their own list (`dplab.cluster.ipp.INTERNALS`). Each entry below names the
symbol, where the book uses it and why; `missing()` says which ones the installed torch lacks,
and tests/test_internals.py fails with that message, naming the symbol, after an upgrade that
removes one. The same test fails when code uses a private torch name that is not listed here.
"""
from __future__ import annotations

import importlib

# (symbol: "module:attribute.path", where it is used, why)
INTERNALS = (
    ("torch.distributed._tools.mem_tracker:MemTracker", "Lab 7 (labcode.sharding)",
     "to measure what each rank's model, gradients and optimizer state take"),
    ("torch.distributed._tools.fsdp2_mem_tracker:FSDPMemTracker", "Lab 7 (labcode.sharding)",
     "the same, for a model that fully_shard wrapped"),
    ("torch.testing._internal.distributed.fake_pg:FakeProcessGroup", "Lab 7, the memory of large p",
     "the 'fake' backend: a process group of any size in one process, no communication"),
    ("torch.nn.parallel:DistributedDataParallel._get_ddp_logging_data", "Lab 4 (labcode.overlap), "
     "chapters/ddp_inside.md", "DDP's rebuilt bucket sizes, which no public API reports"),
    ("torch.distributed:_broadcast_coalesced", "chapters/ddp_inside.md",
     "counted to show the broadcasts DDP makes at construction and before each forward pass"),
    ("torch.nn.modules._functions:SyncBatchNorm", "chapters/data_parallelism.md, exercise 4",
     "its source is read to show the two messages SyncBatchNorm sends"),
    ("torch._C:_distributed_c10d", "dplab.cluster.flight (Lab 5)",
     "torch.distributed's C++ side, where the Flight Recorder's dump lives"),
    ("torch._C._distributed_c10d:_dump_fr_trace", "dplab.cluster.flight (Lab 5)",
     "a rank's Flight Recorder buffer, as pickle bytes: torch dumps it by itself only on NCCL's "
     "watchdog timeout, and a stuck Gloo rank never gets one"),
    ("os:_exit", "dplab.cluster.engine.dump_stacks_on_death",
     "wrapped, so that a rank that ends through os._exit first writes where it was"),
)


def resolve(symbol: str):
    """The object a "module:attr.path" symbol names; raises ImportError or AttributeError."""
    module, _, path = symbol.partition(":")
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def missing() -> list[str]:
    """One message for each listed name that the installed torch (or Python) no longer has."""
    import torch

    found = []
    for symbol, where, why in INTERNALS:
        try:
            resolve(symbol)
        except (ImportError, AttributeError) as error:
            owner = "Python" if symbol.startswith("os:") else f"torch {torch.__version__}"
            found.append(f"{owner} has no {symbol.replace(':', '.')} ({type(error).__name__}: {error}), "
                         f"which {where} uses {why}: adapt that code, and this list (dplab/internals.py)")
    return found

