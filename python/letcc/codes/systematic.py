"""Systematic codes: K of the N workers compute f on the inputs themselves.

``LeTCC(K, N, systematic=True)`` and ``BACC(K, N, systematic=True)`` put K
of the N worker nodes on the inputs' nodes alpha. Both encoders interpolate
(LeTCC's spline with lam_enc = 0, Berrut's rational interpolant), so those
workers' coded inputs are the inputs, and encode() writes them as copies of
X's rows (bit for bit: an interpolant evaluated at its own node is only equal
to rounding, and 1 * x + 0 * y is not x for x = -0.0 or y = inf). The other
P = N - K workers (the parity workers) evaluate f between the inputs.
decode() returns a systematic worker's own answer bit for bit where it
answered, and estimates only the inputs whose systematic worker did not
(``code.systematic_workers[k]`` is the worker computing f(x_k)).

Where the parity nodes sit (``parity_nodes``; measured in
bench/results/systematic_accuracy.md): a missing input is estimated from the
answers around it, and a parity worker at t between alpha_k and alpha_(k+1)
computes f of a blend of x_k and x_(k+1) (the encoder's curve there). With
few parity workers (P <= K / 2) each goes to the middle of an interval
between two inputs, the intervals spread evenly (P = K / 2 pairs the inputs:
every input has one parity neighbour, shared with one other input; a
missing input is then the blend's answer extrapolated past its partner's
exact one). With more, the parity nodes are Chebyshev points of the second
kind (the K nearest the inputs left out): they put parity nodes beyond the
outermost inputs and close to them, where the end inputs otherwise would be
extrapolated. Nodes in [-1, 1] as for the non-systematic codes; alpha stays
the code's (Chebyshev points of the first kind by default).

LeTCC's systematic decoder (``pinned_decoder_rows``) fits the encoder's own
curve to the answers: the natural cubic spline with knots at alpha, pinned
to the exact answers at the answering inputs' nodes, whose values at the
missing inputs' nodes minimise

    sum over answering parity workers p of ||y_p - g(beta_p)||^2 + lam * integral g''^2

(scipy's lam: a plain sum). When f is affine the answers lie exactly on the
encoder's curve, and any K answers that determine it decode exactly; in the
log space (output_space='auto' on probability rows) the same holds for a
classifier whose logits are affine in the input (logistic regression: the
log-softmax is the logits minus one number per point, which the final
softmax removes). The default lam is SYSTEMATIC_LAM, small enough to leave a
determined fit alone and only choose the smoothest curve where the answers
leave it undetermined (more inputs missing than parity answers to replace
them). Measured with one systematic answer missing (LeNet-5 and three
held-out classifiers, K = 2 to 12): the smoothing spline through the
answering nodes (the non-systematic decoder) was 0-13 points of
degraded-mode accuracy worse at N/K <= 1.5, 1.8-6.3 at N/K = 1.75, within
-2.5 to +1.9 points at N/K = 2, and up to 53 points worse on logistic
regression (which the pinned decoder decodes exactly); the linear space was
worse in 40 of 44 cells (by up to 63 points).
"""
from __future__ import annotations

from typing import Callable, Tuple

import numpy as np

from letcc.codes._arrays import put_rows, take_rows
from letcc.codes._plan_cache import PlanCache
from letcc.codes.lam_defaults import SYSTEMATIC_LAM, local_gap_lams
from letcc.codes.output_space import log_or_none, softmax_
from letcc.nodes import chebyshev_second_kind
from letcc.splines import DenseOperator, SplineSmoother

__all__ = ["check_systematic", "parity_nodes", "SystematicLayout", "pinned_decoder_rows", "roughness_matrix",
           "full_pinned_operator", "decode_letcc", "decode_bacc"]


def check_systematic(systematic, K: int, N: int) -> bool:
    """``systematic`` as a bool; ValueError when N < K + 1 (no parity worker)."""
    if not isinstance(systematic, (bool, np.bool_)):
        raise TypeError(f"systematic must be True or False, got {type(systematic).__name__} {systematic!r}")
    if systematic and N < K + 1:
        raise ValueError(f"systematic=True needs N >= K + 1 (at least one parity worker), got N = {N}, K = {K}")
    return bool(systematic)


