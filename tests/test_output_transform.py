"""LeTCC's output spaces (letcc.codes.output_space): the compiled log/softmax
passes against numpy, output_space='auto' (the default) choosing the log
space for probability rows and the linear space, bit for bit, for anything
else, and the accuracy of the default on a small fixed classifier (issue 22)."""
import numpy as np
import pytest

import letcc
from letcc import _core
from letcc import evaluate as ev
from letcc.codes import BACC, LeTCC
import letcc.codes.letcc_code as letcc_code
from letcc.codes.lam_defaults import DEFAULT_POLICY, LOCAL_END_FACTOR, LOG_C0, LOG_POLICY, local_gap_lams
from letcc.codes.output_space import (LOG_FLOOR, PROB_SUM_TOL, from_log, is_probability_rows, log_or_none, softmax_,
                                      to_log)

BEST = letcc.kernel_isa()
ORDER = ["baseline", "avx2", "avx512"]
RUNNABLE = ORDER[: ORDER.index(BEST) + 1] if BEST in ORDER else [BEST]


@pytest.fixture(params=RUNNABLE)
def isa(request):
    """Every build of the compiled passes this CPU runs (output_space.cpp
    follows letcc.set_kernel_isa)."""
    letcc.set_kernel_isa(request.param if request.param in ORDER else "auto")
    yield request.param
    letcc.set_kernel_isa("auto")


@pytest.fixture
def fresh():
    """A generator on fresh entropy; the seed is in every failure message."""
    seed = np.random.SeedSequence().entropy
    return np.random.default_rng(seed), f"seed {seed}"


def _probs(rng, shape, dtype=np.float64, scale=3.0):
    z = rng.standard_normal(shape) * scale
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(dtype)


# ---------------------------------------------------------------- the compiled passes against numpy

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", [1, 3, 10, 17, 1000])
def test_compiled_log_matches_numpy_every_element(isa, fresh, dtype, m):
    rng, seed = fresh
    # logits of scale 40: probabilities from 1 down to far below LOG_FLOOR (exact zeros in float32)
    P = _probs(rng, (23, 2, m), dtype, scale=40.0)
    P[0, 0] = 0.0
    P[0, 0, m // 2] = 1.0                              # all mass on one class
    P[1, 1, :] = 1.0 / m                               # uniform row
    L = _core.log_prepare(P, True, PROB_SUM_TOL, LOG_FLOOR)
    assert type(L) is np.ndarray and L.dtype == dtype and L.shape == P.shape and not np.shares_memory(L, P)
    # reference: float64 numpy log of the floored values, rounded to dtype; the kernels (fdlibm's
    # log, musl's logf) are within an ulp of the exact log, so within 2 of the rounded reference
    ref = np.log(np.maximum(P.astype(np.float64), np.float64(dtype(LOG_FLOOR)))).astype(dtype)
    ulp = np.finfo(dtype).eps
    np.testing.assert_allclose(L, ref, rtol=2 * ulp, atol=0, err_msg=seed)
    assert L[0, 0, 0] == ref[0, 0, 0] and L[0, 0, m // 2] == 0.0   # a zero -> log(LOG_FLOOR); 1 -> 0 exactly
    # numpy's own log of the same floored values (what to_log does), to its precision
    np.testing.assert_allclose(L, to_log(P), rtol=4 * ulp, atol=4 * ulp, err_msg=seed)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", [1, 3, 10, 17, 1000])
def test_compiled_softmax_matches_numpy_every_element(isa, fresh, dtype, m):
    rng, seed = fresh
    Z = (rng.standard_normal((9, 3, m)) * 30).astype(dtype)
    Z[0, 0] = -50.0
    Z[0, 0, 0] = 800.0                                 # one class far ahead: the others underflow to 0
    Z[1, 1] = 0.0                                      # a flat row: uniform
    # reference: z - max in Z's dtype (a float32 kernel rounds it so, as numpy's float32 softmax
    # does), then exp and the row sum in float64, rounded to dtype
    ref = (Z - Z.max(-1, keepdims=True)).astype(np.float64)
    ref = np.exp(ref)
    ref = (ref / ref.sum(-1, keepdims=True)).astype(dtype)
    got = Z.copy()
    assert _core.softmax_last_axis(got) is True
    ulp = np.finfo(dtype).eps
    # float64: exp (a few ulps) over the row sum (its rounding grows like log2(m) ulps in
    # both, the reference's pairwise and the kernel's 8 lanes), and exp below -708 returns 0
    # (a subnormal probability in numpy): atol 1e-300; float32: cephes' expf (about an ulp)
    # times the rounded inverse of the float64 row sum (subnormal results: atol 1e-40)
    rtol = (6 + 2 * np.log2(m + 1)) * np.finfo(np.float64).eps if dtype == np.float64 else 4 * ulp
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-300 if dtype == np.float64 else 1e-40, err_msg=seed)
    assert got[0, 0, 0] == 1.0 and np.all(got[0, 0, 1:] == 0.0)
    np.testing.assert_allclose(got[1, 1], 1.0 / m, rtol=2 * ulp)
    np.testing.assert_allclose(got.astype(np.float64).sum(-1), 1.0, rtol=m * ulp)
    # the reference path (numpy ufuncs in dtype) gives the same to its precision: exp's relative
    # error grows with its argument's size (|z - max| ulps of z), the row sum's with m
    spread = float(np.abs(Z[np.abs(Z) < 700]).max())
    np.testing.assert_allclose(got, from_log(Z.copy()), rtol=(4 * spread + 2 * m) * ulp, atol=1e-38, err_msg=seed)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-13), (np.float32, 2e-6)])
