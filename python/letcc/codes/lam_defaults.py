"""The default choice of the smoothing parameters (lam_enc, lam_dec) and the
protocol a lam policy follows.

Protocol (what LeTCC accepts as lam_dec / lam_enc besides numbers)::

    policy.lam_dec(beta_available, N, K) -> float >= 0, or None
        beta_available: ascending float64 nodes of the workers that answered.
        None means "choose by GCV from this call's data".
    policy.lam_enc(K, N) -> float >= 0          (optional)
    policy.lam_dec_at(beta_available, alpha, N, K) -> float, None, or (K,) lams   (optional)
        Preferred over lam_dec when present: it sees the decoder's evaluation
        points alpha (ascending) and may return one lam per alpha_k ("local"
        lam); the decoder then estimates f(x_k) with a spline smoothed by lam_k.

lam_dec may also return a (K,) sequence (one lam per alpha, the code's own
alpha in ascending order). A plain callable is accepted too: ``fn(beta_available, N, K)`` for lam_dec,
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

Why the default is *local* (LocalGapLam): a smoothing spline's bandwidth at x
is ~ (lam * local spacing)^(1/4), so lam = c h^3 gives bandwidth ~ c^(1/4) h
only where the spacing is h. One lam for the whole decoder must be a
compromise between the wide interior gaps of Chebyshev nodes (and the holes
stragglers open) and the dense nodes near the ends; measured per output point,
the best lam differs by three orders of magnitude between the middle and the
outermost alpha (bench/results/lambda.md). LocalGapLam applies the h^3 rule
at each alpha_k with h the length of the answering interval that contains it,
so each estimate f(x_k) is smoothed at its own scale.
"""
from __future__ import annotations

import numbers

import numpy as np

from letcc.splines._validation import as_lam

__all__ = ["GapScaledLam", "LocalGapLam", "local_gaps", "DEFAULT_POLICY", "resolve_lam_enc", "resolve_lam_dec"]


class GapScaledLam:
    """The earlier default (one lam per decode; LeTCC's 'auto' is now
    LocalGapLam): lam_dec = c_dec * phi^3 with phi = max(g, end_factor * d),
    g the largest gap between consecutive answering nodes and d the distance
    from the outermost answering node to the end of [-1, 1]; lam_enc a constant
    (default 0: the coded inputs pass exactly through the inputs). Removing a
    worker never shrinks g or d, so more stragglers never mean less smoothing.

    Constants (c_dec = 5.6e-4, end_factor = 8) from bench/results/lambda.md:
    fitted on the calibration images of LeNet-5, RepVGG-a0 and a small ViT
    (softmax outputs; K = 8, N = 16 and K = 12, N = 36), and on held-out images
    LeTCC's MSE is below BACC's at every S = 0 .. N/2 for all six cases (mean
    improvement 12-32%). Without the end term (the earlier 3e-4 g^3, studied in
    bench/results/rates.md) it lost to BACC at S = N/2 - 1 on every model with
    N = 16: missing end workers make the decoder extrapolate to the outer alphas.
    Any lam_enc > 0 costs MSE on unrelated images. On smooth functions lam = 0
    is best; this default keeps the h^4 error rate (MSE ~ N^-8 at fixed S).

    This policy knows nothing about noise in the worker outputs; with noisy
    workers use lam_dec=None (GCV per decode), a LamPolicy calibrated with
    noise_sigma, or letcc.tune. letcc.LamPolicy() is the same formula and can
    be calibrated per model (LeTCC.calibrate).
    """

    def __init__(self, c_dec: float = 5.6e-4, lam_enc: float = 0.0, end_factor: float = 8.0):
        self.c_dec = as_lam(c_dec)
        self._lam_enc = as_lam(lam_enc)
        self.end_factor = as_lam(end_factor)

    def lam_dec(self, beta_available: np.ndarray, N: int, K: int) -> float:
        if beta_available.shape[0] < 3:
            return 0.0  # one node: a constant, two: the line; lam changes nothing
        g = float(np.max(np.diff(beta_available)))
        # Missing end workers make the decoder extrapolate to the outer alphas,
        # which needs more smoothing than an interior gap of the same size
        # (bench/results/lambda.md): d is the distance from the outermost
        # answering node to the end of [-1, 1].
        d = max(float(beta_available[0]) + 1.0, 1.0 - float(beta_available[-1]), 0.0)
        phi = max(g, self.end_factor * d)
        return self.c_dec * phi ** 3

    def lam_enc(self, K: int, N: int) -> float:
        return self._lam_enc

    def __repr__(self) -> str:
        return f"GapScaledLam(c_dec={self.c_dec!r}, lam_enc={self._lam_enc!r}, end_factor={self.end_factor!r})"


