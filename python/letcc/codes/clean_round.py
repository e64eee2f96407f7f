"""The clean-round test in front of LeTCC's spline locator (issue 28).

``LeTCC(K, N, adversaries=E)`` erases an answer only when the round gives
evidence that it holds a wrong one, as a Reed-Solomon decoder checks the
syndrome before it corrects. The locator (letcc.codes.robust.spline_locate)
scores every answer (s_i: the smaller of its leave-one-out residual and its
disagreement with its nearest answers) and the round by

    T = max_i s_i / median_i loo_i          (robust.round_statistic)

T is free of the outputs' scale, of a constant added to every answer and of
a rotation of the output space; what it still depends on is how smooth the
coded outputs are along the worker nodes, which the code itself fixes: the
workers evaluate f on the encoder's spline through K inputs, so between two
input nodes f is seen along a short smooth curve, whatever f is. The test
is sequential: while T exceeds the threshold for the number of answers
left, the top-scored answer is erased and the rest rescored (at most E
erasures, at least 3 answers kept; an answer with no answering neighbour
within 2.5 typical gaps is never erased by the test, robust.erasable: its
residual is an extrapolation and the decode leans on it); a round whose first T is below the
threshold keeps every answer and is decoded by the plain decoder, bit for
bit.

Calibration. The threshold for n answers is the (1 - false_alarm) quantile
of T over honest synthetic rounds made with the code's own encoder: K
inputs drawn N(0, 1) in 8 dimensions, encoded (the code's alpha, beta,
lam_enc), pushed through a random smooth network f(x) = W tanh(g V x + b)
(16 hidden units, 10 outputs, g log-uniform in [0.3, 3] from nearly linear to
strongly bent), and the answering set drawn uniformly among the sets of n
workers. For a decode in log space (probability answers) the round's
outputs are log_softmax(c f(x)), c log-uniform in [1, 30] (soft to
saturated classifiers), scored in the log space as the decoder scores them.
``max(4000, 20 / false_alarm)`` rounds (20 exceedances expected above the
quantile), 64 answering sets, a fixed seed: deterministic, about 0.5 s
(the default false_alarm, a 2-core machine) once per (code nodes, lam_enc,
n, space, false_alarm) and process, cached
here (``CALIBRATIONS``), shared by every code with the same nodes.

With adversaries >= 2 the locator also tests adjacent pairs (the pair
stage, letcc.codes.robust): the pair statistic T2 = max pair score /
median loo gets its own threshold, the (1 - PAIR_SHARE * false_alarm)
quantile of T2 over the same rounds and more of the same family, up to
``20 / (PAIR_SHARE * false_alarm)`` (a second stream of the seed, so the
single test's threshold is the same number with or without pairs). A
code with adversaries >= 2 thus erases an honest answer in at most
(1 + PAIR_SHARE) false_alarm of the synthetic honest rounds (a union
bound; the two tests fire on partly the same rounds), about 1.5 s per
(n, space) at the default rate.

Later steps. Once a round's first test has fired with a statistic at
least twice its threshold, the round is attacked, and the tests after its
first erasure (the steps that follow, the swap and gap steps' rests) use
the (1 - LATER_FACTOR * false_alarm) quantile of the same rounds' T: a
looser threshold, so a second, weaker wrong answer is less often left in,
at the price of an honest answer erased beside a lone liar in up to
LATER_FACTOR * false_alarm of the rounds that have one (a code with
adversaries >= 2; with adversaries = 1 the budget ends at the first
erasure). Clean rounds keep their rate: a false alarm is a statistic just
above the threshold, which keeps the first step's threshold for the rest
of its round (csrc/driver/locate.hpp, kLaterEvidence).

Why it transfers, and where it does not: a real model is seen through the
same encoder at the same nodes, so the curve each worker evaluates has the
geometry the synthetic rounds have; what differs is how sharply f bends
along it. bench/results/adversarial.md measures the false-alarm rate of this
threshold on the real models' honest rounds, and what it costs.
"""
from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from letcc.codes._plan_cache import PlanCache
from letcc.codes.robust import PAIR_MIN_ANSWERS, DetectionSplines, detection_knots, locator_scores, round_statistic

__all__ = ["FALSE_ALARM", "check_false_alarm", "calibrate", "calibration_rounds", "synthetic_outputs",
           "synthetic_network", "CleanRoundTest", "CALIBRATIONS", "PAIR_SHARE", "LATER_FACTOR", "Thresholds",
           "thresholds_of", "model_statistics", "statistics_needed"]

