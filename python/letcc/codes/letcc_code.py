"""LeTCC: learning-theoretic coded computing with cubic smoothing splines.

Encoding fits one smoothing spline per input coordinate through (alpha_k, x_k)
and evaluates it at the worker nodes beta; decoding fits one per output
coordinate through (beta_v, y_v) for the workers v that answered and evaluates
it at alpha. Both are letcc.SplineSmoother plans: the encoder's is built once,
the decoders' are cached per (available set, lam). A lam policy may give one
lam per alpha_k (the default does); the decoder is then the (K, |F|) matrix
whose row k is the row of the spline smoother with lam_k, applied as a
letcc.DenseOperator and cached the same way.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from letcc._typing import Array, ArrayLike, Indices

from letcc.codes._arrays import take_rows, to_host_2d
from letcc.codes._base import Code, any_answer_rule, as_count
from letcc._checks import as_int, as_real
from letcc.codes._plan_cache import PlanCache
from letcc.codes.robust import (PAIR_MIN_ANSWERS, DetectionSplines, check_adversaries, check_valid, detection_knots,
                                invalid_rows, spline_locate)
from letcc.codes.clean_round import (FALSE_ALARM, PAIR_SHARE, CleanRoundTest, check_false_alarm, model_statistics,
                                     statistics_needed, thresholds_of)
from letcc.codes.lam_defaults import local_gap_rows, resolve_lam_dec, resolve_lam_enc
from letcc import _core
from letcc.codes.output_space import (LOG_FLOOR, PROB_SUM_TOL, as_output_space, from_log, is_probability_rows,
                                     log_or_none, probability_answers_logged, to_log)
from letcc.codes import systematic as _sys
from letcc.nodes import as_nodes, chebyshev_first_kind, chebyshev_second_kind
from letcc.splines import DenseOperator, SplineSmoother, select_lam_gcv, smoother_rows
from letcc.splines._validation import as_lam

__all__ = ["LeTCC", "spline_decoder_matrix"]

# The robust decoder makes a clean round's decode in the locator's first pass
# (spline_locate's decode) from this many bytes of answers: where they do not
# stay in the caches, the pass saves the decode a read of them from memory.
# Below it both are bound by their arithmetic and cost the same fused or not,
# and the decode made in the pass is wasted where the round has an erasure.
# Measured (AMD EPYC, 2 cores, LeTCC(8, 24), 22 float64 answers): the fused
# pass cost the pass plus the decode at m = 1000 - 70000 (up to 12 MB), and
# 0.76x their sum at m = 100000 (17.6 MB); bench/results/robust_decode.md.
PASS_DECODE_MIN_BYTES = 16 << 20


def spline_decoder_matrix(nodes: np.ndarray, points: np.ndarray, lam) -> np.ndarray:
    """The (len(points), len(nodes)) float64 operator of the spline decoder on
    ascending `nodes`, evaluated at `points`: one lam for all rows, or one per
    point (row k: the smoothing spline with lam[k], evaluated at points[k])."""
    lam_arr = np.asarray(lam, dtype=np.float64)
    if lam_arr.ndim == 0:
        return SplineSmoother(nodes, points, lam=float(lam_arr)).matrix()
    # O(n) per row from the Reinsch factors, one factorisation per distinct lam
    return smoother_rows(nodes, points, lam_arr)


class LeTCC(Code):
    """Learning-theoretic coded computing with K inputs and N workers.

    Parameters
    ----------
    K, N : int
        Inputs per round and workers.
    lam_enc : float, 'auto', callable or policy, default 'auto'
        Encoder smoothing parameter (scipy ``make_smoothing_spline`` meaning:
        plain sum in the data term; the paper's lam is this divided by K).
        0 makes the coded inputs pass exactly through the inputs. 'auto' uses
        ``lam_dec``'s ``.lam_enc(K, N)`` when lam_dec is a policy that has one,
        else the default policy (letcc.codes.lam_defaults.LocalGapLam). A callable is
        called as ``fn(K, N)``; an object with ``.lam_enc(K, N)`` is asked once.
    lam_dec : float, None, 'auto', 'gcv', callable or policy, default 'auto'
        Decoder smoothing parameter (same meaning; the paper's is this divided
        by the number of answering workers).

        - a number: the same lam for every decode;
        - None or 'gcv': chosen per decode by generalised cross-validation on
          the outputs (letcc.select_lam_gcv); right for noisy workers, costs
          about 70 extra passes over the outputs per decode, not cached;
        - 'auto': the default policy (letcc.codes.lam_defaults.LocalGapLam), one lam per
          alpha_k: lam_k = c * h_k^3 with h_k the interval of answering nodes
          around alpha_k (its distance beyond the outermost answer, scaled,
          when larger), which shrinks as N grows and grows with the holes
          stragglers leave (see letcc.codes.lam_defaults); a decode in log
          space (output_space 'auto' on probability outputs, or 'log') uses
          the same rule with c = LOG_C0 (LOG_POLICY). Either is a formula per
          answering set, cached with its decoder (no search per decode);
        - a lam policy: any object with ``.lam_dec(beta_available, N, K)``
          or ``.lam_dec_at(beta_available, alpha, N, K)`` (preferred when
          present; and optionally ``.lam_enc(K, N)``), or a callable
          ``fn(beta_available, N, K)``. ``beta_available`` is the ascending
          float64 array of the answering workers' nodes. It returns a lam >= 0,
          a (K,) sequence of lams (one per alpha_k: the estimate of f(x_k)
          comes from the spline smoothed with lam_k), or None for "GCV on this
          call". It is called on every decode (keep it cheap); plans are
          cached by (available set, returned lam(s)).
    alpha, beta : array_like, optional
        Strictly increasing nodes in [-1, 1] for the inputs (K) and the workers
        (N); default Chebyshev points of the first / second kind.
    plan_cache_size : int
        How many decoder plans to keep (least recently used dropped first);
        as many encoders for subsets of the workers (``encode(X, rows=...)``).
    adversaries : int, default 0
        E, the wrong answers per decode to tolerate. 0 is the plain decoder.
        E > 0: answers that cannot be right are erased first (``valid``),
        then a clean-round test decides whether the round holds a wrong
        answer at all (letcc.codes.clean_round): the spline locator
        (letcc.codes.robust) scores every answer (how much it disagrees
        both with a detection smoothing spline through the others and with
        its nearest answers) and the top-scored one is erased only while
        the round's statistic (top score over the median leave-one-out
        score) exceeds a threshold, one erasure at a time, at most E minus
        the invalid answers, at least 3 answers kept (fewer than 4 answers:
        none). With 2 or more erasures left, a step also tests adjacent
        pairs (two wrong answers side by side vouch for each other in the
        single scores): the pair whose members both disagree with the
        spline through the rest and with their outer neighbours is erased
        whole when its own calibrated test fires, unless the single test
        fires too with its top answer in that pair or with the larger
        excess (the pair stage, letcc.codes.robust; part of the calibrated
        test: a caller's flag_threshold and false_alarm=None take single
        steps). The answers kept are decoded by the plain decoder, in the
        space it would use (``output_space``): a round with nothing erased
        is decoded bit for bit as adversaries=0 decodes it. Probability
        answers are scored in the log space they are decoded in. Costs
        one compiled O(n m) pass over the answers per scoring (the
        detection spline's banded residuals and the neighbour distances):
        one on a clean round, one more after each erasure. ``decode(..., return_flagged=True)`` also
        returns the erased workers. All of Y's trailing axes are one round:
        a flagged worker is erased for all of them.
    flag_threshold : float or None, default None
        None: the calibrated clean-round test (``false_alarm``). A number t
        > 0: the caller's own threshold, erase while the top score exceeds
        t^2 times the median leave-one-out score. ``float('inf')``: the
        spline locator never erases (only ``valid``'s rejections are).
    false_alarm : float or None, default 1e-3
        With flag_threshold=None: the rate of honest rounds in which the
        clean-round test erases an answer, in [1e-4, 0.5]. The threshold
        for n answers is the (1 - false_alarm) quantile of the statistic
        over synthetic honest rounds through this code's own encoder
        (random smooth networks; log-softmax of them for probability
        answers), computed on first use for each (n, space), about 1 s,
        and cached per process (letcc.codes.clean_round.CALIBRATIONS). The
        rate on a real model's rounds is measured in
        bench/results/adversarial.md. With adversaries >= 2 the pair test
        has its own threshold at half that rate (about 1.5 s per (n, space)
        for both), so at most 1.5 false_alarm of the synthetic honest
        rounds erase an answer. After the first erasure of a round whose
        first statistic was at least twice its threshold (it is attacked)
        the single test is at 3 false_alarm (clean_round.LATER_FACTOR, at
        most 0.5; the pair test keeps its rate:
        a weaker second wrong answer is caught more often, and a lone liar
        has an honest answer erased beside it in up to that share of its
        rounds). None: no test, E erasures in every round (ApproxIFER's
        rule, the decoder before issue 28).
    valid : 'auto', None, 'simplex' or callable, default 'auto'
        With adversaries > 0: answers that cannot be right are erased before
        the spline locator runs, all of them (they are flagged too), and the
        locator erases at most E minus their number more. 'auto': a round
        decoded in log space (probability answers: with output_space='auto'
        when at most E answers are not probability vectors, or
        output_space='log') erases its answers that are not probability
        vectors (finite, >= 0, each class vector summing to 1 within
        PROB_SUM_TOL): a softmax model cannot return them; other rounds
        check nothing. 'simplex': every class vector of an answer (its last
        axis) must be a probability vector (finite, entries >= -1e-3, sum 1
        within 1e-3); a callable: ``valid(Y) -> (len(Y),) bool``, True for
        a possible answer. ValueError when every answer fails. None: no
        check (and output_space='auto' logs a round only when every answer
        is a probability vector). Ignored with adversaries=0.
    output_space : 'auto', 'linear' or 'log', default 'auto'
        Where the decoder works. 'linear': on the outputs as they are (any
        f). 'log': for workers that return probabilities over the last axis
        of their output (a classifier's softmax): decode() takes
        log(max(Y, LOG_FLOOR)), decodes that, and returns the softmax of the
        estimates over the last axis (each estimate a probability vector);
        ValueError for a negative or non-finite output, or outputs with no
        class axis (1-D Y). 'auto' decides on every decode from the answers
        Y: the log space when Y is a float array with a class axis (ndim >=
        2) whose entries are all finite and >= 0 and whose every row over
        the last axis sums to 1 within letcc.codes.output_space.PROB_SUM_TOL
        (1e-3, summed in float64), else 'linear' (logits, regression
        outputs, signed or integer data: decoded exactly as with 'linear',
        bit for bit). ``last_output_space`` says which the latest decode
        used. 'auto' decides so only with lam_dec='auto' (the built-in rule
        has a version for each space), with or without adversaries (with
        adversaries > 0 a round is probability answers when at most E of
        them are not, see ``valid``); with a lam or a
        policy of the caller's (e.g. calibrated by letcc.tune or
        LamPolicy.calibrate, which score linear decodes) it decodes
        linearly: pass output_space='log' to combine those with the log
        space. letcc.codes.output_space says why: on the eight classifiers of
        bench/results/accuracy.md the log space lowered the softmax MSE
        against BACC by 36-89% (linear: 16-37%) and raised the decoded
        accuracy by +1.6 to +11 points over BACC's (linear: -0.3 to +2.2),
        winning RelAcc where the linear decoder cannot. The check, the log
        and the softmax are two compiled passes for numpy answers (about
        1-2 us per decode at 10 classes; more at 1000 classes, see the
        README); the encoder is the same in every space. With adversaries
        > 0, the adversary detection runs on the log outputs of a round
        decoded in log space.
    systematic : bool, default False
        True: K of the N workers are the inputs' own nodes (their coded
        inputs are the inputs, copied bit for bit), the other N - K are
        parity workers between them (letcc.codes.systematic.parity_nodes;
        ``beta``, when given, must hold every alpha_k), and lam_enc is 0 (the
        encoder interpolates; another lam_enc is a ValueError).
        ``systematic_workers[k]`` is the worker computing f(x_k). decode()
        returns those workers' answers bit for bit where they answered and
        estimates only the inputs whose systematic worker did not, with the
        pinned decoder (letcc.codes.systematic.pinned_decoder_rows: the
        encoder's spline through the exact answers, fitted to the parity
        answers) in the space ``output_space`` chooses; lam_dec='auto' is
        its small lam SYSTEMATIC_LAM, a number or a policy (its lam_k for
        input k) sets it, GCV is not available. ``is_complete`` holds once
        every systematic worker answered. Needs N >= K + 1; not combined with
        adversaries > 0.

    Attributes ``lam_enc`` (the float in use), ``lam_dec`` (as given),
    ``last_lam_dec`` (the lam the latest decode used: a float, or a (K,)
    float64 array when the policy chose one lam per alpha_k) and
    ``last_output_space`` ('linear' or 'log': the space the latest decode
    worked in; None before the first, and after a systematic decode that
    estimated nothing), ``systematic_workers`` (the K systematic workers'
    indices, a tuple in alpha's order; None unless systematic=True). With adversaries > 0,
    ``last_clean_round``: the latest decode's clean-round test, a dict with
    the top-scored ``worker``, the round's ``statistic`` and the
    ``threshold`` it was held to (None with false_alarm=None), and where
    the pair stage tested (adversaries >= 2, at least 5 answers) the
    top-scored adjacent ``pair`` of workers, its ``pair_statistic`` and
    ``pair_threshold``; None when the locator did not run (fewer than 4 answers, nothing left of E, or
    flag_threshold=inf). A wrong answer that one round cannot tell from an
    honest one (a relabelled class) is still top-scored far more often
    than an honest worker (bench/results/adversarial.md, first table: 2
    fixed relabelling workers of 22 on the classifiers): evidence for the
    caller to pool over rounds.
    """

    def __init__(self, K: int, N: int, lam_enc: Any = "auto", lam_dec: Any = "auto", alpha: ArrayLike | None = None,
                 beta: ArrayLike | None = None, plan_cache_size: int = 128, adversaries: int = 0,
                 flag_threshold: float | None = None, output_space: str = "auto", valid: Any = "auto",
                 false_alarm: float | None = FALSE_ALARM, systematic: bool = False) -> None:
        self.K = as_count(K, "K")
        self.output_space = as_output_space(output_space)
        self._log = self.output_space == "log"
        self.N = as_count(N, "N")
        self.adversaries = check_adversaries(adversaries, self.N, self.N - 3, "LeTCC keeps at least 3 answers")
        self.flag_threshold = None if flag_threshold is None else as_real(flag_threshold, "flag_threshold", 0.0,
                                                                          strict=True, finite=False)
        self._detection = DetectionSplines(plan_cache_size)
        self.valid = check_valid(valid, allow_auto=True)
        self.false_alarm = None if false_alarm is None else check_false_alarm(false_alarm)
        self.alpha = chebyshev_first_kind(self.K) if alpha is None else as_nodes(alpha, self.K, "alpha")
        self._layout = None
        if _sys.check_systematic(systematic, self.K, self.N):
            self._check_systematic_args(lam_enc, lam_dec)
            given = None if beta is None else as_nodes(beta, self.N, "beta")
            self._layout, self.beta = _sys.SystematicLayout.build(self.K, self.N, self.alpha, given)
            lam_enc = 0.0
        else:
            self.beta = chebyshev_second_kind(self.N) if beta is None else as_nodes(beta, self.N, "beta")
        self.systematic_workers = None if self._layout is None else self._layout.workers
        self.waiting_rule = any_answer_rule(self)      # can_decode: any answer; is_complete below
        self._sys_E = self._sys_omega = None      # the pinned decoder's matrices, built on first use
        self._knots = detection_knots(self.beta)       # the spline locator's knots, one per worker
        # per answering set (its bytes): (rows, srt, nodes, knots) of _erase_flagged
        self._locator_sets = PlanCache(plan_cache_size)
        # the lam rule of each space ('auto' may use both); the kind is the
        # same in both (only lam_dec='auto' differs: LOG_POLICY in log space)
        self._lam_dec_kind, self._lam_dec_value = resolve_lam_dec(
            lam_dec, self.K, self.N, "log" if self._log else "linear")
        self._log_rule = resolve_lam_dec(lam_dec, self.K, self.N, "log")
        # the space of a decode: None = decided from Y on every decode. 'auto'
        # decides only for the built-in lam rule, which has a log-space
        # version; a lam or policy given by the caller (e.g. calibrated by
        # letcc.tune on linear decodes) and the robust decoder stay linear.
        auto_decides = isinstance(lam_dec, str) and lam_dec == "auto"
        self._space = (None if auto_decides else "linear") if self.output_space == "auto" else self.output_space
        # A policy that states the local-gap rule (lam_defaults' protocol) has
        # lams that are a function of the answering set alone and valid by
        # construction: its decoders are cached by the set, and a cached
        # decode skips the policy and the checks of its answer.
        self._set_keyed = self._lam_dec_kind == "local_gap"
        self.lam_dec = lam_dec
        self.lam_enc = resolve_lam_enc(lam_enc, lam_dec, self.K, self.N)
        self.encoder = SplineSmoother(self.alpha, self.beta, lam=self.lam_enc)
        self._clean_test = None if self.false_alarm is None else CleanRoundTest(
            self.alpha, self.beta, self.lam_enc, self.encoder, self.false_alarm, self._detection,
            pairs=self.adversaries >= 2)
        self._decoders = PlanCache(plan_cache_size)
        self._row_encoders = PlanCache(plan_cache_size)
        self.last_lam_dec: float | None = None
        self.last_output_space: str | None = None

    # ---- encoding -------------------------------------------------------

    def encode(self, X: Array, out: Array | None = None, rows: Indices | None = None) -> Array:
        """X (K, ...) -> coded inputs (N, ...): the encoder spline at every beta_n.
        With `out` ((N, ...), X's kind and dtype) the result is written there.
        With `rows` (worker indices): only those workers' coded inputs,
        (len(rows), ...) in that order, the encoder spline at beta[rows] (a
        plan per set of rows, cached like the decoders)."""
        X = self._inputs(X)
        if self._layout is not None:      # the spline's values, then the systematic rows as copies of X's
            idx = None if rows is None else self._rows(rows)
            coded = self.encoder(X, out) if idx is None else self.encoder_for(idx)(X, out)
            return self._layout.put_inputs(X, coded, idx)
        if rows is None:
            return self.encoder(X, out)
        return self.encoder_for(rows)(X, out)

    def encoder_for(self, rows) -> SplineSmoother:
        """The encoder plan evaluated at beta[rows] only (cached per rows)."""
        idx = self._rows(rows)
        if idx.shape[0] == self.N and np.array_equal(idx, np.arange(self.N)):
            return self.encoder
        # the encoder's own fit at the subset's nodes (checked already)
        return self._row_encoders.get(idx.tobytes(), lambda: self.encoder._at_points(self.beta[idx]))

    # ---- decoding -------------------------------------------------------

    def _lam_dec_for(self, beta_available: np.ndarray, log: bool = False):
        """The decoder's lam for these answering nodes (ascending): a float, a
        (K,) float64 array (one per alpha_k), or None = GCV. `log`: for a
        decode in log space (output_space='auto')."""
        kind, value = self._log_rule if log else (self._lam_dec_kind, self._lam_dec_value)
        if kind == "fixed":
            return value
        if kind == "gcv":
            return None
        if kind == "policy_at":
            lam = value(beta_available, self.alpha, self.N, self.K)
        else:
            lam = value(beta_available, self.N, self.K)
        if lam is None:
            return None
        try:
            if isinstance(lam, (str, bytes)) or not hasattr(lam, "__len__"):
                return as_lam(lam)
            arr = np.asarray(lam, dtype=np.float64)
            if arr.shape != (self.K,):
                raise ValueError(f"expected one lam per alpha, shape ({self.K},), got shape {arr.shape}")
            lo, hi = arr.min(), arr.max()
            if not (lo >= 0.0 and np.isfinite(hi)):  # one pass each, not K scalar checks
                bad = arr[~(np.isfinite(arr) & (arr >= 0.0))][0]
                raise ValueError(f"every lam must be finite and >= 0, got {bad!r}")
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"the lam_dec policy returned {lam!r}: {exc}") from None
        if lo == hi:
            return float(lo)  # one lam after all: the banded spline plan
        return arr

    def decoder_plan(self, available, Y=None, output_space: str | None = None):
        """The linear map decode() applies for this set (columns in ascending
        worker order; in log space it maps the log outputs): a
        SplineSmoother, or a DenseOperator when the policy gave one lam per
        alpha_k (systematic=True: a (K, len(available)) DenseOperator, the
        answered inputs' unit rows and the pinned decoder's rows; decode()
        copies the answers instead of applying unit rows). Y is needed only
        when lam is chosen by GCV. `output_space`
        ('linear' or 'log'): that space's map; default the code's space, and
        for output_space='auto' the space decode(Y, available) would use
        ('linear' without Y)."""
        avail = self._available(available)
        sorted_idx = np.sort(avail)
        space = self._space if output_space is None else output_space
        if space not in (None, "linear", "log"):
            raise ValueError(f"output_space must be 'linear' or 'log', got {output_space!r}")
        if Y is not None:
            Y = self._outputs(Y, avail)
            if space is None:
                space = "log" if log_or_none(Y, strict=False) is not None else "linear"
            if space == "log":
                Y = log_or_none(Y, strict=True)
            order = np.argsort(avail, kind="stable")
            Y = take_rows(Y, order)
        if self._layout is not None:      # systematic: unit rows for the answered inputs, the pinned decoder's
            return _sys.full_pinned_operator(self, sorted_idx, space == "log")
        return (self._plan_log if space == "log" else self._plan)(sorted_idx, Y)

    def _plan_log(self, sorted_idx: np.ndarray, Y_sorted):
        """_plan for a decode in log space (output_space 'auto' or 'log')."""
        return self._plan(sorted_idx, Y_sorted, True)

    def _plan(self, sorted_idx: np.ndarray, Y_sorted, log: bool = False):
        if self._set_keyed:
            # the space's own rule; output_space='log' keeps its entries under "set"
            key = "set-log" if log and not self._log else "set"
            plan, lam = self._decoders.get((key, sorted_idx.tobytes()),
                                           lambda: self._build_set_keyed(sorted_idx, log))
            self.last_lam_dec = lam
            return plan
        beta_av = self.beta[sorted_idx]
        lam = self._lam_dec_for(beta_av, log)
        if isinstance(lam, np.ndarray):
            self.last_lam_dec = lam.copy()
            return self._decoders.get(
                (sorted_idx.tobytes(), lam.tobytes()),
                lambda: DenseOperator(spline_decoder_matrix(beta_av, self.alpha, lam)))
        if lam is None:
            if Y_sorted is None:
                raise ValueError("lam_dec is chosen by GCV from the outputs: pass Y")
            lam = select_lam_gcv(beta_av, np.ones(beta_av.shape[0]), to_host_2d(Y_sorted))
            self.last_lam_dec = lam
            return SplineSmoother(beta_av, self.alpha, lam=lam)
        self.last_lam_dec = lam
        return self._decoders.get((sorted_idx.tobytes(), lam),
                                  lambda: SplineSmoother(beta_av, self.alpha, lam=lam))

    def _build_set_keyed(self, sorted_idx: np.ndarray, log: bool = False):
        """(plan, lam) for the built-in policy on this answering set: the same
        operators as the general path, without re-checking what the policy
        and the code's own nodes guarantee. lam is read-only (it is handed
        out again on every decode of this set)."""
        beta_av = self.beta[sorted_idx]
        lam = 0.0  # fewer than three nodes: the rule's lam (lam changes nothing)
        if beta_av.shape[0] >= 3:
            # the rule's lams and the rows in one compiled call (the rule's
            # own numpy arithmetic, done there bit for bit)
            c, end_factor = self._log_rule[1] if log else self._lam_dec_value
            lam, rows = local_gap_rows(beta_av, self.alpha, c, end_factor)
            lam.flags.writeable = False
            lams = lam.tolist()  # (min and max of a list of floats: a fifth of numpy's two reductions)
            if min(lams) != max(lams):
                return DenseOperator._from_checked(rows), lam
            lam = lams[0]  # one lam after all: the banded spline plan
        return SplineSmoother(beta_av, self.alpha, lam=lam), lam

    def decode(self, Y: Array, available: Indices, return_flagged: bool = False) -> Any:
        """Y (len(available), ...) outputs of workers `available` (any order) -> (K, ...).
        With ``return_flagged``: (estimates, flagged), flagged the sorted
        int64 worker indices judged wrong and left out (always empty with
        adversaries=0). The space it decodes in: ``last_output_space``."""
        avail = self._available(available)
        Y = self._outputs(Y, avail)
        if self._layout is not None:
            est = _sys.decode_letcc(self, Y, avail)
            return (est, np.zeros(0, dtype=np.int64)) if return_flagged else est
        if self.adversaries:
            return self._decode_robust(avail, Y, return_flagged)
        return self._decode_plain(avail, Y, return_flagged)

    def _decode_plain(self, avail: np.ndarray, Y, return_flagged: bool) -> Any:
        """decode() with adversaries=0 (checked avail and Y); also the robust
        decoder's last step, on the answers it keeps."""
        space = self._space
        if space != "linear":
            # Where the previous decode was in log space (a classifier's
            # rounds, one after the other) and the built-in rule's decoders:
            # the row order, the check, the log, the map and the softmax in
            # one compiled call (the log plan is looked up first; None back
            # means "not probability rows"). A decode of 10 classes is about
            # 5-8 us: the log space was to cost under 10% more.
            Z = False
            if self._set_keyed and type(Y) is np.ndarray and (space == "log" or self.last_output_space == "log"):
                order = avail.argsort(kind="stable")
                srt = avail[order]
                est = self._plan(srt, None, True)._apply_log(Y, space is None, PROB_SUM_TOL, LOG_FLOOR,
                                                             None if srt.tobytes() == avail.tobytes() else order)
                if est is not None and est is not False:
                    self.last_output_space = "log"
                    return (est, np.zeros(0, dtype=np.int64)) if return_flagged else est
                Z = est        # None: checked, not probability rows; False: not taken
            # Otherwise one compiled pass for numpy: the check ('auto': are
            # these probability rows?) and the log; None: decode Y as it is
            if Z is False and type(Y) is np.ndarray:
                Z = _core.log_prepare(Y, space is None, PROB_SUM_TOL, LOG_FLOOR)
            if Z is False or (Z is None and space == "log"):
                Z = log_or_none(Y, strict=space == "log")
            if Z is not None:
                est = self._decode_log(avail, Z)
                return (est, np.zeros(0, dtype=np.int64)) if return_flagged else est
        self.last_output_space = "linear"
        # only a stated local-gap rule gives dense decoders without looking at
        # Y (a fixed lam is a banded plan; GCV and other policies may need Y)
        est = self._decode_rows(avail, Y, self._plan, permutable=self._set_keyed)
        return (est, np.zeros(0, dtype=np.int64)) if return_flagged else est

    def _decode_log(self, avail: np.ndarray, Z, rows=None):
        """The estimates from the log outputs Z of the answers `avail` (rows:
        Z's row rows[i] is worker avail[i]'s, the others are left out)."""
        self.last_output_space = "log"
        est = self._decode_rows(avail, Z, self._plan_log, permutable=self._set_keyed, rows=rows)
        if not (type(est) is np.ndarray and _core.softmax_last_axis(est)):
            est = from_log(est)
        return est

    def _decode_robust(self, avail: np.ndarray, Y, return_flagged: bool):
        """decode() with adversaries > 0: the answers that cannot be right
        erased (valid), the clean-round test and the spline locator's
        erasures (letcc.codes.clean_round), then the plain decode of the
        answers kept: a round with nothing erased is decoded bit for bit as
        adversaries=0 decodes it."""
        self._clean_report = None
        space, n, E = self._space, avail.size, self.adversaries
        Z = prob = None
        if space is None or (space == "log" and self.valid is not None):
            # answer by answer, with the logs of those that pass; more than E
            # (valid=None: any) failures end the scan
            prob, Z = probability_answers_logged(Y, E if self.valid is not None else 0)
        log = space == "log"
        k = int(np.count_nonzero(prob)) if space is None and prob is not None else 0
        if k:
            # a classifier's round holds at most E answers that are not
            # probabilities; with valid=None nothing may be erased for it
            log = k == n or (self.valid is not None and k >= n - E)
        if log and Y.ndim < 2:
            raise ValueError("output_space='log' needs a class axis: Y must be (len(available), ..., classes), "
                             f"got shape {tuple(Y.shape)}")
        bad = None
        if self.valid not in (None, "auto"):
            bad = invalid_rows(Y, to_host_2d(Y), self.valid)
        if log and prob is not None and self.valid is not None and not prob.all():
            bad = ~prob if bad is None else bad | ~prob   # not a probability vector: wrong by construction
        invalid = np.zeros(0, dtype=np.int64)
        if bad is not None and bad.any():
            if bad.all():
                raise ValueError(f"every answer of this decode fails valid={self.valid!r}: nothing to decode")
            keep_rows = np.flatnonzero(~bad)
            invalid = np.sort(avail[bad])
            if log and Z is not None:        # the logs the check took, of the answers kept (decoded: Y is not)
                avail, Y, Z = avail[keep_rows], None, Z[keep_rows]
            else:
                avail, Y, Z = avail[keep_rows], take_rows(Y, keep_rows), None
        if log and Z is None:
            Z = log_or_none(Y, strict=True)
        # the plain decoder's map of a clean round, made in the locator's pass
        # where it can be: the log space's, or the linear one's where the
        # plain decoder decodes linearly (the check found a non-probability)
        fuse = self._plan_log if log else (self._plan if space == "linear" or prob is not None else None)
        avail, kept, flagged, decoded = self._erase_flagged(avail, Y, Z if log else None, max(E - invalid.size, 0),
                                                            fuse)
        if invalid.size:
            flagged = np.union1d(invalid, flagged)
        # the plain decoder's own steps on the answers kept (in log space on
        # the logs already taken: the same numbers as its fused pass)
        if decoded is not None:
            est = decoded.reshape(decoded.shape[:1] + (Z if log else Y).shape[1:])
            self.last_output_space = "log" if log else "linear"
            if log and not _core.softmax_last_axis(est):
                est = from_log(est)
        elif log:
            est = self._decode_log(avail, Z, rows=kept)
        elif kept is None and prob is not None:
            # the check found an answer that is not a probability vector: the
            # plain decoder's own check would too, and decode linearly
            self.last_output_space = "linear"
            est = self._decode_rows(avail, Y, self._plan, permutable=self._set_keyed)
        elif kept is None:
            est = self._decode_plain(avail, Y, False)
        else:
            # 'auto' with more than E answers that are not probabilities (the
            # check's scan, not log) and at most E erased: a row kept is one of
            # them, so the plain decoder decodes the rows kept linearly
            est = self._decode_kept(avail, Y, kept, linear=space is None and prob is not None and not invalid.size
                                    and self.valid is not None)
        return (est, flagged) if return_flagged else est

    def _decode_kept(self, avail: np.ndarray, Y, rows: np.ndarray, linear: bool = False):
        """_decode_plain of the rows `rows` of Y (row rows[i]: worker
        avail[i]), without copying them where the decode is known to be
        linear: output_space='linear', `linear` (the caller knows a row kept
        is not a probability vector), or 'auto' with a row kept that is not
        a probability vector (then the rows kept are not all probabilities,
        and the plain decoder decodes them linearly too)."""
        linear = linear or self._space == "linear"
        if (not linear and self._space is None and type(Y) is np.ndarray and Y.ndim >= 2
                and Y.flags.c_contiguous):
            r = int(rows[0])
            Z = _core.log_prepare(Y[r:r + 1], True, PROB_SUM_TOL, LOG_FLOOR)
            linear = Z is None or Z is False
        if linear:
            self.last_output_space = "linear"
            return self._decode_rows(avail, Y, self._plan, permutable=self._set_keyed, rows=rows)
        return self._decode_plain(avail, take_rows(Y, rows), False)

    _clean_report: tuple | None = None      # (srt, spline_locate's report) of the latest decode

    @property
    def last_clean_round(self) -> dict | None:      # type: ignore[override]
        # made when asked for: a decode only keeps the locator's report
        if self._clean_report is None:
            return None
        srt, report = self._clean_report
        out = {"worker": int(srt[report["top"]]), "statistic": report["statistic"], "threshold": report["threshold"]}
        if "pair_top" in report:
            out.update(pair=tuple(int(srt[k]) for k in report["pair_top"]), pair_statistic=report["pair_statistic"],
                       pair_threshold=report["pair_threshold"])
        return out

    def _locator_set(self, avail: np.ndarray):
        """(rows, srt, nodes, knots) of the answering set `avail` for the
        locator: rows the order that sorts avail (None: ascending), srt the
        sorted workers, their nodes and detection knots."""
        order = avail.argsort(kind="stable")
        srt = avail[order]
        for arr in (order, srt):
            arr.flags.writeable = False
        rows = None if srt.tobytes() == avail.tobytes() else order
        return rows, srt, self.beta[srt], self._knots[srt]

    def _erase_flagged(self, avail: np.ndarray, Y, Z, budget: int, fuse=None):
        """(avail', rows, flagged, decoded): the workers the spline locator
        keeps, their rows in Y (or Z) in that order (None: all, nothing
        erased), the sorted workers it erased, and, where nothing was erased
        and the decode was made in the locator's pass, its (K, m) result
        (else None). Z: Y's log when the locator scores the log space
        (probability answers; Y may be None), else None (it scores Y).
        fuse: the plan (_plan or _plan_log) whose map a clean round is
        decoded with: where its decoder is dense, avail ascending and the
        answers at least PASS_DECODE_MIN_BYTES, the locator's first pass
        applies it too (spline_locate's decode)."""
        if budget <= 0 or self.flag_threshold == np.inf:
            return avail, None, np.zeros(0, dtype=np.int64), None
        rows, srt, nodes, knots = self._locator_sets.get(avail.tobytes(), lambda: self._locator_set(avail))
        Dh = to_host_2d(Y if Z is None else Z)          # float32 or float64, scored in float64
        decode = None
        if (fuse is not None and rows is None and self._set_keyed and type(Y if Z is None else Z) is np.ndarray
                and Dh.nbytes >= PASS_DECODE_MIN_BYTES):
            # the decoder _decode_rows takes for an ascending set; dense: its sums run over the
            # answers in this order, as the pass has them
            op = fuse(srt, None)
            decode = op._op if isinstance(op, DenseOperator) else None
        # the caller's threshold, else the calibrated clean-round test, else
        # (false_alarm=None) E erasures in every round
        calibrated = self.flag_threshold is None and self._clean_test is not None
        space = "linear" if Z is None else "log"
        ratio, pair_ratio, later = self._clean_test.ratios_for(space) if calibrated else (None, None, None)
        report: dict = {}
        pos = spline_locate(nodes, Dh, budget, self._detection, self.flag_threshold,
                            knots=knots, ratio=ratio, report=report, rows=rows, pair_ratio=pair_ratio,
                            decode=decode, later_ratio=later)
        if report:
            # evidence for the caller to pool over rounds: where a wrong answer hides in
            # one round, the top-scored worker is still the same adversary more often
            self._clean_report = (srt, report)
        if pos.size == 0:
            return avail, None, np.zeros(0, dtype=np.int64), report.pop("decoded", None)
        flagged = srt[pos]
        flagged.sort()                                  # (in place: np.sort copies first)
        kept = report["kept"]
        keep_rows = kept if rows is None else np.sort(rows[kept])   # rows of Y kept, Y's order
        return avail[keep_rows], keep_rows, flagged, None

    def clean_round_threshold(self, n: int, space: str = "linear", pair: bool = False, later: bool = False) -> float:
        """The clean-round test's threshold on the round statistic for n
        answers scored in `space` ('linear', or 'log' for probability
        answers), calibrated now if it is not yet (letcc.codes.clean_round;
        about 0.5 s, 1.5 s with the pair test, then cached): call it ahead of
        serving for the answering-set sizes expected, to keep the
        calibration out of the first rounds. pair: the pair test's
        threshold instead (adversaries >= 2; inf where no pair is tested:
        adversaries < 2 or n < 5); later: the threshold of the tests after a
        round's first erasure, for n answers kept (false_alarm times
        clean_round.LATER_FACTOR); all are calibrated by any call."""
        test = self._calibrated_test()
        n = as_int(n, "n", 4, self.N)
        if space not in ("linear", "log"):
            raise ValueError(f"space must be 'linear' or 'log', got {space!r}")
        if pair and later:
            raise ValueError("pair and later name different thresholds: ask for one at a time")
        t = test.thresholds(n, space)
        return t.pair if pair else t.later if later else t.single

    def _calibrated_test(self) -> CleanRoundTest:
        if self._clean_test is None:
            raise ValueError("this code has no clean-round test (false_alarm=None)")
        return self._clean_test

    def calibrate_clean_round(self, outputs, sizes=None, sets: int = 64, seed: int = 0, space: str | None = None):
        """Calibrate the clean-round test on the model's own honest rounds,
        in place of the synthetic rounds (letcc.codes.clean_round), for the
        answering-set sizes given; returns {n: clean_round.Thresholds} of
        every size calibrated.

        outputs: (N, rounds, ...) float, every worker's honest answer in each
        of `rounds` rounds of this code (what ``letcc.evaluate.coded_outputs``
        gives; rounds the decoder will not see, or the test's false-alarm
        rate on them is optimistic). Each round is scored from `sets`
        answering sets of each size drawn uniformly (seeded by `seed`), and
        the thresholds are the same quantiles of the round statistic the
        synthetic calibration takes, so rounds x sets must reach
        20 / false_alarm (20 / (false_alarm / 2) with the pair test); the
        statistic depends on the answering set too, so many sets matter (in
        tests/test_clean_round.py 300 rounds x 20 sets gave fresh rounds
        1.9x the stated rate, x 100 sets 1.15x). sizes: the answering-set
        sizes (an int or several; default: max(K, adversaries + 4) .. N),
        each with the sizes a round of it reaches after erasures, n - 1 ..
        n - adversaries (at least 4), whose thresholds its later tests take;
        every size is checked before any is computed, and all are installed
        at the end, so a call that raises changes nothing. space:
        'linear' or 'log', the space the decoder scores such rounds in
        (None: 'log' where outputs are probability vectors and the code's
        output_space allows it, else 'linear'). Use it where the synthetic
        family does not fit the model: bench/results/adversarial.md has a
        held-out classifier whose honest rounds raised an alarm in 1.6% of
        them at the synthetic threshold for 0.1%."""
        test = self._calibrated_test()
        shape = tuple(outputs.shape) if hasattr(outputs, "shape") else np.shape(outputs)
        if len(shape) < 2 or shape[0] != self.N or 0 in shape:
            raise ValueError(f"outputs must be (N, rounds, ...) with N = {self.N} workers and at least one round "
                             f"and output, got shape {shape}")
        Y = to_host_2d(outputs, "outputs").reshape(shape)
        if not np.isfinite(Y).all():
            bad = np.argwhere(~np.isfinite(Y))[0]
            raise ValueError(f"outputs must be finite (honest rounds), got {Y[tuple(bad)]} at {tuple(int(i) for i in bad)}")
        sets = as_int(sets, "sets", 1, 1 << 20)
        if space is None:
            space = "log" if self._space in (None, "log") and is_probability_rows(Y) else "linear"
        if space not in ("linear", "log"):
            raise ValueError(f"space must be None, 'linear' or 'log', got {space!r}")
        if space == "log" and not is_probability_rows(Y):
            raise ValueError("space='log' needs probability vectors along outputs' last axis (>= 0, summing to 1)")
        if sizes is None:
            sizes = range(max(self.K, self.adversaries + 4), self.N + 1)
        elif isinstance(sizes, numbers.Integral) and not isinstance(sizes, bool):
            sizes = [sizes]
        given = {as_int(n, "sizes", 4, self.N) for n in sizes}
        # with the sizes the rounds of each reach after erasures (their later tests' thresholds)
        sizes = sorted({k for n in given for k in range(max(4, n - self.adversaries), n + 1)})
        R = Y.shape[1]
        pairs_at = {n: test.pairs and n >= PAIR_MIN_ANSWERS for n in sizes}
        need = statistics_needed(PAIR_SHARE * test.false_alarm if any(pairs_at.values()) else test.false_alarm)
        if R * sets < need:
            raise ValueError(f"{R} rounds x {sets} sets = {R * sets} statistics per size; the quantiles at "
                             f"false_alarm={test.false_alarm:g} need at least {need}: give more rounds or sets")
        O = np.ascontiguousarray((to_log(Y) if space == "log" else Y).reshape(self.N, R, -1), dtype=np.float64)
        out = {}
        rng = np.random.default_rng(seed)
        for n in sizes:
            stats, stats2 = model_statistics(O, self.beta, n, sets, rng, self._detection, pairs_at[n])
            out[n] = thresholds_of(stats, stats2, test.false_alarm)
        for n, t in out.items():
            test.install(n, space, t)
        return out

    def can_decode(self, available) -> bool:
        return self._available(available, allow_empty=True).size > 0

    def _idle_decoder(self):
        # the plain decoder in the linear space (a systematic code's workers are tied to their nodes)
        return None if self._layout is not None else (lambda avail, Y: self._decode_rows(avail, Y, self._plan))

    @property
    def complete_needs_every_worker(self) -> bool:
        # every answer changes a non-systematic estimate; a systematic one is
        # exact once the K systematic workers answered
        return self._layout is None

    @property
    def linear_in_outputs(self) -> bool:
        # a fixed lam or a stated local-gap rule: a linear map fixed by the set.
        # GCV looks at the outputs; any other policy may answer None (GCV) for a set.
        # the robust decoder looks at the outputs (which answers to erase).
        # the log space's transforms are not linear, and 'auto' looks at the
        # outputs to choose the space: only 'linear' (or 'auto' with
        # adversaries, which decodes linearly) can be a linear map.
        return self._lam_dec_kind in ("fixed", "local_gap") and not self.adversaries and self._space == "linear"

    def is_complete(self, available) -> bool:
        avail = self._available(available, allow_empty=True)
        if self._layout is not None:
            return self._layout.split(avail)[1].size == 0   # every estimate exact
        return avail.size == self.N

    def _check_systematic_args(self, lam_enc, lam_dec) -> None:
        if self.adversaries:
            raise ValueError(f"systematic=True is not combined with adversaries={self.adversaries}")
        if not (isinstance(lam_enc, str) and lam_enc == "auto") and resolve_lam_enc(lam_enc, lam_dec, self.K,
                                                                                   self.N) != 0.0:
            raise ValueError(f"systematic=True needs lam_enc = 0 (the encoder interpolates the inputs), "
                             f"got lam_enc={lam_enc!r}")
        if lam_dec is None or (isinstance(lam_dec, str) and lam_dec == "gcv"):
            raise ValueError(f"systematic=True has no GCV decoder: pass lam_dec='auto', a number or a "
                             f"policy, got lam_dec={lam_dec!r}")

    def __repr__(self) -> str:
        adv = f", adversaries={self.adversaries}" if self.adversaries else ""
        space = f", output_space={self.output_space!r}" if self.output_space != "auto" else ""
        sys_ = ", systematic=True" if self._layout is not None else ""
        return (f"LeTCC(K={self.K}, N={self.N}, lam_enc={self.lam_enc!r}, lam_dec={self.lam_dec!r}"
                f"{adv}{space}{sys_})")
