"""Decoding that survives wrong answers: the two locators the codes use with
``adversaries=E``.

Spline locator (LeTCC's robust decoder), O(n m) per step, at most E + 1 steps
-----------------------------------------------------------------------------
For the answering nodes b_1 < ... < b_n and outputs Y (n, m), a *detection*
smoothing spline with lam = letcc.splines.gcv.lam_scale(b) (the lam at which
the Reinsch system's roughness penalty and data term weigh the same: about
h^3 / 9 for spacing h, a local smoother of bandwidth ~ h) has hat matrix H.
Its leave-one-out residuals are exact for a smoothing spline:

    y_i - g^(-i)(b_i) = (y_i - (H y)_i) / (1 - H_ii)

(g^(-i): the same spline fitted without point i; Green & Silverman 3.2).
Worker i's score is the smaller of two disagreements:

    loo_i  = sum_j (Y_ij - (H Y)_ij)^2 / (1 - H_ii)^2    (the spline through the others)
    nn_i   = min ||y_i - y_k||^2 over the 2 nearest answers k on either side
    side_i = min over the two sides of the larger ||y_i - y_k||^2 of that side's 2 answers
    s_i    = min(loo_i, max(nn_i, side_i / 4))

An answer is suspect only when neither the spline through the other
answers nor its nearest answers agree with it; the side term keeps two
wrong answers side by side (colluders) from vouching for each other: each
has one agreeing neighbour, not a whole side (the factor 1/4 = (1/2)^2 lets
the farther answer of a side lie twice as far as the nearest; it was the
one value tried, on the same three models the bench reports). Classifiers' coded
outputs change class every few nodes (bench/results/adversarial.md): an
honest answer at a class change has a large loo_i (the spline cannot follow
the jump) but agrees with the answers on its side of the change; a wrong
one agrees with neither. On LeNet-5, RepVGG-A0 and the ViT at N = 24,
S = 2, E = 2 (same draws) nn raised the locator's recall from 0.69-0.86
with loo alone to 0.73-0.99 on the sign-flip, noise, shift, bounded and
colluding adversaries, and from 0.47-0.59 to 0.51-0.71 on RelabelClasses;
the side term then raised colluding from 0.78-0.80 to 0.85-0.89 and
shift(+1) from 0.89 to 0.98, the others within +-0.02 (through the bench,
the locator alone: MSE -40 to -46% on shift, -6 to -16% colluding, -2 to
-3% sign-flip, +0.1 to +1% relabel). Its price is on clean rounds, where E
erasures are spent anyway: they hit more informative honest answers (+10
to +160% MSE against nn alone, bench/results/adversarial.md's E = 0 rows).

The locator takes the worker with the largest score, erases it, rescores
the rest and repeats, E times (one at a time: two wrong answers side by side
mask each other in a single pass), leaving at least 3 answers. The first
scoring is one compiled pass over the answers (letcc._core.locator_scores,
csrc/locator.hpp: the formulas' one home; csrc/driver/locator.hpp): the
detection spline's residuals from its banded Reinsch factors (no n x n
operator), their row sums and the distances to the next two answers, O(n m)
and deterministic. Every later step scores the answers kept with the same
lam, the round's detection spline fitted to them alone, without another
such pass (locator_rescored, csrc/locator_rescore.hpp): by the identity
behind loo_i, the residuals of that fit are r_K + H_KE (I - H_EE)^-1 r_E
for the erased answers E, so its sums follow from the first pass's and the
erased answers' residual cross products r_j . r_e, which one pass of two
multiply-adds an element per erased answer forms (a scoring pass makes ~15;
bench/results/robust_decode.md). Exact but for rounding (within ~1e-6 of
the largest score against dense refits; where the identity would lose more,
an answer kept nearly alone between erased ones, the answers kept get a
pass of their own with the same lam). The steps themselves, tests and
erasures, run in one compiled call (letcc._core.spline_locate,
csrc/driver/locate.hpp; in Python they cost more than the passes at m =
1000). The detection spline, its hat matrix,
1 - H_ii and which answers a test may erase are cached per answering set
(DetectionSplines). The answers kept are then decoded in place where the
decoder is dense (zero columns for the erased rows, no copy).

Pair stage (``pair_ratio``; LeTCC with adversaries >= 2). Two wrong
answers on adjacent nodes vouch for each other: each one's nearest answer
agrees with it, and the spline through the others is pulled towards both
by the other one, so neither single score stands out (measured before this
stage, the smooth f of bench/adversarial.py at E = 2: adjacent pairs were
9% of the rounds, caught 33% of the time, and carried more than half of
the MSE). The same pass also adds up the adjacent residuals' dot products
r_i . r_{i+1}, and with them each adjacent pair P = {i, i + 1} gets

    e_P  = (I - H_PP)^-1 r_P          the leave-two-out residuals (exact for a
                                      smoothing spline, as loo_i is: the spline
                                      through the other n - 2 answers)
    p_i  = min(||e_P,i||^2, ||e_P,i+1||^2, out_i, out_{i+1})

out_i, out_{i+1} being each member's smallest squared distance to the 2
answers on its outer side. p_i is large only when both members disagree
with the spline through the rest and with their outer neighbours: a
wrong answer next to an honest one scores low (the honest one agrees with
its outer side), so one liar never spends the budget on a pair. A step
with 2 or more erasures left tests max p / median loo against its own
calibrated threshold and erases the pair when it fires, unless the single
test fires too with its top answer inside that pair (erased alone; the
rescoring then exposes a wrong partner) or with the larger excess over its
threshold. A test erases a pair only with an answer on either side of it
and a hole, from the answer before to the answer after, of at most
3.5 typical gaps (``pair_erasable``): two missing nodes side
by side cost the decode far more than one (up to 530x the full decode's
MSE on LeTCC(8, 24), letcc.codes.idle_nodes), more so beside a straggler
or at an end. Where it fires it erases the top pair or an erasable pair
one apart around it (j - 1, j + 1 or j, j + 2), whichever leaves the
answers kept the smaller round statistic (each rescored without a scoring
pass): two wrong answers with an honest one between them (wrong, honest,
wrong) make the pairs of each with the honest one score high too, and
erasing such a pair left a wrong answer in and the honest one out. A
clean round adds the dot products to its one pass and nothing else.

Swap step. Wrong, honest, wrong where the honest answer is the top single
score (its residual carries both wrong ones') sends it first, and the
budget runs out with a wrong answer kept. So a tested locate whose last
erasure left another answer above the threshold (in that step's scores)
ends by testing the answers kept once more: while they fail,
the top-scored one kept replaces the erased answer whose return leaves the
smallest statistic, if that rest passes (each candidate rescored without
a pass). It never runs on a round the test passes before
the budget is spent. On the smooth f at E = 2 it cut the MSE under attack
by 2-16% and the rounds with an honest answer erased by a fifth to a
half; one apart is still the costliest pattern (bench/results/pair_stage.md).

Gap step. Wrong, honest, wrong where the greedy steps took the honest
answer and an answer beside the pattern, or took the honest one alone and
stopped: the two wrong ones, now side by side among the answers kept,
vouch for each other. A locate of 7 answers or more whose first step
tested pairs and whose single test fired weighs, for each erased answer e
whose neighbours e - 1 and e + 1 both scored above half the first step's
threshold level (e erasable without them; either may be an end answer),
the pair {e - 1, e + 1} against the erasures made, and takes it where the
rest it leaves passes the single test with a statistic 4 times smaller and
the pair test on every pair (none masked: the holes the pair leaves would
otherwise hide two wrong answers side by side there). One pass of cross
products for all of them; csrc/driver/locate.hpp (kGapGate, kGapMargin)
says what was measured: on the smooth f at E = 2 the MSE fell 16-20% under
shift(+1) and 3-6% under colluding answers, and no round with one liar or
none changed.

Each step may first test the round (``ratio``): the top-scored answer is
erased only while round_statistic (the top score over the median loo score)
exceeds a threshold; LeTCC's default takes it calibrated at a stated
false-alarm rate (letcc.codes.clean_round), ``flag_threshold=t`` is the
caller's own (t^2), ``float('inf')`` never erases, and LeTCC's
``false_alarm=None`` erases E in every round, as ApproxIFER does. On the
classifiers' probability answers the honest rounds' statistic is as large as
a relabelled round's (bench/results/adversarial.md), so the test spares the
clean rounds and leaves the valid-but-wrong answers mostly unflagged.

Answers that cannot be right (``valid=``)
-----------------------------------------
``valid='simplex'`` (or a callable) rejects answers before the locator: for
a classifier every answer must be a probability vector, and the sign-flip,
noise, shift, bounded and colluding adversaries all leave the simplex, so
they are caught exactly (recall 100%, no honest answer erased). Rejected
answers are all erased and flagged; the locator erases at most E minus
their number more. Adversaries that return valid probability vectors
(letcc.adversaries.RelabelClasses) pass the check and are left to the
locator.

Berlekamp-Welch locator (ApproxIFER's, for BACC), O(m n (2K + 2E)^2)
--------------------------------------------------------------------
Berrut's interpolant through K points is a rational function p/q with
deg p, deg q <= K - 1. With E wrong answers among n, the error locator
Lambda (degree E, zero at the wrong nodes) gives polynomials P = p Lambda and
Q = q Lambda of degree <= K + E - 1 with P(z_i) = y_i Q(z_i) at every
answering node. Fixing Q's constant coefficient to 1, the unknowns are the
K + E coefficients of P and K + E - 1 of Q: per output coordinate j, the
linear system

    sum_a P_a z_i^a - y_ij sum_{a>=1} Q_a z_i^a = y_ij,      i = 1..n,

needs n >= 2K + 2E - 1 answers (N = 2K + S + 2E - 1 workers for S
stragglers, ApproxIFER's setting), solved in least squares when n is larger.
In coordinate j the E nodes with the smallest |Q_j(z_i)| are the suspects;
every coordinate votes, and the E workers with the most votes (ties: the
smaller summed |Q| rank) are flagged, dropped, and the rest Berrut-decoded.
"""
from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from letcc import _core
from letcc.codes._plan_cache import PlanCache
from letcc.splines import SplineSmoother
from letcc.splines.gcv import lam_scale

