"""Every bad input to the spline layer fails with a ValueError or TypeError
whose message names the offending value (issue 2's list: x not strictly
increasing, NaN/inf in x, w or lam, w <= 0, lam < 0, length mismatches, empty
arrays, unsupported dtypes, nu out of range; plus shapes, axis and out=)."""
import warnings

import numpy as np
import pytest

import letcc

X = np.array([0.0, 0.5, 1.25, 2.0, 3.0])
Y = np.arange(10.0).reshape(5, 2)


def make_plan(**kw):
    return letcc.SplineSmoother(kw.pop("x", X), kw.pop("at", [0.2, 0.7]), **kw)


def both(**kw):
    """The two constructors with the same (x, w, lam)."""
    x = kw.pop("x", X)
    y = np.zeros(np.shape(x)[:1] if np.ndim(x) == 1 else 3)
    return [
        lambda: letcc.SplineSmoother(x, [0.5], **kw),
        lambda: letcc.SmoothingSpline(x, y, **kw),
    ]


# ---------------------------------------------------------------- x
@pytest.mark.parametrize(
    "x, match",
    [
        ([0.0, 1.0, 1.0, 2.0], r"strictly increasing, but x\[2\] = 1\.0 <= x\[1\] = 1\.0"),
        ([3.0, 2.0, 1.0], r"strictly increasing, but x\[1\] = 2\.0 <= x\[0\] = 3\.0"),
        ([0.0, np.nan, 2.0], r"x\[1\] = nan is not finite"),
        ([0.0, 1.0, np.inf], r"x\[2\] = inf is not finite"),
        ([-np.inf, 1.0, 2.0], r"x\[0\] = -inf is not finite"),
        ([], r"x is empty"),
        ([[0.0, 1.0], [2.0, 3.0]], r"x must be 1-D, got shape \(2, 2\)"),
    ],
)
def test_bad_knots(x, match):
    for make in both(x=x):
        with pytest.raises(ValueError, match=match):
            make()


@pytest.mark.parametrize("x", [[0.0, 1.0 + 1j, 2.0], np.array([0, 1, 2], dtype=complex), "abc", [0.0, "a", 2.0]])
def test_knots_that_are_not_real_numbers(x):
    for make in both(x=x):
        with pytest.raises(TypeError, match=r"x must be"):
            make()


def test_knots_too_close_for_floating_point():
    # valid in exact arithmetic, but the gaps underflow: a ValueError naming
    # the knot and lam, not a RuntimeError from the core
    for make in both(x=[0.0, 1e-320, 1.0], lam=1.0):
        with pytest.raises(ValueError, match=r"knots too close .* lam = 1\b.*x\[1\] = 9\.99989e-321"):
            make()


# ---------------------------------------------------------------- w
@pytest.mark.parametrize(
    "w, match",
    [
        ([1.0, 1.0, 0.0, 1.0, 1.0], r"positive and finite, got w\[2\] = 0\.0"),
        ([1.0, -2.0, 1.0, 1.0, 1.0], r"positive and finite, got w\[1\] = -2\.0"),
        ([1.0, 1.0, 1.0, np.nan, 1.0], r"positive and finite, got w\[3\] = nan"),
        ([1.0, 1.0, 1.0, 1.0, np.inf], r"positive and finite, got w\[4\] = inf"),
        ([1.0, 1.0, 1.0], r"w must have shape \(5,\) to match x, got shape \(3,\)"),
        (np.ones((5, 1)), r"w must have shape \(5,\) to match x, got shape \(5, 1\)"),
        (1.0, r"w must have shape \(5,\) to match x, got shape \(\)"),
    ],
)
def test_bad_weights(w, match):
    for make in both(w=w):
        with pytest.raises(ValueError, match=match):
            make()


@pytest.mark.parametrize("w", [np.ones(5, dtype=complex), "abcde", [1, 1, 1, 1, None, 1][:5] + ["x"]])
def test_weights_that_are_not_real_numbers(w):
    for make in both(w=w):
        with pytest.raises(TypeError, match=r"^w must be"):
            make()


# ---------------------------------------------------------------- lam
@pytest.mark.parametrize(
    "lam, match",
    [
        (-1.0, r"lam must be finite and >= 0, got -1\.0"),
        (-1e-300, r"lam must be finite and >= 0, got -1e-300"),
        (np.nan, r"lam must be finite and >= 0, got nan"),
        (np.inf, r"lam must be finite and >= 0, got inf"),
        (np.float32(-2), r"lam must be finite and >= 0, got .*-2\.0"),
    ],
)
def test_bad_lam_values(lam, match):
    for make in both(lam=lam):
        with pytest.raises(ValueError, match=match):
            make()


