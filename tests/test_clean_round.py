"""The clean-round test in front of LeTCC's spline locator (issue 28):
letcc.codes.clean_round and LeTCC(adversaries=E)'s default decoder."""
import numpy as np
import pytest

from letcc.adversaries import Colluding, ConstantShift, GaussianNoise, RelabelClasses, SignFlip, UniformBounded
from letcc.codes import BACC, LeTCC
from letcc.codes.clean_round import (CALIBRATIONS, calibrate, calibration_rounds, check_false_alarm,
                                     synthetic_outputs)
from letcc.codes.output_space import probability_answers


def honest_rounds(code, rounds, space, seed):
    """(N, rounds, 10) honest synthetic answers (another seed than the
    calibration's: fresh functions and inputs of the same family)."""
    return synthetic_outputs(code.encoder, code.K, rounds, space, np.random.default_rng(seed))


def smooth_rounds(code, rounds, seed, freq=(0.5, 2.0), m=6):
    """(N, rounds, m) a smooth non-classifier f, not of the calibration's
    family: sines of random frequency (in `freq`) along the inputs. At
    frequencies of 0.5-2 the coded outputs turn every few worker nodes and
    a wrong answer hides among the honest ones (bench/results/adversarial.md);
    at 0.05-0.2 one wrong answer stands out."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((code.K, rounds, 3))
    U = np.asarray(code.encoder(X))
    w = rng.uniform(*freq, size=(rounds, m, 3))
    return np.sin(np.einsum("rod,nrd->nro", w, U) + rng.uniform(0, 6, (rounds, m)))


# ------------------------------------------------------------ the false-alarm rate


def test_false_alarm_rate_on_honest_rounds_is_near_the_stated_rate():
    K, N, n, fa = 6, 20, 18, 0.05
    code = LeTCC(K, N, adversaries=2, false_alarm=fa, output_space="linear")
    rounds = 1500
    Y = honest_rounds(code, rounds, "linear", seed=1)
    rng = np.random.default_rng(2)
    alarms = 0
    for r in range(rounds):
        F = np.sort(rng.choice(N, n, replace=False))
        _, flagged = code.decode(Y[F, r], F, return_flagged=True)
        alarms += flagged.size > 0
    # binomial(1500, 0.05): mean 75, sd 8.4; [40, 115] is about +-4.5 sd
    assert 40 <= alarms <= 115, alarms


def test_false_alarm_rate_in_log_space_and_on_a_function_outside_the_family():
    K, N, n = 8, 24, 22
    code = LeTCC(K, N, adversaries=2, false_alarm=0.02)
    rounds = 1000
    P = honest_rounds(code, rounds, "log", seed=3)
    P = np.exp(P)                                        # probabilities: the decoder takes the logs itself
    S = smooth_rounds(code, rounds, seed=4)
    rng = np.random.default_rng(5)
    alarms = {"log": 0, "smooth": 0}
    for r in range(rounds):
        F = np.sort(rng.choice(N, n, replace=False))
        alarms["log"] += code.decode(P[F, r], F, return_flagged=True)[1].size > 0
        assert code.last_output_space == "log"
        alarms["smooth"] += code.decode(S[F, r], F, return_flagged=True)[1].size > 0
        assert code.last_output_space == "linear"
    # log: the calibration's family, binomial(1000, 0.02) (mean 20, sd 4.4): within 4.5 sd
    assert 2 <= alarms["log"] <= 40, alarms
    # smooth sines: not the family; the threshold must not alarm much more often than stated
    assert alarms["smooth"] <= 40, alarms


def test_calibration_is_deterministic_cached_and_shared():
    a, b = LeTCC(5, 16, adversaries=1, false_alarm=0.1), LeTCC(5, 16, adversaries=2, false_alarm=0.1)
    t = a._clean_test.threshold(14, "linear")
    assert t == b._clean_test.threshold(14, "linear")
    got = calibrate(a.encoder, a.beta, 5, 14, "linear", 0.1)
    assert t == got.single and got.pair == np.inf
    assert a._clean_test.later_threshold(14, "linear") == got.later == a.clean_round_threshold(14, later=True)
    assert got.later <= got.single                      # a looser quantile of the same rounds
    with pytest.raises(ValueError, match="pair and later name different thresholds"):
        b.clean_round_threshold(14, pair=True, later=True)
    assert a._clean_test._key + (14, "linear") in CALIBRATIONS
    assert t > 1.0                                      # the top score over the median: at least 1
    assert a._clean_test.threshold(14, "log") != t      # one per space
    assert calibration_rounds(1e-3) == 20000 and calibration_rounds(0.5) == 4000


# ------------------------------------------------------------ clean rounds are the plain decoder's


@pytest.mark.parametrize("space", ["linear", "log"])
def test_a_clean_round_decodes_bit_for_bit_as_the_plain_decoder(space):
    K, N = 8, 24
    code, plain = LeTCC(K, N, adversaries=2), LeTCC(K, N)
    Y = honest_rounds(code, 40, space, seed=6)
    if space == "log":
        Y = np.exp(Y)
    rng = np.random.default_rng(7)
    clean = 0
    for r in range(40):
        F = rng.permutation(N)[:22]                     # any order
        est, flagged = code.decode(Y[F, r], F, return_flagged=True)
        assert code.last_output_space == space
        if flagged.size == 0:
            clean += 1
            for _ in range(2):                          # the plain decoder's first and later (fused) passes
                np.testing.assert_array_equal(est, plain.decode(Y[F, r], F))
    assert clean >= 36


def test_erased_answers_leave_the_plain_decode_of_the_rest():
    K, N = 8, 24
    code, plain = LeTCC(K, N, adversaries=2), LeTCC(K, N)
    Y = smooth_rounds(code, 1, seed=8, freq=(0.05, 0.2), m=10)[:, 0]
    F = np.arange(N)
    Yc, adv = SignFlip(2).corrupt(Y, F, np.random.default_rng(9))
    est, flagged = code.decode(Yc, F, return_flagged=True)
    np.testing.assert_array_equal(flagged, adv)
    keep = np.setdiff1d(F, adv)
    np.testing.assert_array_equal(est, plain.decode(Y[keep], keep))


# ------------------------------------------------------------ the log space and the probability check


def test_probabilities_with_adversaries_decode_in_log_space_with_the_check_on():
    K, N = 8, 24
    code, plain = LeTCC(K, N, adversaries=2), LeTCC(K, N)
    assert code.valid == "auto" and code.false_alarm == 1e-3
    P = np.exp(honest_rounds(code, 1, "log", seed=10)[:, 0])
    F = np.arange(1, N)
    Pc, adv = UniformBounded(2).corrupt(P[F], F, np.random.default_rng(11))
    est, flagged = code.decode(Pc, F, return_flagged=True)
    assert code.last_output_space == "log"
    np.testing.assert_array_equal(flagged, adv)         # not probability vectors: erased by the check
    keep = np.setdiff1d(F, adv)
    np.testing.assert_array_equal(est, plain.decode(P[keep], keep))
    assert plain.last_output_space == "log"
    # more than E answers off the simplex: not a classifier's round, decoded linearly
    Pc[:5] = -Pc[:5]
    code.decode(Pc, F)
    assert code.last_output_space == "linear"
    # valid=None: nothing may be erased for the check, so only a round of all probabilities is logged
    nocheck = LeTCC(K, N, adversaries=2, valid=None)
    nocheck.decode(P[F], F)
    assert nocheck.last_output_space == "log"


def test_probability_answers_per_row():
    rng = np.random.default_rng(12)
    P = rng.dirichlet(np.ones(4), size=(6, 3))
    P[1, 2, 0] = -1e-9
    P[4, 0] *= 1.01
    np.testing.assert_array_equal(probability_answers(P), [True, False, True, True, False, True])
    assert probability_answers(P[:, 0, 0]) is None and probability_answers(P.astype(np.int64)) is None


# ------------------------------------------------------------ every adversary model is caught


@pytest.mark.parametrize("make", [lambda E: SignFlip(E), lambda E: GaussianNoise(E, scale=0.5),
                                  lambda E: ConstantShift(E, shift=1.0), lambda E: UniformBounded(E, M=1.0),
                                  lambda E: Colluding(E, M=1.0)],
                         ids=["sign-flip", "gaussian", "shift", "bounded", "colluding"])
@pytest.mark.parametrize("E", [1, 2])
def test_each_adversary_model_is_located_on_a_smooth_f(make, E):
    K, N = 8, 24
    code = LeTCC(K, N, adversaries=E)
    Y = smooth_rounds(code, 30, seed=13, freq=(0.05, 0.2), m=10)
    rng = np.random.default_rng(14)
    hit = total = wrong = 0
    for r in range(30):
        F = np.sort(rng.choice(N, 22, replace=False))
        Yc, adv = make(E).corrupt(Y[F, r], F, rng)
        _, flagged = code.decode(Yc, F, return_flagged=True)
        hit += np.isin(adv, flagged).sum()
        total += adv.size
        wrong += np.setdiff1d(flagged, adv).size
    assert hit >= 0.9 * total and wrong <= 0.1 * total, (hit, total, wrong)


@pytest.mark.parametrize("make", [lambda E: RelabelClasses(E, classes=10),
                                  lambda E: Colluding(E, vector=np.eye(10)[3])],
                         ids=["relabel", "colluding-one-hot"])
def test_wrong_answers_that_stay_probabilities_are_located_on_a_smooth_classifier(make):
    # a soft classifier (probabilities that change smoothly along the nodes).
    # At the default false_alarm=1e-3 the threshold (about 106 at n = 22) is
    # above most relabelled rounds' statistic (20-120 here): the synthetic
    # null is heavy-tailed (bench/results/adversarial.md); at 0.05 most are caught
    K, N, E = 8, 24, 1
    code = LeTCC(K, N, adversaries=E, false_alarm=0.05)
    rng = np.random.default_rng(15)
    X = rng.standard_normal((K, 20, 3))
    U = np.asarray(code.encoder(X))
    W = rng.standard_normal((20, 10, 3))
    logits = 3.0 * np.einsum("rcd,nrd->nrc", W, np.sin(0.2 * U))
    P = np.exp(logits - logits.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    hit = wrong = 0
    for r in range(20):
        F = np.sort(rng.choice(N, 22, replace=False))
        Pc, adv = make(E).corrupt(P[F, r], F, rng)
        _, flagged = code.decode(Pc, F, return_flagged=True)
        assert code.last_output_space == "log"
        hit += np.isin(adv, flagged).sum()
        wrong += np.setdiff1d(flagged, adv).size
    assert hit >= 10 and wrong <= 3, (hit, wrong)   # relabel: 12 of 20 measured


# ------------------------------------------------------------ the other rules and the errors


def test_flag_threshold_and_false_alarm_none_keep_their_meaning():
    K, N = 8, 24
    Y = smooth_rounds(LeTCC(K, N), 1, seed=16)[:, 0]
    F = np.arange(N)
    always = LeTCC(K, N, adversaries=2, false_alarm=None)   # ApproxIFER's rule: E erasures every round
    assert always.decode(Y, F, return_flagged=True)[1].size == 2
    never = LeTCC(K, N, adversaries=2, flag_threshold=float("inf"))
    assert never.decode(Y, F, return_flagged=True)[1].size == 0


@pytest.mark.parametrize("bad,exc,match", [(0.0, ValueError, r"false_alarm must be in .* got 0\.0"),
                                           (1.0, ValueError, r"got 1\.0"), (-0.1, ValueError, r"got -0\.1"),
                                           (float("nan"), ValueError, "got nan"),
                                           (1e-6, ValueError, r"got 1e-06"),
                                           ("1e-3", TypeError, "false_alarm must be a real number.*str '1e-3'"),
                                           (True, TypeError, "bool True")])
def test_bad_false_alarm_values(bad, exc, match):
    with pytest.raises(exc, match=match):
        LeTCC(8, 24, adversaries=1, false_alarm=bad)
    with pytest.raises(exc, match=match):
        check_false_alarm(bad)


def test_valid_auto_is_letcc_s_only():
    with pytest.raises(ValueError, match="valid must be None, 'simplex' or a callable.*'auto'"):
        BACC(8, 24, adversaries=1, valid="auto")
    with pytest.raises(ValueError, match="valid must be None, 'auto', 'simplex' or a callable.*'simplexes'"):
        LeTCC(8, 24, adversaries=1, valid="simplexes")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_probability_answers_logged_matches_the_check_and_the_log(dtype):
    from letcc.codes.output_space import log_or_none, probability_answers_logged, to_log
    rng = np.random.default_rng(17)
    P = rng.dirichlet(np.ones(5), size=(8, 3)).astype(dtype)
    P[[2, 6], 1] = -P[[2, 6], 1]
    prob, Z = probability_answers_logged(P, 2)
    np.testing.assert_array_equal(prob, probability_answers(P))
    assert Z.shape == P.shape and Z.dtype == P.dtype
    for i in range(8):
        if prob[i]:
            # the compiled log the plain decoder takes (numpy's log: within an ulp or two)
            np.testing.assert_array_equal(Z[i:i + 1], log_or_none(P[i:i + 1], strict=True))
            np.testing.assert_allclose(Z[i:i + 1], to_log(P[i:i + 1]), rtol=1e-15 if dtype == np.float64 else 3e-7,
                                       atol=0)
        else:
            assert not Z[i].any()                        # the rows of the answers that failed: 0
    prob, Z = probability_answers_logged(P, 1)           # 2 failures > 1: the scan ends at the second, no logs
    np.testing.assert_array_equal(prob, np.isin(np.arange(8), [0, 1, 3, 4, 5]))
    assert Z is None
    prob, Z = probability_answers_logged(P, 0)           # the scan ends at the first failure
    np.testing.assert_array_equal(prob, np.arange(8) < 2)
    assert Z is None
    L = rng.standard_normal((8, 3, 5))                   # logits: not probabilities
    prob, Z = probability_answers_logged(L, 2)
    assert not prob.any() and Z is None
    prob, Z = probability_answers_logged(np.asfortranarray(P[:, 0]), 2)   # not C-contiguous: the numpy check
    assert Z is None and prob.sum() == 8
    prob, Z = probability_answers_logged(np.zeros((4, 0, 5)), 2)           # no class vectors: the numpy check
    assert Z is None and prob.all()


def test_adversaries_zero_is_the_plain_decoder_bit_for_bit():
    rng = np.random.default_rng(18)
    K, N = 8, 24
    a, b = LeTCC(K, N), LeTCC(K, N, adversaries=0, false_alarm=0.01, valid="simplex")
    P = rng.dirichlet(np.ones(10), size=(20, 3))
    L = rng.standard_normal((20, 3, 10))
    F = rng.permutation(N)[:20]
    for Y in (P, L, P.astype(np.float32)):
        for _ in range(2):
            np.testing.assert_array_equal(b.decode(Y, F), a.decode(Y, F))
            assert a.last_output_space == b.last_output_space


def test_torch_probabilities_with_an_adversary():
    torch = pytest.importorskip("torch")
    K, N = 8, 24
    code = LeTCC(K, N, adversaries=2)
    P = np.exp(honest_rounds(code, 1, "log", seed=19)[:, 0])
    F = np.arange(N)
    Pc = P.copy()
    Pc[5] = -Pc[5]
    est_np, fl_np = code.decode(Pc, F, return_flagged=True)
    est, fl = code.decode(torch.as_tensor(Pc), torch.arange(N), return_flagged=True)
    assert isinstance(est, torch.Tensor) and code.last_output_space == "log"
    np.testing.assert_array_equal(fl, [5])
    np.testing.assert_array_equal(fl_np, [5])
    np.testing.assert_allclose(est.numpy(), est_np, rtol=1e-10, atol=1e-14)


def test_an_isolated_answer_is_never_erased_by_the_test():
    from letcc.codes.robust import erasable
    knots = np.array([0.0, 3.0, 4.0, 5.0, 6.0, 8.0, 9.0])     # gaps 3 1 1 1 2 1: median 1
    np.testing.assert_array_equal(erasable(knots), [False, True, True, True, True, True, True])
    K, N = 8, 24
    code, plain = LeTCC(K, N, adversaries=2), LeTCC(K, N)
    Y = smooth_rounds(code, 1, seed=20, freq=(0.05, 0.2), m=10)[:, 0]
    F = np.setdiff1d(np.arange(N), [1, 2])                   # worker 0 alone at the end
    Yc = Y[F].copy()
    Yc[0] += 5.0                                              # wrong, but nothing to compare it with
    est, flagged = code.decode(Yc, F, return_flagged=True)
    assert 0 not in flagged
    always = LeTCC(K, N, adversaries=1, false_alarm=None)    # the untested rule still may
    assert always.decode(Yc, F, return_flagged=True)[1].tolist() == [0]


def test_clean_round_threshold_ahead_of_serving():
    code = LeTCC(8, 24, adversaries=1, false_alarm=0.2)
    t = code.clean_round_threshold(22, "log")
    assert t == code._clean_test.threshold(22, "log") and t > 1.0
    with pytest.raises(ValueError, match="n must be >= 4, got 3"):
        code.clean_round_threshold(3)
    with pytest.raises(ValueError, match="n must be <= 24, got 25"):
        code.clean_round_threshold(25)
    with pytest.raises(ValueError, match="space must be 'linear' or 'log', got 'logit'"):
        code.clean_round_threshold(22, "logit")
    with pytest.raises(ValueError, match="no clean-round test"):
        LeTCC(8, 24, adversaries=1, false_alarm=None).clean_round_threshold(22)


def test_last_clean_round_reports_the_top_scored_worker():
    K, N = 8, 24
    code = LeTCC(K, N, adversaries=2)
    assert code.last_clean_round is None
    Y = smooth_rounds(code, 1, seed=21, freq=(0.05, 0.2), m=10)[:, 0]
    F = np.arange(N)
    code.decode(Y, F)
    rep = code.last_clean_round
    assert set(rep) == {"worker", "statistic", "threshold", "pair", "pair_statistic", "pair_threshold"}
    assert rep["statistic"] <= rep["threshold"] and rep["pair_statistic"] <= rep["pair_threshold"]
    assert rep["threshold"] == code.clean_round_threshold(N, "linear")
    assert rep["pair_threshold"] == code.clean_round_threshold(N, "linear", pair=True)
    assert rep["pair"][1] == rep["pair"][0] + 1          # every worker answered: adjacent nodes
    Yc = Y.copy()
    Yc[9] = -Yc[9]
    code.decode(Yc, F)
    assert code.last_clean_round["worker"] == 9 and code.last_clean_round["statistic"] > rep["threshold"]
    code.decode(Y[:3], F[:3])                                 # fewer than 4 answers: no test ran
    assert code.last_clean_round is None


# ------------------------------------------------------------ calibration on the model's own rounds


def test_calibration_on_the_models_rounds_is_the_stated_quantiles_of_its_statistics():
    """calibrate_clean_round's thresholds: the quantiles of T (and T2) over
    rounds x sets of the model's honest rounds, written out here with the
    same answering sets; then the code's tests take them."""
    from letcc.codes.clean_round import LATER_FACTOR, PAIR_SHARE
    from letcc.codes.robust import DetectionSplines, detection_knots, locator_scores, round_statistic

    K, N, n, fa = 5, 16, 14, 0.05
    code = LeTCC(K, N, adversaries=2, false_alarm=fa, output_space="linear")
    synthetic = code.clean_round_threshold(n - 3)
    Y = smooth_rounds(code, 40, seed=11, freq=(0.05, 0.2))
    got = code.calibrate_clean_round(Y, sizes=n, sets=25, seed=3)
    assert sorted(got) == [n - 2, n - 1, n]          # and the sizes its rounds reach after erasures
    rng = np.random.default_rng(3)
    knots = detection_knots(code.beta)
    q = lambda a, rate: float(np.quantile(a, 1.0 - rate, method="higher"))     # noqa: E731
    for k in (n - 2, n - 1, n):                      # the sets drawn size after size, ascending
        T, T2 = [], []
        for _ in range(25):
            F = np.sort(rng.choice(N, k, replace=False))
            for r in range(40):
                s, loo, p = locator_scores(DetectionSplines(), knots[F], np.ascontiguousarray(Y[F, r]),
                                           tested=True, pairs=True)
                T.append(round_statistic(s, loo))
                T2.append(round_statistic(p, loo))
        t = got[k]
        assert t.single == q(T, fa) and t.pair == q(T2, PAIR_SHARE * fa) and t.later == q(T, LATER_FACTOR * fa)
        assert code.clean_round_threshold(k) == t.single
        assert code.clean_round_threshold(k, pair=True) == t.pair
        assert code.clean_round_threshold(k, later=True) == t.later
    assert code.clean_round_threshold(n - 3) == synthetic          # other sizes keep the synthetic calibration


