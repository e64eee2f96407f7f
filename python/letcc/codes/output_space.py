"""The space a decoder works in: the workers' outputs as they are, or their logarithms.

``LeTCC(K, N)`` (``output_space="auto"``, the default) decodes the
logarithms of probability outputs (a classifier's softmax) and turns the
estimates back into probabilities with a softmax over the last axis::

    Y (n, ..., classes) probabilities --to_log--> log(max(Y, LOG_FLOOR))
        --spline decoder--> Z (K, ..., classes) --from_log--> softmax(Z, axis=-1)

and decodes any other outputs as they are. Which, it decides once per
decode from the answers (``is_probability_rows``): a float array with a
class axis (ndim >= 2, last axis non-empty) whose entries are all finite and
>= 0 and whose every row over the last axis sums to 1 within PROB_SUM_TOL.
``output_space="log"`` forces the log space (ValueError for answers that
cannot be logged), ``"linear"`` the outputs as they are.

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

numpy arrays (C-contiguous float32/float64) take the compiled passes of
letcc._core (csrc/output_space.hpp: the check and the log in one pass, the
softmax in place in another), which is what keeps a decode in log space
within a few percent of a linear one at 10 classes; torch tensors and CuPy
arrays take their own library's operations (the result has the input's
kind, dtype and device).
"""
from __future__ import annotations

import numpy as np

from letcc import _core
from letcc.codes._arrays import is_torch_tensor

__all__ = ["OUTPUT_SPACES", "LOG_FLOOR", "PROB_SUM_TOL", "as_output_space", "is_probability_rows", "to_log",
           "from_log", "log_or_none", "softmax_", "probability_answers",
           "probability_answers_logged"]

OUTPUT_SPACES = ("auto", "linear", "log")
# Probabilities below this are raised to it before the log (a float32 softmax
# returns exact zeros beyond a logit gap of about 104). Smaller floors did
# better on the study's models (1e-30 against 1e-12, 1e-8, 1e-6), and 1e-30
# is a normal float32 number.
LOG_FLOOR = 1e-30
# How far from 1 a row of probabilities may sum for output_space='auto' to
# take it as one, for float32 and float64 alike: the storage dtype does not
# say in which precision the probabilities were computed (a float32 or
# float16 model's softmax is often handed over as float64). A softmax
# rounded to float16 is off by at most 2^-11 ~ 4.9e-4 relative per entry, so
# its row sums by at most that much (float32: 6e-8); 1e-3 accepts those
# with a factor 2 to spare, as letcc.codes.robust's valid='simplex' does.
# The check sums in float64, so its own rounding is far below this for any
# row length. Outputs that are not probabilities (logits, regression
# outputs, signed data) fail the sign test long before the sum test.
PROB_SUM_TOL = 1e-3


def as_output_space(space) -> str:
    if not isinstance(space, str) or space not in OUTPUT_SPACES:
        raise ValueError(f"output_space must be one of {OUTPUT_SPACES}, got {space!r}")
    return space


def is_probability_rows(Y) -> bool:
    """Whether Y (numpy, torch or CuPy) is what output_space='auto' decodes
    in log space: float dtype, a class axis (ndim >= 2, last axis non-empty),
    every entry finite and >= 0, every row over the last axis summing to 1
    within PROB_SUM_TOL (summed in float64)."""
    if len(Y.shape) < 2 or Y.shape[-1] == 0 or 0 in Y.shape:
        return False
    if is_torch_tensor(Y):
        import torch
        if not Y.is_floating_point():
            return False
        ok = torch.isfinite(Y).all() & (Y >= 0).all()
        return bool(ok) and bool(((Y.to(torch.float64).sum(-1) - 1.0).abs() <= PROB_SUM_TOL).all())
    if getattr(Y, "dtype", None) is None or Y.dtype.kind != "f":
        return False
    if isinstance(Y, np.ndarray):
        r = _core.log_prepare(np.ascontiguousarray(Y), True, PROB_SUM_TOL, LOG_FLOOR)
        return r is not None
    import cupy   # a GPU array of another kind: letcc's codes take torch and CuPy ones
    if not bool(cupy.isfinite(Y).all() & (Y >= 0).all()):
        return False
    return bool((cupy.abs(Y.astype(cupy.float64).sum(-1) - 1.0) <= PROB_SUM_TOL).all())


