// pybind11 bindings of the CPU spline core (letcc._core), thin on purpose:
// argument conversion, one dtype dispatch (bind::dispatch_float), the GIL
// released around the compute. The logic lives in headers with no Python in
// them: the linear maps and the dense-vs-banded policy in
// driver/linear_maps.hpp, fit / evaluate / GCV in driver/spline_ops.hpp, the
// tiling over threads in driver/parallel.hpp, the math in reinsch.hpp,
// plan.hpp and the kernels (dispatch.hpp). csrc/test/ checks those headers
// without Python. The user-facing argument checks and their messages are the
// Python layer's (letcc/splines/_validation.py); what is checked here is what
// memory safety needs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bindings_arrays.hpp"
#include "dispatch.hpp"
#include "driver/linear_maps.hpp"
#include "driver/locate.hpp"
#include "driver/locator.hpp"
#include "driver/spline_ops.hpp"
#include "local_gaps.hpp"
#include "output_space_apply.hpp"
#include "reinsch.hpp"
#include "smoother_rows.hpp"
#include "thread_pool.hpp"

namespace py = pybind11;
using namespace letcc;
using bind::FloatKind;
using bind::as_f64_vector;
using bind::columns_of;
using bind::dispatch_float;

// bindings_control.cpp: the local runtime's control segment (round counter, task doorbell).
void register_control(py::module_& mod);
// output_space.cpp: the compiled passes of LeTCC's log output space.
void register_output_space(py::module_& mod);
// bindings_copy.cpp: the serving master's small copies, with the GIL held.
void register_copy(py::module_& mod);
// bindings_waiter.cpp: the compiled waiting rule of a round (round_waiter.hpp).
void register_waiter(py::module_& mod);

