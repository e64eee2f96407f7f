"""The paper's evaluation metrics.

- MSE: mean over samples of the squared L2 norm of the error of the whole
  output vector, ``mean_i ||f(x_i) - f^(x_i)||^2`` (for a round of K inputs
  this is the paper's (1/K) sum_k ||f(x_k) - f^(x_k)||^2; averaging over
  rounds and straggler sets gives its expectation). The paper computes it on
  the model's softmax outputs; these functions take whatever outputs they get.
- RelAcc: accuracy of the decoded outputs' argmax against the labels divided
  by the base model's accuracy (argmax of the exact outputs against the same
  labels), as DESIGN.md defines it: 1 means coding lost nothing, below 1 it
  lost accuracy. (The paper's prose states the inverse ratio; its tables'
  values, at most 1, match this one.)

Inputs may be numpy arrays or torch tensors (CPU or GPU: they are copied to
host float64); samples lie along the first axis.
"""
from __future__ import annotations

import numpy as np

from letcc.codes._arrays import is_torch_tensor

__all__ = ["squared_errors", "mse", "accuracy", "rel_acc", "TARGETS"]

# what a lam calibration may optimise (letcc.tune, letcc.policy.LamPolicy.target)
TARGETS = ("mse", "relacc")


def _host(a, name: str) -> np.ndarray:
    if is_torch_tensor(a):
        a = a.detach().cpu().numpy()
    elif type(a).__module__.startswith("cupy"):
        a = a.get()
    arr = np.asarray(a)
    if arr.ndim == 0:
        raise ValueError(f"{name} must have a sample axis, got a scalar")
    return arr


def _pair(exact, estimate):
    e = _host(exact, "exact")
    h = _host(estimate, "estimate")
    if e.shape != h.shape:
        raise ValueError(f"exact has shape {e.shape} but estimate has shape {h.shape}")
    return e.astype(np.float64, copy=False), h.astype(np.float64, copy=False)


def squared_errors(exact, estimate) -> np.ndarray:
    """(n,) squared L2 norm of exact[i] - estimate[i] over all trailing axes."""
    e, h = _pair(exact, estimate)
    d = (e - h).reshape(e.shape[0], int(np.prod(e.shape[1:])))
    return np.einsum("ij,ij->i", d, d)


def mse(exact, estimate) -> float:
    """Mean over samples of ||exact[i] - estimate[i]||^2 (the paper's MSE)."""
    sq = squared_errors(exact, estimate)
    if sq.size == 0:
        raise ValueError("mse of zero samples is undefined")
    return float(sq.mean())


def _labels(labels, n: int) -> np.ndarray:
    lab = _host(labels, "labels")
    if lab.ndim != 1 or lab.shape[0] != n:
        raise ValueError(f"labels must have shape ({n},), got {lab.shape}")
    if lab.dtype.kind not in "iu":
        raise TypeError(f"labels must be integer class indices, got dtype {lab.dtype}")
    return lab


def accuracy(outputs, labels) -> float:
    """Fraction of samples whose argmax over the last axis equals the label
    (outputs (n, classes), labels (n,) integers)."""
    out = _host(outputs, "outputs")
    if out.ndim != 2:
        raise ValueError(f"outputs must have shape (samples, classes), got {out.shape}")
    lab = _labels(labels, out.shape[0])
    if out.shape[0] == 0:
        raise ValueError("accuracy of zero samples is undefined")
    return float(np.mean(np.argmax(out, axis=1) == lab))


def rel_acc(estimates, exact_outputs, labels) -> float:
    """accuracy(estimates, labels) / accuracy(exact_outputs, labels)."""
    base = accuracy(exact_outputs, labels)
    if base == 0.0:
        raise ValueError("the base model's accuracy on these labels is 0: RelAcc is undefined")
    return accuracy(estimates, labels) / base