def parity_nodes(alpha: np.ndarray, n_parity: int) -> np.ndarray:
    """The default parity nodes for inputs at `alpha` (ascending), ascending.

    Up to K // 2 parity nodes: the middles of n_parity evenly spread
    intervals between consecutive inputs (at K // 2, every other interval:
    the inputs in pairs, each pair sharing the parity node between them).
    More: Chebyshev points of the second kind for N = K + n_parity, less the
    K nearest the inputs (one each, nearest first), so that the nodes keep
    Chebyshev's density at the ends and the outermost inputs get parity
    nodes beyond them. Measured (bench/results/systematic_accuracy.md, "Where
    the parity nodes sit"): the pairs win at N/K <= 1.5, the Chebyshev
    nodes at N/K = 1.75 and 2."""
    alpha = np.asarray(alpha, dtype=np.float64)
    K = alpha.shape[0]
    if n_parity <= K // 2:
        at = [int((j + 0.5) * (K - 1) / n_parity) for j in range(n_parity)]
        out = np.array([(alpha[i] + alpha[i + 1]) / 2.0 for i in at], dtype=np.float64)
    else:
        cheb = list(chebyshev_second_kind(K + n_parity))
        for a in alpha:
            cheb.remove(min(cheb, key=lambda t: abs(t - a)))
        out = np.array(cheb, dtype=np.float64)
    out = np.sort(out)
    if np.unique(np.concatenate((out, alpha))).size != K + n_parity:
        raise ValueError(f"{n_parity} parity nodes do not fit between {K} inputs at distinct points")
    return out


class SystematicLayout:
    """Which workers are systematic, and the shared encode / decode steps.

    ``beta`` (N,) ascending worker nodes holding every alpha_k exactly;
    ``workers`` the tuple of the K systematic workers (workers[k] computes
    f(x_k)); ``parity`` the int64 array of the others."""

    def __init__(self, alpha: np.ndarray, beta: np.ndarray):
        pos = np.searchsorted(beta, alpha)
        ok = (pos < beta.shape[0]) & (beta[np.minimum(pos, beta.shape[0] - 1)] == alpha)
        if not ok.all():
            k = int(np.argmin(ok))
            raise ValueError(f"systematic=True needs every input node among the worker nodes: "
                             f"alpha[{k}] = {float(alpha[k])!r} is not in beta")
        self.workers: Tuple[int, ...] = tuple(int(p) for p in pos)
        self._workers = pos.astype(np.int64)
        self._input_of = np.full(beta.shape[0], -1, dtype=np.int64)   # worker -> its input (-1: parity)
        self._input_of[pos] = np.arange(alpha.shape[0])
        self.parity = np.flatnonzero(self._input_of < 0)
        self.K = alpha.shape[0]
        # split() per answering list (order included): a server sees the same few again and again
        self._splits = PlanCache(256)

    @classmethod
    def build(cls, K: int, N: int, alpha: np.ndarray, beta) -> Tuple["SystematicLayout", np.ndarray]:
        """(layout, beta): beta as given (checked to hold alpha) or the
        default (alpha and parity_nodes(alpha, N - K))."""
        if beta is None:
            beta = np.sort(np.concatenate((alpha, parity_nodes(alpha, N - K))))
            beta.setflags(write=False)
        return cls(alpha, beta), beta

    # ---- encode --------------------------------------------------------

    def put_inputs(self, X, coded, rows):
        """Overwrite the systematic workers' rows of `coded` (all N workers,
        or those of `rows` in that order) with copies of X's rows."""
        if rows is None:
            return put_rows(coded, self._workers, X)
        inputs = self._input_of[rows]
        at = np.flatnonzero(inputs >= 0)
        if at.size:
            put_rows(coded, at, take_rows(X, inputs[at]))
        return coded

    # ---- decode --------------------------------------------------------

    def split(self, avail: np.ndarray):
        """(src, missing): src (K,) the position in `avail` of each input's
        systematic answer (-1 where it did not answer), missing the inputs
        without one (int64, ascending)."""
        return self._split(avail)[:2]

    def _split(self, avail: np.ndarray):
        """(src, missing, gather), cached: gather are the rows decode() takes
        from Y (the answers, the first one as the missing inputs' placeholder)."""
        return self._splits.get(avail.tobytes(), lambda: self._build_split(avail))

    def _build_split(self, avail: np.ndarray):
        src = np.full(self.K, -1, dtype=np.int64)
        inputs = self._input_of[avail]
        answered = inputs >= 0
        src[inputs[answered]] = np.flatnonzero(answered)
        missing = np.flatnonzero(src < 0)
        # handed out again from the cache, and only read (left writable: torch
        # warns on indexing with a read-only numpy array)
        return src, missing, np.where(src < 0, 0, src)

    def decode(self, Y, avail: np.ndarray, estimate: Callable):
        """(est, estimated): est (K, ...) with row k a copy of Y's row of
        workers[k] where it answered, else input k's row of
        ``estimate(missing)`` (the missing inputs, ascending -> their
        (len(missing), ...) estimates, Y's kind and dtype); estimated says
        whether any row was estimated."""
        src, missing, gather = self._split(avail)
        if missing.size == 0:
            return take_rows(Y, src), False
        est = take_rows(Y, gather)           # the missing rows' placeholders are replaced below
        put_rows(est, missing, estimate(missing))
        return est, True


