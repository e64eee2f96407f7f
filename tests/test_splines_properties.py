"""Property-based tests (hypothesis): random shapes, dtypes, strides and
values thrown at SmoothingSpline, SplineSmoother and their calls.

The only acceptable outcomes are a result of the documented shape and dtype,
or a ValueError / TypeError. Anything else (another exception, a crash of the
process, a wrong shape, a silently changed dtype) fails. When every input is
sane (well-separated finite knots, finite moderate data and lam) the result
must also be finite.
"""
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import letcc

torch = pytest.importorskip("torch")

ACCEPTED = (ValueError, TypeError)
DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.uint8, np.bool_, np.complex128,
          np.complex64, object, "U4"]
# LETCC_HYPOTHESIS_EXAMPLES=5000 for a longer hunt than the default quick run
SETTINGS = settings(
    max_examples=int(os.environ.get("LETCC_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

any_float = st.floats(allow_nan=True, allow_infinity=True, width=64)
moderate = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@st.composite
def good_knots(draw, n):
    """n strictly increasing knots with gaps not too small relative to their span."""
    start = draw(st.floats(-100, 100))
    gaps = draw(st.lists(st.floats(0.05, 10.0), min_size=max(n - 1, 0), max_size=max(n - 1, 0)))
    return np.concatenate([[start], start + np.cumsum(gaps)]) if n > 0 else np.zeros(0)


@st.composite
def knots(draw):
    """(x, sane): mostly good knots of random length, sometimes anything."""
    kind = draw(st.sampled_from(["good"] * 8 + ["random", "weird"]))
    if kind == "good":
        x = draw(good_knots(draw(st.integers(1, 7))))
        sane = True
    elif kind == "random":
        x = np.array(draw(st.lists(any_float, min_size=0, max_size=7)))
        sane = False
    else:
        x = draw(st.sampled_from([
            [], 3.0, [[0.0, 1.0]], ["a", "b"], [0.0, 1j], np.array([0, 1, 2], dtype=object),
            [0.0, 1e-320, 1.0], [-1e308, 0.0, 1e308], [0.0, 1e-300, 2e-300], None,
        ]))
        sane = False
    return as_kind(draw, x), sane


def as_kind(draw, x):
    """The same numbers as a list, an array of some dtype, a strided or read-only view."""
    if not isinstance(x, np.ndarray) or x.dtype == object:
        return x
    how = draw(st.sampled_from(["array", "array", "list", "f32", "strided", "readonly", "torch", "int"]))
    if how == "list":
        return x.tolist()
    if how == "f32":
        with np.errstate(all="ignore"):
            return x.astype(np.float32)
    if how == "int":
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return x.astype(np.int64)
    if how == "strided":
        return np.repeat(x, 2, axis=0)[::2]
    if how == "readonly":
        x = x.copy()
        x.flags.writeable = False
        return x
    if how == "torch" and x.dtype.kind == "f":
        return torch.from_numpy(np.ascontiguousarray(x))
    return x


@st.composite
def data_array(draw, n):
    """(y, sane): an array whose first axis has n entries (or not), of a random
    dtype, shape, layout and values."""
    rows = draw(mostly(st.just(n), st.integers(0, 8)))
    extra = tuple(draw(st.lists(st.integers(0, 4), max_size=2)))
    shape = (rows,) + extra
    size = int(np.prod(shape))
    finite = draw(st.booleans())
    vals = draw(st.lists(moderate if finite else any_float, min_size=size, max_size=size))
    base = np.array(vals, dtype=np.float64).reshape(shape)
    dtype = draw(st.sampled_from([np.float64, np.float32] * 4 + DTYPES))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = base.astype(dtype)
    layout = draw(st.sampled_from(["C", "C", "F", "strided", "reversed", "readonly", "torch", "torch", "list", "scalar"]))
    if layout == "F":
        y = np.asfortranarray(y)
    elif layout == "strided" and y.ndim >= 2:
        y = np.repeat(y, 2, axis=-1)[..., ::2]
    elif layout == "reversed" and y.ndim >= 2:
        y = np.ascontiguousarray(y[..., ::-1])[..., ::-1]
    elif layout == "readonly":
        y = y.copy()
        y.flags.writeable = False
    elif layout == "torch" and y.dtype in (np.float32, np.float64, np.float16, np.int64, np.complex64):
        y = torch.from_numpy(np.ascontiguousarray(y))
        if y.ndim >= 2 and draw(st.booleans()):
            y = y.transpose(0, -1).contiguous().transpose(0, -1)
    elif layout == "list" and y.dtype == np.float64:
        y = y.tolist()
    elif layout == "scalar":
        y = y.reshape(-1)[0] if y.size else np.float64(1.0)
    sane = finite and rows == n and np.dtype(dtype).kind in "fiub" and dtype != np.float16
    return y, sane


def mostly(valid, invalid, invalid_share=10):
    """valid most of the time, invalid about 1 time in invalid_share (so that
    most examples reach the calls, and every refusal path is still drawn)."""
    return st.sampled_from([True] * (invalid_share - 1) + [False]).flatmap(lambda ok: valid if ok else invalid)


def lam_values(with_none):
    valid = [st.floats(1e-6, 1e6), st.just(0.0), st.integers(0, 3)] + ([st.just(None)] if with_none else [])
    return mostly(
        st.one_of(*valid),
        st.one_of(any_float, st.integers(-3, -1), st.sampled_from(["1", 1j, True, np.float32(0.5), np.array([1.0])])),
        invalid_share=6,
    )


def weights(draw, n):
    kind = draw(st.sampled_from(["none"] * 4 + ["good"] * 4 + ["any", "wrong length"]))
    if kind == "none":
        return None, True
    if kind == "good":
        return np.array(draw(st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n))), True
    if kind == "any":
        return np.array(draw(st.lists(any_float, min_size=n, max_size=n))), False
    return np.ones(n + draw(st.integers(1, 3))), False


points = mostly(
    st.one_of(
        st.lists(st.floats(-200, 200), min_size=1, max_size=6).map(np.array),
        st.floats(-200, 200),
        st.sampled_from([np.array([0.5], dtype=np.float32), [3, 4], np.arange(3)[::-1]]),
    ),
    st.one_of(
        st.lists(any_float, min_size=0, max_size=6).map(np.array),
        st.sampled_from([np.zeros((2, 2)), "a", [1j], None, []]),
    ),
    invalid_share=6,
)


def points_sane(p):
    """Finite points not far outside any sane knots (far extrapolation of
    float32 data may overflow, legitimately)."""
    try:
        arr = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return bool(np.all(np.abs(arr) <= 1e3))


def numpy_of(y):
    return y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)


def expected_dtype(y):
    arr = numpy_of(y)
    return np.float32 if arr.dtype == np.float32 else np.float64


def check_result(res, y, lead_shape, sane, out=None):
    # the result is `out` when given, else of y's kind (torch in, torch out)
    kind = torch.Tensor if isinstance(y if out is None else out, torch.Tensor) else np.ndarray
    if not (isinstance(res, kind) or (kind is np.ndarray and np.isscalar(res))):
        raise AssertionError(f"result of type {type(res)} for input of type {type(y)}")
    arr = numpy_of(res)
    ny = numpy_of(y)
    assert arr.shape == tuple(lead_shape) + ny.shape[1:], (arr.shape, lead_shape, ny.shape)
    assert arr.dtype == expected_dtype(y), (arr.dtype, ny.dtype)
    if sane:
        assert np.isfinite(arr).all()


def quietly(fn, *args, **kw):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


@SETTINGS
@given(data=st.data())
def test_spline_smoother_accepts_or_refuses_cleanly(data):
    (x, x_sane) = data.draw(knots())
    n = len(x) if isinstance(x, (list, np.ndarray, torch.Tensor)) and np.ndim(x) == 1 else 3
    w, w_sane = weights(data.draw, n)
    lam = data.draw(lam_values(with_none=False))
    at = data.draw(points)
    method = data.draw(mostly(st.sampled_from(["auto", "banded", "dense"]), st.sampled_from(["fast", None, 1])))
    nu = data.draw(mostly(st.sampled_from([0, 0, 1, 2]), st.sampled_from([-1, 3, 1.0, None, True])))
    try:
        plan = quietly(letcc.SplineSmoother, x, at, lam=lam, w=w, method=method, nu=nu)
    except ACCEPTED as exc:
        event(f"plan refused: {str(exc)[:25]}")
        return
    assert plan.n == n and plan.q >= 1
    lam_sane = isinstance(lam, (int, float)) and not isinstance(lam, bool) and 0 <= lam <= 1e6
    for _ in range(2):
        y, y_sane = data.draw(data_array(n))
        out = None
        if data.draw(st.booleans()):
            ny = numpy_of(y)
            shape = (plan.q,) + ny.shape[1:] if ny.ndim else (plan.q,)
            out_dtype = data.draw(mostly(st.just(expected_dtype(y)), st.sampled_from([np.float32, np.float64, np.int64])))
            out_shape = data.draw(mostly(st.just(shape), st.just((plan.q + 1,) + shape[1:])))
            out = np.zeros(out_shape, dtype=out_dtype)
            if data.draw(st.booleans()) and out.ndim >= 2:
                out = np.zeros(out.shape[:-1] + (2 * out.shape[-1],), out.dtype)[..., ::2]
        try:
            res = quietly(plan, y, out=out)
        except ACCEPTED as exc:
            event(f"call refused: {str(exc)[:25]}")
            continue
        event("called")
        if out is not None:
            assert res is out
        sane = x_sane and w_sane and lam_sane and y_sane and points_sane(at)
        check_result(res, y, (plan.q,), sane, out)
        if sane and out is None:
            ny = np.asarray(numpy_of(y), dtype=np.float64).reshape(n, -1)
            A = plan.matrix()
            got = np.asarray(numpy_of(res), dtype=np.float64).reshape(plan.q, -1)
            # rounding of A @ y is relative to |A| @ |y| (rows of A cancel far outside the knots)
            scale = (np.abs(A) @ np.abs(ny)).max(initial=0.0)
            tol = 1e-6 if expected_dtype(y) == np.float32 else 1e-12
            assert np.all(np.abs(got - A @ ny) <= tol * (1.0 + scale))


@SETTINGS
@given(data=st.data())
def test_smoothing_spline_accepts_or_refuses_cleanly(data):
    (x, x_sane) = data.draw(knots())
    n = len(x) if isinstance(x, (list, np.ndarray, torch.Tensor)) and np.ndim(x) == 1 else 3
    w, w_sane = weights(data.draw, n)
    lam = data.draw(lam_values(with_none=True))
    y, y_sane = data.draw(data_array(n))
    ndim = numpy_of(y).ndim
    axis = data.draw(mostly(
        st.integers(-ndim, ndim - 1) if ndim else st.just(0),
        st.one_of(st.integers(-4, 4), st.sampled_from([1.0, None, "0", True])),
    ))
    if ndim and isinstance(axis, int) and not isinstance(axis, bool) and -ndim <= axis < ndim:
        # put the knot axis where `axis` says
        if isinstance(y, np.ndarray):
            y = np.moveaxis(y, 0, axis)
        elif isinstance(y, torch.Tensor):
            y = torch.movedim(y, 0, axis)
        elif axis % ndim != 0:
            y = np.moveaxis(np.asarray(y), 0, axis).tolist()
    try:
        s = quietly(letcc.SmoothingSpline, x, y, lam=lam, w=w, axis=axis)
    except ACCEPTED as exc:
        event(f"spline refused: {str(exc)[:25]}")
        return
    assert isinstance(s.lam, float) and s.lam >= 0
    # the knot axis moved to the front: the shape the results are checked against
    ny = np.moveaxis(numpy_of(y), axis, 0)
    lam_sane = lam is None or (isinstance(lam, (int, float)) and not isinstance(lam, bool) and 0 <= lam <= 1e6)
    for _ in range(2):
        xq = data.draw(points)
        nu = data.draw(mostly(st.sampled_from([0, 1, 2, np.int64(1)]), st.sampled_from([-1, 3, 1.0, None, True, "1"])))
        try:
            res = quietly(s, xq, nu=nu)
        except ACCEPTED as exc:
            event(f"evaluation refused: {str(exc)[:25]}")
            continue
        event("evaluated")
        lead = np.shape(np.asarray(xq, dtype=np.float64))
        kind_y = torch.from_numpy(np.zeros(1)) if isinstance(y, torch.Tensor) else np.zeros(1)
        arr = numpy_of(res)
        assert arr.shape == lead + ny.shape[1:], (arr.shape, lead, ny.shape)
        assert arr.dtype == expected_dtype(y)
        assert isinstance(res, type(kind_y)) or np.isscalar(res) or isinstance(res, np.generic)
        if x_sane and w_sane and lam_sane and y_sane and points_sane(xq):
            assert np.isfinite(arr).all()
