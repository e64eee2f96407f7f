"""The spline locator's rescoring after erasures without a second scoring
pass (letcc._core.locator_rescore, csrc/locator_rescore.hpp; robust.locator_rescored),
against refitting the detection spline (the first step's lam) to the answers
kept with dense float64 linear algebra; and the decode of the rows kept
without copying them (DenseOperator._apply_rows)."""
import numpy as np
import pytest

from letcc import _core
from letcc.codes import LeTCC
from letcc.codes.robust import DetectionSplines, locator_rescored, locator_scores
from letcc.splines import DenseOperator
from letcc.splines.gcv import lam_scale

from test_pair_stage import ref_pair_scores
from test_robust_locator_scores import answers, random_knots, ref_scores


def refit_scores(knots, Y, erased, pairs):
    """(s, loo[, p]) of the answers kept, from a dense refit with the lam of all the knots."""
    lam = lam_scale(knots, np.ones(knots.shape[0]))
    kept = np.setdiff1d(np.arange(knots.shape[0]), erased)
    s, loo, _, _ = ref_scores(knots[kept], Y[kept], lam)
    if not pairs:
        return s, loo
    return s, loo, ref_pair_scores(knots[kept], Y[kept], lam)


def first_pass(ds, t, Y, pairs, rows=None):
    return locator_scores(ds, t, Y, rows, pairs=pairs, sums=True)[-1]


