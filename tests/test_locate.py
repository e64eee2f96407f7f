"""The spline locator's steps in one compiled call (letcc._core.spline_locate,
csrc/driver/locate.hpp): the erasable masks against the rule written out
here, the steps against test_pair_stage's dense written-out steps where the
rescoring's identity declines (the locate builds the detection spline of the
answers kept itself), its thresholds asked once per size and only for the
sizes a round reaches, and its bad arguments."""
from __future__ import annotations

import numpy as np
import pytest

from letcc import _core
from letcc.codes.robust import DetectionSplines, detection_knots, erasable, pair_erasable, spline_locate

from test_pair_stage import ref_locate
from test_robust_locator_scores import answers, random_knots


def rule_masks(knots):
    """(erasable, pair_erasable) as stated: an answer with an answering
    neighbour within 2.5 median gaps (all where n < 3); a pair whose members
    are erasable, with an answer on either side and knots[i + 2] - knots[i - 1]
    at most 3.5 median gaps (none where n < 4)."""
    n = knots.shape[0]
    if n < 3:
        return np.ones(n, dtype=bool), np.zeros(max(n - 1, 0), dtype=bool)
    gaps = np.diff(knots)
    med = np.median(gaps)
    single = np.array([min(gaps[i - 1] if i > 0 else np.inf, gaps[i] if i < n - 1 else np.inf) <= 2.5 * med
                       for i in range(n)])
    pair = np.array([0 < i < n - 2 and single[i] and single[i + 1] and knots[i + 2] - knots[i - 1] <= 3.5 * med
                     for i in range(n - 1)], dtype=bool)
    return single, pair


def test_erasable_masks_are_the_stated_rule(rng):
    for _ in range(400):
        n = int(rng.integers(0, 30))
        t = random_knots(rng, n) if n else np.zeros(0)
        if n >= 6 and rng.random() < 0.5:             # holes: nodes missing from an even grid
            grid = np.linspace(-np.pi, 0.0, n + 4)
            t = np.sort(rng.choice(grid, n, replace=False))
        single, pair = rule_masks(t)
        np.testing.assert_array_equal(erasable(t), single)
        np.testing.assert_array_equal(pair_erasable(t), pair)


def test_a_gap_that_is_not_a_number_makes_nothing_erasable():
    """numpy's median and minimum carry NaN: no answer or pair is erasable."""
    t = np.array([-3.0, -2.5, np.nan, -1.5, -1.0, -0.5])
    assert not erasable(t).any() and not pair_erasable(t).any()


def test_the_pass_decode_comes_back_only_where_the_pass_ran(rng):
    """decode= with no steps to take (E = 0, or 3 answers): no pass, no decode
    (None, never the unwritten output array); with steps and nothing erased,
    the pass's decode is the operator applied to the answers."""
    from letcc.splines import DenseOperator

    t = random_knots(rng, 9)
    Y = answers(rng, t, 5, noise=0.001)
    d = DetectionSplines().get(t)
    A = DenseOperator(rng.standard_normal((2, 9)))
    args = (d.plan, Y, None, d.one_minus_diag, d.pair_inv, d.hat, t, d.lam)
    assert _core.spline_locate(*args, 0, 1e9, None, A._op)[3] is None
    erased, kept, rep, decoded = _core.spline_locate(*args, 2, 1e9, None, A._op)
    assert erased.size == 0 and kept.tolist() == list(range(9))
    np.testing.assert_allclose(decoded, A.matrix() @ Y, rtol=1e-12, atol=1e-12)
    t3 = t[:3]
    d3 = DetectionSplines().get(t3)
    out = _core.spline_locate(d3.plan, Y[:3], None, d3.one_minus_diag, d3.pair_inv, d3.hat, t3, d3.lam, 2, 1e9,
                              None, DenseOperator(np.ones((2, 3)))._op)
    assert out[0].size == 0 and out[3] is None


def _declines_somewhere(t, Y, erased):
    """Whether the rescoring identity declines for some prefix of `erased`."""
    d = DetectionSplines().get(t)
    first = _core.locator_scores(d.plan, Y, d.one_minus_diag, None, 0, None, True)[-1]
    return any(_core.locator_rescore(d.hat, first, Y, None, np.array(erased[:k]), False) is None
               for k in range(1, len(erased) + 1))