def roughness_matrix(alpha: np.ndarray) -> np.ndarray:
    """Omega (K, K): integral g''^2 = v^T Omega v for the natural cubic spline
    g with values v at the knots alpha (Green & Silverman's Q R^-1 Q^T),
    read off the spline layer's smoother S(lam = 1) = (I + Omega)^-1."""
    K = alpha.shape[0]
    if K < 3:
        return np.zeros((K, K))      # a line (or a constant): no curvature
    S = SplineSmoother(alpha, alpha, lam=1.0).matrix()
    om = np.linalg.solve(S, np.eye(K)) - np.eye(K)
    return (om + om.T) / 2.0


def pinned_decoder_rows(E: np.ndarray, omega: np.ndarray, input_of: np.ndarray, sorted_idx: np.ndarray,
                        missing: np.ndarray, lam) -> np.ndarray:
    """The (len(missing), len(sorted_idx)) float64 operator of LeTCC's
    systematic decoder (module docstring) on the ascending answering set
    `sorted_idx`: row i estimates input missing[i] from the answers, column j
    weighs worker sorted_idx[j]'s. E (N, K) the encoder's interpolation
    matrix (coded input n = sum_k E[n, k] x_k), omega the roughness matrix of
    alpha, input_of (N,) each worker's input (-1: parity). lam: one number,
    or a (K,) array (row i then uses lam[missing[i]])."""
    inputs = input_of[sorted_idx]
    par_cols = np.flatnonzero(inputs < 0)
    known_cols = np.flatnonzero(inputs >= 0)
    known = inputs[known_cols]
    A = E[np.ix_(sorted_idx[par_cols], missing)]          # parity answers on the missing values
    B = E[np.ix_(sorted_idx[par_cols], known)]            # ... and on the pinned ones
    om_mm = omega[np.ix_(missing, missing)]
    om_mk = omega[np.ix_(missing, known)]
    lams = np.asarray(lam, dtype=np.float64)
    out = np.zeros((missing.shape[0], sorted_idx.shape[0]))
    for value in np.unique(lams) if lams.ndim else [float(lams)]:
        # normal equations of the pinned fit: (A^T A + lam Om_mm) c = A^T y_p - (A^T B + lam Om_mk) y_known;
        # the pseudo-inverse gives the least-norm answer where they leave c undetermined (lam = 0)
        H = np.linalg.pinv(A.T @ A + value * om_mm, hermitian=True)
        rows = np.arange(missing.shape[0]) if lams.ndim == 0 else np.flatnonzero(lams[missing] == value)
        if rows.size == 0:
            continue
        out[np.ix_(rows, par_cols)] = (H @ A.T)[rows]
        out[np.ix_(rows, known_cols)] = -(H @ (A.T @ B + value * om_mk))[rows]
    return out