# the default false-alarm rate per honest round: a clean round of a code with
# adversaries > 0 keeps all its answers with probability 1 - FALSE_ALARM
FALSE_ALARM = 1e-3
# rates calibrate() can estimate: below 1e-4 the synthetic rounds needed
# (20 / rate) take more than a few seconds; above 0.5 "false alarm" means
# erasing in most clean rounds
MIN_FALSE_ALARM, MAX_FALSE_ALARM = 1e-4, 0.5
MIN_ROUNDS = 4000
EXCEEDANCES = 20
SETS = 64
SEED = 28
# the pair test's false-alarm rate, as a share of false_alarm (the single
# test keeps false_alarm): a code with adversaries >= 2 erases in at most
# (1 + PAIR_SHARE) false_alarm of the synthetic honest rounds
PAIR_SHARE = 0.5
# the tests after the first erasure of a round whose first statistic was at
# least twice its threshold (it is attacked; csrc/driver/locate.hpp,
# kLaterEvidence) are at LATER_FACTOR times false_alarm: a second wrong
# answer is then likelier than an honest false alarm. Measured on
# bench/adversarial.py's smooth f (N = 24, S = 2, 1600 rounds each,
# adversaries = 2), first without the evidence rule: with 3, MSE at E = 2
# -3 to -22% (gaussian -22%, relabel -11%, shift -9%, sign-flip -7%), and
# with one liar +1 to +3% (an honest answer erased beside it in 0.1-0.3%
# more rounds); with 10, -7 to -27% at E = 2 but +12 to +13% with one liar.
# With the rule (what runs), 1-6% off the E = 2 MSE (pair_stage.md) and
# clean rounds unchanged (adversarial.md).
LATER_FACTOR = 3.0
DIM_IN, HIDDEN, DIM_OUT = 8, 16, 10
BEND = (0.3, 3.0)          # g: the network's input gain (how far tanh bends)
SHARPNESS = (1.0, 30.0)    # c: the classifier's logit scale (log space only)

# (alpha, beta, lam_enc, false_alarm, n, space[, "pairs"]) -> Thresholds
CALIBRATIONS = PlanCache(256)


class Thresholds(NamedTuple):
    """One calibration's thresholds (calibrate) for n answers."""
    single: float       # on T, the first step's test: the (1 - false_alarm) quantile
    pair: float         # on T2, the pair test (inf without pairs)
    later: float        # on T, the tests after the first erasure (LATER_FACTOR x false_alarm)


def check_false_alarm(false_alarm) -> float:
    """false_alarm as a float in [MIN_FALSE_ALARM, MAX_FALSE_ALARM];
    TypeError / ValueError naming the value."""
    if isinstance(false_alarm, (bool, np.bool_)) or not isinstance(false_alarm, numbers.Real):
        raise TypeError(f"false_alarm must be a real number (the rate of clean rounds in which an honest "
                        f"answer is erased), got {type(false_alarm).__name__} {false_alarm!r}")
    fa = float(false_alarm)
    if not (MIN_FALSE_ALARM <= fa <= MAX_FALSE_ALARM):
        raise ValueError(f"false_alarm must be in [{MIN_FALSE_ALARM:g}, {MAX_FALSE_ALARM:g}] (a rate per clean "
                         f"round the calibration can estimate), got {false_alarm!r}")
    return fa


def statistics_needed(rate: float) -> int:
    """Honest rounds' statistics behind a quantile at 1 - rate (EXCEEDANCES above it)."""
    return int(np.ceil(EXCEEDANCES / rate))


def calibration_rounds(false_alarm: float) -> int:
    """Synthetic honest rounds behind one threshold."""
    return max(MIN_ROUNDS, statistics_needed(false_alarm))


def _log_uniform(rng, lo_hi, size):
    lo, hi = np.log(lo_hi[0]), np.log(lo_hi[1])
    return np.exp(rng.uniform(lo, hi, size))


def synthetic_network(rng: np.random.Generator, rounds: int, space: str = "linear"):
    """A random smooth network per round (the module docstring): a function
    U (P, rounds, DIM_IN) -> (P, rounds, DIM_OUT) float64, round r's network
    applied to U[:, r] ('linear': f's outputs; 'log': log_softmax(c f))."""
    g = _log_uniform(rng, BEND, rounds)
    V = rng.standard_normal((rounds, HIDDEN, DIM_IN)) * (g / np.sqrt(DIM_IN))[:, None, None]
    b = rng.standard_normal((rounds, HIDDEN))
    W = rng.standard_normal((rounds, DIM_OUT, HIDDEN)) / np.sqrt(HIDDEN)
    c = _log_uniform(rng, SHARPNESS, rounds) if space == "log" else None

    def f(U):
        H = np.tanh(np.einsum("rhd,nrd->nrh", V, np.asarray(U, dtype=np.float64)) + b[None])
        O = np.einsum("roh,nrh->nro", W, H)
        if c is not None:
            O *= c[None, :, None]
            O -= O.max(axis=-1, keepdims=True)
            O -= np.log(np.exp(O).sum(axis=-1, keepdims=True))
        return O
    return f