__all__ = ["check_adversaries", "check_valid", "invalid_rows", "DetectionSpline", "DetectionSplines", "erasable",
           "locator_scores", "locator_rescored",
           "PAIR_MIN_ANSWERS", "pair_erasable", "round_statistic", "spline_locate", "bw_needed",
           "bw_locator_values", "bw_locate"]


# lam of the detection spline, in units of lam_scale (the Reinsch balance point)
DETECTION_LAM_FACTOR = 1.0

# answers a step needs to test pairs: a pair erased leaves at least 3 (csrc/driver/locate.hpp)
PAIR_MIN_ANSWERS = int(_core.PAIR_MIN_ANSWERS)


class AdversariesTypeError(TypeError, ValueError):
    """adversaries= of the wrong kind: a TypeError (letcc's convention for the
    wrong kind) that is also a ValueError (a bad adversaries value)."""


def check_adversaries(E, N: int, maximum: int, why: str) -> int:
    """E as an int in [0, max(maximum, 0)]; ValueError naming the value (and
    `why` when it is too large)."""
    if isinstance(E, (bool, np.bool_)) or not isinstance(E, numbers.Integral):
        raise AdversariesTypeError(f"adversaries must be a non-negative integer (wrong answers per decode), "
                                   f"got {type(E).__name__} {E!r}")
    E_int = int(E)
    if E_int < 0:
        raise ValueError(f"adversaries must be >= 0, got {E!r}")
    if E_int > max(maximum, 0):
        raise ValueError(f"adversaries = {E!r} is too many for N = {N} workers: at most {max(maximum, 0)} ({why})")
    return E_int