def test_a_round_of_a_calibrated_size_takes_no_synthetic_threshold(monkeypatch):
    """A decode of n answers that erases, after calibrate_clean_round(sizes=n):
    every threshold it asks for (the later step's at n - 1) is the model's."""
    from letcc.codes import clean_round

    code = LeTCC(5, 16, adversaries=2, false_alarm=0.05, output_space="linear")
    Y = smooth_rounds(code, 60, seed=12, freq=(0.05, 0.2))
    code.calibrate_clean_round(Y[:, :40], sizes=14, sets=25)

    def no_synthetic(*args, **kwargs):
        raise AssertionError("a synthetic calibration ran in the decode")

    monkeypatch.setattr(clean_round, "calibrate", no_synthetic)
    F = np.arange(1, 15)
    Yr = Y[F, 52].copy()
    Yr[6] += 0.5 * np.abs(Yr).max()
    assert code.decode(Yr, F, return_flagged=True)[1].tolist() == [7]
    assert code.last_clean_round["threshold"] == code.clean_round_threshold(14)


def test_a_calibration_that_raises_changes_nothing():
    code = LeTCC(5, 16, adversaries=2, false_alarm=0.1, output_space="linear")
    before = code.clean_round_threshold(4)
    Y = smooth_rounds(code, 30, seed=13)
    # size 4 would need 200 statistics, 5 (with the pair test) 400: checked before anything is computed
    with pytest.raises(ValueError, match="need at least 400"):
        code.calibrate_clean_round(Y, sizes=[4, 5], sets=10)
    assert code.clean_round_threshold(4) == before