def log_or_none(Y, strict: bool):
    """The decoder's input in log space: to_log(Y), or None when Y is not
    probability rows (is_probability_rows) and not `strict` (auto: decode Y as
    it is). `strict` (output_space='log'): only finite, >= 0 entries and a
    class axis are required; ValueError otherwise. A C-contiguous float32 /
    float64 numpy Y is checked and logged in one compiled pass."""
    if type(Y) is np.ndarray:
        Z = _core.log_prepare(Y, not strict, PROB_SUM_TOL, LOG_FLOOR)
        if Z is not False:
            return Z if Z is not None or not strict else to_log(Y)  # to_log names the bad entry
    if strict:
        if len(Y.shape) < 2:
            raise ValueError("output_space='log' needs a class axis: Y must be (len(available), ..., classes), "
                             f"got shape {tuple(Y.shape)}")
        return to_log(Y)
    return to_log(Y) if is_probability_rows(Y) else None


def softmax_(Z):
    """from_log(Z): the softmax over the last axis, in place where Z is a
    numpy (compiled, when C-contiguous float32/float64) or CuPy array."""
    if type(Z) is np.ndarray and _core.softmax_last_axis(Z):
        return Z
    return from_log(Z)


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


def probability_answers(Y):
    """(n,) bool per answer (row) of Y (n, ..., classes): True where every
    class vector of that answer passes is_probability_rows' test (finite,
    >= 0, summing to 1 within PROB_SUM_TOL); None where Y cannot hold
    probabilities at all (no class axis, not a float dtype). The decoder
    with adversaries uses it to tell a classifier's round with a few wrong
    answers (most rows pass) from outputs that are not probabilities."""
    if len(Y.shape) < 2 or Y.shape[-1] == 0 or Y.shape[0] == 0:
        return None
    if is_torch_tensor(Y):
        if not Y.is_floating_point():
            return None
        Y = Y.detach().cpu().numpy()
    elif not isinstance(Y, np.ndarray):
        Y = Y.get()                                  # CuPy: the check on the host (n rows)
    if Y.dtype.kind != "f":
        return None
    n, C = Y.shape[0], Y.shape[-1]
    V = Y.reshape(n, -1, C)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(V).all(axis=(1, 2)) & (V.min(axis=(1, 2), initial=np.inf) >= 0)
        sums = V.sum(axis=2, dtype=np.float64)
        ok &= (np.abs(sums - 1.0) <= PROB_SUM_TOL).all(axis=1)
    return ok


def probability_answers_logged(Y, max_bad: int):
    """(prob, Z) for the robust decoder: prob as probability_answers(Y), and
    Z = to_log(Y) in the rows of the answers that passed (0 in the others),
    or None where more than `max_bad` answers failed: one compiled call
    (letcc._core.log_prepare_answers) checks answer by answer, each check
    stopping at its first bad class vector, and once more than `max_bad`
    answers have failed the rest are not looked at (prob False there): the
    round is not one of probability answers, and logits or regression
    outputs cost about (max_bad + 1) class vectors, not a pass. Where Y is
    not a C-contiguous float32 / float64 numpy array with a class axis:
    (probability_answers(Y), None)."""
    if not (type(Y) is np.ndarray and Y.ndim >= 2 and Y.flags.c_contiguous and Y.dtype in (np.float32, np.float64)
            and Y.shape[-1] > 0 and Y.shape[0] > 0):
        return probability_answers(Y), None
    out = _core.log_prepare_answers(Y, PROB_SUM_TOL, LOG_FLOOR, max_bad)
    return (probability_answers(Y), None) if out is False else out     # False: an axis of length 0