namespace {

std::string shape_text(const std::vector<py::ssize_t>& shape) {
    return std::string(py::str(py::tuple(py::cast(shape))));
}

// The caller's `out` for a result of this shape and y's dtype: a writeable
// C-contiguous numpy array not overlapping y.
py::array checked_out(const py::object& outobj, const py::array& y, const std::vector<py::ssize_t>& shape) {
    if (!py::isinstance<py::array>(outobj)) throw py::type_error("out must be a numpy array");
    py::array out = py::reinterpret_borrow<py::array>(outobj);
    if (!out.dtype().is(y.dtype()))
        throw py::type_error("out has dtype " + std::string(py::str(out.dtype())) + " but y has dtype " +
                             std::string(py::str(y.dtype())));
    if (!(out.flags() & py::array::c_style) || !out.writeable())
        throw py::value_error("out must be a writeable C-contiguous array");
    const std::vector<py::ssize_t> got(out.shape(), out.shape() + out.ndim());
    if (got != shape)
        throw py::value_error("out has shape " + shape_text(got) + " but the result has shape " + shape_text(shape));
    if (bind::ranges_overlap(y, out)) throw py::value_error("out must not overlap y");
    return out;
}

// Applies a linear map (SplinePlan or DenseMap) to y along its first axis.
// Fast path: y a C-contiguous float32/float64 ndarray with y.shape[0] == n.
// Returns None when y is not such an array, or has another number of rows
// (the Python side, letcc/splines/_linear_map.py, then converts it or says
// what is wrong); raises for a bad `out`.
template <class Map>
py::object apply_map(const Map& map, const py::object& yobj, const py::object& outobj, int threads) {
    if (!py::isinstance<py::array>(yobj)) return py::none();
    py::array y = py::reinterpret_borrow<py::array>(yobj);
    const FloatKind kind = bind::float_kind(y);
    if (kind == FloatKind::none || y.ndim() < 1 || y.shape(0) != map.n()) return py::none();
    const std::size_t m = columns_of(y);
    const std::vector<py::ssize_t> shape = bind::shape_with_rows(y, map.q());
    py::array out = outobj.is_none() ? py::array() : checked_out(outobj, y, shape);
    dispatch_float(kind, [&](auto tag) {
        using T = decltype(tag);
        if (outobj.is_none()) out = py::array_t<T>(shape);
        const T* src = static_cast<const T*>(y.data());
        T* dst = static_cast<T*>(out.mutable_data());
        py::gil_scoped_release release;
        map.template run<T>(src, dst, m, threads);
    });
    return std::move(out);
}

driver::SplinePlan make_plan(const py::array& x, const py::array& w, double lam, const py::array& at, int nu,
                             const std::string& method) {
    const auto xv = as_f64_vector(x, "x");
    const auto wv = as_f64_vector(w, "w");
    const auto av = as_f64_vector(at, "at");
    return driver::SplinePlan(xv, wv, lam, av, nu, method);
}

driver::DenseMap make_dense(const py::array& a) {
    auto arr = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
    if (!arr) throw py::type_error("the operator must be convertible to float64");
    if (arr.ndim() != 2)
        throw py::value_error("the operator must be 2-D (q, n), got ndim = " + std::to_string(arr.ndim()));
    return driver::DenseMap(std::vector<double>(arr.data(), arr.data() + arr.size()), arr.shape(0), arr.shape(1));
}

ReinschFactor factor_of(const py::array& x, const py::array& w, double lam) {
    const auto xv = as_f64_vector(x, "x");
    const auto wv = as_f64_vector(w, "w");
    if (wv.size() != xv.size()) throw py::value_error("w and x differ in length");
    return factor_reinsch(xv.data(), wv.data(), xv.size(), lam);
}

// (g, gamma) at the knots for every column of y (C-contiguous, (n, ...)).
py::tuple fit(const py::array& x, const py::array& w, double lam, const py::array& y, int threads) {
    const ReinschFactor f = factor_of(x, w, lam);
    const FloatKind kind = bind::checked_float_array(y, "y", static_cast<py::ssize_t>(f.n));
    const std::vector<py::ssize_t> shape(y.shape(), y.shape() + y.ndim());
    return dispatch_float(kind, [&](auto tag) -> py::tuple {
        using T = decltype(tag);
        py::array_t<T> g(shape), gam(shape);
        const T* yp = static_cast<const T*>(y.data());
        T* gp = g.mutable_data();
        T* cp = gam.mutable_data();
        {
            py::gil_scoped_release release;
            driver::fit<T>(f, yp, gp, cp, columns_of(y), threads);
        }
        return py::make_tuple(g, gam);
    });
}

// Values (nu = 0, 1, 2) at xq of the natural cubic spline with values g and
// second derivatives gamma at the knots x (both C-contiguous (n, ...), same dtype).
py::array evaluate(const py::array& x, const py::array& g, const py::array& gam, const py::array& xq, int nu,
                   int threads) {
    const auto xv = as_f64_vector(x, "x");
    const auto qv = as_f64_vector(xq, "xq");
    if (nu < 0 || nu > 2) throw py::value_error("nu must be 0, 1 or 2, got " + std::to_string(nu));
    if (xv.empty()) throw py::value_error("need at least one knot");
    const FloatKind kind = bind::checked_float_array(g, "g", static_cast<py::ssize_t>(xv.size()));
    bind::checked_float_array(gam, "gamma", static_cast<py::ssize_t>(xv.size()));
    if (!g.dtype().is(gam.dtype())) throw py::type_error("g and gamma must have the same dtype");
    if (columns_of(g) != columns_of(gam)) throw py::value_error("g and gamma must have the same shape");
    return dispatch_float(kind, [&](auto tag) -> py::array {
        using T = decltype(tag);
        py::array_t<T> out(bind::shape_with_rows(g, static_cast<py::ssize_t>(qv.size())));
        const T* gp = static_cast<const T*>(g.data());
        const T* cp = static_cast<const T*>(gam.data());
        T* op = out.mutable_data();
        {
            py::gil_scoped_release release;
            driver::evaluate<T>(xv, gp, cp, columns_of(g), qv, nu, op, threads);
        }
        return std::move(out);
    });
}

// Weighted GCV score for one lam, all columns sharing it (driver::gcv).
// Returns (score, trace, rss).
py::tuple gcv(const py::array& x, const py::array& w, double lam, const py::array& y, int threads) {
    const ReinschFactor f = factor_of(x, w, lam);
    const FloatKind kind = bind::checked_float_array(y, "y", static_cast<py::ssize_t>(f.n));
    const driver::GcvScore s = dispatch_float(kind, [&](auto tag) {
        using T = decltype(tag);
        const T* yp = static_cast<const T*>(y.data());
        py::gil_scoped_release release;
        return driver::gcv<T>(f, yp, columns_of(y), threads);
    });
    return py::make_tuple(s.score, s.trace, s.rss);
}

// A (q x n) float64 array holding rows (row-major).
py::array_t<double> rows_array(const std::vector<double>& rows, std::int64_t q, std::int64_t n) {
    py::array_t<double> out({static_cast<py::ssize_t>(q), static_cast<py::ssize_t>(n)});
    std::copy(rows.begin(), rows.end(), out.mutable_data());
    return out;
}

// y of the locator's passes: a numpy array of 2 dimensions (answers, outputs);
// TypeError/ValueError naming what it is instead.
py::array answers_array(const py::object& yobj) {
    if (!py::isinstance<py::array>(yobj))
        throw py::type_error("y must be a numpy array (answers, outputs), got " +
                             std::string(py::str(py::type::of(yobj).attr("__name__"))));
    const py::array y = py::reinterpret_borrow<py::array>(yobj);
    if (y.ndim() != 2)
        throw py::value_error("y must be 2-D (answers, outputs), got ndim = " + std::to_string(y.ndim()) +
                              ", shape " + shape_text(std::vector<py::ssize_t>(y.shape(), y.shape() + y.ndim())));
    return y;
}

// pair_inv (None: no pairs, empty) as 4 (n - 1) doubles: each adjacent pair's
// (I - H_PP)^-1 row-major; ValueError naming the count, `what` the n answers.
std::vector<double> pair_inv_vector(const py::object& pairobj, std::size_t n, const std::string& what) {
    if (pairobj.is_none()) return {};
    std::vector<double> pinv = as_f64_vector(py::array::ensure(pairobj), "pair_inv");
    if (pinv.size() != (n >= 1 ? 4 * (n - 1) : 0))
        throw py::value_error("pair_inv has " + std::to_string(pinv.size()) + " entries but " + what + " make " +
                              std::to_string(n >= 1 ? n - 1 : 0) + " adjacent pairs, 4 each (a flat array of 4 (n - 1))");
    return pinv;
}

// The rows of y (rows_in_y of them) that `rows` names in knot order, one per
// knot (None: every row of y, in order); ValueError/TypeError naming what is wrong.
std::vector<std::size_t> knot_rows(const py::object& rowsobj, std::size_t n, std::size_t rows_in_y,
                                   const char* per = "knot") {
    std::vector<std::size_t> idx(n);
    if (rowsobj.is_none()) {
        if (rows_in_y != n)
            throw py::value_error("y has " + std::to_string(rows_in_y) + " rows but the plan has " +
                                  std::to_string(n) + " knots (pass rows= to score some of them)");
        for (std::size_t i = 0; i < n; ++i) idx[i] = i;
    } else {
        const py::array r = py::array::ensure(rowsobj);
        if (!r || (r.dtype().kind() != 'i' && r.dtype().kind() != 'u'))
            throw py::type_error("rows must be an integer array, got " +
                                 (r ? std::string(py::str(r.dtype())) : std::string(py::str(py::type::of(rowsobj).attr("__name__")))));
        if (r.ndim() != 1 || static_cast<std::size_t>(r.shape(0)) != n)
            throw py::value_error("rows must be 1-D with one entry per " + std::string(per) + " (" + std::to_string(n) +
                                  "), got shape " +
                                  shape_text(std::vector<py::ssize_t>(r.shape(), r.shape() + r.ndim())));
        const auto r64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(r);
        for (std::size_t i = 0; i < n; ++i) {
            const std::int64_t v = r64.data()[i];
            if (v < 0 || static_cast<std::size_t>(v) >= rows_in_y)
                throw py::value_error("rows[" + std::to_string(i) + "] = " + std::to_string(v) +
                                      " is out of range for y with " + std::to_string(rows_in_y) + " rows");
            idx[i] = static_cast<std::size_t>(v);
        }
    }
    return idx;
}

// f(rows) with rows[i] (const T* const*, T y's element type) pointing at y's
// row idx[i] of m elements, the GIL released: the locator's passes over any
// rows of the caller's array.
template <class F>
void on_rows(FloatKind kind, const py::array& y, const std::vector<std::size_t>& idx, std::size_t m, F&& f) {
    dispatch_float(kind, [&](auto tag) {
        using T = decltype(tag);
        const T* base = static_cast<const T*>(y.data());
        std::vector<const T*> ptrs(idx.size());
        for (std::size_t i = 0; i < idx.size(); ++i) ptrs[i] = base + idx[i] * m;
        const T* const* rows = ptrs.data();
        py::gil_scoped_release release;
        f(rows);
    });
}

// DenseOperator.apply_rows: A @ y[rows] without gathering the rows (the
// robust decoders' answers kept after erasures): y a C-contiguous
// float32/float64 ndarray (r, ...), rows n indices into its first axis.
// None where y is not such an array (the Python side gathers the rows then).
py::object apply_rows(const driver::DenseMap& map, const py::object& yobj, const py::object& rowsobj, int threads) {
    if (!py::isinstance<py::array>(yobj)) return py::none();
    const py::array y = py::reinterpret_borrow<py::array>(yobj);
    const FloatKind kind = bind::float_kind(y);
    if (kind == FloatKind::none || y.ndim() < 1) return py::none();
    const std::vector<std::size_t> idx = knot_rows(rowsobj, static_cast<std::size_t>(map.n()),
                                                   static_cast<std::size_t>(y.shape(0)), "column of the operator");
    const std::size_t m = columns_of(y);
    py::array out = dispatch_float(kind, [&](auto tag) -> py::array {
        return py::array_t<decltype(tag)>(bind::shape_with_rows(y, map.q()));
    });
    on_rows(kind, y, idx, m, [&](auto rows) {
        using T = std::remove_const_t<std::remove_pointer_t<std::remove_pointer_t<decltype(rows)>>>;
        map.template run_rows<T>(rows, static_cast<T*>(out.mutable_data()), m, threads);
    });
    return std::move(out);
}

// A decode made in the locator's pass (driver::PassDecode): decode None, or a
// DenseOperator of n columns, and its (q, m) output of y's dtype.
struct PassDecodeArg {
    const driver::DenseMap* map = nullptr;
    py::array out;
};

PassDecodeArg pass_decode_arg(const py::object& decodeobj, std::size_t n, std::size_t m, FloatKind kind) {
    PassDecodeArg d;
    if (decodeobj.is_none()) return d;
    if (!py::isinstance<driver::DenseMap>(decodeobj))
        throw py::type_error("decode must be a letcc._core.DenseOperator or None, got " +
                             std::string(py::str(py::type::of(decodeobj).attr("__name__"))));
    d.map = &decodeobj.cast<const driver::DenseMap&>();
    if (static_cast<std::size_t>(d.map->n()) != n || n < 2)
        throw py::value_error("decode has " + std::to_string(d.map->n()) + " columns but the plan has " +
                              std::to_string(n) + " knots (at least 2)");
    const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(d.map->q()), static_cast<py::ssize_t>(m)};
    d.out = kind == FloatKind::f64 ? py::array(py::array_t<double>(shape)) : py::array(py::array_t<float>(shape));
    return d;
}

