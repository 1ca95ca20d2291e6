"""Generated from labs/04_ddp.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import functools
import itertools
import torch
import torch.distributed as dist
import torch.nn.functional as F
from dplab.models import mlp
from torch.nn.parallel import DistributedDataParallel as DDP


# From labs/04_ddp.ipynb, section "1. DDP against one process and against a hand-written all-reduce".
def allreduce_gradients(model, group=None):
    # Average every gradient over the ranks of `group` (default: all) in one all-reduce.
    grads = [p.grad for p in model.parameters()]
    # one message instead of one per tensor
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    flat /= dist.get_world_size(group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
WIDE_MLP = (784,) + (1024,) * 10 + (10,)


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
BW = 64


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def reverse_buckets(params, cap_bytes):
    # Last parameter first; a bucket is closed as soon as it holds cap_bytes or more.
    buckets, current, size = [], [], 0
    for q in reversed(list(params)):
        current.append(q)
        size += q.numel() * q.element_size()
        if size >= cap_bytes:
            buckets.append(current)
            current, size = [], 0
    return buckets + [current] if current else buckets


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def ddp_bucket_bytes(ddp):
    # DDP's buckets in bytes, in launch order, once it has rebuilt them, from an
    # internal debugging API that gives them as a string "b1, b2, ..."
    rebuilt = ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]
    return [int(s) for s in str(rebuilt).split(", ")]


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
class OverlapAllReduce:
    def __init__(self, params, cap_mb, group=None):
        self.group, self.p = group, dist.get_world_size(group)  # average over `group`
        self.buckets = reverse_buckets(params, cap_mb * 2**20)
        self.reset()
        for i, bucket in enumerate(self.buckets):
            for q in bucket:
                q.register_post_accumulate_grad_hook(functools.partial(self.ready, i))

    def ready(self, i, param):                               # called during backward
        self.left[i] -= 1
        if self.left[i] == 0:
            self.launch(i)

    def launch(self, i):                                     # bucket i's all-reduce
        flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[i]])
        self.launched.append(
            (i, flat, dist.all_reduce(flat, group=self.group, async_op=True))
        )

    def wait(self):                                          # called after backward
        for i, flat, handle in self.launched:
            handle.wait()
            flat /= self.p
            offset = 0
            for q in self.buckets[i]:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))
                offset += q.numel()
        assert len(self.launched) == len(self.buckets)
        self.reset()

    def reset(self):                                         # ready for the next step
        self.launched = []  # (bucket, flat buffer, handle)
        self.left = [len(b) for b in self.buckets]  # gradients each bucket waits for


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
CAPS = (1, 5, 10, 25, 50)


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
class HandDDP(OverlapAllReduce):
    # OverlapAllReduce on any model, as DDP: every rank starts from group rank 0's
    # parameters and buffers, frozen parameters are left out, buckets are launched in
    # order, and a parameter that got no gradient is named in an error.
    def __init__(self, model, cap_mb, group=None):
        with torch.no_grad():
            for t in itertools.chain(model.parameters(), model.buffers()):
                dist.broadcast(t, group=group, group_src=0)
        # parameters() gives a tied (shared) parameter once: one hook, one all-reduce
        trained = [q for q in model.parameters() if q.requires_grad]
        if not trained:
            raise ValueError("the model has no parameter with requires_grad=True")
        self.names = {q: name for name, q in model.named_parameters()}
        super().__init__(trained, cap_mb, group)

    def reset(self):
        super().reset()
        self.next, self.fired = 0, set()  # the next bucket to launch; hooks called

    def ready(self, i, param):
        if param in self.fired:  # DDP syncs every backward itself; HandDDP needs wait()
            raise RuntimeError("a second backward pass before wait(): HandDDP averages "
                               "each backward's gradients, so call wait() after each")
        self.fired.add(param)
        self.left[i] -= 1
        while self.next < len(self.buckets) and self.left[self.next] == 0:
            self.launch(self.next)  # bucket i only after buckets 0 to i - 1
            self.next += 1

    def wait(self):
        unused = [self.names[q] for b in self.buckets for q in b if q not in self.fired]
        if unused:
            for *_, handle in self.launched:  # finish what was launched, then say why
                handle.wait()
            self.reset()
            raise RuntimeError(
                f"rank {dist.get_rank()}: no gradient reached {', '.join(unused)} in "
                "this backward pass. Set requires_grad=False on parameters the model "
                "does not use before HandDDP is built, or use DDP with "
                "find_unused_parameters=True."
            )
        super().wait()


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def make_step(kind, x, y, device, cap=None, group=None):
    # One SGD step of the wide MLP on (x, y): kind "none" (no communication), "after"
    # (all-reduce after backward), "hook" (HandDDP) or "ddp" (DDP). Returns the
    # model and the step.
    model = mlp(sizes=WIDE_MLP).to(device)
    if kind == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        model = DDP(model, device_ids=ids, bucket_cap_mb=cap, process_group=group)
    overlap = HandDDP(model, cap, group) if kind == "hook" else None
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        if kind == "after":
            allreduce_gradients(model, group)       # no overlap: step 1's function
        elif kind == "hook":
            overlap.wait()
        opt.step()
    return model, step