def test_a_model_the_synthetic_family_misjudges_keeps_its_stated_rate_once_calibrated_on_its_rounds():
    """A nearly linear f (sines of low frequency): its honest rounds' T runs
    far above the synthetic rounds', so the synthetic threshold raises an
    alarm in most of them; calibrated on other honest rounds of the same f,
    the alarms on fresh rounds fall to near the stated rate, and a wrong
    answer is still caught."""
    K, N, n, fa = 6, 20, 18, 0.05
    code = LeTCC(K, N, adversaries=1, false_alarm=fa, output_space="linear")
    calib = smooth_rounds(code, 300, seed=21, freq=(0.01, 0.03))
    fresh = smooth_rounds(code, 400, seed=22, freq=(0.01, 0.03))        # other functions of the same kind
    rng = np.random.default_rng(23)
    sets = [np.sort(rng.choice(N, n, replace=False)) for _ in range(400)]

    def alarm_rate():
        return np.mean([code.decode(fresh[F, r], F, return_flagged=True)[1].size > 0 for r, F in enumerate(sets)])

    synthetic = alarm_rate()
    code.calibrate_clean_round(calib, sizes=[n], sets=100)
    own = alarm_rate()
    # measured: 0.445 -> 0.0575 (binomial(400, 0.05): sd 0.011); with 20 sets 0.095: the
    # answering sets matter too, so the calibration wants many of them
    assert synthetic > 0.3 and own < 0.08, (synthetic, own)
    Yw = fresh[sets[0], 0].copy()
    Yw[7] += 0.5 * np.abs(fresh[:, 0]).max()
    assert code.decode(Yw, sets[0], return_flagged=True)[1].tolist() == [int(sets[0][7])]


