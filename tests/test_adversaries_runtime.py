"""The runtime with adversarial workers: CodedInference(adversaries=...)
corrupts the answering workers' outputs before the decode, and RoundInfo
records who was adversarial and who the code flagged."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import letcc
from letcc.adversaries import SignFlip
from letcc.runtime.coded_inference import CodedInference
from letcc.stragglers import FixedCount


class Smooth:
    """f(x) = a smooth map of the inputs (sums of sines), so that a wrong
    answer stands out of its neighbours' values."""

    def __call__(self, x):
        x2 = x.reshape(x.shape[0], -1)
        return np.stack([np.sin(x2).sum(1), np.cos(x2).sum(1), x2[:, 0]], axis=1)


def smooth():
    return Smooth()


def test_runtime_reports_adversarial_and_flagged_workers(rng):
    K, N, d = 3, 20, 4
    code = letcc.LeTCC(K, N, adversaries=1)
    with CodedInference(functools.partial(smooth), code, stragglers=FixedCount(2), seed=5,
                        adversaries=SignFlip(1)) as ci:
        hits = 0
        for _ in range(6):
            X = 0.3 * rng.standard_normal((2 * K, d))
            out = ci(X)
            info = ci.last_round
            assert len(info.adversarial) == 1 and info.adversarial[0] in info.answered
            assert len(info.flagged) == 1 and info.flagged[0] in info.answered
            hits += info.flagged == info.adversarial
            if info.flagged == info.adversarial:
                # the estimate is the plain decode of the honest answers
                groups = np.swapaxes(X.reshape(2, K, d), 0, 1)
                Y = Smooth()(code.encode(groups).reshape(-1, d)).reshape(N, 2, 3)
                keep = sorted(set(info.answered) - set(info.flagged))
                ref = letcc.LeTCC(K, N).decode(Y[keep], keep)
                np.testing.assert_allclose(out, np.swapaxes(ref, 0, 1).reshape(2 * K, 3), rtol=1e-5, atol=1e-5)
        assert hits >= 5


def test_runtime_without_adversaries_records_nothing(rng):
    with CodedInference(functools.partial(smooth), letcc.LeTCC(2, 6)) as ci:
        ci(rng.standard_normal((2, 3)))
        assert ci.last_round.adversarial == () and ci.last_round.flagged == ()
    with pytest.raises(TypeError, match="adversaries"):
        CodedInference(functools.partial(smooth), letcc.LeTCC(2, 6), adversaries=1)