// The spline locator's scores (s, loo) of n answers (letcc.codes.robust): the
// rows of y (2-D, C-contiguous float32/float64, (answers, m)) that `rows`
// names in knot order (None: every row of y, in order), scored with the
// detection spline `plan` at its knots (its factor; its query points play no
// part) and one_minus_diag = 1 - H_ii (n). pair_inv (flat, 4 (n - 1): each
// adjacent pair's (I - H_PP)^-1 row-major) not None: (s, loo, pair), the
// pair scores too, from the same pass. sums: the pass's sums appended to
// the tuple (locator.hpp's layout, locator_sums_size). decode (a
// DenseOperator of n columns) not None: its map of those rows appended last,
// a (q, m) array of y's dtype made in the same pass (driver::PassDecode: the
// numbers DenseOperator.apply gives on them). One pass over those rows
// (driver/locator.hpp), the GIL released.
py::tuple locator_scores(const driver::SplinePlan& plan, const py::object& yobj, const py::object& omdobj,
                         const py::object& rowsobj, int threads, const py::object& pairobj, bool want_sums,
                         const py::object& decodeobj) {
    const py::array y = answers_array(yobj);
    const FloatKind kind = bind::checked_float_array(y, "y", y.shape(0));
    const std::size_t n = static_cast<std::size_t>(plan.n());
    const std::size_t rows_in_y = static_cast<std::size_t>(y.shape(0));
    const std::size_t m = static_cast<std::size_t>(y.shape(1));
    const std::vector<double> omd = as_f64_vector(py::array::ensure(omdobj), "one_minus_diag");
    if (omd.size() != n)
        throw py::value_error("one_minus_diag has " + std::to_string(omd.size()) + " entries but the plan has " +
                              std::to_string(n) + " knots");
    const bool pairs = !pairobj.is_none();
    const std::vector<double> pinv = pair_inv_vector(pairobj, n, "the plan's " + std::to_string(n) + " knots");
    const std::vector<std::size_t> idx = knot_rows(rowsobj, n, rows_in_y);
    py::array_t<double> s(static_cast<py::ssize_t>(n)), loo(static_cast<py::ssize_t>(n));
    py::array_t<double> pair(static_cast<py::ssize_t>(pairs && n >= 1 ? n - 1 : 0));
    double* sp = s.mutable_data();
    double* lp = loo.mutable_data();
    double* pp = pair.mutable_data();
    py::array_t<double> sums(static_cast<py::ssize_t>(want_sums ? locator_sums_size(plan.n(), pairs) : 0));
    double* sums_p = want_sums ? sums.mutable_data() : nullptr;
    const PassDecodeArg decode = pass_decode_arg(decodeobj, n, m, kind);
    const driver::DenseMap* dec = decode.map;
    py::array est = decode.out;
    void* est_p = dec != nullptr ? est.mutable_data() : nullptr;
    on_rows(kind, y, idx, m, [&](auto rows) {
        using T = std::remove_const_t<std::remove_pointer_t<std::remove_pointer_t<decltype(rows)>>>;
        driver::PassDecode<T> pd;
        if (dec != nullptr) pd = {dec->coeffs_for<T>(), dec->q(), static_cast<T*>(est_p)};
        driver::locator_scores(plan.factor(), plan.tables(), rows, m, omd.data(), threads, sp, lp,
                               pairs ? pinv.data() : nullptr, pp, sums_p, pd);
    });
    py::list out;
    out.append(s);
    out.append(loo);
    if (pairs) out.append(pair);
    if (want_sums) out.append(sums);
    if (dec != nullptr) out.append(est);
    return py::tuple(out);
}