class DetectionSpline(NamedTuple):
    """The detection spline of one answering set (DetectionSplines.get); all read-only."""
    plan: object                    # letcc._core.Plan at the knots (locator_scores)
    one_minus_diag: np.ndarray      # 1 - H_ii (n,)
    not_erasable: np.ndarray | None  # ~erasable(knots) (n,); None where every answer is erasable
    pair_inv: np.ndarray            # (I - H_PP)^-1 of pair i = answers i, i + 1, row-major, 4 (n - 1)
    pair_not_erasable: np.ndarray   # ~pair_erasable(knots) (n - 1,)
    hat: np.ndarray                 # H (n, n): for the rescoring after an erasure
    lam: float


class DetectionSplines:
    """Per answering set (its ascending detection knots, detection_knots):
    its DetectionSpline, cached; and, for the knots kept after erasures,
    the masks alone (``masks``)."""

    def __init__(self, maxsize: int = 128):
        self._cache = PlanCache(maxsize)
        self._masks = PlanCache(maxsize)

    def get(self, knots: np.ndarray, lam: float | None = None) -> DetectionSpline:
        """The DetectionSpline at the ascending `knots` (n), with lam =
        DETECTION_LAM_FACTOR * lam_scale(knots) or the `lam` given (the
        answers kept after erasures, scored with their round's spline)."""
        key = knots.tobytes() if lam is None else knots.tobytes() + np.float64(lam).tobytes()
        return self._cache.get(key, lambda: _detection_spline(knots, lam))

    def masks(self, knots: np.ndarray):
        """(not_erasable, pair_not_erasable) of get(knots) without the
        spline: for the knots kept after an erasure, which the rescoring
        scores with the first step's spline (spline_locate)."""
        return self._masks.get(knots.tobytes(), lambda: _masks(knots))