def local_gaps(beta_available: np.ndarray, alpha: np.ndarray, end_factor: float) -> np.ndarray:
    """phi_k = max(h_k, end_factor * x_k) for every alpha_k: h_k the length of
    the interval of the answering nodes (extended by the ends -1 and 1 of the
    domain) that contains alpha_k, x_k how far alpha_k lies outside
    [b_first, b_last] (0 inside). Removing a node only merges intervals and
    moves b_first / b_last inwards, so phi_k never shrinks: more stragglers,
    never less smoothing."""
    b = beta_available
    lo, hi = float(b[0]), float(b[-1])
    e = b
    if lo > -1.0 or hi < 1.0:
        e = np.concatenate(([-1.0] if lo > -1.0 else [], b, [1.0] if hi < 1.0 else []))
    j = np.searchsorted(e, alpha) - 1
    np.maximum(j, 0, out=j)
    np.minimum(j, e.shape[0] - 2, out=j)
    h = e[j + 1] - e[j]
    x = np.maximum(lo - alpha, 0.0) + np.maximum(alpha - hi, 0.0)
    return np.maximum(h, end_factor * x)


class LocalGapLam:
    """Default lam policy: one lam per decoder output point,
    lam_k = c_dec * phi_k^3 with phi_k = max(h_k, end_factor * x_k)
    (letcc.codes.lam_defaults.local_gaps): h_k the answering interval around
    alpha_k, x_k its distance beyond the outermost answering node. lam_enc is
    a constant (default 0).

    The g^3 rule of GapScaledLam applied at each alpha_k instead of once per
    decode with the largest gap g: the interior of Chebyshev nodes wants far
    more smoothing than their dense ends, and one lam cannot serve both.
    Constants (c_dec = 5.6e-3, end_factor = 16) fitted on the calibration
    images of LeNet-5, RepVGG-a0 and a small ViT at (K, N) = (8, 16) and
    (12, 36) (bench/lambda_policy.py --fit-default, bench/results/lambda.md).

    ``lam_dec_at(beta_available, alpha, N, K)`` -> read-only (K,) lams (what
    LeTCC calls; remembered per (answering nodes, alpha), so a set seen before
    costs a dict lookup); ``lam_dec(beta_available, N, K)`` does the same for
    Chebyshev points of the first kind as alpha (the codes' default).
    """

    MEMO_SIZE = 4096

    def __init__(self, c_dec: float = 5.6e-3, lam_enc: float = 0.0, end_factor: float = 16.0):
        self.c_dec = as_lam(c_dec)
        self._lam_enc = as_lam(lam_enc)
        self.end_factor = as_lam(end_factor)
        self._memo: dict = {}

    def lam_dec_at(self, beta_available: np.ndarray, alpha: np.ndarray, N: int, K: int):
        if beta_available.shape[0] < 3:
            return 0.0  # one node: a constant, two: the line; lam changes nothing
        key = (beta_available.tobytes(), alpha.tobytes())
        lam = self._memo.get(key)
        if lam is None:
            phi = local_gaps(beta_available, alpha, self.end_factor)
            lam = self.c_dec * phi * phi * phi
            lam.flags.writeable = False  # handed out again from the memo
            if len(self._memo) >= self.MEMO_SIZE:
                self._memo.clear()
            self._memo[key] = lam
        return lam

    def lam_dec(self, beta_available: np.ndarray, N: int, K: int):
        from letcc.nodes import chebyshev_first_kind
        return self.lam_dec_at(beta_available, chebyshev_first_kind(K), N, K)

    def lam_enc(self, K: int, N: int) -> float:
        return self._lam_enc

    def __repr__(self) -> str:
        return f"LocalGapLam(c_dec={self.c_dec!r}, lam_enc={self._lam_enc!r}, end_factor={self.end_factor!r})"


DEFAULT_POLICY = LocalGapLam()


def _is_number(v) -> bool:
    return isinstance(v, (numbers.Real, np.floating, np.integer)) and not isinstance(v, (bool, np.bool_))


def resolve_lam_dec(spec):
    """-> ("fixed", float) | ("gcv", None) | ("policy", callable(beta_available, N, K))
    | ("policy_at", callable(beta_available, alpha, N, K))."""
    if isinstance(spec, str):
        if spec == "auto":
            return "policy_at", DEFAULT_POLICY.lam_dec_at
        if spec == "gcv":
            return "gcv", None
        raise ValueError(f"lam_dec must be a number >= 0, None, 'auto', 'gcv' or a policy, got {spec!r}")
    if spec is None:
        return "gcv", None
    if _is_number(spec):
        return "fixed", as_lam(spec)
    if hasattr(spec, "lam_dec_at") and callable(spec.lam_dec_at):
        return "policy_at", spec.lam_dec_at
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
