"""Generated from labs/01_single_device.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import numpy as np
import torch
from dplab.models import mlp
from torch.nn import functional as F


# From labs/01_single_device.ipynb, section "Steps".
def train(
    seed: int,
    lr: float,
    batch: int,
    epochs: int,
    x: torch.Tensor,
    y: torch.Tensor,
    device="cpu",
):
    torch.manual_seed(seed)
    model = mlp(seed=seed).to(device)
    order_rng = torch.Generator().manual_seed(seed)
    losses = []
    for epoch in range(epochs):
        order = torch.randperm(len(y), generator=order_rng)  # a new shuffle each epoch
        for start in range(0, len(y), batch):
            idx = order[start:start + batch]
            xb, yb = x[idx].to(device), y[idx].to(device)     # data loading
            logits = model(xb)                                # forward
            loss = F.cross_entropy(logits, yb)                # loss: mean cross-entropy
            model.zero_grad(set_to_none=True)
            loss.backward()                                   # backward: fills w.grad
            with torch.no_grad():
                for w in model.parameters():
                    w -= lr * w.grad                          # SGD: w <- w - lr * grad
            losses.append(loss.item())
    return model, np.array(losses)


# From labs/01_single_device.ipynb, section "Steps".
def accuracy_of(model, x, y):
    with torch.no_grad():
        correct = int((model(x).argmax(dim=1) == y).sum())
    return correct / len(y)