def erasure_sets(rng, n, pairs=False):
    """Single answers (ends included), side-by-side pairs, one apart, and three."""
    sets = [[0], [n - 1], [int(rng.integers(1, n - 1))], [n // 2, n // 2 + 1], [1, 3]]
    if n >= 7:
        sets += [sorted(rng.choice(n, 3, replace=False).tolist()), [n - 3, 2, n - 2]]
    if n >= 16:     # 5 and 7 erased (the rescoring kernel forms up to 4 residual rows at once)
        sets += [sorted(rng.choice(n, k, replace=False).tolist()) for k in (5, 7)]
    # pair scores need PAIR_MIN_ANSWERS kept (leaving two of 3 or 4 out leaves no line)
    return [e for e in sets if len(e) <= n - (5 if pairs else 3)]


@pytest.mark.parametrize("n", [5, 6, 9, 22, 64])
@pytest.mark.parametrize("m", [1, 7, 1000, 4099])
def test_rescored_scores_are_the_refit_without_the_erased_every_element(n, m, rng):
    t = random_knots(rng, n)
    Y = answers(rng, t, m, bad=[n // 3, n // 2])
    ds = DetectionSplines()
    for pairs in (False, True):
        first = first_pass(ds, t, Y, pairs)
        for erased in erasure_sets(rng, n, pairs):
            got = locator_rescored(ds, t, Y, None, first, erased, pairs=pairs)
            want = refit_scores(t, Y, erased, pairs)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == np.float64
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6 * max(w.max(), 1e-300))


def test_every_kernel_build_and_float32_give_the_refit(kernel_isa, rng):
    for n, m in ((6, 13), (22, 1000), (40, 4099)):
        t = random_knots(rng, n)
        Y = answers(rng, t, m, bad=[2, 3])
        for dtype in (np.float64, np.float32):
            Yd = Y.astype(dtype)
            ds = DetectionSplines()
            first = first_pass(ds, t, Yd, True)
            for erased in ([2], [2, 3], [1, n - 2]):
                got = locator_rescored(ds, t, Yd, None, first, erased, pairs=True)
                want = refit_scores(t, Yd.astype(np.float64), erased, True)
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6 * w.max())


def test_rows_threads_and_the_test_mask(rng):
    n, m = 22, 5000                      # n m (|X| + 1) over the threshold: the tiles go to threads
    t = random_knots(rng, n)
    Y = answers(rng, t, m, bad=[5, 6])
    ds = DetectionSplines()
    first = first_pass(ds, t, Y, True)
    want = locator_rescored(ds, t, Y, None, first, [5, 6], pairs=True)
    # the answers among other rows, named by rows=: the same numbers bit for bit
    rows = rng.permutation(n + 3)[:n]
    Yp = rng.standard_normal((n + 3, m))
    Yp[rows] = Y
    got = locator_rescored(ds, t, Yp, rows, first_pass(ds, t, Yp, True, rows), [5, 6], pairs=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # threads: the same bits whatever the count
    hat = ds.get(t).hat
    one = _core.locator_rescore(hat, first, Y, None, np.array([5, 6]), True, 1)
    two = _core.locator_rescore(hat, first, Y, None, np.array([5, 6]), True, 2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    # tested: 0 where the answers kept may not be erased (t[0] isolated among them)
    t2 = t.copy()
    t2[0] = t2[1] - 10 * np.median(np.diff(t2))
    first2 = first_pass(ds, t2, Y, True)
    s, loo, p = locator_rescored(ds, t2, Y, None, first2, [5, 6], tested=True, pairs=True)
    s0, loo0, p0 = locator_rescored(ds, t2, Y, None, first2, [5, 6], pairs=True)
    assert s[0] == 0.0 and p[0] == 0.0 and s0[0] > 0.0 and p0[0] > 0.0
    np.testing.assert_array_equal(s[1:], s0[1:])
    np.testing.assert_array_equal(loo, loo0)


def test_an_erased_answer_that_is_not_finite_is_scored_afresh(rng):
    n, m = 12, 40
    t = random_knots(rng, n)
    Y = answers(rng, t, m)
    Y[4, 7] = np.nan
    ds = DetectionSplines()
    first = first_pass(ds, t, Y, False)
    hat = ds.get(t).hat
    assert _core.locator_rescore(hat, first, Y, None, np.array([4]), False) is None
    kept = np.setdiff1d(np.arange(n), [4])
    got = locator_rescored(ds, t, Y, None, first, [4])
    want = locator_scores(ds, t[kept], Y, kept, lam=ds.get(t).lam)     # a pass over the answers kept, same lam
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert np.isfinite(got[0]).all()
    Y[4, 7] = np.inf
    assert _core.locator_rescore(hat, first_pass(ds, t, Y, False), Y, None, np.array([4]), False) is None


def test_where_the_identity_loses_accuracy_the_answers_kept_get_a_pass_of_their_own():
    """An answer left nearly alone between erased ones (random knots, 3 of 9
    erased): the conditioning checks send it to a pass over the answers kept
    with the same lam, which agrees with the dense refit."""
    rng = np.random.default_rng(2024)
    found = 0
    for _ in range(3000):
        n = 9
        t = random_knots(rng, n)
        Y = answers(rng, t, 3, bad=[3, 4])
        ds = DetectionSplines()
        first = first_pass(ds, t, Y, False)
        erased = sorted(rng.choice(n, 3, replace=False).tolist())
        if _core.locator_rescore(ds.get(t).hat, first, Y, None, np.array(erased), False) is not None:
            continue
        found += 1
        got = locator_rescored(ds, t, Y, None, first, erased)
        for g, w in zip(got, refit_scores(t, Y, erased, False)):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6 * w.max())
        if found == 5:
            break
    assert found == 5


def test_scores_from_sums_are_the_pass_and_pair_inverses_the_2x2_inverse(rng):
    n = 15
    t = random_knots(rng, n)
    Y = answers(rng, t, 30, bad=[3])
    d = DetectionSplines().get(t)
    plan, omd, pair_inv, hat = d.plan, d.one_minus_diag, d.pair_inv, d.hat
    s, loo, p, sums = _core.locator_scores(plan, Y, omd, None, 0, pair_inv, True)
    for a, b in zip(_core.locator_scores_from_sums(sums, omd, pair_inv), (s, loo, p)):
        np.testing.assert_array_equal(a, b)
    s1, loo1, sums1 = _core.locator_scores(plan, Y, omd, None, 0, None, True)
    assert sums1.shape == (3 * n,)
    np.testing.assert_array_equal(sums1, sums[:3 * n])
    for a, b in zip(_core.locator_scores_from_sums(sums1, omd), (s, loo)):
        np.testing.assert_array_equal(a, b)
    for i in range(n - 1):
        block = np.eye(2) - hat[i:i + 2, i:i + 2]
        np.testing.assert_allclose(pair_inv[4 * i:4 * i + 4].reshape(2, 2), np.linalg.inv(block), rtol=1e-12)


def test_bad_arguments_name_the_value(rng):
    n = 8
    t = random_knots(rng, n)
    Y = answers(rng, t, 5)
    ds = DetectionSplines()
    d = ds.get(t)
    plan, omd, pair_inv, hat = d.plan, d.one_minus_diag, d.pair_inv, d.hat
    first = first_pass(ds, t, Y, False)
    e = np.array([2])
    with pytest.raises(ValueError, match="hat must be a square 2-D float64 array"):
        _core.locator_rescore(hat[:, :-1], first, Y, None, e)
    with pytest.raises(ValueError, match=r"first has 24 sums but a pass over 8 answers with pairs makes 32"):
        _core.locator_rescore(hat, first, Y, None, e, True)
    with pytest.raises(ValueError, match=r"erased\[1\] = 8 is not a position among the 8 answers"):
        _core.locator_rescore(hat, first, Y, None, np.array([2, 8]))
    with pytest.raises(ValueError, match="erased position 2 is listed twice"):
        _core.locator_rescore(hat, first, Y, None, np.array([2, 2]))
    with pytest.raises(ValueError, match="erasing 6 of 8 answers leaves fewer than 3"):
        _core.locator_rescore(hat, first, Y, None, np.arange(6))
    with pytest.raises(TypeError, match="y must be a numpy array"):
        _core.locator_rescore(hat, first, Y.tolist(), None, e)
    with pytest.raises(ValueError, match=r"rows\[0\] = 9 is out of range for y with 8 rows"):
        _core.locator_rescore(hat, first, Y, np.r_[9, 1:8], e)
    with pytest.raises(ValueError, match=r"sums has 23 entries but 8 answers need 24"):
        _core.locator_scores_from_sums(first[:-1], omd)
    with pytest.raises(ValueError, match=r"pair_inv has 4 entries but 8 answers make 7 adjacent pairs"):
        _core.locator_scores_from_sums(np.zeros(32), omd, pair_inv[:4])
    with pytest.raises(ValueError, match=r"upper and lower need 7 entries each"):
        _core.pair_inverses(omd, np.zeros(6), np.zeros(7))


# ------------------------------------------------------------------ the decode of the rows kept

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_apply_rows_is_the_operator_on_the_rows_gathered(kernel_isa, dtype, rng):
    """DenseOperator._apply_rows: op(y[rows]) bit for bit, for rows in any
    order with repeats, widths with and without leftover columns, trailing
    axes kept, 1 and 2 threads (a width over the parallel threshold); the
    rows of y not listed may hold anything (NaN, inf: they are not read)."""
    A = rng.standard_normal((5, 7))
    op = DenseOperator(A)
    cols = np.array([9, 0, 3, 4, 8, 1, 3])
    for shape in ((10, 1), (10, 296), (10, 300), (10, 37, 3), (10, 40000)):
        Y = rng.standard_normal(shape).astype(dtype)
        Y[[2, 5, 7]] = np.nan
        Y[5, 0] = np.inf
        for threads in (0, 1, 2):
            if threads:
                got = op._op.apply_rows(Y, cols, threads)
                want = op._op.apply(np.ascontiguousarray(Y[cols]), None, threads)
            else:
                got = op._apply_rows(Y, cols)
                want = op(np.ascontiguousarray(Y[cols]))
            assert got.dtype == dtype and got.shape == (5,) + shape[1:]
            np.testing.assert_array_equal(got, want)
            ref = A @ Y[cols].reshape(7, -1).astype(np.float64)      # dense float64 reference
            tol = 1e-13 if dtype == np.float64 else 1e-5
            np.testing.assert_allclose(got.reshape(5, -1), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_apply_rows_errors_and_the_arrays_it_hands_back(rng):
    op = DenseOperator(rng.standard_normal((3, 4)))
    Y = rng.standard_normal((6, 8))
    with pytest.raises(ValueError, match=r"rows must be 1-D with one entry per column of the operator \(4\), "
                                         r"got shape \(3,\)"):
        op._apply_rows(Y, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"rows\[2\] = 6 is out of range for y with 6 rows"):
        op._apply_rows(Y, np.array([0, 1, 6, 2]))
    with pytest.raises(ValueError, match=r"rows\[0\] = -1 is out of range"):
        op._apply_rows(Y, np.array([-1, 1, 3, 2]))
    with pytest.raises(TypeError, match="rows must be an integer array, got float64"):
        op._apply_rows(Y, np.array([0.0, 1, 3, 2]))
    # not a C-contiguous float array: None, for the caller to gather the rows
    assert op._apply_rows(np.asfortranarray(Y), np.arange(4)) is None
    assert op._apply_rows(Y.astype(np.int64), np.arange(4)) is None
    assert op._apply_rows(Y.tolist(), np.arange(4)) is None
    assert op._apply_rows(Y[::2], np.arange(3).repeat(2)[:4]) is None


@pytest.mark.parametrize("space", ["linear", "log"])
def test_robust_decode_of_wide_rows_is_the_plain_decode_of_the_rows_kept(space, rng):
    """The rows kept are decoded where they lie (DenseOperator._apply_rows):
    the plain decode of the rows kept, copied out."""
    K, N = 8, 24
    F = np.sort(rng.choice(N, 22, replace=False))
    code = LeTCC(K, N)
    U = np.asarray(code.encoder(rng.standard_normal((K, 500, 3))))
    logits = np.einsum("cd,nbd->nbc", rng.standard_normal((10, 3)), np.sin(U))[F]
    if space == "log":                # two answers whose classes are rotated: still probabilities
        Y = np.exp(logits - logits.max(-1, keepdims=True))
        Y /= Y.sum(-1, keepdims=True)
        Y[[6, 15]] = np.roll(Y[[6, 15]], 3, axis=-1)
    else:
        Y = logits.copy()
        Y[[6, 15]] += 10.0
    Y = np.ascontiguousarray(Y)
    rob = LeTCC(K, N, adversaries=2, false_alarm=None)      # E erasures in every round
    est, flagged = rob.decode(Y, F, return_flagged=True)
    assert flagged.size == 2 and rob.last_output_space == space
    keep = ~np.isin(F, flagged)
    plain = LeTCC(K, N)
    want = plain.decode(np.ascontiguousarray(Y[keep]), F[keep])
    np.testing.assert_allclose(est, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
    assert plain.last_output_space == space


@pytest.mark.parametrize("width", [1, 40, 5000])
def test_decode_of_the_rows_kept_reads_only_those(monkeypatch, width, rng):
    """_decode_rows(rows=): the rows left out are never read (NaN and inf in
    them change nothing), no row is copied, and the estimates are those of
    the rows kept copied out in worker order, bit for bit, at every width."""
    import letcc.codes._base as base

    code = LeTCC(8, 24)
    avail = np.array([3, 0, 5, 9, 2, 11, 14, 12, 20, 17, 23, 6, 7, 1, 4, 8, 10, 13, 15, 16, 18, 19])
    Y = rng.standard_normal((24, width))
    kept = np.array([0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 15, 16, 17, 18, 19, 20, 21, 22, 23])
    Y[[7, 14]] = np.nan
    Y[14, 0] = np.inf
    asc = avail.argsort()          # the decode sums the answers in worker order
    want = code._decode_rows(avail[asc], np.ascontiguousarray(Y[kept[asc]]), code._plan)
    calls = []
    real = base.take_rows
    monkeypatch.setattr(base, "take_rows", lambda *args: calls.append(1) or real(*args))
    got = code._decode_rows(avail, Y, code._plan, rows=kept)
    assert not calls
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).all()


# ------------------------------------------------------------ a clean round's decode made in the locator's pass


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_pass_decodes_its_rows_as_the_dense_operator(kernel_isa, dtype, rng):
    """_core.locator_scores(decode=op): the scores as without it, and op's map
    of the rows scored (rows= in knot order) bit for bit as DenseOperator
    gives it on those rows, for widths with and without leftover columns,
    1 and 2 threads."""
    import letcc
    n, q = 22, 8
    t = random_knots(rng, n)
    ds = DetectionSplines()
    d = ds.get(t)
    op = DenseOperator(rng.standard_normal((q, n)))
    try:
        for threads in (1, 2):
            letcc.set_num_threads(threads)
            for m in (1, 5, 17, 256, 1000, 70001):
                Y = rng.standard_normal((n + 3, m)).astype(dtype)
                rows = rng.permutation(n + 3)[:n]
                got = _core.locator_scores(d.plan, Y, d.one_minus_diag, rows, 0, d.pair_inv, True, op._op)
                ref = _core.locator_scores(d.plan, Y, d.one_minus_diag, rows, 0, d.pair_inv, True)
                for a, b in zip(got[:-1], ref):
                    np.testing.assert_array_equal(a, b)
                assert got[-1].dtype == dtype and got[-1].shape == (q, m)
                np.testing.assert_array_equal(got[-1], op(np.ascontiguousarray(Y[rows])))
    finally:
        letcc.set_num_threads(0)


def test_the_pass_decode_bad_arguments_name_the_value(rng):
    t = random_knots(rng, 6)
    d = DetectionSplines().get(t)
    Y = rng.standard_normal((6, 10))
    with pytest.raises(TypeError, match="decode must be a letcc._core.DenseOperator or None, got ndarray"):
        _core.locator_scores(d.plan, Y, d.one_minus_diag, None, 0, None, False, np.ones((2, 6)))
    with pytest.raises(ValueError, match="decode has 5 columns but the plan has 6 knots"):
        _core.locator_scores(d.plan, Y, d.one_minus_diag, None, 0, None, False, DenseOperator(np.ones((2, 5)))._op)


@pytest.mark.parametrize("space", ["linear", "log"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_clean_round_decoded_in_the_pass_is_the_plain_decode(space, dtype, rng, monkeypatch):
    """A clean round of ascending answers is decoded in the locator's pass
    (LeTCC._erase_flagged's fuse): the estimates equal the plain decoder's
    bit for bit, in both spaces and dtypes, with and without leftover
    columns; a round with an erasure, unsorted answers and torch inputs take
    the plain steps (and agree too)."""
    from letcc.codes import robust
    calls = []
    real = _core.spline_locate

    def spy(*args):
        calls.append(args[11] is not None)          # decode: the pass decodes too
        return real(*args)

    monkeypatch.setattr(robust._core, "spline_locate", spy)
    from letcc.codes import letcc_code
    monkeypatch.setattr(letcc_code, "PASS_DECODE_MIN_BYTES", 0)     # the small rounds here: fused too
    K, N = 8, 24
    code, plain = LeTCC(K, N, adversaries=2), LeTCC(K, N)
    F = np.sort(rng.choice(N, 22, replace=False))
    code.clean_round_threshold(22, space)                            # calibrated first: its passes not counted
    for m in (3, 40, 1001):
        U = np.asarray(code.encoder(rng.standard_normal((K, m, 3))))
        logits = np.einsum("cd,nbd->nbc", rng.standard_normal((10, 3)) * 0.3, np.sin(U))
        Y = logits if space == "linear" else np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        Y = np.ascontiguousarray(Y[F]).astype(dtype)
        calls.clear()
        est, flagged = code.decode(Y, F, return_flagged=True)
        assert flagged.size == 0 and calls == [True]                 # clean, decoded in the pass
        ref = plain.decode(Y, F)
        assert code.last_output_space == space and plain.last_output_space == space
        np.testing.assert_array_equal(est, ref)
        np.testing.assert_array_equal(code.last_lam_dec, plain.last_lam_dec)
        assert est.dtype == dtype and est.shape == (K,) + Y.shape[1:]
        monkeypatch.setattr(letcc_code, "PASS_DECODE_MIN_BYTES", Y.nbytes + 1)   # below the size: not fused
        calls.clear()
        np.testing.assert_array_equal(code.decode(Y, F), est)
        assert calls == [False]
        monkeypatch.setattr(letcc_code, "PASS_DECODE_MIN_BYTES", Y.nbytes)
        perm = rng.permutation(22)                                   # unsorted: the plain steps
        calls.clear()
        np.testing.assert_allclose(code.decode(Y[perm], F[perm]), est, rtol=1e-5, atol=1e-6)
        assert calls == [False]
        Yw = Y.copy()
        if space == "linear":
            Yw[7] += 5.0
        else:                                   # certain of the least likely class: still probabilities
            Yw[7] = np.eye(10, dtype=dtype)[Y[7].argmin(-1)]
        calls.clear()
        est_w, fl = code.decode(Yw, F, return_flagged=True)
        assert fl.tolist() == [F[7]] and calls[0]                    # the pass's decode is left unused
        keep = np.setdiff1d(F, fl)
        np.testing.assert_array_equal(est_w, plain.decode(Yw[np.isin(F, keep)], keep))