def _masks(knots: np.ndarray):
    not_ok, pair_not_ok = _core.erasable_masks(knots)
    for arr in (not_ok, pair_not_ok):
        arr.flags.writeable = False
    return (None if not not_ok.any() else not_ok), pair_not_ok


def _detection_spline(knots: np.ndarray, lam: float | None = None) -> DetectionSpline:
    n = knots.shape[0]
    if lam is None:
        lam = DETECTION_LAM_FACTOR * lam_scale(knots, np.ones(n))
    plan = SplineSmoother(knots, knots, lam=lam, method="banded")
    H = plan.matrix()
    one_minus_diag = 1.0 - np.diag(H)
    # (I - H_PP)^-1 of P = {i, i + 1}
    pair_inv = _core.pair_inverses(one_minus_diag, np.diag(H, 1), np.diag(H, -1))
    not_ok, pair_not_ok = _masks(knots)
    for arr in (one_minus_diag, pair_inv, H):
        arr.flags.writeable = False
    return DetectionSpline(plan._plan, one_minus_diag, not_ok, pair_inv, pair_not_ok, H, float(lam))


def locator_scores(splines: DetectionSplines, knots: np.ndarray, Y: np.ndarray, rows=None, tested: bool = False,
                   pairs: bool = False, sums: bool = False, lam: float | None = None):
    """(s, loo), each (n,) float64: the locator's scores s_i = min(loo_i,
    agreement_i) and the leave-one-out scores loo_i (the module docstring)
    of the answers at the ascending detection `knots` (n), in one compiled
    pass: row rows[i] of Y (2-D C-contiguous float32/float64 (answers, m))
    is the answer at knots[i] (rows None: Y has n rows, in knot order).
    tested: the scores a test looks at, 0 where an answer may not be erased
    (``erasable``). pairs (n >= PAIR_MIN_ANSWERS): (s, loo, p), p (n - 1,)
    the pair scores of the same pass (the module docstring; tested: 0 where
    the pair may not be erased, ``pair_erasable``). sums: the pass's sums
    appended (what locator_rescored takes). lam: the detection spline's
    (None: the knots' own, DetectionSplines.get)."""
    d = splines.get(knots, lam)
    out = _core.locator_scores(d.plan, Y, d.one_minus_diag, rows, 0, d.pair_inv if pairs else None, sums)
    if tested:
        _mask(out, d.not_erasable, d.pair_not_erasable if pairs else None)
    return out


def _mask(scores, not_erasable, pair_not_erasable) -> None:
    """A test's view of (s, loo[, p, ...]): 0 where it may not erase."""
    if not_erasable is not None:
        scores[0][not_erasable] = 0.0
    if pair_not_erasable is not None:
        scores[2][pair_not_erasable] = 0.0