def test_round_trip(dtype, rtol):
    P = _probs(np.random.default_rng(0), (7, 3, 10), dtype)
    for L in (to_log(P), log_or_none(P, strict=False), log_or_none(P, strict=True)):
        assert L.dtype == dtype and not np.shares_memory(L, P)
        for back in (from_log(L.copy()), softmax_(L.copy())):
            assert back.dtype == dtype
            np.testing.assert_allclose(back, P, rtol=rtol, atol=0)


def test_round_trip_exact_on_one_hot_and_uniform_rows():
    for dtype in (np.float32, np.float64):
        P = np.zeros((3, 4), dtype)
        P[0, 1] = P[1, 3] = 1.0
        P[2] = 0.25
        back = softmax_(log_or_none(P, strict=False))
        # a one-hot row's zeros come back as LOG_FLOOR / (1 + 3 LOG_FLOOR): 1e-30, 1 exactly in dtype
        assert np.array_equal(back[2], P[2]) and back[0, 1] == 1.0 and back[1, 3] == 1.0
        np.testing.assert_allclose(back, P, atol=2e-30, rtol=0)


def test_round_trip_torch():
    torch = pytest.importorskip("torch")
    P = torch.from_numpy(_probs(np.random.default_rng(1), (5, 10)))
    back = from_log(to_log(P))
    assert isinstance(back, torch.Tensor) and back.dtype == torch.float64
    np.testing.assert_allclose(back.numpy(), P.numpy(), rtol=1e-13)


def test_zeros_are_floored():
    P = np.array([[1.0, 0.0, 0.0]])
    L = to_log(P)
    assert np.all(np.isfinite(L)) and L[0, 1] == pytest.approx(np.log(LOG_FLOOR))
    assert np.array_equal(log_or_none(P, strict=False), L)
    np.testing.assert_allclose(from_log(L), P, atol=1e-29)


# ---------------------------------------------------------------- invalid input

@pytest.mark.parametrize("bad", [-0.1, np.nan, np.inf])
def test_invalid_probabilities_raise_in_log_space(bad):
    P = _probs(np.random.default_rng(2), (16, 10))
    P[3, 4] = bad
    with pytest.raises(ValueError, match=r"needs probabilities .*Y\[3, 4\]"):
        to_log(P)
    with pytest.raises(ValueError, match=r"output_space='log' needs probabilities .*Y\[3, 4\]"):
        LeTCC(8, 16, output_space="log").decode(P, np.arange(16))
    with pytest.raises(ValueError, match=r"needs probabilities .*Y\[3, 4\]"):
        log_or_none(P, strict=True)
    assert log_or_none(P, strict=False) is None