@pytest.mark.parametrize("lam", ["1", 1j, True, np.array([1.0]), [0.1]])
def test_lam_that_is_not_a_real_number(lam):
    for make in both(lam=lam):
        with pytest.raises(TypeError, match=r"lam must be a real number"):
            make()


def test_plan_needs_an_explicit_lam():
    with pytest.raises(TypeError, match=r"got None"):
        make_plan(lam=None)


# ---------------------------------------------------------------- evaluation points
@pytest.mark.parametrize(
    "at, match",
    [
        ([], r"at is empty"),
        ([0.0, np.nan], r"at\[1\] = nan is not finite"),
        ([np.inf], r"at\[0\] = inf is not finite"),
        ([[0.0, 1.0]], r"at must be a scalar or 1-D, got shape \(1, 2\)"),
    ],
)
def test_bad_plan_points(at, match):
    with pytest.raises(ValueError, match=match):
        make_plan(at=at)


@pytest.mark.parametrize("at", [[0.5j], "x", [object()]])
def test_plan_points_that_are_not_real_numbers(at):
    with pytest.raises(TypeError, match=r"at must be"):
        make_plan(at=at)


@pytest.mark.parametrize(
    "xq, match",
    [
        ([0.1, -np.inf], r"xq\[1\] = -inf is not finite"),
        (np.nan, r"xq\[0\] = nan is not finite"),
        (np.zeros((2, 2)), r"xq must be a scalar or 1-D, got shape \(2, 2\)"),
    ],
)
def test_bad_evaluation_points(xq, match):
    s = letcc.SmoothingSpline(X, Y, lam=0.1)
    with pytest.raises(ValueError, match=match):
        s(xq)


@pytest.mark.parametrize("xq", [0.5 + 1j, "abc", [None, "a"]])
def test_evaluation_points_that_are_not_real_numbers(xq):
    s = letcc.SmoothingSpline(X, Y, lam=0.1)
    with pytest.raises(TypeError, match=r"xq must be"):
        s(xq)


# ---------------------------------------------------------------- nu
@pytest.mark.parametrize("nu", [3, -1, 100, np.int64(3)])
def test_nu_out_of_range(nu):
    s = letcc.SmoothingSpline(X, Y, lam=0.1)
    with pytest.raises(ValueError, match=rf"nu must be 0, 1 or 2, got (np.int64\()?{int(nu)}"):
        s([0.5], nu=nu)


@pytest.mark.parametrize("nu", [1.0, "1", None, True])
def test_nu_not_an_integer(nu):
    s = letcc.SmoothingSpline(X, Y, lam=0.1)
    with pytest.raises(TypeError, match=r"nu must be an integer 0, 1 or 2, got"):
        s([0.5], nu=nu)


# ---------------------------------------------------------------- y: lengths, shapes, dtypes
def test_y_length_mismatch():
    with pytest.raises(ValueError, match=r"y has 4 entries along axis 0 but x has 5 knots"):
        letcc.SmoothingSpline(X, np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"y has 3 entries along axis 1 but x has 5 knots"):
        letcc.SmoothingSpline(X, np.zeros((5, 3)), axis=1)
    plan = make_plan()
    with pytest.raises(ValueError, match=r"y has 4 rows along the knot axis but the plan has n = 5 knots"):
        plan(np.zeros((4, 2)))  # C-contiguous: the compiled fast path
    with pytest.raises(ValueError, match=r"y has 4 rows along the knot axis but the plan has n = 5 knots"):
        plan(np.zeros((2, 4)).T)  # strided: the general path
    with pytest.raises(ValueError, match=r"y has 6 rows"):
        plan(list(range(6)))


def test_scalar_y():
    with pytest.raises(ValueError, match=r"y must have at least one dimension"):
        make_plan()(np.float64(1.0))
    with pytest.raises(ValueError, match=r"y must have at least one dimension"):
        letcc.SmoothingSpline(X, 2.0)


@pytest.mark.parametrize(
    "dtype, name",
    [(np.complex128, "complex128"), (np.complex64, "complex64"), (np.float16, "float16"), (object, "object"),
     ("U3", "<U3"), ("S2", "|S2"), (np.longdouble, np.dtype(np.longdouble).name)],
)
def test_unsupported_y_dtypes(dtype, name):
    y = np.ones((5, 2)).astype(dtype)
    with pytest.raises(TypeError, match=rf"y must hold float32 or float64 numbers, got dtype {name}"):
        make_plan()(y)
    with pytest.raises(TypeError, match=rf"y must hold float32 or float64 numbers, got dtype {name}"):
        letcc.SmoothingSpline(X, y)


