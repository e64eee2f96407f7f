"""Adversary models (letcc.adversaries): each does what it says, seeded,
with the frequencies it claims; and the evaluator applies them with the same
draws for every scheme."""
import numpy as np
import pytest

from letcc.adversaries import Colluding, ConstantShift, GaussianNoise, RelabelClasses, SignFlip, UniformBounded
from letcc.codes import BACC, LeTCC
from letcc.evaluate import corrupt_rounds, decode_errors, evaluate, summarize


def _Y(rng, n=12, m=5):
    return rng.random((n, m))


def test_sign_flip_negates_exactly_E_answering_workers(rng):
    Y = _Y(rng)
    avail = np.array([11, 3, 5, 0, 7, 9, 2, 4, 6, 8, 10, 1])
    Yc, adv = SignFlip(3).corrupt(Y, avail, np.random.default_rng(1))
    assert adv.dtype == np.int64 and adv.size == 3 and np.all(np.diff(adv) > 0) and np.isin(adv, avail).all()
    rows = np.isin(avail, adv)
    np.testing.assert_array_equal(Yc[rows], -Y[rows])
    np.testing.assert_array_equal(Yc[~rows], Y[~rows])
    assert not np.shares_memory(Yc, Y)


def test_draws_are_seeded_and_uniform_over_the_answering_workers():
    avail = np.arange(2, 12)
    model = SignFlip(2)
    a = [model.choose(avail, np.random.default_rng([5, i])) for i in range(4000)]
    b = [model.choose(avail, np.random.default_rng([5, i])) for i in range(4000)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    counts = np.bincount(np.concatenate(a), minlength=12)
    assert counts[:2].sum() == 0
    # each of 10 workers is adversarial with probability 2/10: 800 of 4000 expected, sd ~ 25
    assert np.all(np.abs(counts[2:] - 800) < 5 * np.sqrt(4000 * 0.2 * 0.8))
    # pairs are uniform too: the chosen pair is never a repeat and covers all 45 pairs
    pairs = {tuple(x) for x in a}
    assert len(pairs) == 45


def test_fixed_workers_corrupt_only_when_they_answer(rng):
    model = UniformBounded(workers=[1, 4], M=0.5)
    assert model.E == 2
    Y = _Y(rng, 4)
    Yc, adv = model.corrupt(Y, [0, 1, 2, 3], np.random.default_rng(0))
    np.testing.assert_array_equal(adv, [1])
    assert np.all(np.abs(Yc[1]) <= 0.5) and np.array_equal(Yc[[0, 2, 3]], Y[[0, 2, 3]])


def test_gaussian_noise_has_its_scale_and_shift_adds_a_constant(rng):
    Y = np.zeros((10, 20000))
    Yc, adv = GaussianNoise(1, scale=0.3).corrupt(Y, np.arange(10), np.random.default_rng(2))
    noise = Yc[adv[0]]
    assert abs(noise.mean()) < 5 * 0.3 / np.sqrt(20000) and abs(noise.std() - 0.3) < 0.01
    Y = _Y(rng)
    Yc, adv = ConstantShift(2, shift=-0.7).corrupt(Y, np.arange(12), np.random.default_rng(3))
    np.testing.assert_allclose(Yc[adv] - Y[adv], -0.7, rtol=0, atol=1e-15)


def test_uniform_bounded_is_uniform_on_minus_M_M():
    Y = np.full((6, 50000), 3.0)
    Yc, adv = UniformBounded(1, M=2.0).corrupt(Y, np.arange(6), np.random.default_rng(4))
    v = Yc[adv[0]]
    assert v.min() >= -2.0 and v.max() <= 2.0
    # uniform on [-2, 2]: mean 0, variance 16/12; deciles at -1.6, -1.2, ...
    assert abs(v.mean()) < 0.03 and abs(v.var() - 16 / 12) < 0.03
    np.testing.assert_allclose(np.quantile(v, np.linspace(0.1, 0.9, 9)), np.linspace(-1.6, 1.6, 9), atol=0.04)


def test_colluding_adversaries_share_one_vector(rng):
    Y = _Y(rng, 10, 4)
    Yc, adv = Colluding(3, M=1.0).corrupt(Y, np.arange(10), np.random.default_rng(5))
    assert adv.size == 3
    assert np.array_equal(Yc[adv[0]], Yc[adv[1]]) and np.array_equal(Yc[adv[1]], Yc[adv[2]])
    assert np.all(np.abs(Yc[adv]) <= 1.0)
    vec = np.array([1.0, -2.0, 0.5, 9.0])
    Yc, adv = Colluding(2, vector=vec).corrupt(Y, np.arange(10), np.random.default_rng(6))
    np.testing.assert_array_equal(Yc[adv], np.stack([vec, vec]))
    with pytest.raises(ValueError, match="4"):
        Colluding(1, vector=[1.0, 2.0]).corrupt(Y, np.arange(10), np.random.default_rng(0))


def test_relabel_classes_rolls_every_class_vector_by_a_uniform_nonzero_shift(rng):
    C = 5
    P = rng.dirichlet(np.ones(C), size=(12, 3))            # 12 workers, 3 class vectors each
    avail = np.arange(12)
    seen = np.zeros(C, dtype=np.int64)
    for i in range(2000):
        Pc, adv = RelabelClasses(2, classes=C).corrupt(P, avail, np.random.default_rng([9, i]))
        rows = np.isin(avail, adv)
        np.testing.assert_array_equal(Pc[~rows], P[~rows])
        for w in np.flatnonzero(rows):
            # the same roll r for all of a worker's class vectors, r in 1..C-1: out[c] = in[c - r]
            r = [k for k in range(C) if np.array_equal(Pc[w], np.roll(P[w], k, axis=-1))]
            assert len(r) == 1 and r[0] != 0
            seen[r[0]] += 1
        np.testing.assert_allclose(Pc.sum(-1), 1.0)         # still probability vectors
        assert Pc.min() >= 0
    assert seen[0] == 0
    # 4000 draws uniform over 1..C-1: 1000 each, sd ~27
    assert np.abs(seen[1:] - 1000).max() < 150
    with pytest.raises(ValueError, match="multiple of classes = 4"):
        RelabelClasses(1, classes=4).corrupt(np.ones((3, 6)), np.arange(3), np.random.default_rng(0))
    with pytest.raises(ValueError, match="classes"):
        RelabelClasses(1, classes=1)


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    Y = torch.rand(8, 3, dtype=torch.float32)
    Yc, adv = SignFlip(2).corrupt(Y, np.arange(8), np.random.default_rng(0))
    assert isinstance(Yc, torch.Tensor) and Yc.dtype == torch.float32
    torch.testing.assert_close(Yc[adv], -Y[adv])


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="-1"):
        SignFlip(-1)
    with pytest.raises(ValueError, match="-0.5"):
        UniformBounded(1, M=-0.5)
    with pytest.raises(ValueError, match="shift"):
        ConstantShift(1, shift=0.0)
    with pytest.raises(TypeError, match="Generator"):
        SignFlip(1).choose([0, 1], 3)
    with pytest.raises(ValueError, match="more than once"):
        SignFlip(workers=[1, 1])
    with pytest.raises(TypeError):
        SignFlip()


