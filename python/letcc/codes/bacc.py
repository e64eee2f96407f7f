"""BACC: Berrut approximated coded computing (the baseline).

Encoder and decoder are Berrut's first-form rational interpolant

    r(z) = sum_i w_i(z) y_i,   w_i(z) = ((-1)^i / (z - z_i)) / sum_j ((-1)^j / (z - z_j)),

with the nodes z_i in ascending order and r(z_i) = y_i exactly when z hits a
node. Encoding interpolates the inputs placed at alpha and evaluates at beta;
decoding interpolates the outputs of the workers that answered (the signs
alternate over those nodes only, in ascending order) and evaluates at alpha.
Both are linear maps, applied as dense (q, n) operators: letcc's compiled
DenseOperator for numpy arrays and CPU torch tensors (numpy's GEMM with an
inner dimension of K is far from the memory floor), the array's own matmul for
GPU arrays.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from letcc._typing import Array, ArrayLike, Indices

from letcc.codes._base import Code, any_answer_rule, as_count
from letcc.codes._arrays import take_rows, to_host_2d
from letcc.codes._plan_cache import PlanCache
from letcc.codes import systematic as _sys
from letcc.codes.robust import bw_locate, bw_needed, check_adversaries, check_valid, invalid_rows
from letcc.nodes import as_nodes, chebyshev_first_kind, chebyshev_second_kind
from letcc.splines import DenseOperator

__all__ = ["BACC", "berrut_matrix"]


def berrut_matrix(nodes: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Dense (q, n) float64 operator of Berrut's interpolant on ascending `nodes`
    evaluated at `points`: row j holds w_i(points[j]); a point equal to a node
    gets that node's unit row (exact interpolation)."""
    nodes = np.asarray(nodes, dtype=np.float64)
    points = np.asarray(points, dtype=np.float64)
    diff = points[:, None] - nodes[None, :]
    signs = np.where(np.arange(nodes.shape[0]) % 2 == 0, 1.0, -1.0)
    hit = diff == 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = signs[None, :] / diff
        M = terms / terms.sum(axis=1, keepdims=True)
    rows_hit = hit.any(axis=1)
    if rows_hit.any():
        M[rows_hit] = hit[rows_hit].astype(np.float64)
    return M