def synthetic_outputs(encoder, K: int, rounds: int, space: str, rng: np.random.Generator) -> np.ndarray:
    """(N, rounds, DIM_OUT) float64: every worker's answer in `rounds` honest
    synthetic rounds through `encoder` (a (K,) -> (N,) SplineSmoother), in
    the space the decoder scores them ('linear': f's outputs; 'log':
    log_softmax(c f))."""
    X = rng.standard_normal((K, rounds, DIM_IN))
    return synthetic_network(rng, rounds, space)(encoder(X))


def calibrate(encoder, beta: np.ndarray, K: int, n: int, space: str, false_alarm: float,
              splines: DetectionSplines | None = None, seed: int = SEED, pairs: bool = False):
    """The Thresholds for answering sets of n workers: ``single``, the (1 -
    false_alarm) quantile of T over calibration_rounds(false_alarm) honest
    synthetic rounds (see the module docstring), and ``later``, the (1 -
    LATER_FACTOR * false_alarm) quantile of the same rounds' T (at most
    MAX_FALSE_ALARM). Deterministic for a seed.

    pairs: ``pair``, the threshold on the pair statistic T2: T2's (1 -
    PAIR_SHARE * false_alarm) quantile over those rounds and more, up to
    calibration_rounds(PAIR_SHARE * false_alarm) (the single threshold is
    the same number with or without pairs); without pairs, inf."""
    N = beta.shape[0]
    splines = DetectionSplines() if splines is None else splines
    key = [seed, K, N, n, space == "log"]
    rounds = calibration_rounds(false_alarm)
    stats, stats2 = _honest_statistics(encoder, beta, K, n, space, rounds, np.random.default_rng(key), splines, pairs)
    if pairs:
        more = calibration_rounds(PAIR_SHARE * false_alarm) - rounds
        if more > 0:
            stats2 = np.concatenate((stats2, _honest_statistics(encoder, beta, K, n, space, more,
                                                                np.random.default_rng(key + [1]), splines, True)[1]))
    return thresholds_of(stats, stats2, false_alarm)


def thresholds_of(stats: np.ndarray, stats2: np.ndarray | None, false_alarm: float) -> Thresholds:
    """The Thresholds of honest rounds' statistics T (and T2, None without
    pairs): their (1 - false_alarm), (1 - PAIR_SHARE false_alarm) and
    (1 - LATER_FACTOR false_alarm) quantiles (the higher order statistic)."""
    single = float(np.quantile(stats, 1.0 - false_alarm, method="higher"))
    later = float(np.quantile(stats, 1.0 - min(LATER_FACTOR * false_alarm, MAX_FALSE_ALARM), method="higher"))
    pair = np.inf if stats2 is None else float(np.quantile(stats2, 1.0 - PAIR_SHARE * false_alarm, method="higher"))
    return Thresholds(single, pair, later)