def test_where_the_rescoring_declines_the_steps_are_the_written_out_ones(rng):
    """Irregular knots, most answers erasable away: some steps leave an answer
    nearly alone between erased ones, where the identity would lose accuracy
    and the locate scores the answers kept with a pass of their own (a
    detection spline it builds for them, with the first step's lam)."""
    declined = 0
    for _ in range(300):
        n = int(rng.integers(6, 12))
        t = random_knots(rng, n)
        Y = answers(rng, t, int(rng.integers(2, 9)), bad=[int(rng.integers(n))])
        ratio, pair_ratio = float(rng.uniform(1, 5)), float(rng.uniform(1, 5))
        got = spline_locate(-np.cos(t), Y, n - 3, DetectionSplines(), knots=t, ratio=lambda k: ratio,
                            pair_ratio=lambda k: pair_ratio).tolist()
        assert got == ref_locate(t, Y, n - 3, lambda k: ratio, lambda k: pair_ratio)
        declined += _declines_somewhere(t, Y, got)
        if declined >= 5:
            break
    assert declined >= 5


def test_thresholds_are_asked_once_per_size_and_only_for_sizes_reached(rng):
    """A calibrated test calibrates a size when first asked: a clean round asks
    for its own size only; a round that erases asks each size it reaches once."""
    from letcc.codes import LeTCC

    beta = LeTCC(8, 24).beta
    F = np.sort(rng.choice(24, 22, replace=False))
    t = detection_knots(beta[F])
    asked = []
    level = [1e9]

    def ratio(k):
        asked.append(k)
        return level[0]

    Y = answers(rng, t, 10, noise=0.01)
    assert spline_locate(beta[F], Y, 2, DetectionSplines(), knots=t, ratio=ratio).size == 0
    assert asked == [22]
    asked.clear()
    level[0] = 0.0                      # every step fires: 2 erasures, then the swap step's test
    rep: dict = {}
    got = spline_locate(beta[F], Y, 2, DetectionSplines(), knots=t, ratio=ratio, report=rep)
    assert got.size == 2 and rep["swap"]
    assert sorted(asked) == [20, 21, 22]
    # with later_ratio: the first step's size from ratio, every smaller one from it
    later_asked = []

    def later(k):
        later_asked.append(k)
        return 0.0

    asked.clear()
    got = spline_locate(beta[F], Y, 2, DetectionSplines(), knots=t, ratio=ratio, later_ratio=later)
    assert got.size == 2 and asked == [22] and sorted(later_asked) == [20, 21]


def test_a_threshold_callable_that_raises_propagates_its_error(rng):
    t = random_knots(rng, 9)
    Y = answers(rng, t, 4)

    def boom(k):
        raise RuntimeError(f"calibration of {k} answers failed")

    with pytest.raises(RuntimeError, match="calibration of 9 answers failed"):
        spline_locate(-np.cos(t), Y, 2, DetectionSplines(), knots=t, ratio=boom)


def test_bad_arguments_name_the_value(rng):
    t = random_knots(rng, 9)
    Y = answers(rng, t, 4)
    d = DetectionSplines().get(t)

    def call(**kw):
        args = dict(plan=d.plan, y=Y, rows=None, one_minus_diag=d.one_minus_diag, pair_inv=d.pair_inv, hat=d.hat,
                    knots=t, lam=d.lam, E=2)
        args.update(kw)
        return _core.spline_locate(**args)

    assert call()[0].dtype == np.int64
    with pytest.raises(TypeError, match="ratio must be None, a number or a callable n -> number, got str"):
        call(ratio="high")
    with pytest.raises(TypeError, match=r"ratio\(9\) must return a number, got str"):
        call(ratio=lambda k: "high")
    with pytest.raises(ValueError, match="E must be >= 0, got -1"):
        call(E=-1)
    with pytest.raises(ValueError, match=r"later_ratio needs ratio \(the first step's test\)"):
        call(later_ratio=3.0)
    with pytest.raises(TypeError, match="later_ratio must be None, a number or a callable n -> number, got str"):
        call(ratio=3.0, later_ratio="low")
    with pytest.raises(ValueError, match=r"hat must be the detection spline's \(9, 9\) hat matrix"):
        call(hat=np.eye(8))
    with pytest.raises(ValueError, match="one entry per knot of the plan \\(9\\), got 9 and 8"):
        call(knots=t[:8])
    with pytest.raises(ValueError, match="y has 8 rows but the plan has 9 knots"):
        call(y=Y[:8])
    with pytest.raises(TypeError, match="decode must be a letcc._core.DenseOperator or None, got ndarray"):
        call(decode=np.ones((2, 9)))
