"""A minimal, complete DDP script: MNIST MLP, DistributedSampler, rank-0 checkpoint.

    torchrun --standalone --nproc-per-node 2 chapters/ddp_train.py --epochs 2
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from dplab.data import load_mnist
from dplab.models import mlp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch B")
    ap.add_argument("--checkpoint", default=None, help="file to save to from rank 0")
    args = ap.parse_args()

    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which
    # init_process_group reads, and LOCAL_RANK, which is for us.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # before any CUDA use or collective
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks_here))
        dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    data = load_mnist()
    train_set = TensorDataset(data.x_train, data.y_train)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # this rank's share
    loader = DataLoader(train_set, batch_size=args.batch, sampler=sampler,
                        drop_last=True)

    model = mlp(seed=0).to(device)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
        total = torch.zeros(2, device=device)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()  # gradients are averaged across ranks here
            opt.step()
            n = torch.tensor(float(len(y)), device=device)
            total += torch.stack([loss.detach() * n, n])
        dist.all_reduce(total)  # the mean loss over all ranks' samples
        if rank == 0:
            mean_loss = total[0].item() / total[1].item()
            print(f"epoch {epoch}: mean training loss {mean_loss:.2f} "
                  f"over {int(total[1].item())} samples on {world_size} ranks")

    if args.checkpoint and rank == 0:
        state = {"model": ddp.module.state_dict(), "optim": opt.state_dict()}
        torch.save(state, args.checkpoint)
    dist.barrier()  # nobody reads the checkpoint before it is written

    # Evaluation: each rank scores an unpadded shard (every world_size-th test
    # sample); one all-reduce of (correct, count) gives the exact test accuracy.
    x_test, y_test = data.x_test[rank::world_size], data.y_test[rank::world_size]
    with torch.no_grad():
        pred = ddp.module(x_test.to(device)).argmax(1)
    score = torch.tensor([(pred == y_test.to(device)).sum().item(), len(y_test)],
                         dtype=torch.float64, device=device)
    dist.all_reduce(score)
    assert int(score[1].item()) == len(data.y_test)  # each test sample counted once
    if rank == 0:
        print(f"test accuracy {score[0].item() / score[1].item():.2f} "
              f"over {int(score[1].item())} test samples")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
