"""The lam rules (one home for their formulas and constants) and the protocol a
lam policy follows.

Protocol (what LeTCC accepts as lam_dec / lam_enc besides numbers)::

    policy.lam_dec(beta_available, N, K) -> float >= 0, or None
        beta_available: ascending float64 nodes of the workers that answered.
        None means "choose by GCV from this call's data".
    policy.lam_enc(K, N) -> float >= 0          (optional)
    policy.lam_dec_at(beta_available, alpha, N, K) -> float, None, or (K,) lams   (optional)
        Preferred over lam_dec when present: it sees the decoder's evaluation
        points alpha (ascending) and may return one lam per alpha_k ("local"
        lam); the decoder then estimates f(x_k) with a spline smoothed by lam_k.
    policy.local_gap_rule(K, N) -> (c, end_factor) or None   (optional)
        "For (K, N) my lam_dec_at is the local-gap rule lam_k = c * phi_k^3
        (local_gap_lams), and it will not change while I am in use." LeTCC
        then builds each answering set's lams and decoder in one compiled call
        (local_gap_rows) and caches the decoder by the set alone, without
        calling the policy again. None (or no such method): LeTCC calls
        lam_dec_at / lam_dec on every decode.

lam_dec may also return a (K,) sequence (one lam per alpha, the code's own
alpha in ascending order). A plain callable is accepted too: ``fn(beta_available, N, K)`` for lam_dec,
``fn(K, N)`` for lam_enc. lam_dec may be called on every decode, so it should
be cheap; LeTCC caches decoder plans by (available set, lam), so a policy whose
answers change over time (e.g. one that learns) stays correct.

lam is always scipy's `make_smoothing_spline` lam (a plain sum in the data term,
no 1/n), on nodes in [-1, 1].

The rules, with b_1 < ... < b_m the answering nodes:

    local  (LocalGapLam, the default)  lam_k = c * phi_k^3,  phi_k = max(h_k, a * x_k)
           h_k the length of the interval of [-1, b_1, ..., b_m, 1] that holds
           alpha_k, x_k how far alpha_k lies beyond [b_1, b_m] (0 inside)
    global (GapScaledLam)              lam = c * max(g, a * d)^3
           g = max_i (b_{i+1} - b_i), d = max(b_1 + 1, 1 - b_m)
    table  (GapTableLam, calibrated)   lam = max(psi(g), end_k * d^3), psi a
           non-decreasing step function of log10 g (g^3 scaling beyond its edges)

Fewer than three answering nodes get lam = 0 (one node: a constant, two: the
line; lam changes nothing). Removing a worker only widens the intervals (and
g, d, x_k), so more stragglers never mean less smoothing.

Why the rules scale like gap^3: the Reinsch system R + lam Q^T Q weighs its
two parts equally at lam ~ h^3 (letcc.splines.gcv.lam_scale is h^3/9 for
spacing h), and a smoothing spline with lam = c h^3 is a local smoother of
bandwidth ~ (lam h)^(1/4) = c^(1/4) h. Its bias is ~ lam h f'''' = c h^4 f'''',
the same order as the interpolation error of a cubic spline, so the noiseless
error keeps falling like h^4 (MSE like N^-8 for smooth f) instead of stalling
at lam h (a fixed lam: MSE ~ N^-2). Taking h as the gaps between the nodes
that answered makes lam grow as stragglers open holes, which is what tuned
values do (DESIGN.md). See bench/results/rates.md for the measurements.

Why the default is *local*: a smoothing spline's bandwidth at x is ~ (lam *
local spacing)^(1/4), so lam = c h^3 gives bandwidth ~ c^(1/4) h only where
the spacing is h. One lam for the whole decoder must be a compromise between
the wide interior gaps of Chebyshev nodes (and the holes stragglers open) and
the dense nodes near the ends; measured per output point, the best lam
differs by three orders of magnitude between the middle and the outermost
alpha (bench/results/lambda.md). Why the end term: a missing *end* worker
makes the decoder extrapolate linearly to the outer alphas, which sit where
the inputs along the encoder curve are densest; those points want far more
smoothing than an interior hole as wide.
"""
from __future__ import annotations

import bisect
import math
import numbers

import numpy as np

from letcc import _core
from letcc.splines._validation import as_lam