// The locator's scores (s, loo[, pair]) from sums in locator_scores's
// layout made by the caller (letcc.codes.robust's rescoring after an
// erasure: the sums of the answers kept, from the first pass's): the
// formulas' one home (locator.hpp) without a pass. n = len(one_minus_diag);
// sums 3 n, or 4 n with pair_inv (4 (n - 1)).
py::tuple locator_scores_from_sums_py(const py::object& sumsobj, const py::object& omdobj, const py::object& pairobj) {
    const std::vector<double> omd = as_f64_vector(py::array::ensure(omdobj), "one_minus_diag");
    const std::vector<double> sums = as_f64_vector(py::array::ensure(sumsobj), "sums");
    const std::size_t n = omd.size();
    const bool pairs = !pairobj.is_none();
    if (sums.size() != locator_sums_size(static_cast<std::int64_t>(n), pairs))
        throw py::value_error("sums has " + std::to_string(sums.size()) + " entries but " + std::to_string(n) +
                              " answers" + (pairs ? " with pairs" : "") + " need " +
                              std::to_string(locator_sums_size(static_cast<std::int64_t>(n), pairs)));
    const std::vector<double> pinv = pair_inv_vector(pairobj, n, std::to_string(n) + " answers");
    py::array_t<double> s(static_cast<py::ssize_t>(n)), loo(static_cast<py::ssize_t>(n));
    py::array_t<double> pair(static_cast<py::ssize_t>(pairs && n >= 1 ? n - 1 : 0));
    locator_scores_from_sums(n, sums.data(), omd.data(), s.mutable_data(), loo.mutable_data());
    if (!pairs) return py::make_tuple(s, loo);
    locator_pair_scores_from_sums(n, sums.data(), pinv.data(), pair.mutable_data());
    return py::make_tuple(s, loo, pair);
}

// The locator's scores of the answers kept after erasing `erased` (positions
// into the n answers of a first pass: rows of y as in locator_scores) without
// another scoring pass (driver::locator_rescore): hat (n x n) the detection
// spline's hat matrix, first that pass's sums (locator_scores(..., sums=True),
// with pairs when `pairs`). (s, loo[, pair]) of the n - len(erased) answers
// kept, ascending; None where the identity would lose float64 accuracy or an
// erased answer is not finite (then score the answers kept with a pass of
// their own). The GIL released around the pass.
py::object locator_rescore(const py::object& hatobj, const py::object& firstobj, const py::object& yobj,
                           const py::object& rowsobj, const py::object& erasedobj, bool pairs, int threads) {
    const auto hat = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(hatobj);
    if (!hat || hat.ndim() != 2 || hat.shape(0) != hat.shape(1))
        throw py::value_error("hat must be a square 2-D float64 array (the detection spline's hat matrix)");
    const std::size_t n = static_cast<std::size_t>(hat.shape(0));
    const std::vector<double> first = as_f64_vector(py::array::ensure(firstobj), "first");
    if (first.size() != locator_sums_size(static_cast<std::int64_t>(n), pairs))
        throw py::value_error("first has " + std::to_string(first.size()) + " sums but a pass over " +
                              std::to_string(n) + " answers" + (pairs ? " with pairs" : "") + " makes " +
                              std::to_string(locator_sums_size(static_cast<std::int64_t>(n), pairs)));
    const py::array y = answers_array(yobj);
    const FloatKind kind = bind::checked_float_array(y, "y", y.shape(0));
    const std::size_t m = static_cast<std::size_t>(y.shape(1));
    const std::vector<std::size_t> idx = knot_rows(rowsobj, n, static_cast<std::size_t>(y.shape(0)));
    const auto er = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(erasedobj);
    if (!er || er.ndim() != 1) throw py::value_error("erased must be a 1-D integer array of positions");
    std::vector<std::size_t> erased;
    for (py::ssize_t i = 0; i < er.shape(0); ++i) {
        const std::int64_t v = er.data()[i];
        if (v < 0 || static_cast<std::size_t>(v) >= n)
            throw py::value_error("erased[" + std::to_string(i) + "] = " + std::to_string(v) +
                                  " is not a position among the " + std::to_string(n) + " answers");
        erased.push_back(static_cast<std::size_t>(v));
    }
    const std::size_t nk = n >= erased.size() ? n - erased.size() : 0;
    py::array_t<double> s(static_cast<py::ssize_t>(nk)), loo(static_cast<py::ssize_t>(nk));
    py::array_t<double> pair(static_cast<py::ssize_t>(pairs && nk >= 1 ? nk - 1 : 0));
    double* sp = s.mutable_data();
    double* lp = loo.mutable_data();
    double* pp = pair.mutable_data();
    const double* H = hat.data();
    bool ok = false;
    on_rows(kind, y, idx, m, [&](auto rows) {
        ok = driver::locator_rescore(H, first.data(), rows, n, m, erased, pairs, threads, sp, lp, pp);
    });
    if (!ok) return py::none();
    if (pairs) return py::make_tuple(s, loo, pair);
    return py::make_tuple(s, loo);
}