def _honest_statistics(encoder, beta, K, n, space, rounds, rng, splines, pairs):
    """(T, T2) of `rounds` honest synthetic rounds, SETS answering sets of n
    (T2 None without pairs), scored as spline_locate's test scores them."""
    N = beta.shape[0]
    O = synthetic_outputs(encoder, K, rounds, space, rng)
    knots = detection_knots(beta)
    stats = np.empty(rounds)
    stats2 = np.empty(rounds) if pairs else None
    per_set = -(-rounds // SETS)
    for j in range(SETS):
        lo, hi = j * per_set, min((j + 1) * per_set, rounds)
        if lo >= hi:
            break
        avail = np.sort(rng.choice(N, n, replace=False))
        _score_rounds(splines, knots[avail], O[avail, lo:hi], stats[lo:hi],
                      None if stats2 is None else stats2[lo:hi])
    return stats, stats2


def _score_rounds(splines, t, O, stats, stats2) -> None:
    """T (and T2 where stats2 is given) of each round of O (n, rounds, m),
    the answers at the detection knots t, into stats (stats2)."""
    Os = np.ascontiguousarray(O.transpose(1, 0, 2))       # (rounds, n, m)
    for r in range(Os.shape[0]):
        if stats2 is not None:
            s, loo, p = locator_scores(splines, t, Os[r], tested=True, pairs=True)
            stats2[r] = round_statistic(p, loo)
        else:
            s, loo = locator_scores(splines, t, Os[r], tested=True)
        stats[r] = round_statistic(s, loo)


def model_statistics(outputs: np.ndarray, beta: np.ndarray, n: int, sets: int, rng: np.random.Generator,
                     splines: DetectionSplines, pairs: bool):
    """(T, T2) of a model's honest rounds: outputs (N, rounds, m), every
    worker's answer in the space the decoder scores, each round decoded from
    `sets` answering sets of n drawn uniformly (rounds x sets statistics;
    T2 None without pairs)."""
    N, R = outputs.shape[:2]
    knots = detection_knots(beta)
    stats = np.empty((sets, R))
    stats2 = np.empty((sets, R)) if pairs else None
    for j in range(sets):
        avail = np.sort(rng.choice(N, n, replace=False))
        _score_rounds(splines, knots[avail], outputs[avail], stats[j], None if stats2 is None else stats2[j])
    return stats.ravel(), (None if stats2 is None else stats2.ravel())


class CleanRoundTest:
    """One code's clean-round thresholds, per (answers n, space), from the
    process-wide CALIBRATIONS. pairs (a code with adversaries >= 2): the
    pair test's thresholds too, from the same rounds (calibrate)."""

    def __init__(self, alpha: np.ndarray, beta: np.ndarray, lam_enc: float, encoder, false_alarm: float,
                 splines: DetectionSplines, pairs: bool = False):
        self.false_alarm, self.pairs = false_alarm, bool(pairs)
        self._key = (alpha.tobytes(), beta.tobytes(), float(lam_enc), false_alarm)
        self._alpha, self._beta, self._encoder, self._splines = alpha, beta, encoder, splines
        self._held: dict = {}       # (n, space, pairs) -> thresholds: a dict lookup per decode (0.1 us, not 1.3)
        self._installed: dict = {}  # (n, space) -> Thresholds from the model's own honest rounds (install)
        self._lookups: dict = {}    # (space, which, pairs) -> the locate's threshold function (_lookup)

    def thresholds(self, n: int, space: str) -> Thresholds:
        """The Thresholds for n answers decoded in `space` ('linear' or
        'log'), calibrated on first use (pair: inf without pairs or with
        fewer than PAIR_MIN_ANSWERS answers)."""
        pairs = self.pairs and n >= PAIR_MIN_ANSWERS
        held = self._held.get((n, space, pairs))
        if held is None and (n, space) in self._installed:
            held = self._held[(n, space, pairs)] = self._installed[(n, space)]
        if held is None:
            held = self._held[(n, space, pairs)] = CALIBRATIONS.get(
                self._key + (int(n), space) + (("pairs",) if pairs else ()), lambda: calibrate(
                    self._encoder, self._beta, self._alpha.shape[0], int(n), space, self.false_alarm,
                    self._splines, pairs=pairs))
        return held

    def install(self, n: int, space: str, thresholds: Thresholds) -> None:
        """Use `thresholds` for n answers in `space` from now on, in place of
        the synthetic calibration's (LeTCC.calibrate_clean_round: from the
        model's own honest rounds)."""
        self._installed[(int(n), space)] = thresholds
        for key in [k for k in self._held if k[:2] == (int(n), space)]:
            del self._held[key]
        self._lookups.clear()           # their sizes known: asked again

    def threshold(self, n: int, space: str) -> float:
        """The threshold on T (the first step's single test) for n answers in `space`."""
        return self.thresholds(n, space).single

    def pair_threshold(self, n: int, space: str) -> float:
        """The threshold on the pair statistic T2 for n answers in `space`
        (inf where there is no pair test: adversaries < 2, n < 5)."""
        return self.thresholds(n, space).pair

    def later_threshold(self, n: int, space: str) -> float:
        """The threshold on T of the tests after a round's first erasure
        (LATER_FACTOR x false_alarm) for n answers kept in `space`."""
        return self.thresholds(n, space).later

    def ratios_for(self, space: str):
        """(ratio, pair_ratio, later_ratio): n -> threshold(n, space),
        pair_threshold (None without pairs) and later_threshold, what
        robust.spline_locate takes, in one lookup."""
        return (self._lookup(space, "single"), self._lookup(space, "pair") if self.pairs else None,
                self._lookup(space, "later"))

    def _lookup(self, space: str, which: str):
        """One function per (space, which field of Thresholds) that the
        locate calls for each size it reaches: a dict lookup once a size is
        known (the compiled locate calls it 2-4 times a round; through
        threshold() each call was four Python frames)."""
        key = (space, which, self.pairs)
        fn = self._lookups.get(key)
        if fn is None:
            known: dict = {}
            thresholds = self.thresholds

            def fn(n: int) -> float:
                v = known.get(n)
                if v is None:
                    v = known[n] = getattr(thresholds(n, space), which)
                return v

            self._lookups[key] = fn
        return fn
