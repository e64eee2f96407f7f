"""The decoders' per-call fast paths give exactly what the general paths give.

A production loop decodes every round, often with a new answering set, so
LeTCC with its default lam policy caches decoders by the set and builds new
ones without re-checking what the code guarantees, and `available` given as a
list of ints or a 1-D integer ndarray skips numpy's checks. These tests hold the fast paths to the
general ones (bit for bit) and the errors to the same messages.
"""
import numpy as np
import pytest

import letcc
from letcc.codes import BACC, LeTCC, Replication
from letcc.codes.lam_defaults import DEFAULT_POLICY, LocalGapLam
from letcc.splines import DenseOperator, smoother_rows
from letcc.codes.lam_defaults import local_gap_rows, local_gaps
from letcc.splines.smoother_rows import smoother_rows_checked

CODES = [lambda: LeTCC(4, 8), lambda: BACC(4, 8), lambda: Replication(4, 2)]


def general_policy(beta_available, alpha, N, K):
    """DEFAULT_POLICY seen through a user policy: LeTCC takes its general path."""
    return DEFAULT_POLICY.lam_dec_at(beta_available, alpha, N, K)


class UserPolicy:
    lam_dec_at = staticmethod(general_policy)


@pytest.mark.parametrize("make", CODES)
def test_available_kinds_agree(make, rng):
    code = make()
    for _ in range(20):
        a = rng.permutation(code.N)[: rng.integers(1, code.N + 1)]
        want = code._available(a)
        assert want.dtype == np.int64 and np.array_equal(want, a)
        for dt in (np.int8, np.int32, np.uint16, np.uint64):     # ndarrays of any integer dtype
            got = code._available(a.astype(dt))
            assert got.dtype == np.int64 and np.array_equal(got, a)
        for kind in (list, tuple):
            got = code._available(kind(int(v) for v in a))
            assert got.dtype == np.int64 and np.array_equal(got, want)
        assert np.array_equal(code._available([np.int64(v) for v in a]), want)


@pytest.mark.parametrize("make", CODES)
@pytest.mark.parametrize("available, exc, match", [
    ((1, 3, 1), ValueError, "lists worker 1 more than once"),
    ((0, 8), ValueError, r"available\[1\] = 8 is not a worker index in 0..7"),
    ((-1, 2), ValueError, r"available\[0\] = -1 is not a worker index"),
    ((0.5, 2), TypeError, "integer worker indices"),
    ((2, "1"), TypeError, "integer worker indices"),
])
def test_bad_tuples_get_the_general_errors(make, available, exc, match):
    with pytest.raises(exc, match=match):
        make().decode(np.zeros((len(available), 2)), available)
    with pytest.raises(exc, match=match):                  # the same as an ndarray (its own fast path)
        make().decode(np.zeros((len(available), 2)), np.array(available))