def locator_rescored(splines: DetectionSplines, knots: np.ndarray, Y: np.ndarray, rows, first_sums: np.ndarray,
                     erased, tested: bool = False, pairs: bool = False):
    """The scores locator_scores gives (s, loo[, p]) of the answers kept
    after erasing the positions `erased` from those a first pass scored at
    the ascending `knots` (rows as there; first_sums: its sums), with that
    pass's detection spline (its lam) fitted to the answers kept, without
    a second scoring pass: letcc._core.locator_rescore
    (csrc/locator_rescore.hpp: the first pass's sums and one pass forming
    the erased answers' residual cross products). Where that cannot be done
    to float64 accuracy (an erased answer that is not finite; an answer
    kept that the spline nearly interpolates once the erased are out, or
    (I - H_EE) near singular: its conditioning checks) the answers kept are
    scored by a pass of their own, with the same lam."""
    d = splines.get(knots)
    n = knots.shape[0]
    first = first_sums if pairs else first_sums[:3 * n]
    erased = np.asarray(erased, dtype=np.int64)
    kept = np.ones(n, dtype=bool)
    kept[erased] = False
    out = _core.locator_rescore(d.hat, first, Y, rows, erased, pairs)
    tk = knots[kept]
    if out is None:
        rows_k = np.flatnonzero(kept) if rows is None else np.asarray(rows)[kept]
        return locator_scores(splines, tk, Y, rows_k, tested=tested, pairs=pairs, lam=d.lam)
    if tested:
        not_erasable, pair_not_erasable = splines.masks(tk)
        _mask(out, not_erasable, pair_not_erasable if pairs else None)
    return out


def detection_knots(nodes: np.ndarray) -> np.ndarray:
    """The detection spline's knots: -arccos(beta), ascending with beta. The
    default worker nodes (Chebyshev points of the second kind) are equally
    spaced there, so one lam smooths every part of the domain alike (on beta
    itself the nodes crowd towards +-1, and one lam that suits the middle
    over-smooths the ends)."""
    return -np.arccos(np.clip(nodes, -1.0, 1.0))


def erasable(knots: np.ndarray) -> np.ndarray:
    """(n,) bool: the answers (ascending detection knots) that a test may
    erase: those with an answering neighbour within 2.5 median gaps (the
    median gap between consecutive knots; every answer where n < 3). Further
    away, an answer's leave-one-out residual is an extrapolation across the
    hole, large for honest answers too, and the decode leans on it most
    (csrc/driver/locate.hpp's kIsolatedGaps says what was measured)."""
    return ~_core.erasable_masks(knots)[0]


def pair_erasable(knots: np.ndarray) -> np.ndarray:
    """(n - 1,) bool: the adjacent pairs (answers i, i + 1 of the ascending
    detection knots) that a test may erase: both members erasable, an
    answer on either side, and knots[i + 2] - knots[i - 1] at most 3.5
    median gaps (csrc/driver/locate.hpp's kPairHoleGaps: two missing nodes
    side by side cost the decode far more than one)."""
    return ~_core.erasable_masks(knots)[1]


def round_statistic(s: np.ndarray, loo: np.ndarray) -> float:
    """The clean-round statistic max_i s_i / median_i loo_i (0 when every
    score is 0, inf when only the median is): free of the outputs' scale,
    of a constant added to every answer and of a rotation of the output
    space, so one threshold serves any f of the same smoothness. The pair
    statistic is the same with the pair scores for s."""
    return _over(float(s.max()), _median(loo))


def _median(loo: np.ndarray) -> float:
    n = loo.shape[0]
    k = n // 2                      # the median, as np.median takes it (a quarter of its time)
    srt = np.sort(loo)              # (NaN last, as np.median's partition puts it)
    return float(srt[k]) if n % 2 else float((srt[k - 1] + srt[k]) / 2.0)


def _over(top: float, med: float) -> float:
    """A statistic: top over the median loo (0 when top is 0, inf when only the median is)."""
    if top <= 0.0:
        return 0.0
    return top / med if med > 0.0 else np.inf


