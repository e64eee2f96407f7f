// pybind11 bindings of the CPU spline core (letcc._core). Thin on purpose:
// validation of knots and weights lives in reinsch.hpp, the math in the
// headers; this file converts arrays, releases the GIL around compute and
// splits column tiles over the thread pool.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <chrono>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "dense_kernel.hpp"
#include "dispatch.hpp"
#include "eval_coeffs.hpp"
#include "plan.hpp"
#include "reinsch.hpp"
#include "local_gaps.hpp"
#include "output_space_apply.hpp"
#include "smoother_rows.hpp"
#include "thread_pool.hpp"

namespace py = pybind11;
using namespace letcc;

// bindings_round_counter.cpp: the local runtime's shared-memory atomics.
void register_round_counter(py::module_& mod);
// output_space.cpp: the compiled passes of LeTCC's log output space.
void register_output_space(py::module_& mod);

namespace {

// Below this many elements a call runs on the calling thread: waking the pool
// costs more than it saves.
constexpr std::size_t kParallelMinElems = 1 << 16;
// The same for the dense kernel, which does far less work per element than the
// banded one: on the 2-core dev machine, where a pool thread takes around
// 100 us to wake, calls with m * (n + q) up to 5e5 ran as fast on one thread as
// on two (the helper mostly woke after the caller had finished: 1 vs 2 threads
// 1.0x in most of 40 cases, 0.8-1.65x in the noisy rest), and 1.1-1.85x faster
// on two from 8e5 (q x n from 8 x 12 to 32 x 32, float32 and float64). Below
// the threshold the call does not wake the pool: the other core stays free.
constexpr std::size_t kDenseParallelMinElems = 1 << 19;
// Outputs at least this large are written with non-temporal stores:
// they do not stay in the caches anyway, and streaming saves reading every
// destination line before writing it.
constexpr std::size_t kStreamMinBytes = std::size_t(16) << 20;

std::vector<double> as_f64_vector(const py::array& a, const char* name) {
    auto arr = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
    if (!arr) throw py::type_error(std::string(name) + " must be convertible to float64");
    if (arr.ndim() != 1)
        throw py::value_error(std::string(name) + " must be 1-D, got ndim = " + std::to_string(arr.ndim()));
    return std::vector<double>(arr.data(), arr.data() + arr.size());
}

std::vector<double>& tls_buffer(std::size_t size) {
    thread_local std::vector<double> buf;
    if (buf.size() < size) buf.resize(size);
    return buf;
}

// Number of columns of a C-contiguous array whose first axis has length n.
std::size_t columns_of(const py::array& y) {
    std::size_t m = 1;
    for (py::ssize_t d = 1; d < y.ndim(); ++d) m *= static_cast<std::size_t>(y.shape(d));
    return m;
}

// body(c0, w) for column tiles [c0, c0 + w) covering [0, m): a first tile of
// `lead` columns (0: none), then tiles of tw columns.
template <class F>
void for_each_tile(std::size_t m, std::size_t tw, std::size_t work, int threads, F&& body, std::size_t lead = 0) {
    if (m == 0 || tw == 0) return;
    if (lead >= m) lead = 0;
    const std::size_t ntiles = (lead ? 1 : 0) + (m - lead + tw - 1) / tw;
    const int nthreads = (work < kParallelMinElems) ? 1 : threads;
    ThreadPool::instance().parallel_for(ntiles, nthreads, [&](std::size_t t) {
        if (lead && t == 0) return body(std::size_t(0), lead);
        const std::size_t c0 = lead + (lead ? t - 1 : t) * tw;
        const std::size_t w = std::min(tw, m - c0);
        body(c0, w);
    });
}

bool ranges_overlap(const py::array& a, const py::array& b) {
    const char* a0 = static_cast<const char*>(a.data());
    const char* b0 = static_cast<const char*>(b.data());
    const char* a1 = a0 + a.nbytes();
    const char* b1 = b0 + b.nbytes();
    return a0 < b1 && b0 < a1;
}

// Applies a linear map (Plan or DenseOperator) to y along its first axis.
// Fast path: y a C-contiguous float32/float64 ndarray with y.shape[0] == n.
// Returns None when y is not such an array (the Python side then converts it
// and calls again); raises for a wrong length or a bad `out`.
template <class Map>
py::object apply_map(const Map& map, const py::object& yobj, const py::object& outobj, int threads) {
    if (!py::isinstance<py::array>(yobj)) return py::none();
    py::array y = py::reinterpret_borrow<py::array>(yobj);
    const bool f64 = py::isinstance<py::array_t<double>>(y);
    const bool f32 = !f64 && py::isinstance<py::array_t<float>>(y);
    if (!(f64 || f32) || !(y.flags() & py::array::c_style) || y.ndim() < 1) return py::none();
    if (y.shape(0) != map.n()) {
        std::ostringstream os;
        os << "y has " << y.shape(0) << " rows along the knot axis but the plan has n = " << map.n()
           << " knots";
        throw py::value_error(os.str());
    }
    const std::size_t m = columns_of(y);
    std::vector<py::ssize_t> shape(y.shape(), y.shape() + y.ndim());
    shape[0] = map.q();
    py::array out;
    if (outobj.is_none()) {
        out = f64 ? py::array(py::array_t<double>(shape)) : py::array(py::array_t<float>(shape));
    } else {
        if (!py::isinstance<py::array>(outobj)) throw py::type_error("out must be a numpy array");
        out = py::reinterpret_borrow<py::array>(outobj);
        if (!out.dtype().is(y.dtype()))
            throw py::type_error("out has dtype " + std::string(py::str(out.dtype())) +
                                 " but y has dtype " + std::string(py::str(y.dtype())));
        if (!(out.flags() & py::array::c_style) || !out.writeable())
            throw py::value_error("out must be a writeable C-contiguous array");
        bool ok = out.ndim() == static_cast<py::ssize_t>(shape.size());
        for (std::size_t d = 0; ok && d < shape.size(); ++d) ok = out.shape(d) == shape[d];
        if (!ok) {
            std::ostringstream os;
            os << "out has shape " << std::string(py::str(py::tuple(py::cast(std::vector<py::ssize_t>(
                                              out.shape(), out.shape() + out.ndim())))))
               << " but the result has shape "
               << std::string(py::str(py::tuple(py::cast(shape))));
            throw py::value_error(os.str());
        }
        if (ranges_overlap(y, out)) throw py::value_error("out must not overlap y");
    }
    if (f64)
        map.template run<double>(static_cast<const double*>(y.data()), static_cast<double*>(out.mutable_data()), m,
                    threads);
    else
        map.template run<float>(static_cast<const float*>(y.data()), static_cast<float*>(out.mutable_data()), m,
                   threads);
    return std::move(out);
}


// out (q x m) = A y with the dense kernel; A given in float64 and float32.
template <class T>
void run_dense_map(const std::vector<double>& a64, const std::vector<float>& a32, std::int64_t q, std::int64_t n,
                   const T* y, T* out, std::size_t m, int threads) {
    const std::size_t tw = std::min<std::size_t>(kernels::kDenseTile, m);
    const std::size_t work = m * static_cast<std::size_t>(n + q);
    if (work < kDenseParallelMinElems) threads = 1;
    py::gil_scoped_release release;
    for_each_tile(m, tw, work, threads, [&](std::size_t c0, std::size_t w) {
        auto& buf = tls_buffer(static_cast<std::size_t>(n) * kernels::kDenseTile);
        if constexpr (std::is_same<T, double>::value)
            dense_tile_f64(a64.data(), q, n, y, m, out, m, c0, w, buf.data());
        else
            dense_tile_f32(a32.data(), q, n, y, m, out, m, c0, w, reinterpret_cast<float*>(buf.data()));
    });
}

// When the dense operator beats the banded passes: n * q at most this, per
// dtype. Measured with bench/spline.py on an AVX2 machine (the crossover for
// q = n was n ~ 48 for float32 and n ~ 24-28 for float64); float32 is capped
// lower, at n * q <= 32 * 32, to keep its float32 accumulation error (about
// sqrt(n) * eps32 * max|y|) well inside 1e-6 of max|y|; see
// bench/results/spline.md.
constexpr std::int64_t kDenseMaxWorkF32 = 32 * 32;
constexpr std::int64_t kDenseMaxWorkF64 = 24 * 24;
// Where the banded kernel is the AVX-512 one (set at plan construction: the
// kernel auto runs then), the crossover is lower. Measured on an Intel Xeon
// (AVX-512, 2 threads, q = n Chebyshev points, out=, banded / dense time,
// m = 64 .. 150528, two runs): float32 1.05-1.29 at n = 20, 0.76-1.21 at
// n = 24 (0.91-0.93 at m = 1024 and 150528, 1.13-1.19 at m = 64 and 32768),
// 0.66-1.13 at n = 28, 0.53-1.00 at n = 32; float64 0.98-1.21 at n = 12,
// 0.71-1.06 at n = 16 (0.82-0.86 but at m = 32768). So the crossover moves
// with m only by a few knots, with no trend beyond the smallest m (where
// either call takes microseconds), and by a factor of 1.3-2 with the kernel:
// auto follows the kernel, not m.
constexpr std::int64_t kDenseMaxWorkF32Avx512 = 24 * 24;
constexpr std::int64_t kDenseMaxWorkF64Avx512 = 12 * 12;

// The largest n * q for which method="auto" takes the dense operator, for the
// plan kernel in use now.
std::int64_t dense_max_work(bool f64) {
    if (plan_kernel() == "avx512") return f64 ? kDenseMaxWorkF64Avx512 : kDenseMaxWorkF32Avx512;
    return f64 ? kDenseMaxWorkF64 : kDenseMaxWorkF32;
}

class Plan {
public:
    // method: "auto" (choose per dtype by size), "banded" or "dense".
    Plan(const py::array& x, const py::array& w, double lam, const py::array& at, int nu,
         const std::string& method) {
        const auto xv = as_f64_vector(x, "x");
        const auto wv = as_f64_vector(w, "w");
        const auto av = as_f64_vector(at, "at");
        if (wv.size() != xv.size())
            throw py::value_error("w has length " + std::to_string(wv.size()) + " but x has length " +
                                  std::to_string(xv.size()));
        if (nu < 0 || nu > 2) throw py::value_error("nu must be 0, 1 or 2, got " + std::to_string(nu));
        if (method != "auto" && method != "banded" && method != "dense")
            throw py::value_error("method must be 'auto', 'banded' or 'dense', got '" + method + "'");
        factor_ = factor_reinsch(xv.data(), wv.data(), xv.size(), lam);
        tables_ = make_plan_tables(factor_, av.data(), av.size(), nu);
        const std::int64_t work = tables_.n * tables_.q;
        dense_f32_ = method == "dense" || (method == "auto" && work <= dense_max_work(false));
        dense_f64_ = method == "dense" || (method == "auto" && work <= dense_max_work(true));
        if (dense_f32_ || dense_f64_) {
            // The operator, built in float64 by the banded kernel on the identity.
            const std::size_t n = static_cast<std::size_t>(tables_.n), q = static_cast<std::size_t>(tables_.q);
            std::vector<double> eye(n * n, 0.0);
            for (std::size_t i = 0; i < n; ++i) eye[i * n + i] = 1.0;
            std::vector<double> buf(plan_buffer_size(tables_.n, n));
            // A^T columns: apply to the identity (n x n) -> (q x n) = A.
            a64_.assign(q * n, 0.0);
            plan_tile_f64(tables_, eye.data(), n, a64_.data(), n, 0, n, buf.data());
            a32_.assign(a64_.begin(), a64_.end());
        }
    }