__all__ = ["LOCAL_C0", "LOCAL_END_FACTOR", "LOG_C0", "LOG_POLICY", "SYSTEMATIC_LAM", "GLOBAL_C0", "GLOBAL_END_FACTOR", "gap_and_end",
           "effective_gap", "local_gaps", "local_gap_lams", "global_gap_lam", "local_gap_rows",
           "LocalGapLam", "GapScaledLam", "GapTableLam", "DEFAULT_POLICY", "resolve_lam_enc",
           "resolve_lam_dec"]

# The local rule's constants: the best pair of a grid (c in quarter decades,
# a in octaves) scored on the calibration images of LeNet-5, RepVGG-a0 and a
# small ViT at (K, N) = (8, 16) and (12, 36), S = 0 .. N/2
# (bench/lambda_policy.py --fit-default; lambda.md, "Fitting the uncalibrated default").
LOCAL_C0 = 5.6e-3
LOCAL_END_FACTOR = 16.0
# The local rule's c when LeTCC decodes log-probabilities (output_space='log',
# letcc.codes.output_space): the log outputs vary smoothly along the encoder
# curve and interpolation is nearly right; on the development models of
# bench/accuracy.py c = 0 .. 1.7e-5 tied (MSE 72.0-72.3% below BACC, RelAcc
# +5.7 points) and larger c lost both (5.6e-4: 67.6%, +4.8; 5.6e-3: 54.9%,
# +2.6). A small c keeps the rule's growth with the gaps.
LOG_C0 = 1e-5
# lam_dec='auto' of a systematic LeTCC (letcc.codes.systematic's pinned
# decoder, the same lam meaning): a lam that leaves a fit the parity answers
# determine alone (the penalty ~1e-9 / h^3 beside O(1) normal equations) and
# chooses the smoothest curve where they do not. The measured optimum was lam
# -> 0 (bench/results/systematic_accuracy.md, LeNet-5: lam = 0, 1e-9 and 1e-6
# tie; 1e-4 costs up to 28 points of degraded-mode accuracy at K = 12, 1e-2
# falls to about chance).
SYSTEMATIC_LAM = 1e-9
# The global rule's (the default before the local one), fitted the same way:
# each model alone picked c = 5.6e-4 (LeNet-5: 5.6e-4 and 1e-3 tie) and a = 8.
GLOBAL_C0 = 5.6e-4
GLOBAL_END_FACTOR = 8.0


# ---------------------------------------------------------------- the formulas

def gap_and_end(beta_available) -> tuple[float, float]:
    """(g, d): the largest gap between consecutive nodes (ascending), and the
    distance from the outermost node to its end of [-1, 1] (the larger of the two)."""
    b = beta_available
    m = b.shape[0]
    g = float((b[1:] - b[:-1]).max()) if m > 1 else 0.0
    d = max(float(b[0]) + 1.0, 1.0 - float(b[m - 1]), 0.0)
    return g, d


def effective_gap(beta_available, end_factor: float = GLOBAL_END_FACTOR) -> float:
    """phi = max(g, end_factor * d) (see gap_and_end): the global rule's lam is c phi^3."""
    g, d = gap_and_end(beta_available)
    return max(g, end_factor * d)


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


def local_gap_lams(beta_available: np.ndarray, alpha: np.ndarray, c: float, end_factor: float):
    """The local rule: lam_k = c * phi_k^3 (a (K,) array), or 0.0 for fewer than
    three answering nodes."""
    if beta_available.shape[0] < 3:
        return 0.0
    phi = local_gaps(beta_available, alpha, end_factor)
    return c * phi * phi * phi


def global_gap_lam(beta_available: np.ndarray, c: float, end_factor: float) -> float:
    """The global rule: lam = c * max(g, end_factor * d)^3, or 0.0 for fewer
    than three answering nodes."""
    if beta_available.shape[0] < 3:
        return 0.0
    phi = effective_gap(beta_available, end_factor)
    return c * phi * phi * phi