def test_corrupt_rounds_draws_per_round_in_order(rng):
    YF = rng.random((9, 4, 3))
    avail = np.arange(3, 12)
    out, mask = corrupt_rounds(YF, avail, SignFlip(2), 7, 3)
    assert mask.shape == (4, 9) and np.all(mask.sum(axis=1) == 2)
    g = np.random.default_rng([7, 3, 1])
    for b in range(4):
        ref, adv = SignFlip(2).corrupt(YF[:, b], avail, g)
        np.testing.assert_array_equal(out[:, b], ref)
        np.testing.assert_array_equal(avail[mask[b]], adv)


def _setup(rng, K=3, N=12, B=5):
    def f(X):
        return np.stack([np.sin(X).sum(axis=1), np.cos(X).sum(axis=1)], axis=1)
    G = rng.standard_normal((K, B, 2)) * 0.3
    exact = f(G.reshape(K * B, 2)).reshape(K, B, -1)
    return f, G, exact


def test_decode_errors_with_adversaries_equal_a_direct_computation(rng):
    f, G, exact = _setup(rng)
    K, B = G.shape[:2]
    sets = [np.arange(12), np.array([0, 2, 3, 5, 6, 7, 9, 11])]
    model = UniformBounded(2, M=1.0)
    for code in (LeTCC(K, 12), LeTCC(K, 12, adversaries=2)):
        out = f(code.encode(G).reshape(-1, 2)).reshape(12, B, 2)
        e = decode_errors(code, out, exact, sets, adversaries=model, adversary_seed=11)
        for j, F in enumerate(sets):
            g = np.random.default_rng([11, j, 1])
            for b in range(B):
                Yc, adv = model.corrupt(out[F, b], F, g)
                if code.adversaries:
                    est, fl = code.decode(Yc, F, return_flagged=True)
                    assert e.flagged[j, b] == fl.size and e.flagged_true[j, b] == np.isin(fl, adv).sum()
                else:
                    est = code.decode(Yc, F)
                assert e.adversarial[j, b] == 2
                np.testing.assert_allclose(e.mse[j, b], np.sum((est - exact[:, b]) ** 2) / K, rtol=1e-12)
        m = summarize("x", e, exact)
        if code.adversaries:
            assert m.flag_recall == pytest.approx(e.flagged_true.sum() / e.adversarial.sum())
            assert m.flag_precision == pytest.approx(e.flagged_true.sum() / e.flagged.sum())
        else:
            assert m.flag_recall is None and m.flag_precision is None


def test_evaluate_gives_every_scheme_the_same_adversaries(rng):
    f, G, exact = _setup(rng, B=3)
    K = G.shape[0]
    codes = {"a": LeTCC(K, 12), "b": LeTCC(K, 12, lam_dec=1e-3), "free": LeTCC(K, 12)}
    out = {n: f(c.encode(G).reshape(-1, 2)).reshape(12, 3, 2) for n, c in codes.items()}
    sets = {1: [np.delete(np.arange(12), 4), np.delete(np.arange(12), 9)]}
    adv = {"a": SignFlip(1), "b": SignFlip(1), "free": None}
    res = evaluate(codes, out, exact, sets, adversaries=adv, adversary_seed=3, reference="free")
    ea, eb, ef = (res[1]["errors"][n] for n in ("a", "b", "free"))
    assert ef.adversarial is None and np.all(ea.adversarial == 1)
    # both schemes saw the same corrupted outputs: a's mse equals decode_errors with the same draws
    direct = decode_errors(codes["a"], out["a"], exact, sets[1], adversaries=SignFlip(1), adversary_seed=3)
    np.testing.assert_array_equal(direct.mse, ea.mse)
    assert ea.mse.mean() > ef.mse.mean()
    with pytest.raises(TypeError, match="adversaries"):
        evaluate(codes, out, exact, sets, adversaries=2)
