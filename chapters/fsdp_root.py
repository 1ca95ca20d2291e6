"""What FSDP2 gathers per step when `reshard_after_forward` is left at its default.

Run under `mpiexec -n 2` (the sharding chapter does, through `dplab.cluster.jobs.run_job`). A
model whose root unit keeps parameters of its own (the last Linear, as a Transformer's
root keeps its embedding and output layer) is wrapped three times, with
`reshard_after_forward` left out, True and False. Rank 0 prints, as JSON, the kind and
bytes of each collective that one training step calls, and the bytes of the root's own
parameters.
"""
import json
import sys

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from dplab.cluster import engine
from dplab.cluster.settings import Settings
from dplab.traffic import collectives_of

SIZES = (64, 128, 128, 32)  # widths; the root keeps the last Linear (128 x 32)


def build(mesh, **kw) -> nn.Module:
    """The MLP: each Linear but the last is a unit; the root keeps the last."""
    torch.manual_seed(0)
    a, b, c, d = SIZES
    model = nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c), nn.ReLU(),
                          nn.Linear(c, d))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh, **kw)
    return fully_shard(model, mesh=mesh, **kw)


def main() -> None:
    import torch.distributed as dist

    info = engine.setup(Settings.for_job(device="cpu"))
    mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    x = torch.randn(4, SIZES[0])
    out = {"p": info.world_size}
    for name, kw in (("default", {}), ("True", {"reshard_after_forward": True}),
                     ("False", {"reshard_after_forward": False})):
        model = build(mesh, **kw)

        def step():
            model.zero_grad()
            model(x).sum().backward()
        step()  # the first forward runs FSDP's lazy init, which finds the root
        out[name] = [(c.kind, c.nbytes) for c in collectives_of(step, model)]
    last = build(mesh)[4]
    out["root_bytes"] = sum(q.numel() * q.element_size() for q in last.parameters())
    if info.rank == 0:
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    engine.finalize()


if __name__ == "__main__":
    main()