// A threshold per number of answers kept for the locate: None (an empty
// function), a number, or a callable k -> number called with the GIL taken
// (a calibrated test calibrates a size the first time it is asked).
std::function<double(std::size_t)> threshold_function(const py::object& obj, const char* name) {
    if (obj.is_none()) return {};
    if (PyCallable_Check(obj.ptr())) {
        // the locate holds it while the GIL is released: the object is
        // copied (a reference taken) and released under the GIL
        auto held = std::make_shared<py::object>(obj);
        return [held, name](std::size_t k) {
            py::gil_scoped_acquire gil;
            const py::object v = (*held)(k);
            try {
                return v.cast<double>();
            } catch (const py::cast_error&) {
                throw py::type_error(std::string(name) + "(" + std::to_string(k) + ") must return a number, got " +
                                     std::string(py::str(py::type::of(v).attr("__name__"))));
            }
        };
    }
    double v;
    try {
        v = obj.cast<double>();
    } catch (const py::cast_error&) {
        throw py::type_error(std::string(name) + " must be None, a number or a callable n -> number, got " +
                             std::string(py::str(py::type::of(obj).attr("__name__"))));
    }
    return [v](std::size_t) { return v; };
}

// The spline locator's steps in one call (driver::spline_locate; what
// letcc.codes.robust.spline_locate does with them): the answers in the rows
// of y that `rows` names in knot order (as locator_scores), the detection
// spline of all n (plan at its knots, one_minus_diag, pair_inv, hat, the
// ascending knots, its lam), at most E erasures, the thresholds ratio and
// pair_ratio (threshold_function; later_ratio, the tests after the first
// step's, empty: ratio), decode as locator_scores's. Returns
// (erased: int64 positions in the order erased, kept: the others ascending,
// report: (top, statistic,
// threshold or None, pair_top or None, pair_statistic, pair_threshold,
// swap_ran, gap_ran), decoded: the pass's decode where the pass ran and erased
// nothing, else None).
// pair_choice, swap and gap: the bench's and the tests' ablation switches. The GIL
// is released around the locate (a threshold callable takes it again).
py::tuple spline_locate_py(const driver::SplinePlan& plan, const py::object& yobj, const py::object& rowsobj,
                           const py::object& omdobj, const py::object& pairobj, const py::object& hatobj,
                           const py::object& knotsobj, double lam, std::int64_t E, const py::object& ratioobj,
                           const py::object& pairratioobj, const py::object& decodeobj, int threads, bool pair_choice,
                           bool swap, bool gap, const py::object& laterratioobj) {
    const py::array y = answers_array(yobj);
    const FloatKind kind = bind::checked_float_array(y, "y", y.shape(0));
    const std::size_t n = static_cast<std::size_t>(plan.n());
    const std::size_t m = static_cast<std::size_t>(y.shape(1));
    if (E < 0) throw py::value_error("E must be >= 0, got " + std::to_string(E));
    const std::vector<double> omd = as_f64_vector(py::array::ensure(omdobj), "one_minus_diag");
    const std::vector<double> knots = as_f64_vector(py::array::ensure(knotsobj), "knots");
    if (omd.size() != n || knots.size() != n)
        throw py::value_error("one_minus_diag and knots must have one entry per knot of the plan (" +
                              std::to_string(n) + "), got " + std::to_string(omd.size()) + " and " +
                              std::to_string(knots.size()));
    const std::vector<double> pinv = pair_inv_vector(pairobj, n, "the plan's " + std::to_string(n) + " knots");
    const auto hat = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(hatobj);
    if (!hat || hat.ndim() != 2 || static_cast<std::size_t>(hat.shape(0)) != n ||
        static_cast<std::size_t>(hat.shape(1)) != n)
        throw py::value_error("hat must be the detection spline's (" + std::to_string(n) + ", " + std::to_string(n) +
                              ") hat matrix");
    const std::vector<std::size_t> idx = knot_rows(rowsobj, n, static_cast<std::size_t>(y.shape(0)));
    driver::LocateTests tests;
    tests.ratio = threshold_function(ratioobj, "ratio");
    tests.pair_ratio = threshold_function(pairratioobj, "pair_ratio");
    tests.pair_choice = pair_choice;
    tests.swap = swap;
    tests.gap = gap;
    tests.later_ratio = threshold_function(laterratioobj, "later_ratio");
    if (tests.later_ratio && !tests.ratio) throw py::value_error("later_ratio needs ratio (the first step's test)");
    if (tests.pair_ratio && pinv.empty() && n >= kPairMinAnswers)
        throw py::value_error("pair_ratio needs pair_inv (the pairs' (I - H_PP)^-1)");
    driver::LocateSpline d;
    d.plan = &plan;
    d.omd = omd.data();
    d.pair_inv = pinv.empty() ? nullptr : pinv.data();
    d.hat = hat.data();
    d.knots = knots.data();
    d.lam = lam;
    d.n = n;
    const PassDecodeArg decode = pass_decode_arg(decodeobj, n, m, kind);
    const driver::DenseMap* dec = decode.map;
    py::array est = decode.out;
    void* est_p = dec != nullptr ? est.mutable_data() : nullptr;
    driver::LocateReport rep;
    std::vector<std::size_t> erased;
    on_rows(kind, y, idx, m, [&](auto rows) {
        using T = std::remove_const_t<std::remove_pointer_t<std::remove_pointer_t<decltype(rows)>>>;
        driver::PassDecode<T> pd;
        if (dec != nullptr) pd = {dec->coeffs_for<T>(), dec->q(), static_cast<T*>(est_p)};
        erased = driver::spline_locate<T>(d, rows, m, static_cast<std::size_t>(E), tests, threads, rep, pd);
    });
    py::array_t<std::int64_t> out(static_cast<py::ssize_t>(erased.size()));
    for (std::size_t i = 0; i < erased.size(); ++i) out.mutable_data()[i] = static_cast<std::int64_t>(erased[i]);
    std::vector<char> gone(n, 0);
    for (std::size_t e : erased) gone[e] = 1;
    py::array_t<std::int64_t> kept(static_cast<py::ssize_t>(n - erased.size()));
    for (std::size_t i = 0, t = 0; i < n; ++i)
        if (!gone[i]) kept.mutable_data()[t++] = static_cast<std::int64_t>(i);
    const py::object thr = tests.ratio ? py::object(py::float_(rep.threshold)) : py::object(py::none());
    const py::object ptop = rep.has_pair ? py::object(py::make_tuple(rep.pair_top, rep.pair_top + 1)) : py::none();
    const py::tuple report = py::make_tuple(rep.top, rep.statistic, thr, ptop, rep.pair_statistic,
                                            rep.pair_threshold, rep.swap_ran, rep.gap_ran);
    // the pass's decode, where the pass ran (with steps) and erased nothing
    const bool pass_ran = rep.top >= 0;
    const py::object decoded = dec != nullptr && pass_ran && erased.empty() ? py::object(est) : py::object(py::none());
    return py::make_tuple(out, kept, report, decoded);
}