def test_y_that_is_not_numeric():
    with pytest.raises(TypeError, match=r"y must hold float32 or float64"):
        make_plan()(["a", "b", "c", "d", "e"])
    with pytest.raises(TypeError, match=r"got dtype object"):
        letcc.SmoothingSpline(X, [1.0, None, 2.0, 3.0, 4.0])


def test_axis_errors():
    with pytest.raises(ValueError, match=r"axis 2 is out of range for y with 2 dimensions"):
        letcc.SmoothingSpline(X, np.zeros((3, 5)), axis=2)
    with pytest.raises(ValueError, match=r"axis -3 is out of range"):
        letcc.SmoothingSpline(X, np.zeros((3, 5)), axis=-3)
    with pytest.raises(TypeError, match=r"axis must be an integer, got 1\.0"):
        letcc.SmoothingSpline(X, np.zeros((3, 5)), axis=1.0)
    with pytest.raises(TypeError, match=r"axis must be an integer, got True"):
        letcc.SmoothingSpline(X, np.zeros((3, 5)), axis=True)


@pytest.mark.parametrize("x", [[-1e308, 0.0, 1e308, 1.5e308], [-1e308, 1e308, 1.2e308], [0.0, 1e-170, 2e-170, 1.0]])
def test_gcv_refuses_knots_whose_lam_scale_overflows(x):
    # gaps whose sums or inverse squares overflow float64: no lam to search around
    y = np.arange(len(x), dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no RuntimeWarning on the way
        with pytest.raises(ValueError, match=r"lam=None \(GCV\) cannot choose lam for knots x\[0\] = "):
            letcc.SmoothingSpline(np.array(x), y, lam=None)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_gcv_refuses_non_finite_y(bad):
    y = np.ones((5, 3))
    y[2, 1] = bad
    with pytest.raises(ValueError, match=r"lam=None \(GCV\) needs finite y"):
        letcc.SmoothingSpline(X, y, lam=None)


# ---------------------------------------------------------------- out=
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_out_errors(layout):
    plan = make_plan()
    y = Y.copy() if layout == "contiguous" else np.asfortranarray(Y)
    with pytest.raises(ValueError, match=r"out has shape \(3, 2\) but the result has shape \(2, 2\)"):
        plan(y, out=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"out has shape \(2,\) but the result has shape \(2, 2\)"):
        plan(y, out=np.zeros(2))
    with pytest.raises(TypeError, match=r"out has dtype float32 but (y|the result) has dtype float64"):
        plan(y, out=np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError, match=r"out has dtype int64 but (y|the result) has dtype float64"):
        plan(y, out=np.zeros((2, 2), np.int64))
    read_only = np.zeros((2, 2))
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match=r"read-only|writeable"):
        plan(y, out=read_only)
    with pytest.raises(TypeError, match=r"out must be a numpy array or a torch tensor, got list"):
        plan(y, out=[[0.0, 0.0], [0.0, 0.0]])


def test_out_overlapping_y():
    plan = letcc.SplineSmoother(X, X, lam=0.1)
    y = Y.copy()
    ref = plan(y)
    with pytest.raises(ValueError, match=r"out must not overlap y"):
        plan(y, out=y)
    np.testing.assert_array_equal(y, Y)  # y untouched
    # a strided overlapping out goes through a temporary and is correct
    yf = np.asfortranarray(Y)
    assert plan(yf, out=yf) is yf
    np.testing.assert_allclose(yf, ref, rtol=0, atol=1e-12)


def test_torch_unsupported_dtypes():
    torch = pytest.importorskip("torch")
    for dt in (torch.float16, torch.bfloat16):
        with pytest.raises(TypeError, match=rf"got torch dtype {dt}"):
            make_plan()(torch.zeros((5, 2), dtype=dt))
    with pytest.raises(TypeError, match=r"got dtype complex64"):
        make_plan()(torch.zeros((5, 2), dtype=torch.complex64))


def test_plan_method_and_nu_errors():
    with pytest.raises(ValueError, match=r"method must be 'auto', 'banded' or 'dense', got 'fast'"):
        make_plan(method="fast")
    with pytest.raises(ValueError, match=r"nu must be 0, 1 or 2, got 3"):
        make_plan(nu=3)
    with pytest.raises(TypeError, match=r"nu must be an integer 0, 1 or 2, got 1\.5"):
        make_plan(nu=1.5)