def local_gap_rows(beta_available: np.ndarray, alpha: np.ndarray, c: float, end_factor: float):
    """(lams, rows) of the local-gap decoder in one compiled call: lams ==
    local_gap_lams(beta_available, alpha, c, end_factor) (the same arithmetic,
    in csrc/local_gaps.hpp; tested equal), rows the (K, m) operator whose row
    k is the smoothing spline with lams[k] evaluated at alpha[k]
    (letcc.splines.smoother_rows). No argument checks: for a caller whose
    beta_available is a strictly increasing C-contiguous float64 array of at
    least 3 nodes and alpha a finite float64 array (a decoder built for a new
    answering set on the master's critical path)."""
    return _core.local_gap_rows(beta_available, alpha, float(c), float(end_factor))


# ---------------------------------------------------------------- the rules as policies

class _MemoLam:
    """lam_dec_at answers remembered per (answering nodes, alpha): a set seen
    before costs a dict lookup (at most 2^N sets, few in practice; cleared
    when full). Arrays handed out are read-only."""

    MEMO_SIZE = 4096

    def __init__(self):
        self._memo: dict = {}

    def lam_dec_at(self, beta_available: np.ndarray, alpha: np.ndarray, N: int, K: int):
        key = (beta_available.tobytes(), alpha.tobytes())
        lam = self._memo.get(key)
        if lam is None:
            lam = self._rule(beta_available, alpha)
            if isinstance(lam, np.ndarray):
                lam.flags.writeable = False  # handed out again from the memo
            if len(self._memo) >= self.MEMO_SIZE:
                self._memo.clear()
            self._memo[key] = lam
        return lam

    def lam_dec(self, beta_available: np.ndarray, N: int, K: int):
        """lam_dec_at with alpha = Chebyshev points of the first kind (the
        codes' default alpha)."""
        from letcc.nodes import chebyshev_first_kind
        return self.lam_dec_at(beta_available, chebyshev_first_kind(K), N, K)

    def lam_enc(self, K: int, N: int) -> float:
        return self._lam_enc

    def local_gap_rule(self, K: int, N: int):
        return None

    def _rule(self, beta_available, alpha):
        raise NotImplementedError


class LocalGapLam(_MemoLam):
    """Default lam policy: the local rule (module docstring), one lam per
    decoder output point, lam_k = c_dec * phi_k^3 with phi_k = max(h_k,
    end_factor * x_k) (local_gaps); lam_enc a constant (default 0: every
    encoder smoothing tried moved the coded inputs off the inputs and cost MSE).

    Constants LOCAL_C0 and LOCAL_END_FACTOR (see where they are defined).
    ``lam_dec_at(beta_available, alpha, N, K)`` -> read-only (K,) lams (what
    LeTCC calls); it also states its rule (``local_gap_rule``), so LeTCC
    builds its decoders in one compiled call per answering set.
    """

    def __init__(self, c_dec: float = LOCAL_C0, lam_enc: float = 0.0, end_factor: float = LOCAL_END_FACTOR):
        super().__init__()
        self.c_dec = as_lam(c_dec)
        self._lam_enc = as_lam(lam_enc)
        self.end_factor = as_lam(end_factor)

    def _rule(self, beta_available, alpha):
        return local_gap_lams(beta_available, alpha, self.c_dec, self.end_factor)

    def local_gap_rule(self, K: int, N: int):
        return self.c_dec, self.end_factor

    def psi(self, g: float) -> float:
        """lam for an answering interval of width g (no end term)."""
        return self.c_dec * g ** 3

    def end_k(self) -> float:
        """k in the end term k * x^3 (x: distance beyond the outermost answer)."""
        return self.c_dec * self.end_factor ** 3

    def __repr__(self) -> str:
        return f"LocalGapLam(c_dec={self.c_dec!r}, lam_enc={self._lam_enc!r}, end_factor={self.end_factor!r})"