def test_calibration_on_probability_rounds_is_for_the_log_space():
    from letcc.codes.output_space import from_log

    code = LeTCC(5, 16, adversaries=1, false_alarm=0.1)
    P = from_log(3.0 * smooth_rounds(code, 30, seed=31, m=4))       # softmax rows
    got = code.calibrate_clean_round(P, sizes=[15], sets=10)[15]
    assert code.clean_round_threshold(15, space="log") == got.single
    assert code.clean_round_threshold(15, space="linear") != got.single
    lin = code.calibrate_clean_round(P, sizes=[15], sets=10, space="linear")[15]
    assert code.clean_round_threshold(15, space="linear") == lin.single


def test_calibration_on_the_models_rounds_names_bad_input():
    code = LeTCC(5, 16, adversaries=1, false_alarm=0.1)
    Y = smooth_rounds(code, 30, seed=41)
    with pytest.raises(ValueError, match=r"outputs must be \(N, rounds, ...\) with N = 16 workers.*got shape \(15, 30, 6\)"):
        code.calibrate_clean_round(Y[:15])
    with pytest.raises(ValueError, match=r"got shape \(16,\)"):
        code.calibrate_clean_round(Y[:, 0, 0])
    bad = Y.copy()
    bad[3, 2, 1] = np.nan
    with pytest.raises(ValueError, match=r"outputs must be finite \(honest rounds\), got nan at \(3, 2, 1\)"):
        code.calibrate_clean_round(bad)
    with pytest.raises(ValueError, match=r"30 rounds x 2 sets = 60 statistics per size; the quantiles at "
                                         r"false_alarm=0.1 need at least 200"):
        code.calibrate_clean_round(Y, sizes=[14], sets=2)
    with pytest.raises(ValueError, match="space must be None, 'linear' or 'log', got 'logits'"):
        code.calibrate_clean_round(Y, space="logits")
    with pytest.raises(ValueError, match=r"space='log' needs probability vectors along outputs' last axis"):
        code.calibrate_clean_round(Y, space="log")
    with pytest.raises(ValueError, match="sizes"):
        code.calibrate_clean_round(Y, sizes=[17])
    with pytest.raises(TypeError, match="outputs must hold float32 or float64 numbers, got dtype complex128"):
        code.calibrate_clean_round(Y.astype(complex))
    with pytest.raises(ValueError, match=r"no clean-round test \(false_alarm=None\)"):
        LeTCC(5, 16, adversaries=1, false_alarm=None).calibrate_clean_round(Y)