def test_invalid_probabilities_raise_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="needs probabilities"):
        to_log(torch.tensor([[0.5, -0.5]]))
    with pytest.raises(ValueError, match="needs probabilities"):
        LeTCC(2, 4, output_space="log").decode(torch.tensor([[0.5, -0.5]] * 4), [0, 1, 2, 3])


def test_log_space_needs_a_class_axis_and_a_known_name():
    with pytest.raises(ValueError, match="class axis"):
        LeTCC(8, 16, output_space="log").decode(np.full(16, 0.5), np.arange(16))
    with pytest.raises(ValueError, match=r"output_space must be one of \('auto', 'linear', 'log'\), got 'logits'"):
        LeTCC(8, 16, output_space="logits")
    with pytest.raises(ValueError, match="output_space must be 'linear' or 'log', got 'auto'"):
        LeTCC(8, 16).decoder_plan(np.arange(16), output_space="auto")


# ---------------------------------------------------------------- output_space='auto'

def test_auto_decodes_probability_rows_in_log_space():
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        P = _probs(rng, (16, 4, 10), dtype)
        F = rng.permutation(16)[:12]
        auto, log = LeTCC(8, 16), LeTCC(8, 16, output_space="log")
        assert auto.output_space == "auto" and auto.last_output_space is None
        est = auto.decode(P[F], F)
        assert auto.last_output_space == "log" and est.dtype == dtype
        assert np.array_equal(est, log.decode(P[F], F)) and log.last_output_space == "log"
        assert np.array_equal(auto.last_lam_dec, log.last_lam_dec)
        # the plan decode() used: the log space's (LOG_POLICY), on the log outputs
        plan = auto.decoder_plan(F, Y=P[F])
        assert np.array_equal(plan.matrix(), log.decoder_plan(F).matrix())
        assert not np.array_equal(plan.matrix(), auto.decoder_plan(F).matrix())   # without Y: linear
        est2, flagged = auto.decode(P[F], F, return_flagged=True)
        assert np.array_equal(est2, est) and flagged.size == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_call_log_space_apply_matches_the_passes(isa, fresh, dtype):
    """Plan.apply_log / DenseOperator.apply_log (check, log, map, softmax in
    one compiled call) against the passes called one by one and a float64
    reference, for a banded plan and a dense operator; None for answers that
    are not probability rows, False for what it does not take."""
    rng, seed = fresh
    x = np.sort(rng.uniform(-1, 1, 14))
    at = np.sort(rng.uniform(-1, 1, 6))
    maps = [letcc.SplineSmoother(x, at, lam=1e-4, method="banded"),
            letcc.splines.DenseOperator(rng.standard_normal((6, 14)))]
    P = _probs(rng, (14, 5, 10), dtype, scale=20.0)
    for op in maps:
        got = op._apply_log(P, True, PROB_SUM_TOL, LOG_FLOOR)
        two = op(_core.log_prepare(P, True, PROB_SUM_TOL, LOG_FLOOR))
        assert _core.softmax_last_axis(two)
        assert got.dtype == dtype and np.array_equal(got, two), seed
        logs = np.log(np.maximum(P.astype(np.float64), dtype(LOG_FLOOR))).reshape(14, -1)
        ref = (op.matrix() @ logs).reshape(6, 5, 10)
        ref = np.exp(ref - ref.max(-1, keepdims=True))
        ref /= ref.sum(-1, keepdims=True)
        if dtype == np.float32:
            # float32 rounding of the mapped logs: at most a few eps times sum |A_ij| |log p_j| in
            # each exponent, which a softmax turns into twice that relative error at most (a fixed
            # rtol of 1e-4 failed on a dense operator with logs near the floor: 1.14e-4)
            scale = (np.abs(op.matrix()) @ np.abs(logs)).reshape(6, 5, 10).max(-1, keepdims=True)
            bound = 16 * np.finfo(np.float32).eps * scale
            assert np.all(np.abs(got - ref) <= bound * ref + 1e-30), seed
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-30, err_msg=seed)
        assert op._apply_log(-P, True, PROB_SUM_TOL, LOG_FLOOR) is None
        assert op._apply_log(P * 1.01, True, PROB_SUM_TOL, LOG_FLOOR) is None
        assert op._apply_log(P * 1.01, False, PROB_SUM_TOL, LOG_FLOOR) is not None   # 'log': no sum test
        for other in (P[:, 0, 0], P[:13], P[:, :, ::2], P.astype(np.int64), [[0.5, 0.5]] * 14):
            assert op._apply_log(other, True, PROB_SUM_TOL, LOG_FLOOR) is False
        # order: the map takes P[order], gathered in the same call
        order = rng.permutation(14)
        inverse = np.argsort(order)
        assert np.array_equal(op._apply_log(P[inverse], True, PROB_SUM_TOL, LOG_FLOOR, order), got), seed
        for bad, msg in ((order[:13], "permutation of the plan's 14 rows"), (np.r_[order[:13], order[0]],
                         r"permutation of 0\.\.13, got \d+ at 13"), (np.r_[order[:13], 14], "got 14 at 13")):
            with pytest.raises(ValueError, match=msg):
                op._apply_log(P, True, PROB_SUM_TOL, LOG_FLOOR, bad)