// not_erasable (n) and pair_not_erasable (n - 1) of the ascending detection
// knots (erasable_masks, driver/locate.hpp): bool arrays.
py::tuple erasable_masks_py(const py::object& knotsobj) {
    const std::vector<double> knots = as_f64_vector(py::array::ensure(knotsobj), "knots");
    const ErasableMasks mk = erasable_masks(knots.data(), knots.size());
    py::array_t<bool> single(static_cast<py::ssize_t>(mk.not_single.size()));
    py::array_t<bool> pair(static_cast<py::ssize_t>(mk.not_pair.size()));
    for (std::size_t i = 0; i < mk.not_single.size(); ++i) single.mutable_data()[i] = mk.not_single[i] != 0;
    for (std::size_t i = 0; i < mk.not_pair.size(); ++i) pair.mutable_data()[i] = mk.not_pair[i] != 0;
    return py::make_tuple(single, pair);
}

// A bool mask of n entries or None (a test's not-erasable answers or pairs).
std::vector<bool> mask_vector(const py::object& obj, std::size_t n, const char* name) {
    if (obj.is_none()) return {};
    const auto a = py::array_t<bool, py::array::c_style | py::array::forcecast>::ensure(obj);
    if (!a || a.ndim() != 1 || static_cast<std::size_t>(a.shape(0)) != n)
        throw py::value_error(std::string(name) + " must be a 1-D bool array of " + std::to_string(n) +
                              " entries or None");
    return std::vector<bool>(a.data(), a.data() + n);
}

// The numbers a locator step tests: s (and pair, not None) set to 0 in
// place where not_erasable (pair_not_erasable) holds, then (top, median,
// pair_top): np.argmax(s), the median of loo as robust._median takes it,
// np.argmax(pair) (-1 without pairs). The compiled locate
// (driver/locate.hpp) takes the same steps with the same helpers
// (np_argmax, np_sorted_median); this call holds them to numpy's in
// tests/test_locator_summary.py.
py::tuple locator_summary(const py::object& sobj, const py::object& looobj, const py::object& pairobj,
                          const py::object& neobj, const py::object& pneobj) {
    auto writable = [](const py::object& obj, const char* name) {
        if (!py::isinstance<py::array_t<double>>(obj))
            throw py::type_error(std::string(name) + " must be a float64 numpy array (it is masked in place)");
        auto a = py::reinterpret_borrow<py::array_t<double>>(obj);
        if (a.ndim() != 1 || !(a.flags() & py::array::c_style) || !a.writeable())
            throw py::value_error(std::string(name) + " must be 1-D, contiguous and writeable (it is masked in place)");
        return a;
    };
    auto s = writable(sobj, "s");
    const std::vector<double> loo = as_f64_vector(py::array::ensure(looobj), "loo");
    const std::size_t n = static_cast<std::size_t>(s.shape(0));
    if (n == 0 || loo.size() != n)
        throw py::value_error("s and loo must have the same length >= 1, got " + std::to_string(n) + " and " +
                              std::to_string(loo.size()));
    double* sp = s.mutable_data();
    const std::vector<bool> ne = mask_vector(neobj, n, "not_erasable");
    for (std::size_t i = 0; i < ne.size(); ++i)
        if (ne[i]) sp[i] = 0.0;
    const std::size_t top = np_argmax(sp, n);
    const double med = np_sorted_median(loo.data(), n);
    std::int64_t pair_top = -1;
    if (!pairobj.is_none()) {
        auto p = writable(pairobj, "pair");
        if (static_cast<std::size_t>(p.shape(0)) + 1 != n)
            throw py::value_error("pair has " + std::to_string(p.shape(0)) + " entries but " + std::to_string(n) +
                                  " answers make " + std::to_string(n - 1) + " adjacent pairs");
        double* pp = p.mutable_data();
        const std::vector<bool> pne = mask_vector(pneobj, n - 1, "pair_not_erasable");
        for (std::size_t i = 0; i < pne.size(); ++i)
            if (pne[i]) pp[i] = 0.0;
        if (n >= 2) pair_top = static_cast<std::int64_t>(np_argmax(pp, n - 1));
    }
    return py::make_tuple(static_cast<std::int64_t>(top), med, pair_top);
}