def spline_locate(nodes: np.ndarray, Y: np.ndarray, E: int, splines: DetectionSplines,
                  flag_threshold=None, knots=None, ratio=None, report=None, rows=None,
                  pair_ratio=None, decode=None, later_ratio=None) -> np.ndarray:
    """Positions (into the ascending `nodes`) of the workers the spline
    locator erases, in the order erased (at most min(E, n - 3)). Y: the
    answers, a 2-D C-contiguous float32/float64 (answers, m) array whose row
    rows[i] is the answer of nodes[i] (rows None: row i); `knots`:
    detection_knots(nodes) when precomputed. The steps run in one compiled
    call (letcc._core.spline_locate, csrc/driver/locate.hpp): the first
    pass scores every answer (locator_scores), each later step rescores the
    answers kept from its sums (locator_rescored).

    Each step erases the top-scored answer only while the round statistic
    (round_statistic) exceeds a threshold: ``ratio`` (a number, or a
    callable ``ratio(n_left)`` -> number: letcc.codes.clean_round's
    calibrated test), else flag_threshold ** 2; neither: always (E steps).
    A tested step looks only at the erasable answers (``erasable``) and pairs
    (``pair_erasable``).

    ``later_ratio`` (with ``ratio``; a number or a callable like it): the
    threshold of every test after the first step's (fewer answers kept:
    the later steps, the swap and gap steps' rests) in a round whose first
    single or pair statistic was at least twice its threshold
    (kLaterEvidence in csrc/driver/locate.hpp); None: ``ratio``.
    letcc.codes.clean_round calibrates it looser (such a round is attacked;
    a false alarm on an honest round is a statistic just above its
    threshold).

    ``pair_ratio`` (with ``ratio``; a number or a callable like it): the
    pair stage (the module docstring). A step with 2 or more erasures left
    also tests the top-scored adjacent pair's statistic against it, and
    erases both members when it exceeds it, unless the single test fires
    too with its top answer in that pair or by a larger factor (then the
    single step acts).

    A tested locate that spends its budget, where its last step left
    another answer above the threshold, ends with the swap step: while the
    answers kept still fail the test, an erased answer is given back for
    the top-scored one kept where that leaves a rest that passes. (The gate spares the rescoring the swap step
    starts with in rounds whose wrong answers all went: without it, erased
    rounds took 15-25% longer to decode at m = 1000 - 10^4.)

    A tested locate whose first step tested pairs and whose single test
    fired ends with the gap step (the module docstring): the two answers
    around an erased one may replace the erasures.

    ``report`` (a dict): filled with the first step's ``top`` (position of
    the top-scored answer), ``statistic`` and ``threshold`` (None untested)
    and, where the first step tested pairs, ``pair_top`` (the positions of
    the top pair), ``pair_statistic`` and ``pair_threshold``; ``swap``:
    whether the swap step ran; ``gap``: whether the gap step replaced the
    erasures; ``kept``: the positions not erased, ascending.

    ``decode`` (with ``report``; a letcc._core.DenseOperator with n
    columns): the first step's pass also applies it to the answers, in
    knot order (what the decoder of a clean round does with them, bit for
    bit), and where nothing is erased ``report['decoded']`` holds the (q, m)
    result: a clean round's decode without a second read of Y."""
    n = nodes.shape[0]
    if min(E, n - 3) <= 0:
        return np.zeros(0, dtype=np.int64)
    if ratio is None and flag_threshold is not None:
        ratio = flag_threshold * flag_threshold
    if ratio is None:
        pair_ratio = later_ratio = None     # untested: E single erasures
    t = detection_knots(nodes) if knots is None else knots
    d = splines.get(t)
    erased, kept, rep, decoded = _core.spline_locate(d.plan, Y, rows, d.one_minus_diag, d.pair_inv, d.hat, t, d.lam,
                                                     E, ratio, pair_ratio, decode, 0, _PAIR_CHOICE, _SWAP_STEP,
                                                     _GAP_STEP, later_ratio)
    if report is not None:
        top, stat, threshold, pair_top, stat2, threshold2, swapped, gapped = rep
        report.update(top=top, statistic=stat, threshold=threshold, swap=swapped, gap=gapped, kept=kept)
        if pair_top is not None:
            report.update(pair_top=pair_top, pair_statistic=stat2, pair_threshold=threshold2)
        if decoded is not None:
            report["decoded"] = decoded
    return erased


# The bench's and the tests' ablation switches (not options): a firing pair
# test weighs the pairs one apart around the top pair (False: erases the top
# pair); the swap step runs (False: never); the gap step runs (False: never).
_PAIR_CHOICE = True
_SWAP_STEP = True
_GAP_STEP = True


# ---------------------------------------------------------------- answers that cannot be right

SIMPLEX_TOL = 1e-3