    std::string method(bool f64) const { return (f64 ? dense_f64_ : dense_f32_) ? "dense" : "banded"; }

    std::int64_t n() const { return tables_.n; }
    std::int64_t q() const { return tables_.q; }

    py::object apply(const py::object& yobj, const py::object& outobj, int threads) const {
        return apply_map(*this, yobj, outobj, threads);
    }

    // The dense (q x n) operator: the plan applied to the identity.
    py::array_t<double> matrix() const {
        const std::size_t n = static_cast<std::size_t>(tables_.n), q = static_cast<std::size_t>(tables_.q);
        std::vector<double> eye(n * n, 0.0);
        for (std::size_t i = 0; i < n; ++i) eye[i * n + i] = 1.0;
        py::array_t<double> out({static_cast<py::ssize_t>(q), static_cast<py::ssize_t>(n)});
        run_banded<double>(eye.data(), out.mutable_data(), n, 1);
        return out;
    }

    const ReinschFactor& factor() const { return factor_; }

    // out (q x m) = the plan applied to y (n x m); the GIL is released inside.
    template <class T>
    void run(const T* y, T* out, std::size_t m, int threads) const {
        constexpr bool is64 = std::is_same<T, double>::value;
        if (is64 ? dense_f64_ : dense_f32_) {
            run_dense_map<T>(a64_, a32_, tables_.q, tables_.n, y, out, m, threads);
            return;
        }
        run_banded<T>(y, out, m, threads);
    }

private:

    template <class T>
    void run_banded(const T* y, T* out, std::size_t m, int threads) const {
        const std::size_t tw = plan_tile_width(tables_.n, sizeof(T), m);
        const std::size_t work = m * static_cast<std::size_t>(tables_.n + tables_.q);
        // Each thread runs a contiguous stretch of tiles (thread_pool.hpp), so
        // its next tile is the adjacent one: that is the one worth prefetching.
        const std::size_t prefetch_cols = tw;
        // (The generic kernel streams float64 only: see dispatch.cpp.)
        const bool stream = static_cast<std::size_t>(tables_.q) * m * sizeof(T) >= kStreamMinBytes;
        py::gil_scoped_release release;
        for_each_tile(m, tw, work, threads, [&](std::size_t c0, std::size_t w) {
            auto& buf = tls_buffer(plan_buffer_size(tables_.n, w));
            if constexpr (std::is_same<T, double>::value)
                plan_tile_f64(tables_, y, m, out, m, c0, w, buf.data(), stream, prefetch_cols);
            else
                plan_tile_f32(tables_, y, m, out, m, c0, w, buf.data(), stream, prefetch_cols);
        }, stream ? columns_to_line(out, m) : 0);
    }

    ReinschFactor factor_;
    PlanTables tables_;
    bool dense_f32_ = false, dense_f64_ = false;
    std::vector<double> a64_;
    std::vector<float> a32_;
};

// Any fixed (q x n) linear map applied with the dense kernel (BACC's Berrut
// operators use it): same call conventions and fast path as Plan.
class DenseOperator {
public:
    explicit DenseOperator(const py::array& a) {
        auto arr = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
        if (!arr) throw py::type_error("the operator must be convertible to float64");
        if (arr.ndim() != 2)
            throw py::value_error("the operator must be 2-D (q, n), got ndim = " + std::to_string(arr.ndim()));
        q_ = arr.shape(0);
        n_ = arr.shape(1);
        if (q_ < 1 || n_ < 1) throw py::value_error("the operator must have at least one row and one column");
        a64_.assign(arr.data(), arr.data() + arr.size());
        for (double v : a64_)
            if (!std::isfinite(v)) throw py::value_error("the operator has a non-finite entry: " + std::to_string(v));
        a32_.assign(a64_.begin(), a64_.end());
    }
    std::int64_t n() const { return n_; }
    std::int64_t q() const { return q_; }
    template <class T>
    void run(const T* y, T* out, std::size_t m, int threads) const {
        run_dense_map<T>(a64_, a32_, q_, n_, y, out, m, threads);
    }
    py::object apply(const py::object& yobj, const py::object& outobj, int threads) const {
        return apply_map(*this, yobj, outobj, threads);
    }
    py::array_t<double> matrix() const {
        py::array_t<double> out({static_cast<py::ssize_t>(q_), static_cast<py::ssize_t>(n_)});
        std::copy(a64_.begin(), a64_.end(), out.mutable_data());
        return out;
    }

private:
    std::int64_t q_ = 0, n_ = 0;
    std::vector<double> a64_;
    std::vector<float> a32_;
};

// g and gamma at the knots for every column of y (C-contiguous, (n, ...)).
template <class T>
py::tuple fit_impl(const ReinschFactor& f, const py::array& y, int threads) {
    const PlanTables p = make_plan_tables(f, nullptr, 0, 0);
    const std::size_t m = columns_of(y);
    std::vector<py::ssize_t> shape(y.shape(), y.shape() + y.ndim());
    py::array_t<T> g(shape), gam(shape);
    std::vector<double> ih(f.h.size());
    for (std::size_t i = 0; i < ih.size(); ++i) ih[i] = 1.0 / f.h[i];
    const T* yp = static_cast<const T*>(y.data());
    T* gp = g.mutable_data();
    T* cp = gam.mutable_data();
    {
        py::gil_scoped_release release;
        const std::size_t tw = tile_width(p.n, sizeof(T), m);
        for_each_tile(m, tw, m * static_cast<std::size_t>(p.n) * 2, threads, [&](std::size_t c0, std::size_t w) {
            auto& buf = tls_buffer(gamma_rows(p.n) * w);
            if constexpr (std::is_same<T, double>::value)
                fit_tile_f64(p, f.lam_over_w.data(), ih.data(), yp, m, gp, cp, m, c0, w, buf.data());
            else
                fit_tile_f32(p, f.lam_over_w.data(), ih.data(), yp, m, gp, cp, m, c0, w, buf.data());
        });
    }
    return py::make_tuple(g, gam);
}

py::array checked_float_array(const py::array& y, const char* name, py::ssize_t n) {
    const bool ok = py::isinstance<py::array_t<double>>(y) || py::isinstance<py::array_t<float>>(y);
    if (!ok) throw py::type_error(std::string(name) + " must be float32 or float64, got " +
                                  std::string(py::str(y.dtype())));
    if (!(y.flags() & py::array::c_style)) throw py::value_error(std::string(name) + " must be C-contiguous");
    if (y.ndim() < 1 || y.shape(0) != n)
        throw py::value_error(std::string(name) + " must have " + std::to_string(n) + " rows along the knot axis");
    return y;
}

py::tuple fit(const py::array& x, const py::array& w, double lam, const py::array& y, int threads) {
    const auto xv = as_f64_vector(x, "x");
    const auto wv = as_f64_vector(w, "w");
    if (wv.size() != xv.size()) throw py::value_error("w and x differ in length");
    const ReinschFactor f = factor_reinsch(xv.data(), wv.data(), xv.size(), lam);
    checked_float_array(y, "y", static_cast<py::ssize_t>(xv.size()));
    if (py::isinstance<py::array_t<double>>(y)) return fit_impl<double>(f, y, threads);
    return fit_impl<float>(f, y, threads);
}

// Values (nu = 0, 1, 2) at xq of the natural cubic spline with values g and
// second derivatives gam at the knots x (both C-contiguous (n, ...), same dtype).
template <class T>
py::array evaluate_impl(const std::vector<double>& xv, const py::array& g, const py::array& gam,
                        const std::vector<double>& xq, int nu, int threads) {
    const std::size_t m = columns_of(g);
    const std::size_t n = xv.size();
    std::vector<EvalTerm> terms(xq.size());
    for (std::size_t i = 0; i < xq.size(); ++i) terms[i] = eval_term(xv, xq[i], nu);
    std::vector<py::ssize_t> shape(g.shape(), g.shape() + g.ndim());
    shape[0] = static_cast<py::ssize_t>(xq.size());
    py::array_t<T> out(shape);
    const T* gp = static_cast<const T*>(g.data());
    const T* cp = static_cast<const T*>(gam.data());
    T* op = out.mutable_data();
    {
        py::gil_scoped_release release;
        const std::size_t tw = std::min<std::size_t>(m, 4096);
        for_each_tile(m, tw, m * xq.size(), threads, [&](std::size_t c0, std::size_t w) {
            for (std::size_t qi = 0; qi < terms.size(); ++qi) {
                const EvalTerm& e = terms[qi];
                const std::size_t k0 = static_cast<std::size_t>(e.k);
                const std::size_t k1 = std::min(k0 + 1, n - 1);
                const T* ga = gp + k0 * m + c0;
                const T* gb = gp + k1 * m + c0;
                const T* ca = cp + k0 * m + c0;
                const T* cb = cp + k1 * m + c0;
                T* o = op + qi * m + c0;
                const double cg1 = (n > 1) ? e.cg1 : 0.0, cc1 = (n > 1) ? e.cc1 : 0.0;
                for (std::size_t j = 0; j < w; ++j)
                    o[j] = static_cast<T>(e.cg0 * static_cast<double>(ga[j]) + cg1 * static_cast<double>(gb[j]) +
                                          e.cc0 * static_cast<double>(ca[j]) + cc1 * static_cast<double>(cb[j]));
            }
        });
    }
    return std::move(out);
}

py::array evaluate(const py::array& x, const py::array& g, const py::array& gam, const py::array& xq, int nu,
                   int threads) {
    const auto xv = as_f64_vector(x, "x");
    const auto qv = as_f64_vector(xq, "xq");
    if (nu < 0 || nu > 2) throw py::value_error("nu must be 0, 1 or 2, got " + std::to_string(nu));
    if (xv.empty()) throw py::value_error("need at least one knot");
    checked_float_array(g, "g", static_cast<py::ssize_t>(xv.size()));
    checked_float_array(gam, "gamma", static_cast<py::ssize_t>(xv.size()));
    if (!g.dtype().is(gam.dtype())) throw py::type_error("g and gamma must have the same dtype");
    if (py::isinstance<py::array_t<double>>(g)) return evaluate_impl<double>(xv, g, gam, qv, nu, threads);
    return evaluate_impl<float>(xv, g, gam, qv, nu, threads);
}

// Weighted GCV score for one lam, all columns sharing it:
//   V(lam) = n * RSS_w / (n - tr S)^2,  RSS_w = sum_cols sum_i w_i (y_i - g_i)^2.
// Returns (score, trace, rss).
py::tuple gcv(const py::array& x, const py::array& w, double lam, const py::array& y, int threads) {
    const auto xv = as_f64_vector(x, "x");
    const auto wv = as_f64_vector(w, "w");
    if (wv.size() != xv.size()) throw py::value_error("w and x differ in length");
    const ReinschFactor f = factor_reinsch(xv.data(), wv.data(), xv.size(), lam);
    checked_float_array(y, "y", static_cast<py::ssize_t>(xv.size()));
    py::tuple gg = py::isinstance<py::array_t<double>>(y) ? fit_impl<double>(f, y, threads)
                                                          : fit_impl<float>(f, y, threads);
    py::array gam = gg[1];
    const std::size_t n = xv.size(), m = columns_of(y);
    // Residuals straight from gamma, y - g = lam W^-1 Q gamma, rather than as
    // the difference y - g, which cancels as lam -> 0 (GCV's plateau there
    // would be rounding noise).
    double rss = 0.0;
    auto accumulate = [&](auto* cp) {
        std::vector<double> ih(f.h.size());
        for (std::size_t i = 0; i < ih.size(); ++i) ih[i] = 1.0 / f.h[i];
        std::vector<double> r(m);
        for (std::size_t i = 0; i < n && n >= 3; ++i) {
            const double il = (i >= 1) ? ih[i - 1] : 0.0;
            const double ir = (i + 1 < n) ? ih[i] : 0.0;
            const double s = f.lam_over_w[i];
            double acc = 0.0;
            for (std::size_t j = 0; j < m; ++j) {
                const double gm = (i >= 1) ? static_cast<double>(cp[(i - 1) * m + j]) : 0.0;
                const double g0 = static_cast<double>(cp[i * m + j]);
                const double gp = (i + 1 < n) ? static_cast<double>(cp[(i + 1) * m + j]) : 0.0;
                const double res = s * (il * gm - (il + ir) * g0 + ir * gp);
                acc += res * res;
            }
            rss += wv[i] * acc;
        }
    };
    if (py::isinstance<py::array_t<double>>(y))
        accumulate(static_cast<const double*>(gam.data()));
    else
        accumulate(static_cast<const float*>(gam.data()));
    const double dn = static_cast<double>(n);
    const double dof_resid = smoother_trace_complement(f);  // n - tr S, without cancellation
    const double tr = dn - dof_resid;
    const double denom = dof_resid * dof_resid;
    const double score = denom > 0 ? dn * rss / denom : std::numeric_limits<double>::infinity();
    return py::make_tuple(score, tr, rss);
}

double trace(const py::array& x, const py::array& w, double lam) {
    const auto xv = as_f64_vector(x, "x");
    const auto wv = as_f64_vector(w, "w");
    if (wv.size() != xv.size()) throw py::value_error("w and x differ in length");
    return smoother_trace(factor_reinsch(xv.data(), wv.data(), xv.size(), lam));
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
    py::class_<Plan>(mod, "Plan")
        .def(py::init<const py::array&, const py::array&, double, const py::array&, int, const std::string&>(),
             py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("at"), py::arg("nu") = 0,
             py::arg("method") = "auto")
        .def("method", &Plan::method, py::arg("float64"))
        .def_property_readonly("n", &Plan::n)
        .def_property_readonly("q", &Plan::q)
        .def("apply", &Plan::apply, py::arg("y"), py::arg("out") = py::none(), py::arg("threads") = 0)
        .def("apply_log", &apply_log_space<Plan>, py::arg("y"), py::arg("check_sums"), py::arg("tol"),
             py::arg("floor"), py::arg("order") = py::none())  // LeTCC's log space in one call (output_space_apply.hpp)
        .def("matrix", &Plan::matrix)
        .def("trace", [](const Plan& p) { return smoother_trace(p.factor()); });
    py::class_<DenseOperator>(mod, "DenseOperator")
        .def(py::init<const py::array&>(), py::arg("a"))
        .def_property_readonly("n", &DenseOperator::n)
        .def_property_readonly("q", &DenseOperator::q)
        .def("apply", &DenseOperator::apply, py::arg("y"), py::arg("out") = py::none(), py::arg("threads") = 0)
        .def("apply_log", &apply_log_space<DenseOperator>, py::arg("y"), py::arg("check_sums"), py::arg("tol"),
             py::arg("floor"), py::arg("order") = py::none())  // LeTCC's log space in one call (output_space_apply.hpp)
        .def("matrix", &DenseOperator::matrix);
    mod.def("fit", &fit, py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("y"), py::arg("threads") = 0);
    mod.def("evaluate", &evaluate, py::arg("x"), py::arg("g"), py::arg("gamma"), py::arg("xq"), py::arg("nu"),
            py::arg("threads") = 0);
    mod.def("gcv", &gcv, py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("y"), py::arg("threads") = 0);
    mod.def("smoother_trace", &trace, py::arg("x"), py::arg("w"), py::arg("lam"));
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
            py::array_t<double> out({static_cast<py::ssize_t>(av.size()), static_cast<py::ssize_t>(xv.size())});
            std::copy(rows.begin(), rows.end(), out.mutable_data());
            return out;
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
            py::array_t<double> out({static_cast<py::ssize_t>(av.size()), static_cast<py::ssize_t>(xv.size())});
            std::copy(rows.begin(), rows.end(), out.mutable_data());
            return py::make_tuple(lams, out);
        },
        py::arg("x"), py::arg("at"), py::arg("c"), py::arg("end_factor"));
    register_round_counter(mod);
    register_output_space(mod);
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
    mod.def("dense_max_work", &dense_max_work, py::arg("float64"),
            "The largest n * q for which a plan built now with method='auto' takes the dense operator for "
            "float64 (float64=True) or float32 data: it follows the banded kernel in use (plan_kernel()).");
    mod.def("set_plan_kernel", &set_plan_kernel, py::arg("name"));
}