// (I - H_PP)^-1 of each adjacent pair (locator.hpp's pair_inverses): flat 4 (n - 1).
py::array_t<double> pair_inverses_py(const py::object& omdobj, const py::object& upperobj, const py::object& lowerobj) {
    const std::vector<double> omd = as_f64_vector(py::array::ensure(omdobj), "one_minus_diag");
    const std::vector<double> up = as_f64_vector(py::array::ensure(upperobj), "upper");
    const std::vector<double> lo = as_f64_vector(py::array::ensure(lowerobj), "lower");
    const std::size_t n = omd.size();
    if (up.size() + 1 != std::max<std::size_t>(n, 1) || lo.size() != up.size())
        throw py::value_error("upper and lower need " + std::to_string(n >= 1 ? n - 1 : 0) +
                              " entries each (one per adjacent pair of " + std::to_string(n) + " answers)");
    py::array_t<double> out(static_cast<py::ssize_t>(n >= 1 ? 4 * (n - 1) : 0));
    pair_inverses(n, omd.data(), up.data(), lo.data(), out.mutable_data());
    return out;
}

}  // namespace

PYBIND11_MODULE(_core, mod) {
    mod.doc() = "letcc's compiled CPU core: Reinsch smoothing splines over many columns";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const std::invalid_argument& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        }
    });
    using driver::DenseMap;
    using driver::SplinePlan;
    py::class_<SplinePlan>(mod, "Plan")
        .def(py::init(&make_plan), py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("at"), py::arg("nu") = 0,
             py::arg("method") = "auto")
        .def("method", &SplinePlan::method, py::arg("float64"))
        .def_property_readonly("n", &SplinePlan::n)
        .def_property_readonly("q", &SplinePlan::q)
        .def("apply", &apply_map<SplinePlan>, py::arg("y"), py::arg("out") = py::none(), py::arg("threads") = 0)
        .def("apply_log", &apply_log_space<SplinePlan>, py::arg("y"), py::arg("check_sums"), py::arg("tol"),
             py::arg("floor"), py::arg("order") = py::none())  // LeTCC's log space in one call (output_space_apply.hpp)
        .def("matrix",
             [](const SplinePlan& p) {
                 py::array_t<double> out({static_cast<py::ssize_t>(p.q()), static_cast<py::ssize_t>(p.n())});
                 double* op = out.mutable_data();
                 py::gil_scoped_release release;
                 p.matrix(op);
                 return out;
             })
        .def("trace", [](const SplinePlan& p) { return smoother_trace(p.factor()); });
    py::class_<DenseMap>(mod, "DenseOperator")
        .def(py::init(&make_dense), py::arg("a"))
        .def_property_readonly("n", &DenseMap::n)
        .def_property_readonly("q", &DenseMap::q)
        .def("apply", &apply_map<DenseMap>, py::arg("y"), py::arg("out") = py::none(), py::arg("threads") = 0)
        .def("apply_rows", &apply_rows, py::arg("y"), py::arg("rows"), py::arg("threads") = 0)
        .def("apply_log", &apply_log_space<DenseMap>, py::arg("y"), py::arg("check_sums"), py::arg("tol"),
             py::arg("floor"), py::arg("order") = py::none())  // LeTCC's log space in one call (output_space_apply.hpp)
        .def("matrix", [](const DenseMap& d) { return rows_array(d.matrix(), d.q(), d.n()); });
    mod.def("fit", &fit, py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("y"), py::arg("threads") = 0);
    mod.def("evaluate", &evaluate, py::arg("x"), py::arg("g"), py::arg("gamma"), py::arg("xq"), py::arg("nu"),
            py::arg("threads") = 0);
    mod.def("gcv", &gcv, py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("y"), py::arg("threads") = 0);
    mod.def("smoother_trace", [](const py::array& x, const py::array& w, double lam) {
        return smoother_trace(factor_of(x, w, lam));
    }, py::arg("x"), py::arg("w"), py::arg("lam"));
    mod.def(
        "smoother_rows",
        [](const py::array& x, const py::array& w, const py::array& lams, const py::array& at, int nu) {
            const auto xv = as_f64_vector(x, "x");
            const auto wv = as_f64_vector(w, "w");
            const auto lv = as_f64_vector(lams, "lam");
            const auto av = as_f64_vector(at, "at");
            if (wv.size() != xv.size())
                throw py::value_error("w has length " + std::to_string(wv.size()) + " but x has length " +
                                      std::to_string(xv.size()));
            if (lv.size() != av.size())
                throw py::value_error("lam has " + std::to_string(lv.size()) + " entries but at has " +
                                      std::to_string(av.size()));
            if (nu < 0 || nu > 2) throw py::value_error("nu must be 0, 1 or 2, got " + std::to_string(nu));
            std::vector<double> rows = smoother_rows(xv.data(), wv.data(), xv.size(), lv.data(), av.data(),
                                                     av.size(), nu);
            return rows_array(rows, av.size(), xv.size());
        },
        py::arg("x"), py::arg("w"), py::arg("lams"), py::arg("at"), py::arg("nu") = 0);
    mod.def(
        "local_gap_rows",
        // (lams, rows) of the local-gap decoder on nodes x at points at: lam_k =
        // c * phi_k^3 (local_gaps.hpp), row k = smoother_rows' row with lam_k,
        // unit weights, values (nu = 0). The caller has checked x (strictly
        // increasing, n >= 3) and at (finite).
        [](const py::array& x, const py::array& at, double c, double end_factor) {
            const auto xv = as_f64_vector(x, "x");
            const auto av = as_f64_vector(at, "at");
            if (xv.empty() || av.empty()) throw py::value_error("x and at must not be empty");
            py::array_t<double> lams(static_cast<py::ssize_t>(av.size()));
            local_gap_lams(xv.data(), xv.size(), av.data(), av.size(), c, end_factor, lams.mutable_data());
            const std::vector<double> w(xv.size(), 1.0);
            std::vector<double> rows = smoother_rows(xv.data(), w.data(), xv.size(), lams.data(), av.data(),
                                                     av.size(), 0);
            return py::make_tuple(lams, rows_array(rows, av.size(), xv.size()));
        },
        py::arg("x"), py::arg("at"), py::arg("c"), py::arg("end_factor"));
    mod.def("locator_scores", &locator_scores, py::arg("plan"), py::arg("y"), py::arg("one_minus_diag"),
            py::arg("rows") = py::none(), py::arg("threads") = 0, py::arg("pair_inv") = py::none(),
            py::arg("sums") = false, py::arg("decode") = py::none());
    mod.def("locator_rescore", &locator_rescore, py::arg("hat"), py::arg("first"), py::arg("y"), py::arg("rows"),
            py::arg("erased"), py::arg("pairs") = false, py::arg("threads") = 0);
    mod.def("locator_summary", &locator_summary, py::arg("s"), py::arg("loo"), py::arg("pair") = py::none(),
            py::arg("not_erasable") = py::none(), py::arg("pair_not_erasable") = py::none());
    mod.def("spline_locate", &spline_locate_py, py::arg("plan"), py::arg("y"), py::arg("rows"),
            py::arg("one_minus_diag"), py::arg("pair_inv"), py::arg("hat"), py::arg("knots"), py::arg("lam"),
            py::arg("E"), py::arg("ratio") = py::none(), py::arg("pair_ratio") = py::none(),
            py::arg("decode") = py::none(), py::arg("threads") = 0, py::arg("pair_choice") = true,
            py::arg("swap") = true, py::arg("gap") = true, py::arg("later_ratio") = py::none());
    mod.def("erasable_masks", &erasable_masks_py, py::arg("knots"));
    mod.attr("PAIR_MIN_ANSWERS") = kPairMinAnswers;
    mod.def("pair_inverses", &pair_inverses_py, py::arg("one_minus_diag"), py::arg("upper"), py::arg("lower"));
    mod.def("locator_scores_from_sums", &locator_scores_from_sums_py, py::arg("sums"), py::arg("one_minus_diag"),
            py::arg("pair_inv") = py::none());
    register_control(mod);
    register_output_space(mod);
    register_copy(mod);
    register_waiter(mod);
    mod.def("set_num_threads", [](int k) { ThreadPool::instance().set_num_threads(k); }, py::arg("k"));
    mod.def("get_num_threads", []() { return ThreadPool::instance().num_threads(); });
    mod.def(
        "_thread_pool_check",
        [](std::size_t ntiles, int threads, double wait_s) {
            // For the tests: runs a parallel_for whose first tile (the caller's
            // run starts at tile 0) waits until another thread has taken a tile
            // from that same run, which only happens if idle threads help with
            // the others' runs. Returns how often each tile ran and whether the
            // wait ended that way (false: it gave up after wait_s seconds).
            std::vector<std::atomic<int>> counts(ntiles);
            std::atomic<bool> helped{false};
            const std::thread::id caller = std::this_thread::get_id();
            const std::size_t caller_run_end = ntiles / static_cast<std::size_t>(std::max(threads, 1));
            bool waited_ok = true;
            {
                py::gil_scoped_release release;
                ThreadPool::instance().parallel_for(ntiles, threads, [&](std::size_t t) {
                    counts[t].fetch_add(1);
                    if (std::this_thread::get_id() != caller && t < caller_run_end) helped.store(true);
                    if (t == 0 && std::this_thread::get_id() == caller) {
                        const auto until = std::chrono::steady_clock::now() +
                                           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(wait_s));
                        while (!helped.load() && std::chrono::steady_clock::now() < until)
                            std::this_thread::sleep_for(std::chrono::microseconds(200));
                        waited_ok = helped.load();
                    }
                });
            }
            std::vector<int> out(ntiles);
            for (std::size_t t = 0; t < ntiles; ++t) out[t] = counts[t].load();
            return py::make_tuple(out, waited_ok);
        },
        py::arg("ntiles"), py::arg("threads"), py::arg("wait_s") = 10.0);
    mod.def("kernel_isa", []() { return std::string(kernel_isa()); });
    // pybind11 turns std::invalid_argument into ValueError with its message.
    mod.def("set_kernel_isa", &set_kernel_isa, py::arg("name"));
    mod.def("plan_kernel", &plan_kernel);
    mod.def("dense_max_work", &driver::dense_max_work, py::arg("float64"),
            "The largest n * q for which a plan built now with method='auto' takes the dense operator for "
            "float64 (float64=True) or float32 data: it follows the banded kernel in use (plan_kernel()).");
    mod.def("set_plan_kernel", &set_plan_kernel, py::arg("name"));
}
