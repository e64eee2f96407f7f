"""The space a decoder works in: the workers' outputs as they are, or their logarithms.

``LeTCC(K, N, output_space="log")`` decodes the logarithms of probability
outputs (a classifier's softmax) and turns the estimates back into
probabilities with a softmax over the last axis::

    Y (n, ..., classes) probabilities --to_log--> log(max(Y, LOG_FLOOR))
        --spline decoder--> Z (K, ..., classes) --from_log--> softmax(Z, axis=-1)

Why (bench/results/accuracy.md): a classifier's softmax saturates, so along
the encoder's curve through K inputs of different classes the probabilities
move in steep steps between nearly one-hot vectors, which a spline (or
Berrut's interpolant) follows poorly; the decoded estimate of an input in a
wide straggler gap is a blend of its neighbours' one-hot outputs, and its
argmax goes to a neighbour's class. The log-probabilities (the logits minus
their log-sum-exp) vary smoothly along the same curve, interpolation fits
them well, and the decoded class and the softmax MSE both improve.

Round trip: for probability rows (entries >= LOG_FLOOR summing to 1),
``from_log(to_log(Y)) == Y`` up to rounding. ``to_log`` raises ValueError on
a negative or non-finite entry (the outputs are then not probabilities).
Entries below LOG_FLOOR (exact zeros of a float32 softmax) are raised to it.

Works on numpy arrays, torch tensors and CuPy arrays (the result has the
input's kind, dtype and device).
"""
from __future__ import annotations

import numpy as np

from letcc.codes._arrays import is_torch_tensor

__all__ = ["OUTPUT_SPACES", "LOG_FLOOR", "as_output_space", "to_log", "from_log"]

OUTPUT_SPACES = ("linear", "log")
# Probabilities below this are raised to it before the log (a float32 softmax
# returns exact zeros beyond a logit gap of about 104). Smaller floors did
# better on the study's models (1e-30 against 1e-12, 1e-8, 1e-6), and 1e-30
# is a normal float32 number.
LOG_FLOOR = 1e-30


def as_output_space(space) -> str:
    if not isinstance(space, str) or space not in OUTPUT_SPACES:
        raise ValueError(f"output_space must be one of {OUTPUT_SPACES}, got {space!r}")
    return space


def _bad_entry(Y) -> str:
    a = np.asarray(Y.detach().cpu().numpy() if is_torch_tensor(Y) else (Y.get() if hasattr(Y, "get") else Y))
    bad = ~(np.isfinite(a) & (a >= 0))
    idx = np.unravel_index(int(np.argmax(bad)), a.shape)
    return f"Y[{', '.join(map(str, idx))}] = {a[idx]!r}"


def to_log(Y):
    """log(max(Y, LOG_FLOOR)) for probability outputs Y (any array kind, a
    float dtype kept; integer arrays become float64). ValueError when an
    entry is negative or not finite."""
    if is_torch_tensor(Y):
        import torch
        if not Y.is_floating_point():
            Y = Y.to(torch.float64)
        lo, hi = torch.aminmax(Y)
        if not (bool(lo >= 0) and bool(torch.isfinite(hi))):
            raise ValueError(f"output_space='log' needs probabilities (finite, >= 0): {_bad_entry(Y)}")
        return torch.log(torch.clamp_min(Y, LOG_FLOOR))
    xp = np
    if type(Y).__module__.startswith("cupy"):
        import cupy as xp  # noqa: F811
    if Y.dtype.kind not in "f":
        Y = Y.astype(np.float64)
    if Y.size == 0:
        return Y.copy()
    lo, hi = Y.min(), Y.max()
    if not (lo >= 0 and xp.isfinite(hi)):   # NaN fails both comparisons
        raise ValueError(f"output_space='log' needs probabilities (finite, >= 0): {_bad_entry(Y)}")
    out = xp.maximum(Y, Y.dtype.type(LOG_FLOOR))
    return xp.log(out, out=out)


def from_log(Z):
    """softmax of Z over its last axis (the inverse of to_log on probability
    rows), in place where Z is a numpy or CuPy array."""
    if is_torch_tensor(Z):
        import torch
        return torch.softmax(Z, dim=-1)
    if Z.size == 0:
        return Z
    Z -= Z.max(axis=-1, keepdims=True)
    xp = np
    if type(Z).__module__.startswith("cupy"):
        import cupy as xp  # noqa: F811
    xp.exp(Z, out=Z)
    Z /= Z.sum(axis=-1, keepdims=True)
    return Z