@pytest.mark.parametrize("K, N", [(8, 16), (5, 12), (1, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_set_keyed_decoders_equal_the_general_path(rng, K, N, dtype):
    fast, general = LeTCC(K, N), LeTCC(K, N, lam_dec=UserPolicy())
    assert fast._set_keyed and not general._set_keyed
    sizes = list(range(1, N + 1)) + [int(rng.integers(1, N + 1)) for _ in range(20)]
    for size in sizes:
        a = rng.permutation(N)[:size].tolist()
        Y = rng.standard_normal((size, 3, 2)).astype(dtype)
        got = fast.decode(Y, a)
        want = general.decode(Y, a)
        assert got.dtype == dtype and got.shape == (K, 3, 2)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(fast.last_lam_dec, general.last_lam_dec)
        assert type(fast.decoder_plan(a)) is type(general.decoder_plan(a))
        np.testing.assert_array_equal(fast.decoder_plan(a).matrix(), general.decoder_plan(a).matrix())


def test_set_keyed_lams_are_read_only_and_cached(rng):
    code = LeTCC(8, 16)
    Y = rng.standard_normal((12, 4))
    a = [3, 0, 15, 7, 9, 1, 2, 11, 12, 5, 6, 14]
    first = code.decode(Y, a)
    lam = code.last_lam_dec
    assert isinstance(lam, np.ndarray) and lam.shape == (8,) and not lam.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        lam[0] = 1.0
    again = code.decode(Y[::-1], a[::-1])     # same set, other order: a cache hit
    np.testing.assert_array_equal(first, again)
    assert (code._decoders.hits, code._decoders.misses) == (1, 1)
    assert code.last_lam_dec is lam


def test_policies_that_state_the_local_gap_rule_are_set_keyed(rng):
    # the fast path is chosen by what a policy says (local_gap_rule), not by its type
    assert LeTCC(4, 8)._set_keyed and LeTCC(4, 8, lam_dec=LocalGapLam(c_dec=1e-2))._set_keyed
    assert LeTCC(4, 8, lam_dec=letcc.LamPolicy())._set_keyed      # the same formula, another class
    assert not LeTCC(4, 8, lam_dec=letcc.LamPolicy(local=False))._set_keyed
    assert not LeTCC(4, 8, lam_dec=letcc.LamPolicy(noise="gcv"))._set_keyed

    class Doubled(LocalGapLam):   # another rule: it says so
        def lam_dec_at(self, beta_available, alpha, N, K):
            return 2.0 * super().lam_dec_at(beta_available, alpha, N, K)

        def local_gap_rule(self, K, N):
            return None

    for lam_dec in (Doubled(), UserPolicy(), 1e-3, "gcv"):
        assert not LeTCC(4, 8, lam_dec=lam_dec)._set_keyed
    # a stated rule decodes exactly as the same rule asked on every decode
    stated, asked = LeTCC(8, 16, lam_dec=letcc.LamPolicy()), LeTCC(8, 16, lam_dec=UserPolicy())
    for size in (2, 5, 11, 16):
        a = rng.permutation(16)[:size].tolist()
        Y = rng.standard_normal((size, 3))
        np.testing.assert_array_equal(stated.decode(Y, a), asked.decode(Y, a))


def test_a_stated_rule_is_checked():
    class Bad(LocalGapLam):
        def local_gap_rule(self, K, N):
            return (-1.0, 16.0)

    with pytest.raises(ValueError, match=r"local_gap_rule c returned -1.0"):
        LeTCC(4, 8, lam_dec=Bad())


def test_smoother_rows_checked_equals_smoother_rows(rng):
    for n in (1, 2, 3, 7, 40):
        x = np.sort(rng.uniform(-1, 1, n)) + np.arange(n) * 1e-3
        at = rng.uniform(-1.2, 1.2, 9)
        lams = rng.uniform(0, 1e-2, 9)
        np.testing.assert_array_equal(smoother_rows_checked(x, at, lams), smoother_rows(x, at, lams))


@pytest.mark.parametrize("c, end_factor", [(5.6e-3, 16.0), (0.3, 1.0), (1e-6, 0.0)])
def test_local_gap_rows_equal_the_policy_arithmetic(rng, c, end_factor):
    # the compiled lams and rows, bit for bit those of local_gaps + smoother_rows
    for n in (3, 4, 9, 30):
        for inner in (True, False):
            x = np.sort(rng.uniform(-1, 1, n)) + np.arange(n) * 1e-3
            if inner:                     # nodes at the domain ends: no end padding
                x[0], x[-1] = -1.0, 1.0
            at = np.concatenate([rng.uniform(-1, 1, 7), [x[0], x[-1], x[1], -1.0, 1.0]])
            lams, rows = local_gap_rows(x, at, c, end_factor)
            phi = local_gaps(x, at, end_factor)
            np.testing.assert_array_equal(lams, c * phi * phi * phi)
            np.testing.assert_array_equal(rows, smoother_rows_checked(x, at, lams))


def test_local_gap_rows_refuse_empty_input():
    with pytest.raises(ValueError, match="x and at must not be empty"):
        local_gap_rows(np.zeros(0), np.zeros(3), 1e-3, 16.0)


def test_dense_operator_from_checked(rng):
    a = rng.standard_normal((5, 7))
    y = rng.standard_normal((7, 30)).astype(np.float32)
    op = DenseOperator._from_checked(np.ascontiguousarray(a))
    assert (op.q, op.n) == (5, 7) and isinstance(op, letcc.splines.DenseOperator)
    np.testing.assert_array_equal(op(y), DenseOperator(a)(y))
    a[2, 3] = np.inf
    with pytest.raises(ValueError, match=r"non-finite entry a\[2, 3\] = inf"):
        DenseOperator._from_checked(a)


DECODERS = {
    "letcc-default": lambda K, N: LeTCC(K, N),
    "letcc-fixed": lambda K, N: LeTCC(K, N, lam_dec=1e-4),
    "letcc-user-policy": lambda K, N: LeTCC(K, N, lam_dec=UserPolicy()),
    "bacc": lambda K, N: BACC(K, N),
}
TOL = {np.float32: 2e-6, np.float64: 1e-13}


@pytest.mark.parametrize("name", sorted(DECODERS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trailing", [(1,), (255,), (256,), (3, 100), (1000,)])
def test_answers_out_of_order_decode_like_sorted_ones(rng, name, dtype, trailing):
    """Wide rows out of order: the dense decoders permute their columns instead
    of copying Y; every other case copies Y into order. Same estimates."""
    K, N = 8, 16
    code = DECODERS[name](K, N)
    for _ in range(5):
        a = rng.permutation(N)[:12]
        Y = rng.standard_normal((12,) + trailing).astype(dtype)
        got = code.decode(Y, a.tolist())
        order = np.argsort(a)
        want = code.decode(Y[order], a[order].tolist())
        assert got.dtype == dtype and got.shape == (K,) + trailing
        M = code.decoder_matrix(a) if isinstance(code, BACC) else code.decoder_plan(a).matrix()
        scale = np.abs(M).sum(axis=1).max() * np.abs(Y).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * scale)


@pytest.mark.parametrize("name, wide, copies", [
    ("letcc-default", True, False), ("bacc", True, False),          # dense decoders permute columns
    ("letcc-default", False, True), ("bacc", False, True),          # narrow rows: copying is cheaper
    ("letcc-fixed", True, True), ("letcc-user-policy", True, True),  # banded plan / policy may want GCV
])
def test_which_decodes_copy_the_rows(monkeypatch, rng, name, wide, copies):
    import letcc.codes._base as base

    code = DECODERS[name](8, 16)
    a = [5, 0, 9, 3, 12, 1, 7, 15, 2, 10, 4, 14]
    Y = rng.standard_normal((12, base.PERMUTE_MIN_ROW_ITEMS if wide else base.PERMUTE_MIN_ROW_ITEMS - 1))
    calls = []
    real = base.take_rows
    monkeypatch.setattr(base, "take_rows", lambda *args: calls.append(1) or real(*args))
    code.decode(Y, a)
    assert bool(calls) == copies
    calls.clear()
    code.decode(Y[np.argsort(a)], sorted(a))        # ascending: never a copy
    assert not calls