def test_consecutive_decodes_in_any_order_of_spaces_match_fresh_codes():
    """The one-call path (taken after a log-space decode, answers ascending)
    gives what the separate passes give, and answers that are not
    probabilities after probabilities (and back) are decoded linearly."""
    rng = np.random.default_rng(10)
    code = LeTCC(8, 16)
    P = _probs(rng, (16, 3, 10))
    R = rng.standard_normal((16, 3, 10))
    sets = [np.sort(rng.permutation(16)[:12]), rng.permutation(16)[:10], np.arange(3, 16)]
    for Y, space in ((P, "log"), (P, "log"), (R, "linear"), (P.astype(np.float32), "log"), (R, "linear"),
                     (P, "log")):
        for F in sets:
            got = code.decode(Y[F], F)
            assert code.last_output_space == space
            fresh_code = LeTCC(8, 16)
            assert np.array_equal(got, fresh_code.decode(Y[F], F)) and fresh_code.last_output_space == space
    forced = LeTCC(8, 16, output_space="log")
    for F in sets:
        assert np.array_equal(forced.decode(P[F], F), LeTCC(8, 16).decode(P[F], F))
    with pytest.raises(ValueError, match=r"output_space='log' needs probabilities .*Y\[0, 0, 0\]"):
        forced.decode(-P[sets[2]], sets[2])


def _not_probabilities(rng, w):
    """Answers of 16 workers that are not probability rows; the single bad
    entries sit in worker w's answer."""
    P = _probs(rng, (16, 3, 10))
    neg = P.copy()
    neg[w, 1, 2] = -1e-9
    nan = P.copy()
    nan[w, 0, 0] = np.nan
    off = P * (1 + 2 * PROB_SUM_TOL)            # rows summing to 1.002
    onehot_int = np.eye(10, dtype=np.int64)[rng.integers(0, 10, (16, 3))]
    return {"regression": rng.standard_normal((16, 3, 10)), "logits": np.log(P) + 2.0, "negative": neg,
            "nan": nan, "rows not summing to 1": off, "uniform in [0, 1)": rng.random((16, 10)),
            "integer one-hot": onehot_int, "1-D": P[:, 0, 0].copy(), "float32 regression":
            rng.standard_normal((16, 7)).astype(np.float32), "strided": P[:, :, ::2]}


