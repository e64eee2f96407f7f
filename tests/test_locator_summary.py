"""The locator step's summary (letcc._core.locator_summary: the test's mask,
argmax of the scores and the median of loo in one compiled call) against
the numpy formulas it replaces in robust.spline_locate, every element,
NaN included; and the lazily made last_clean_round."""
import numpy as np
import pytest

from letcc import _core
from letcc.codes import LeTCC
from letcc.codes.robust import _mask, _median, round_statistic


def reference(s, loo, p, ne, pne):
    """The numpy steps: robust._mask, s.argmax(), robust._median(loo), p.argmax()."""
    s, p = s.copy(), None if p is None else p.copy()
    scores = [s, loo] + ([] if p is None else [p])
    _mask(scores, ne, pne if p is not None else None)
    return int(s.argmax()), _median(loo), -1 if p is None else int(p.argmax()), s, p


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 22, 23, 64])
def test_summary_is_the_numpy_steps(n, rng):
    for trial in range(40):
        s, loo = rng.exponential(size=n), rng.exponential(size=n)
        if trial % 4 == 1:                       # ties: numpy takes the first largest
            s = np.round(s * 2) / 2
        if trial % 4 == 2:                       # NaN answers: the first NaN is the argmax, NaN sorts last
            s[rng.integers(n)] = np.nan
            loo[rng.integers(n)] = np.nan
        p = rng.exponential(size=n - 1) if trial % 2 and n >= 2 else None
        if p is not None and trial % 8 == 3:
            p[rng.integers(n - 1)] = np.nan
        ne = rng.random(n) < 0.3 if trial % 3 else None
        pne = rng.random(n - 1) < 0.3 if p is not None and trial % 3 else None
        top, med, ptop, s_ref, p_ref = reference(s, loo, p, ne, pne)
        got = _core.locator_summary(s, loo, p, ne, pne)
        assert got[0] == top and got[2] == ptop
        assert (np.isnan(med) and np.isnan(got[1])) or got[1] == med
        np.testing.assert_array_equal(s, s_ref)             # masked in place
        if p is not None:
            np.testing.assert_array_equal(p, p_ref)


def test_summary_gives_the_round_statistic(rng):
    s, loo, p = rng.exponential(size=22), rng.exponential(size=22), rng.exponential(size=21)
    top, med, ptop = _core.locator_summary(s, loo, p)
    assert s[top] / med == round_statistic(s, loo) and p[ptop] / med == round_statistic(p, loo)


def test_summary_bad_arguments_name_the_value():
    s, loo = np.ones(5), np.ones(5)
    with pytest.raises(TypeError, match="s must be a float64 numpy array"):
        _core.locator_summary(np.ones(5, dtype=np.float32), loo)
    with pytest.raises(TypeError, match="s must be a float64 numpy array"):
        _core.locator_summary([1.0, 2.0], loo)
    ro = np.ones(5)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="s must be 1-D, contiguous and writeable"):
        _core.locator_summary(ro, loo)
    with pytest.raises(ValueError, match="s must be 1-D, contiguous and writeable"):
        _core.locator_summary(np.ones(10)[::2], loo)
    with pytest.raises(ValueError, match="same length >= 1, got 5 and 4"):
        _core.locator_summary(s, np.ones(4))
    with pytest.raises(ValueError, match="same length >= 1, got 0 and 0"):
        _core.locator_summary(np.ones(0), np.ones(0))
    with pytest.raises(ValueError, match="pair has 5 entries but 5 answers make 4 adjacent pairs"):
        _core.locator_summary(s, loo, np.ones(5))
    with pytest.raises(ValueError, match="not_erasable must be a 1-D bool array of 5 entries"):
        _core.locator_summary(s, loo, None, np.zeros(4, dtype=bool))
    with pytest.raises(ValueError, match="pair_not_erasable must be a 1-D bool array of 4 entries"):
        _core.locator_summary(s, loo, np.ones(4), None, np.zeros(5, dtype=bool))


def test_last_clean_round_is_made_from_the_latest_decode(rng):
    K, N = 8, 24
    code = LeTCC(K, N, adversaries=2)
    X = rng.standard_normal((K, 6))
    Y = np.sin(np.asarray(code.encoder(X)))
    avail = rng.permutation(N)[:22]              # not ascending: positions map back through the sort
    Yw = Y[avail].copy()
    Yw[5] += 10.0                                # one wrong answer
    _, flagged = code.decode(Yw, avail, return_flagged=True)
    report = code.last_clean_round
    assert flagged.tolist() == [avail[5]] and report["worker"] == avail[5]
    assert report["statistic"] > report["threshold"]
    assert set(report["pair"]) <= set(avail.tolist()) and report["pair_threshold"] > 0
    assert code.last_clean_round == report       # made again, the same
    code.decode(Y[:3], np.arange(3))             # too few answers: the locator did not run
    assert code.last_clean_round is None
