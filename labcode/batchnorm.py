"""Generated from labs/02_data_parallel_by_hand.ipynb, labs/04_ddp.ipynb by
tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn


# From labs/02_data_parallel_by_hand.ipynb, section "8. BatchNorm: per-rank statistics, then synchronised ones".
class AllreduceSum(torch.autograd.Function):
    """Sum a tensor over all ranks; the backward pass sums the gradients the same way.
    (MPI.COMM_WORLD is `comm`: exported code names no variable of the page.)"""

    @staticmethod
    def forward(ctx, t):
        buf = t.detach().cpu().numpy().copy()
        MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return torch.from_numpy(buf).to(t.device)

    @staticmethod
    def backward(ctx, grad):
        buf = grad.detach().cpu().numpy().copy()
        MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return torch.from_numpy(buf).to(grad.device)


# From labs/02_data_parallel_by_hand.ipynb, section "8. BatchNorm: per-rank statistics, then synchronised ones".
class HandSyncBatchNorm(nn.Module):
    """BatchNorm1d (training mode) whose mean and variance cover the global batch
    on all ranks."""

    def __init__(self, bn):
        super().__init__()
        self.bn = bn  # keeps its weight (gamma) and bias (beta)

    def global_stats(self, x):
        "The global batch's size, and every feature's mean and (biased) variance."
        n = MPI.COMM_WORLD.allreduce(x.shape[0])
        sums = AllreduceSum.apply(
            torch.cat([x.double().sum(0), (x.double() ** 2).sum(0)])
        )
        mean, mean_sq = sums[: x.shape[1]] / n, sums[x.shape[1]:] / n
        return n, mean, mean_sq - mean**2

    def forward(self, x):
        n, mean, var = self.global_stats(x)
        x_hat = (x - mean.float()) / torch.sqrt(var.float() + self.bn.eps)
        return x_hat * self.bn.weight + self.bn.bias


# From labs/04_ddp.ipynb, section "4. SyncBatchNorm".
class AllReduceSum(torch.autograd.Function):
    # Sum a tensor over all ranks; backward sums the incoming gradients the same way.
    @staticmethod
    def forward(ctx, t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


# From labs/04_ddp.ipynb, section "4. SyncBatchNorm".
class HandSyncBatchNorm1d(torch.nn.BatchNorm1d):
    # BatchNorm1d whose training-mode statistics are those of the global batch.
    def global_sums(self, local):
        return AllReduceSum.apply(local)                      # one message per layer

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        xd = x.double()
        stats = self.global_sums(
            torch.cat([xd.sum(0), (xd * xd).sum(0), xd.new_tensor([x.shape[0]])])
        )
        C = x.shape[1]
        n = stats[-1]
        mean = stats[:C] / n
        var = stats[C:2 * C] / n - mean * mean  # biased: used to normalise
        with torch.no_grad():
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(m * mean.to(x.dtype))
            # unbiased, as BatchNorm
            self.running_var.mul_(1 - m).add_(m * (var * n / (n - 1)).to(x.dtype))
            self.num_batches_tracked += 1
        std = torch.sqrt(var.to(x.dtype) + self.eps)
        return (x - mean.to(x.dtype)) / std * self.weight + self.bias


# From labs/04_ddp.ipynb, section "4. SyncBatchNorm".
def hand_convert(module, cls=HandSyncBatchNorm1d):
    # Swap every BatchNorm1d for cls, keeping its parameters and buffers.
    for name, child in module.named_children():
        if isinstance(child, torch.nn.BatchNorm1d):
            new = cls(child.num_features, child.eps, child.momentum)
            new.load_state_dict(child.state_dict())
            setattr(module, name, new)
        else:
            hand_convert(child, cls)
    return module