def test_auto_decodes_anything_else_linearly_bit_for_bit():
    rng = np.random.default_rng(4)
    F = np.sort(rng.permutation(16)[:11])
    Fr = rng.permutation(16)[:11]
    for name, Y in _not_probabilities(rng, np.intersect1d(F, Fr)[0]).items():
        assert not is_probability_rows(Y[F]), name
        for avail in (F, Fr):
            auto, lin = LeTCC(8, 16), LeTCC(8, 16, output_space="linear")
            got = auto.decode(Y[avail], avail)
            assert auto.last_output_space == "linear", name
            assert np.array_equal(got, lin.decode(Y[avail], avail), equal_nan=True), name
            assert np.array_equal(auto.last_lam_dec, lin.last_lam_dec), name


def test_auto_with_a_lam_of_the_callers_decodes_linearly():
    # (adversaries > 0 decodes in log space like the plain default: tests/test_clean_round.py)
    P = _probs(np.random.default_rng(5), (16, 10))
    F = np.arange(2, 16)
    for kw in ({"lam_dec": 1e-3}, {"lam_dec": DEFAULT_POLICY}):
        auto, lin = LeTCC(8, 16, **kw), LeTCC(8, 16, output_space="linear", **kw)
        assert np.array_equal(auto.decode(P[F], F), lin.decode(P[F], F)) and auto.last_output_space == "linear"
        assert auto.linear_in_outputs == lin.linear_in_outputs


def test_is_probability_rows_tolerance_and_kinds():
    P = _probs(np.random.default_rng(6), (5, 10))
    assert is_probability_rows(P) and is_probability_rows(P.astype(np.float32))
    assert is_probability_rows(P * (1 + 0.9 * PROB_SUM_TOL)) and not is_probability_rows(P * (1 + 1.1 * PROB_SUM_TOL))
    # float16-rounded probabilities handed over as float32 still count
    assert is_probability_rows(P.astype(np.float16).astype(np.float32))
    assert not is_probability_rows(P[:0]) and not is_probability_rows(P[0]) and not is_probability_rows(P[:, :0])
    assert is_probability_rows(np.asfortranarray(P)) and not is_probability_rows(P.astype(np.int64))


def test_auto_torch_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    P = _probs(rng, (16, 3, 10))
    F = rng.permutation(16)[:12]
    auto = LeTCC(8, 16)
    est = auto.decode(torch.from_numpy(P[F]), F)
    assert isinstance(est, torch.Tensor) and auto.last_output_space == "log"
    np.testing.assert_allclose(est.numpy(), LeTCC(8, 16).decode(P[F], F), rtol=1e-12, atol=1e-300)
    R = rng.standard_normal((16, 3, 10))
    est = auto.decode(torch.from_numpy(R[F]), F)
    assert auto.last_output_space == "linear"
    np.testing.assert_array_equal(est.numpy(), LeTCC(8, 16, output_space="linear").decode(R[F], F))