def _as_float(Y):
    """Integer numpy answers as float64 (the estimates are not integers)."""
    if isinstance(Y, np.ndarray) and Y.dtype.kind in "iub":
        return Y.astype(np.float64)
    return Y


def _pinned_lam(code, beta_av: np.ndarray, log: bool):
    """The pinned decoder's lam for a LeTCC: SYSTEMATIC_LAM for lam_dec='auto',
    else the code's own rule (a number, or a policy's lam / (K,) lams)."""
    if isinstance(code.lam_dec, str) and code.lam_dec == "auto":
        return SYSTEMATIC_LAM
    kind, value = code._log_rule if log else (code._lam_dec_kind, code._lam_dec_value)
    if kind == "local_gap":
        return local_gap_lams(beta_av, code.alpha, *value)
    lam = code._lam_dec_for(beta_av, log)
    if lam is None:
        raise ValueError(f"the lam_dec policy {code.lam_dec!r} returned None (GCV from the outputs), which "
                         "systematic=True has not: return a lam >= 0 or one per alpha_k")
    return lam


def pinned_operator(code, sorted_idx: np.ndarray, log: bool):
    """(operator, lam): the cached pinned decoder of a systematic LeTCC for
    this ascending answering set (rows: its missing inputs, ascending)."""
    layout = code._layout
    lam = _pinned_lam(code, code.beta[sorted_idx], log)
    key = ("systematic", sorted_idx.tobytes(), np.asarray(lam, dtype=np.float64).tobytes())

    def build():
        if code._sys_E is None:       # the encoder's interpolation matrix and alpha's roughness, once
            code._sys_E, code._sys_omega = code.encoder.matrix(), roughness_matrix(code.alpha)
        missing = layout.split(sorted_idx)[1]
        return DenseOperator(pinned_decoder_rows(code._sys_E, code._sys_omega, layout._input_of, sorted_idx,
                                                 missing, lam))
    return code._decoders.get(key, build), lam


def full_pinned_operator(code, sorted_idx: np.ndarray, log: bool) -> DenseOperator:
    """The (K, len(sorted_idx)) map of a systematic LeTCC's decode on this
    ascending answering set: unit rows for the answered inputs (decode copies
    those answers), the pinned decoder's rows for the missing ones."""
    src, missing = code._layout.split(sorted_idx)
    A = np.zeros((code.K, sorted_idx.shape[0]))
    answered = np.flatnonzero(src >= 0)
    A[answered, src[answered]] = 1.0
    if missing.size:
        op, code.last_lam_dec = pinned_operator(code, sorted_idx, log)
        A[missing] = op.matrix()
    return DenseOperator(A)


def decode_letcc(code, Y, avail: np.ndarray):
    """decode() of LeTCC(..., systematic=True) (answers checked): exact rows
    where the systematic worker answered, the pinned decoder elsewhere, in
    the space the code's output_space picks from Y (one check per decode)."""
    Y = _as_float(Y)

    def estimate(missing):
        space = code._space
        Z = None if space == "linear" else log_or_none(Y, strict=space == "log")
        log = Z is not None
        code.last_output_space = "log" if log else "linear"
        plan = {}

        def op(srt, _):
            plan["op"], code.last_lam_dec = pinned_operator(code, srt, log)
            return plan["op"]
        est = code._decode_rows(avail, Y if Z is None else Z, op)
        return softmax_(est) if log else est

    est, estimated = code._layout.decode(Y, avail, estimate)
    if not estimated:
        code.last_output_space = None
    return est


def decode_bacc(code, Y, avail: np.ndarray, berrut_matrix):
    """decode() of BACC(..., systematic=True): exact rows where the systematic
    worker answered, Berrut's interpolant through every answer elsewhere.
    ``berrut_matrix`` is bacc.py's (passed in: bacc imports this module)."""
    Y = _as_float(Y)
    layout = code._layout

    def op(srt, _):
        return code._decoders.get(("systematic", srt.tobytes()), lambda: DenseOperator(
            berrut_matrix(code.beta[srt], code.alpha[layout.split(srt)[1]])))

    return layout.decode(Y, avail, lambda missing: code._decode_rows(avail, Y, op))[0]