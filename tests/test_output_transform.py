"""LeTCC's output_space option (letcc.codes.output_space) and the accuracy of
the default on a small fixed classifier (issue 22)."""
import numpy as np
import pytest

from letcc import evaluate as ev
from letcc.codes import BACC, LeTCC
from letcc.codes.lam_defaults import DEFAULT_POLICY, LOG_C0, LOG_POLICY
from letcc.codes.output_space import LOG_FLOOR, from_log, to_log


def _probs(rng, shape, dtype=np.float64):
    z = rng.standard_normal(shape) * 3
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(dtype)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-13), (np.float32, 2e-6)])
def test_round_trip_numpy(dtype, rtol):
    P = _probs(np.random.default_rng(0), (7, 3, 10), dtype)
    L = to_log(P)
    assert L.dtype == dtype and not np.shares_memory(L, P)
    back = from_log(L.copy())
    assert back.dtype == dtype
    np.testing.assert_allclose(back, P, rtol=rtol, atol=0)


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
    np.testing.assert_allclose(from_log(L), P, atol=1e-29)


@pytest.mark.parametrize("bad", [-0.1, np.nan, np.inf])
def test_invalid_probabilities_raise(bad):
    P = _probs(np.random.default_rng(2), (16, 10))
    P[3, 4] = bad
    with pytest.raises(ValueError, match=r"needs probabilities .*Y\[3, 4\]"):
        to_log(P)
    with pytest.raises(ValueError, match="needs probabilities"):
        LeTCC(8, 16, output_space="log").decode(P, np.arange(16))


def test_invalid_probabilities_raise_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="needs probabilities"):
        to_log(torch.tensor([[0.5, -0.5]]))


def test_log_space_needs_a_class_axis_and_a_known_name():
    with pytest.raises(ValueError, match="class axis"):
        LeTCC(8, 16, output_space="log").decode(np.full(16, 0.5), np.arange(16))
    with pytest.raises(ValueError, match="output_space must be one of"):
        LeTCC(8, 16, output_space="logits")


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
    assert not log_code.linear_in_outputs and LeTCC(8, 16).linear_in_outputs
    assert "output_space='log'" in repr(log_code)


def test_linear_space_is_the_default_bit_for_bit():
    rng = np.random.default_rng(4)
    Y = rng.standard_normal((16, 6))
    F = np.sort(rng.permutation(16)[:11])
    assert np.array_equal(LeTCC(8, 16).decode(Y[F], F), LeTCC(8, 16, output_space="linear").decode(Y[F], F))


def _random_softmax_layer(seed=2026, d=192, n=720):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((d, 10)) / 4.0

    def f(x):
        z = x.reshape(x.shape[0], -1) @ W
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    X = rng.standard_normal((n, d))
    return f, X, f(X).argmax(-1)


def test_default_and_log_space_at_least_as_accurate_as_bacc_at_the_largest_s():
    """A small fixed classifier (a seeded random softmax layer, labels its own
    argmax), K = 8, N = 16, S = N / 2 = 8, 20 straggler sets: the default's
    decoded classes are right at least as often as BACC's, and the log
    space's more often still, with a lower MSE."""
    f, X, y = _random_softmax_layer()
    K, N = 8, 16
    G = ev.group_inputs(X, K)
    B = G.shape[1]
    labels = ev.group_labels(y, K, B)
    exact = ev.exact_outputs(f, G)
    codes = {"bacc": BACC(K, N), "default": LeTCC(K, N), "log": LeTCC(K, N, output_space="log")}
    outs = {name: ev.coded_outputs(c, f, G) for name, c in codes.items()}
    res = ev.evaluate(codes, outs, exact, {8: ev.fixed_count_sets(N, 8, 20, 0)}, labels, reference="bacc")[8]
    m = res["schemes"]
    assert m["default"].rel_acc >= m["bacc"].rel_acc
    assert m["log"].rel_acc > m["default"].rel_acc
    assert m["log"].mse < m["default"].mse < m["bacc"].mse
