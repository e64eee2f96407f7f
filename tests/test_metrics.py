"""The paper's MSE and RelAcc."""
import numpy as np
import pytest

from letcc.metrics import accuracy, mse, rel_acc, squared_errors


def test_mse_is_the_mean_squared_l2_norm_per_sample(rng):
    exact = rng.standard_normal((6, 3, 2))
    est = exact + rng.standard_normal((6, 3, 2))
    per_sample = [np.sum((exact[i] - est[i]) ** 2) for i in range(6)]
    np.testing.assert_allclose(squared_errors(exact, est), per_sample, rtol=1e-12)
    assert mse(exact, est) == pytest.approx(np.mean(per_sample), rel=1e-12)
    assert mse(exact, exact) == 0.0


def test_mse_of_float32_and_torch(rng):
    torch = pytest.importorskip("torch")
    exact = rng.standard_normal((5, 4)).astype(np.float32)
    est = exact + np.float32(0.5)
    assert mse(torch.from_numpy(exact), torch.from_numpy(est)) == pytest.approx(4 * 0.25, rel=1e-6)


def test_accuracy_and_rel_acc():
    labels = np.array([0, 1, 2, 1])
    exact = np.eye(3)[[0, 1, 2, 0]]   # base model: 3 of 4 right
    est = np.eye(3)[[0, 1, 0, 0]]     # decoded: 2 of 4 right
    assert accuracy(exact, labels) == 0.75
    assert rel_acc(est, exact, labels) == pytest.approx(0.5 / 0.75)
    assert rel_acc(exact, exact, labels) == 1.0


@pytest.mark.parametrize("call, exc, match", [
    (lambda: mse(np.zeros((3, 2)), np.zeros((3, 3))), ValueError, r"exact has shape \(3, 2\) but estimate has shape"),
    (lambda: mse(np.zeros((0, 2)), np.zeros((0, 2))), ValueError, "zero samples"),
    (lambda: mse(np.float64(1.0), np.float64(1.0)), ValueError, "must have a sample axis"),
    (lambda: accuracy(np.zeros(3), np.zeros(3, dtype=int)), ValueError, r"shape \(samples, classes\)"),
    (lambda: accuracy(np.zeros((3, 2)), np.zeros(2, dtype=int)), ValueError, r"labels must have shape \(3,\)"),
    (lambda: accuracy(np.zeros((3, 2)), np.zeros(3)), TypeError, "integer class indices"),
    (lambda: rel_acc(np.eye(2), np.eye(2)[[1, 0]], np.array([0, 1])), ValueError, "base model's accuracy"),
])
def test_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