class GapScaledLam(_MemoLam):
    """The global rule (module docstring; the default before LocalGapLam): one
    lam per decode, lam_dec = c_dec * max(g, end_factor * d)^3; lam_enc a
    constant (default 0).

    Constants GLOBAL_C0 and GLOBAL_END_FACTOR: on held-out images LeTCC's MSE
    is below BACC's at every S = 0 .. N/2 for the six (model, K, N) cases of
    bench/results/lambda.md (mean improvement 12-32%). Without the end term
    (the earlier 3e-4 g^3, studied in bench/results/rates.md) it lost to BACC
    at S = N/2 - 1 on every model with N = 16. This rule knows nothing about
    noise in the worker outputs; with noisy workers use lam_dec=None (GCV per
    decode), a LamPolicy calibrated with noise_sigma, or letcc.tune.
    """

    def __init__(self, c_dec: float = GLOBAL_C0, lam_enc: float = 0.0, end_factor: float = GLOBAL_END_FACTOR):
        super().__init__()
        self.c_dec = as_lam(c_dec)
        self._lam_enc = as_lam(lam_enc)
        self.end_factor = as_lam(end_factor)

    def _rule(self, beta_available, alpha):
        return global_gap_lam(beta_available, self.c_dec, self.end_factor)

    def psi(self, g: float) -> float:
        return self.c_dec * g ** 3

    def end_k(self) -> float:
        return self.c_dec * self.end_factor ** 3

    def __repr__(self) -> str:
        return f"GapScaledLam(c_dec={self.c_dec!r}, lam_enc={self._lam_enc!r}, end_factor={self.end_factor!r})"


class GapTableLam(_MemoLam):
    """The calibrated global rule (module docstring): lam = max(psi(g),
    end_k * d^3), psi the step function of log10 g with ``lam[i]`` on
    [edges[i], edges[i+1]) and g^3 scaling from the nearest edge beyond them.
    ``edges`` strictly increasing, ``lam`` non-decreasing (checked by
    letcc.policy, which makes these from calibration tables)."""

    def __init__(self, edges, lam, end_k: float, lam_enc: float = 0.0):
        super().__init__()
        self.edges = [float(e) for e in edges]
        self.lam = [float(v) for v in lam]
        self._end_k = as_lam(end_k)
        self._lam_enc = as_lam(lam_enc)

    def psi(self, g: float) -> float:
        """psi(g): the bin's lam inside, g^3 scaling beyond the edges."""
        edges, lam = self.edges, self.lam
        if g <= 0.0:
            return 0.0
        x = math.log10(g)
        if x < edges[0]:  # below the calibrated range: scale like g^3 down from the edge
            return lam[0] * 10.0 ** (3.0 * (x - edges[0]))
        if x >= edges[-1]:  # above: like g^3 up from the last edge
            return lam[-1] * 10.0 ** (3.0 * (x - edges[-1]))
        return lam[bisect.bisect_right(edges, x) - 1]

    def end_k(self) -> float:
        return self._end_k

    def _rule(self, beta_available, alpha):
        if beta_available.shape[0] < 3:
            return 0.0
        g, d = gap_and_end(beta_available)
        return max(self.psi(g), self._end_k * d * d * d)

    def __repr__(self) -> str:
        return f"GapTableLam(edges={self.edges!r}, lam={self.lam!r}, end_k={self._end_k!r})"


DEFAULT_POLICY = LocalGapLam()
# lam_dec='auto' of a LeTCC with output_space='log'
LOG_POLICY = LocalGapLam(LOG_C0)


# ---------------------------------------------------------------- what LeTCC accepts

def _is_number(v) -> bool:
    return isinstance(v, (numbers.Real, np.floating, np.integer)) and not isinstance(v, (bool, np.bool_))


def resolve_lam_dec(spec, K: int, N: int, output_space: str = "linear"):
    """-> ("fixed", float) | ("gcv", None) | ("local_gap", (c, end_factor))
    | ("policy", callable(beta_available, N, K))
    | ("policy_at", callable(beta_available, alpha, N, K)).
    'auto' is DEFAULT_POLICY, or LOG_POLICY for output_space='log'."""
    if isinstance(spec, str):
        if spec == "auto":
            spec = LOG_POLICY if output_space == "log" else DEFAULT_POLICY
        elif spec == "gcv":
            return "gcv", None
        else:
            raise ValueError(f"lam_dec must be a number >= 0, None, 'auto', 'gcv' or a policy, got {spec!r}")
    if spec is None:
        return "gcv", None
    if _is_number(spec):
        return "fixed", as_lam(spec)
    stated = getattr(spec, "local_gap_rule", None)
    if callable(stated):
        rule = stated(K, N)
        if rule is not None:
            c, a = rule
            return "local_gap", (_checked(c, "local_gap_rule c"), _checked(a, "local_gap_rule end_factor"))
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