def test_log_space_decodes_log_outputs_through_the_same_spline():
    rng = np.random.default_rng(3)
    P = _probs(rng, (16, 4, 10))
    F = rng.permutation(16)[:12]
    log_code = LeTCC(8, 16, output_space="log")
    lin = LeTCC(8, 16, lam_dec=LOG_POLICY)  # the same lams, linear space
    est = log_code.decode(P[F], F)
    ref = lin.decode(np.log(P[F]), F)
    ref = np.exp(ref - ref.max(-1, keepdims=True))
    np.testing.assert_allclose(est, ref / ref.sum(-1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(est.sum(-1), 1.0, rtol=1e-12)
    assert np.array_equal(log_code.last_lam_dec, lin.last_lam_dec)
    assert LOG_POLICY.local_gap_rule(8, 16) == (LOG_C0, DEFAULT_POLICY.end_factor)
    # the log space and 'auto' (which may take it) are not linear maps of Y; 'linear' is
    assert not log_code.linear_in_outputs and not LeTCC(8, 16).linear_in_outputs
    assert LeTCC(8, 16, output_space="linear").linear_in_outputs
    assert "output_space='log'" in repr(log_code) and "output_space" not in repr(LeTCC(8, 16))


def test_lam_per_decode_is_the_formula_of_the_space_used(monkeypatch):
    """No search per decode: GCV never runs, the local rule's compiled rows
    run once per new answering set and space (then cached), and the lams are
    the formula's (LOG_C0 in log space, the default c in linear space)."""
    calls = {"rows": 0}
    real = letcc_code.local_gap_rows

    def counting(*a):
        calls["rows"] += 1
        return real(*a)

    def no_search(*a, **k):
        raise AssertionError("a lam search ran during a decode")

    monkeypatch.setattr(letcc_code, "local_gap_rows", counting)
    monkeypatch.setattr(letcc_code, "select_lam_gcv", no_search)
    rng = np.random.default_rng(8)
    code = LeTCC(8, 16)
    P = _probs(rng, (16, 5, 10))
    R = rng.standard_normal((16, 5, 10))
    sets = [np.sort(rng.permutation(16)[:n]) for n in (9, 11, 12, 14)]
    for rep in range(3):
        for F in sets:
            for Y, space, c in ((P, "log", LOG_C0), (R, "linear", DEFAULT_POLICY.local_gap_rule(8, 16)[0])):
                code.decode(Y[F], F)
                assert code.last_output_space == space
                np.testing.assert_array_equal(code.last_lam_dec,
                                              local_gap_lams(code.beta[F], code.alpha, c, LOCAL_END_FACTOR))
    assert calls["rows"] == 2 * len(sets)      # once per (set, space); every repeat is a cache hit


def test_evaluate_decodes_auto_round_by_round_and_right():
    rng = np.random.default_rng(9)
    f, X, y = _random_softmax_layer(seed=9, n=80)
    K, N = 4, 10
    G = ev.group_inputs(X, K)
    exact = ev.exact_outputs(f, G)
    code = LeTCC(K, N)
    out = ev.coded_outputs(code, f, G)
    sets = [np.sort(rng.permutation(N)[:7]), rng.permutation(N)[:5]]
    e = ev.decode_errors(code, out, exact, sets)
    for j, F in enumerate(sets):
        est = np.stack([code.decode(out[F, b], F) for b in range(G.shape[1])], axis=1)
        assert code.last_output_space == "log"
        d = est - exact
        np.testing.assert_allclose(e.mse[j], np.einsum("kbm,kbm->b", d, d) / K, rtol=1e-12)


# ---------------------------------------------------------------- accuracy of the default

def _random_softmax_layer(seed=2026, d=192, n=720):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((d, 10)) / 4.0

    def f(x):
        z = x.reshape(x.shape[0], -1) @ W
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    X = rng.standard_normal((n, d))
    return f, X, f(X).argmax(-1)


def test_default_at_least_as_accurate_as_bacc_at_the_largest_s():
    """A small fixed classifier (a seeded random softmax layer, labels its own
    argmax), K = 8, N = 16, S = N / 2 = 8, 20 straggler sets: the default's
    decoded classes (output_space='auto', which decodes these probabilities
    in log space) are right more often than BACC's, with a lower MSE; the
    linear space, one argument away, is behind it on both."""
    f, X, y = _random_softmax_layer()
    K, N = 8, 16
    G = ev.group_inputs(X, K)
    B = G.shape[1]
    labels = ev.group_labels(y, K, B)
    exact = ev.exact_outputs(f, G)
    codes = {"bacc": BACC(K, N), "default": LeTCC(K, N), "linear": LeTCC(K, N, output_space="linear")}
    outs = {name: ev.coded_outputs(c, f, G) for name, c in codes.items()}
    res = ev.evaluate(codes, outs, exact, {8: ev.fixed_count_sets(N, 8, 20, 0)}, labels, reference="bacc")[8]
    m = res["schemes"]
    assert codes["default"].last_output_space == "log"
    assert m["default"].rel_acc > m["bacc"].rel_acc
    assert m["default"].rel_acc > m["linear"].rel_acc >= m["bacc"].rel_acc
    assert m["default"].mse < m["linear"].mse < m["bacc"].mse
