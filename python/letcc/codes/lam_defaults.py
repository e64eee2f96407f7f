"""The default choice of the smoothing parameters (lam_enc, lam_dec) and the
protocol a lam policy follows.

Protocol (what LeTCC accepts as lam_dec / lam_enc besides numbers)::

    policy.lam_dec(beta_available, N, K) -> float >= 0, or None
        beta_available: ascending float64 nodes of the workers that answered.
        None means "choose by GCV from this call's data".
    policy.lam_enc(K, N) -> float >= 0          (optional)

A plain callable is accepted too: ``fn(beta_available, N, K)`` for lam_dec,
``fn(K, N)`` for lam_enc. lam_dec may be called on every decode, so it should
be cheap; LeTCC caches decoder plans by (available set, lam), so a policy whose
answers change over time (e.g. one that learns) stays correct.

lam is always scipy's `make_smoothing_spline` lam (a plain sum in the data term,
no 1/n), on nodes in [-1, 1].

Why the default scales like gap^3: the Reinsch system R + lam Q^T Q weighs its
two parts equally at lam ~ h^3 (letcc.splines.gcv.lam_scale is h^3/9 for
spacing h), and a smoothing spline with lam = c h^3 is a local smoother of
bandwidth ~ (lam h)^(1/4) = c^(1/4) h. Its bias is ~ lam h f'''' = c h^4 f'''',
the same order as the interpolation error of a cubic spline, so the noiseless
error keeps falling like h^4 (MSE like N^-8 for smooth f) instead of stalling
at lam h (a fixed lam: MSE ~ N^-2). Taking h as the largest gap between the
nodes that answered makes lam grow as stragglers open holes, which is what
tuned values do (DESIGN.md). See bench/results/rates.md for the measurements
that chose the constants.
"""
from __future__ import annotations

import numbers

import numpy as np

from letcc.splines._validation import as_lam

__all__ = ["GapScaledLam", "DEFAULT_POLICY", "resolve_lam_enc", "resolve_lam_dec"]


class GapScaledLam:
    """Default lam policy: lam_dec = c_dec * g^3, g the largest gap between
    consecutive answering nodes; lam_enc a constant (default 0: the coded
    inputs pass exactly through the inputs).

    The constants were measured (bench/results/rates.md, "Choosing the
    defaults"): on softmax outputs of a LeNet-5 trained on Fashion-MNIST
    (K = 8..20, N = 2K..3K, S = 0..N/2), c_dec = 1e-4 .. 1e-3 are all close,
    and c_dec = 3e-4 beats BACC at every S < N/2 (MSE ratios 0.45 .. 0.99),
    usually better than interpolation (lam = 0) once stragglers open holes.
    At S = N/2 with N = 2K it loses to BACC for K = 8 and 12 (so does every
    lam tried): a policy that also looks at the number of answers relative to
    K is needed there. Any
    lam_enc > 0 costs MSE (3x at lam_enc = 1e-5 with K = 20: unrelated images
    make the encoder spline rough, and smoothing it moves the coded inputs at
    the alphas away from the inputs). On smooth functions smaller c is always
    better (lam = 0 is best there); 3e-4 keeps the h^4 error rate (MSE ~ N^-8
    at fixed S) with an MSE 1 to 3.4 times that of interpolation.

    This policy knows nothing about noise in the worker outputs; with noisy
    workers use lam_dec=None (GCV per decode) or letcc.tune.
    """

    def __init__(self, c_dec: float = 3e-4, lam_enc: float = 0.0):
        self.c_dec = as_lam(c_dec)
        self._lam_enc = as_lam(lam_enc)

    def lam_dec(self, beta_available: np.ndarray, N: int, K: int) -> float:
        if beta_available.shape[0] < 3:
            return 0.0  # one node: a constant, two: the line; lam changes nothing
        g = float(np.max(np.diff(beta_available)))
        return self.c_dec * g ** 3

    def lam_enc(self, K: int, N: int) -> float:
        return self._lam_enc

    def __repr__(self) -> str:
        return f"GapScaledLam(c_dec={self.c_dec!r}, lam_enc={self._lam_enc!r})"


DEFAULT_POLICY = GapScaledLam()


def _is_number(v) -> bool:
    return isinstance(v, (numbers.Real, np.floating, np.integer)) and not isinstance(v, (bool, np.bool_))


def resolve_lam_dec(spec):
    """-> ("fixed", float) | ("gcv", None) | ("policy", callable(beta_available, N, K))."""
    if isinstance(spec, str):
        if spec == "auto":
            return "policy", DEFAULT_POLICY.lam_dec
        if spec == "gcv":
            return "gcv", None
        raise ValueError(f"lam_dec must be a number >= 0, None, 'auto', 'gcv' or a policy, got {spec!r}")
    if spec is None:
        return "gcv", None
    if _is_number(spec):
        return "fixed", as_lam(spec)
    if hasattr(spec, "lam_dec") and callable(spec.lam_dec):
        return "policy", spec.lam_dec
    if callable(spec):
        return "policy", spec
    raise TypeError(f"lam_dec must be a number >= 0, None, 'auto', 'gcv', a callable or a policy "
                    f"with a .lam_dec(beta_available, N, K) method, got {spec!r}")


def resolve_lam_enc(spec, lam_dec_spec, K: int, N: int) -> float:
    """The encoder's lam (a float, fixed for the code's lifetime)."""
    if isinstance(spec, str):
        if spec != "auto":
            raise ValueError(f"lam_enc must be a number >= 0, 'auto' or a policy, got {spec!r}")
        # A policy given for lam_dec also sets lam_enc when it knows how.
        if not _is_number(lam_dec_spec) and hasattr(lam_dec_spec, "lam_enc") and callable(lam_dec_spec.lam_enc):
            return _checked(lam_dec_spec.lam_enc(K, N), "lam_enc policy")
        return DEFAULT_POLICY.lam_enc(K, N)
    if _is_number(spec):
        return as_lam(spec)
    if spec is None:
        raise TypeError("lam_enc cannot be None: the encoder sees no data to run GCV on "
                        "(its lam trades input fidelity against smoothness); give a number or 'auto'")
    if hasattr(spec, "lam_enc") and callable(spec.lam_enc):
        return _checked(spec.lam_enc(K, N), "lam_enc policy")
    if callable(spec):
        return _checked(spec(K, N), "lam_enc callable")
    raise TypeError(f"lam_enc must be a number >= 0, 'auto', a callable fn(K, N) or a policy "
                    f"with a .lam_enc(K, N) method, got {spec!r}")


def _checked(value, what: str) -> float:
    try:
        return as_lam(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{what} returned {value!r}: {exc}") from None