class BACC(Code):
    """Berrut approximated coded computing with K inputs and N workers.

    Parameters
    ----------
    K, N : int
        Number of inputs per round and number of workers.
    alpha : (K,) array_like, optional
        Input nodes, strictly increasing in [-1, 1]; default Chebyshev points of
        the first kind (letcc.nodes.chebyshev_first_kind).
    beta : (N,) array_like, optional
        Worker nodes, strictly increasing in [-1, 1]; default Chebyshev points of
        the second kind (letcc.nodes.chebyshev_second_kind).
    plan_cache_size : int
        How many decoder operators (one per available set) to keep; as many
        encoders for subsets of the workers (``encode(X, rows=...)``).
    adversaries : int, default 0
        E > 0: ApproxIFER's decoder. The Berlekamp-Welch locator
        (letcc.codes.robust) flags E answers (error-locator values voted
        across the output coordinates), they are dropped and the rest
        Berrut-decoded. Needs 2K + 2E - 1 answers (N >= 2K + 2E - 1;
        ``can_decode`` is False for fewer answers and ``decode`` raises a
        ValueError saying how many it needs). ``decode(...,
        return_flagged=True)`` also returns the flagged workers; all of Y's
        trailing axes are one round.
    valid : None, 'simplex' or callable, default None
        As LeTCC's: with adversaries > 0, answers that cannot be right are
        dropped (and flagged) first, and Berlekamp-Welch locates at most E
        minus their number more among the rest (fewer when the answers left
        cannot locate that many: BW needs 2K + 2E' - 1 of them).

    systematic : bool, default False
        True: the baseline of LeTCC(..., systematic=True). K of the N workers
        sit on the inputs' nodes alpha (Berrut's interpolant passes through
        its nodes, so their coded inputs are the inputs; encode() copies them
        bit for bit), the other N - K at the same parity nodes as LeTCC's
        (letcc.codes.systematic.parity_nodes; ``beta``, when given, must hold
        every alpha_k). ``systematic_workers[k]`` is the worker computing
        f(x_k). decode() returns those workers' answers bit for bit where
        they answered and, for the other inputs, Berrut's interpolant through
        every answer (in the linear space) at their alpha_k.
        ``is_complete`` holds once every systematic worker answered. Needs
        N >= K + 1; not combined with adversaries > 0.

    With adversaries=0, decodes from any non-empty set of workers (one worker
    gives a constant). ``systematic_workers``: the K systematic workers'
    indices (a tuple in alpha's order), None unless systematic=True.
    """

    def __init__(self, K: int, N: int, alpha: ArrayLike | None = None, beta: ArrayLike | None = None,
                 plan_cache_size: int = 128, adversaries: int = 0, valid: Any = None,
                 systematic: bool = False) -> None:
        self.K = as_count(K, "K")
        self.N = as_count(N, "N")
        systematic = _sys.check_systematic(systematic, self.K, self.N)
        if systematic and adversaries != 0:
            raise ValueError(f"systematic=True is not combined with adversaries={adversaries!r}")
        self.adversaries = check_adversaries(adversaries, self.N, (self.N - 2 * self.K + 1) // 2,
                                             f"Berlekamp-Welch needs N >= 2K + 2E - 1 = {2 * self.K - 1} + 2E")
        self.valid = check_valid(valid)
        self.alpha = chebyshev_first_kind(self.K) if alpha is None else as_nodes(alpha, self.K, "alpha")
        self._layout = None
        if systematic:
            given = None if beta is None else as_nodes(beta, self.N, "beta")
            self._layout, self.beta = _sys.SystematicLayout.build(self.K, self.N, self.alpha, given)
        else:
            self.beta = chebyshev_second_kind(self.N) if beta is None else as_nodes(beta, self.N, "beta")
        self.systematic_workers = None if self._layout is None else self._layout.workers
        # can_decode: the Berlekamp-Welch count with adversaries, else any answer
        self.waiting_rule = any_answer_rule(self, bw_needed(self.K, self.adversaries) if self.adversaries else 1)
        self.encoder_matrix = berrut_matrix(self.alpha, self.beta)  # (N, K), fixed
        self.encoder = DenseOperator(self.encoder_matrix)
        self._decoders = PlanCache(plan_cache_size)
        self._row_encoders = PlanCache(plan_cache_size)

    def encode(self, X: Array, out: Array | None = None, rows: Indices | None = None) -> Array:
        """X (K, ...) -> (N, ...) coded inputs; written into `out` when given.
        With `rows` (worker indices): only those workers' coded inputs, in that
        order (the encoder matrix's rows, an operator cached per rows)."""
        X = self._inputs(X)
        if rows is None:
            coded = self.encoder(X, out)
        else:
            idx = self._rows(rows)
            op = self._row_encoders.get(idx.tobytes(), lambda: DenseOperator(self.encoder_matrix[idx]))
            coded = op(X, out)
        if self._layout is not None:      # the systematic rows as copies (a GEMM's 1 * x + 0 * y is not x for -0.0)
            return self._layout.put_inputs(X, coded, None if rows is None else idx)
        return coded

    def decoder_matrix(self, available) -> np.ndarray:
        """The (K, len(available)) float64 operator decode() applies: column i
        weighs the output of worker available[i]."""
        avail = self._available(available)
        return self._decoder_for(avail)

    def _decoder_op(self, sorted_idx: np.ndarray) -> DenseOperator:
        """The cached operator for an ascending set of answering workers."""
        return self._decoders.get(
            sorted_idx.tobytes(), lambda: DenseOperator(berrut_matrix(self.beta[sorted_idx], self.alpha))
        )

    def _decoder_for(self, avail: np.ndarray) -> np.ndarray:
        order = np.argsort(avail, kind="stable")
        sorted_idx = avail[order]
        M = self._decoder_op(sorted_idx).matrix()
        if np.all(order[:-1] < order[1:]):
            return M
        # Columns follow the caller's order instead of reordering the rows of Y.
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.shape[0])
        return M[:, inverse]

    def decode(self, Y: Array, available: Indices, return_flagged: bool = False) -> Any:
        """Y (len(available), ...) outputs of workers `available` (any order) -> (K, ...).
        With ``return_flagged``: (estimates, flagged), flagged the sorted
        int64 worker indices judged wrong and dropped (empty with adversaries=0)."""
        avail = self._available(available)
        Y = self._outputs(Y, avail)
        flagged = np.zeros(0, dtype=np.int64)
        if self._layout is not None:
            est = _sys.decode_bacc(self, Y, avail, berrut_matrix)
            return (est, flagged) if return_flagged else est
        if self.adversaries:
            need = bw_needed(self.K, self.adversaries)
            if avail.size < need:
                raise ValueError(f"BACC with adversaries={self.adversaries} needs 2K + 2E - 1 = {need} answers "
                                 f"to locate wrong ones, got {avail.size}")
            E = self.adversaries
            if self.valid is not None:
                bad = invalid_rows(Y, to_host_2d(Y), self.valid)
                if bad.all():
                    raise ValueError(f"every answer of this decode fails valid={self.valid!r}: nothing to decode")
                if bad.any():
                    flagged = np.sort(avail[bad])
                    keep_rows = np.flatnonzero(~bad)
                    avail, Y = avail[keep_rows], take_rows(Y, keep_rows)
                    # the rest: E minus the invalid ones, as many as the answers left can locate
                    E = max(0, min(E - flagged.size, (avail.size - 2 * self.K + 1) // 2))
        if self.adversaries and E:
            order = np.argsort(avail, kind="stable")
            srt = avail[order]
            Yh = to_host_2d(Y)[order].astype(np.float64, copy=False)
            pos = bw_locate(self.beta[srt], Yh, self.K, E)
            flagged = np.union1d(flagged, srt[pos])
            kept = np.ones(srt.size, dtype=bool)
            kept[pos] = False
            keep_rows = np.sort(order[kept])
            avail, Y = avail[keep_rows], take_rows(Y, keep_rows)
        est = self._decode_rows(avail, Y, lambda srt, _: self._decoder_op(srt))
        return (est, flagged) if return_flagged else est

    def _idle_decoder(self):
        # Berrut's decoder (a systematic code's workers are tied to their nodes)
        if self._layout is not None:
            return None
        return lambda avail, Y: self._decode_rows(avail, Y, lambda srt, _: self._decoder_op(srt))

    def can_decode(self, available) -> bool:
        n = self._available(available, allow_empty=True).size
        return n >= (bw_needed(self.K, self.adversaries) if self.adversaries else 1)

    @property
    def linear_in_outputs(self) -> bool:
        return not self.adversaries          # the locator looks at the outputs

    @property
    def complete_needs_every_worker(self) -> bool:
        return self._layout is None      # systematic: complete once the K systematic workers answered

    def is_complete(self, available) -> bool:
        avail = self._available(available, allow_empty=True)
        if self._layout is not None:
            return self._layout.split(avail)[1].size == 0
        return avail.size == self.N

    def __repr__(self) -> str:
        adv = f", adversaries={self.adversaries}" if self.adversaries else ""
        sys_ = ", systematic=True" if self._layout is not None else ""
        return f"BACC(K={self.K}, N={self.N}{adv}{sys_})"
