"""Run under `mpiexec -n 3`: ZeRO-1 by hand equals Adam, shards Adam's state, and sends what it should;
`replay` issues again exactly the collectives a step called."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import parameters_to_vector

from dplab.cluster import engine, jobs
from dplab.cluster.settings import Settings
from dplab.models import mlp
from dplab.traffic import count_collectives, counting_allreduce_hook
from labcode.sharding import ZeRO1, optimizer_state_bytes, replay

info = engine.setup(Settings.for_job(device="cpu"))
p = info.world_size
sizes = (20, 7, 2)                   # Ψ = 20·7 + 7 + 7·2 + 2 = 163: p = 3 pads the flat vector by 2
gen = torch.Generator().manual_seed(info.rank)
x, y = torch.randn(4, 20, generator=gen, dtype=torch.float64), torch.randint(0, 2, (4,), generator=gen)

ddp = DDP(mlp(sizes=sizes).double())
hooked = []
ddp.register_comm_hook(None, counting_allreduce_hook(hooked))
opt = torch.optim.Adam(ddp.parameters(), lr=1e-2)
zero = mlp(sizes=sizes).double()
zopt = ZeRO1(zero.parameters(), torch.optim.Adam, lr=1e-2)
with count_collectives() as calls:
    for _ in range(3):
        for model, o in ((ddp, opt), (zero, zopt)):
            o.zero_grad()
            F.cross_entropy(model(x), y).backward()
            o.step()
psi = sum(q.numel() for q in zero.parameters())
shard = -(-psi // p)
mine = min(shard, psi - info.rank * shard)  # my slice's values: the last rank's lack the padding
d = (parameters_to_vector(ddp.parameters()) - parameters_to_vector(zero.parameters())).abs().max().item()
# The counter also sees DDP's default hook, which all-reduces through torch.distributed.
kinds = [c.kind for c in calls]
full = {"all_reduce": 8 * psi, "reduce_scatter": 8 * p * shard, "all_gather": 8 * p * shard}
sizes_ok = all(c.nbytes == full[c.kind] and c.ranks == p for c in calls + hooked)
# Lab 7's replay of one step's collectives (DDP's, seen through the hook, then ZeRO-1's)
# issues the same kinds with the same buffers, in the same order.
step_calls = hooked[:1] + calls[1:3]
with count_collectives() as replayed:
    replay(step_calls, None, torch.device("cpu"))()
replay_ok = replayed == step_calls
sys.stdout.write(f"rank {info.rank}: same {d <= 1e-12} state {optimizer_state_bytes(zopt) == 2 * 8 * mine} "
      f"calls {kinds == ['all_reduce', 'reduce_scatter', 'all_gather'] * 3} hooked {len(hooked) == 3} sizes {sizes_ok} "
      f"replay {replay_ok}\n")  # one write: ranks share stdout
sys.stdout.flush()
jobs.leave()  # a barrier first: no rank tears down Gloo pairs that another still uses