def check_valid(valid, allow_auto: bool = False):
    """None, 'simplex' or a callable (and 'auto' where `allow_auto`: LeTCC's
    default, the probability check on rounds of probability answers);
    ValueError naming the value."""
    if valid is None or callable(valid):
        return valid
    if isinstance(valid, str) and (valid == "simplex" or (allow_auto and valid == "auto")):
        return valid
    kinds = "None, 'auto', 'simplex'" if allow_auto else "None, 'simplex'"
    raise ValueError(f"valid must be {kinds} or a callable Y -> (n,) bool, got {valid!r}")


def invalid_rows(Y, Yh: np.ndarray, valid) -> np.ndarray:
    """(n,) bool, True where a row of Y (n, ...) cannot be an honest answer.
    Yh: Y on the host as a floating (n, -1) array, rows in Y's order.

    'simplex': every class vector of the row (Y's last axis; 1-D Y: the row
    is one class vector) is a probability vector: finite, entries >=
    -SIMPLEX_TOL, summing to 1 within SIMPLEX_TOL. A callable: valid(Y) ->
    (n,) booleans, True for a possible answer."""
    n = Yh.shape[0]
    if valid == "simplex":
        C = Y.shape[-1] if Y.ndim >= 2 else Yh.shape[1]
        with np.errstate(invalid="ignore"):
            ok = Yh.min(axis=1) >= -SIMPLEX_TOL
            sums = np.einsum("ij->i", Yh.reshape(-1, C))     # one pass (faster than BLAS on a short axis)
            ok &= np.abs(sums.reshape(n, -1) - 1.0).max(axis=1) <= SIMPLEX_TOL
        return ~ok      # NaN / inf fail both comparisons
    ok = np.asarray(valid(Y))
    if ok.shape != (n,):
        raise ValueError(f"valid(Y) must return one boolean per answer, shape ({n},), got shape {ok.shape}")
    return ~ok.astype(bool)


def bw_needed(K: int, E: int) -> int:
    """Answers the Berlekamp-Welch locator needs for K inputs and E adversaries."""
    return 2 * K + 2 * E - 1


def bw_locator_values(nodes: np.ndarray, Y: np.ndarray, K: int, E: int) -> np.ndarray:
    """|Q_j(z_i)| (m, n): the fitted Q of every output coordinate j at every
    answering node (ascending `nodes`, Y (n, m) float64)."""
    n, m = Y.shape
    d = K + E                                   # coefficients of P; Q has d - 1 free ones
    V = np.vander(nodes, d, increasing=True)    # (n, d): z^0 .. z^(d-1)
    # A_j = [V, -diag(y_j) V[:, 1:]],  rhs y_j
    A = np.empty((m, n, 2 * d - 1))
    A[:, :, :d] = V
    A[:, :, d:] = -Y.T[:, :, None] * V[None, :, 1:]
    rhs = Y.T[:, :, None]
    # column scaling (each unknown's column to unit norm) before the least squares
    scale = np.sqrt(np.einsum("mnk,mnk->mk", A, A))
    scale[scale == 0.0] = 1.0
    As = A / scale[:, None, :]
    Qm, Rm = np.linalg.qr(As)
    coef = np.linalg.solve(Rm, np.swapaxes(Qm, 1, 2) @ rhs)[:, :, 0] / scale   # (m, 2d - 1)
    q = np.concatenate([np.ones((m, 1)), coef[:, d:]], axis=1)                 # (m, d)
    return np.abs(q @ V.T)                                                     # (m, n)


def bw_locate(nodes: np.ndarray, Y: np.ndarray, K: int, E: int) -> np.ndarray:
    """Positions (into ascending nodes / rows of Y) of the E workers the
    Berlekamp-Welch locator flags, by votes across the m output coordinates."""
    n = nodes.shape[0]
    if E == 0:
        return np.zeros(0, dtype=np.int64)
    Qabs = bw_locator_values(nodes, Y, K, E)
    ranks = np.argsort(np.argsort(Qabs, axis=1, kind="stable"), axis=1, kind="stable")   # 0 = smallest |Q|
    votes = np.count_nonzero(ranks < E, axis=0)
    rank_sum = ranks.sum(axis=0)
    order = np.lexsort((np.arange(n), rank_sum, -votes))
    return np.sort(order[:E]).astype(np.int64)
