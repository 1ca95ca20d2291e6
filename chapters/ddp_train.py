"""A minimal, complete DDP script: MNIST MLP, DistributedSampler, rank-0 checkpoint.

    torchrun --standalone --nproc-per-node 2 chapters/ddp_train.py --epochs 2

With --checkpoint PATH --checkpoint-every K it saves every K steps and, started
again (say by torchrun --max-restarts=1 after a worker dies), resumes exactly.
"""
import argparse
import itertools
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
    ap.add_argument("--checkpoint-every", type=int, default=0,
                    help="also save every K steps (0: only at the end)")
    ap.add_argument("--log-every", type=int, default=0, help="print every N steps")
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

    def save(epoch: int, done: int, step: int, total: torch.Tensor) -> None:
        """Every rank calls this (it gathers); rank 0 writes the file."""
        totals = [torch.empty_like(total) for _ in range(world_size)]
        dist.all_gather(totals, total)  # each rank's running loss totals are its own
        if rank == 0:
            state = {"model": ddp.module.state_dict(), "optim": opt.state_dict(),
                     "epoch": epoch, "done": done, "step": step,
                     "totals": torch.stack(totals)}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)  # never half a file

    # Where training starts: epoch, batches done in it, optimizer steps, and this
    # rank's running (Σ loss·n, Σ n). A checkpoint left by a killed run moves it on:
    # every rank loads it, as the optimizer state (momentum) lives on every rank.
    epoch0, done, step, total = 0, 0, 0, torch.zeros(2, device=device)
    every = args.checkpoint_every if args.checkpoint else 0  # steps between saves
    if args.checkpoint and os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, map_location=device, weights_only=True)
        ddp.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optim"])
        epoch0, done, step = ckpt["epoch"], ckpt["done"], ckpt["step"]
        assert len(ckpt["totals"]) == world_size  # else the shards would differ
        total = ckpt["totals"][rank]
        # DDP's first backward lays its buckets out from the parameters' order;
        # then it rebuilds them in the order the gradients arrived. With 3+ ranks
        # the layout changes the float sums, so one throwaway backward makes the
        # next step sum as the uninterrupted run's step did.
        x, y = data.x_train[:args.batch], data.y_train[:args.batch]
        F.cross_entropy(ddp(x.to(device)), y.to(device)).backward()
        opt.zero_grad()
        if rank == 0:
            restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)
            print(f"resumed at step {step} (restart {restart})", flush=True)

    for epoch in range(epoch0, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
        for x, y in itertools.islice(loader, done, None):  # skip the batches done
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()  # gradients are averaged across ranks here
            opt.step()
            n = torch.tensor(float(len(y)), device=device)
            total += torch.stack([loss.detach() * n, n])
            done, step = done + 1, step + 1
            if rank == 0 and args.log_every and step % args.log_every == 0:
                print(f"step {step}", flush=True)
            # No barrier after a save: the file is read only at a (re)start, once
            # every old rank has exited, and os.replace leaves it whole.
            if every and step % every == 0:
                save(epoch, done, step, total)
        dist.all_reduce(total)  # the mean loss over all ranks' samples
        if rank == 0:
            mean_loss = total[0].item() / total[1].item()
            print(f"epoch {epoch}: mean training loss {mean_loss:.2f} "
                  f"over {int(total[1].item())} samples on {world_size} ranks")
        done, total = 0, torch.zeros(2, device=device)

    if args.checkpoint:
        save(args.epochs, 0, step, total)  # the final state (no barrier: see above)

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
