// The two compiled linear maps y (n x m) -> out (q x m), on row-major
// buffers: SplinePlan (fit a smoothing spline on knots x, evaluate it at
// points `at`: the banded Reinsch factors, or the explicit (q x n) operator
// where that was measured faster) and DenseMap (any fixed (q x n) operator,
// BACC's Berrut maps). No Python here: the bindings (csrc/bindings.cpp)
// convert arrays, release the GIL and call run<T>; the C++ tests
// (csrc/test/) call them directly.
//
// Inputs are the caller's contract: knots strictly increasing and finite,
// weights positive and finite, lam finite and >= 0, points finite (the Python
// layer checks them with its messages, letcc/splines/_validation.py). What is
// checked here is what memory safety or the factorisation needs.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../dense_kernel.hpp"
#include "../dispatch.hpp"
#include "../plan.hpp"
#include "../reinsch.hpp"
#include "parallel.hpp"

namespace letcc {
namespace driver {

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

// The largest n * q for which method "auto" takes the dense operator, for the
// plan kernel in use now.
inline std::int64_t dense_max_work(bool f64) {
    if (plan_kernel() == "avx512") return f64 ? kDenseMaxWorkF64Avx512 : kDenseMaxWorkF32Avx512;
    return f64 ? kDenseMaxWorkF64 : kDenseMaxWorkF32;
}

// A (q x n, row-major, float64) kept in float64 and float32, applied with the
// dense kernel (float32 arithmetic for float32 data).
class DenseMap {
public:
    DenseMap() = default;
    DenseMap(std::vector<double> a, std::int64_t q, std::int64_t n) : q_(q), n_(n), a64_(std::move(a)) {
        if (q_ < 1 || n_ < 1) throw std::invalid_argument("the operator must have at least one row and one column");
        if (a64_.size() != static_cast<std::size_t>(q_ * n_))
            throw std::invalid_argument("the operator has " + std::to_string(a64_.size()) + " entries, not q * n = " +
                                        std::to_string(q_ * n_));
        for (double v : a64_)
            if (!std::isfinite(v)) throw std::invalid_argument("the operator has a non-finite entry: " + std::to_string(v));
        a32_.assign(a64_.begin(), a64_.end());
    }
    std::int64_t n() const { return n_; }
    std::int64_t q() const { return q_; }
    const std::vector<double>& matrix() const { return a64_; }
    // The coefficients run<T> multiplies with (float32 arithmetic for float32 data).
    template <class T>
    const T* coeffs_for() const { return coeffs(static_cast<const T*>(nullptr)); }

    // out (q x m) = A y (n x m); both row-major, not overlapping.
    template <class T>
    void run(const T* y, T* out, std::size_t m, int threads) const {
        each_tile<T>(m, threads, [&](const T* a, std::size_t c0, std::size_t w, T* pack) {
            dense_tile(a, q_, n_, y, m, out, m, c0, w, pack);
        });
    }

    // The same with row i of the input at rows[i] (rows of any array, any
    // order, repeats allowed): the map on a subset of an array's rows without
    // copying them, the numbers run<T> gives on those rows gathered.
    template <class T>
    void run_rows(const T* const* rows, T* out, std::size_t m, int threads) const {
        each_tile<T>(m, threads, [&](const T* a, std::size_t c0, std::size_t w, T* pack) {
            dense_tile_rows(a, q_, n_, rows, out, m, c0, w, pack);
        });
    }

private:
    // tile(coefficients, first column, width, packing scratch) on each column
    // tile of m columns, in parallel above kDenseParallelMinElems of work.
    template <class T, class Tile>
    void each_tile(std::size_t m, int threads, Tile&& tile) const {
        const std::size_t tw = std::min<std::size_t>(kernels::kDenseTile, m);
        const std::size_t work = m * static_cast<std::size_t>(n_ + q_);
        if (work < kDenseParallelMinElems) threads = 1;
        const T* a = coeffs(static_cast<const T*>(nullptr));
        for_each_tile(m, tw, work, threads, [&](std::size_t c0, std::size_t w) {
            T* pack = tls_scratch<T>(static_cast<std::size_t>(n_) * kernels::kDenseTile);
            tile(a, c0, w, pack);
        });
    }

    const double* coeffs(const double*) const { return a64_.data(); }
    const float* coeffs(const float*) const { return a32_.data(); }

    std::int64_t q_ = 0, n_ = 0;
    std::vector<double> a64_;
    std::vector<float> a32_;
};

// Fit-then-evaluate: out[j] = the nu-th derivative at at[j] of the smoothing
// spline of (x, y, w) with lam, for every column of y.
class SplinePlan {
public:
    // method: "auto" (dense or banded per dtype by size, dense_max_work),
    // "banded" or "dense".
    SplinePlan(const std::vector<double>& x, const std::vector<double>& w, double lam, const std::vector<double>& at,
               int nu, const std::string& method) {
        if (w.size() != x.size())
            throw std::invalid_argument("w has length " + std::to_string(w.size()) + " but x has length " +
                                        std::to_string(x.size()));
        if (nu < 0 || nu > 2) throw std::invalid_argument("nu must be 0, 1 or 2, got " + std::to_string(nu));
        if (method != "auto" && method != "banded" && method != "dense")
            throw std::invalid_argument("method must be 'auto', 'banded' or 'dense', got '" + method + "'");
        factor_ = factor_reinsch(x.data(), w.data(), x.size(), lam);
        tables_ = make_plan_tables(factor_, at.data(), at.size(), nu);
        const std::int64_t work = tables_.n * tables_.q;
        dense_f32_ = method == "dense" || (method == "auto" && work <= dense_max_work(false));
        dense_f64_ = method == "dense" || (method == "auto" && work <= dense_max_work(true));
        if (dense_f32_ || dense_f64_) {
            // The operator, built in float64 by the banded kernel on the identity.
            std::vector<double> a(static_cast<std::size_t>(tables_.q * tables_.n), 0.0);
            identity_image(a.data());
            dense_ = DenseMap(std::move(a), tables_.q, tables_.n);
        }
    }

    // "dense" or "banded": how run<double> (f64) or run<float> applies the plan.
    std::string method(bool f64) const { return (f64 ? dense_f64_ : dense_f32_) ? "dense" : "banded"; }
    std::int64_t n() const { return tables_.n; }
    std::int64_t q() const { return tables_.q; }
    const ReinschFactor& factor() const { return factor_; }
    const PlanTables& tables() const { return tables_; }

    // The dense (q x n) operator into out: the banded plan applied to the
    // identity (the same values as the operator the dense method holds).
    void matrix(double* out) const {
        const std::size_t n = static_cast<std::size_t>(tables_.n);
        std::vector<double> eye(n * n, 0.0);
        for (std::size_t i = 0; i < n; ++i) eye[i * n + i] = 1.0;
        run_banded<double>(eye.data(), out, n, 1);
    }

    // out (q x m) = the plan applied to y (n x m); both row-major, not overlapping.
    template <class T>
    void run(const T* y, T* out, std::size_t m, int threads) const {
        if (std::is_same<T, double>::value ? dense_f64_ : dense_f32_)
            dense_.run<T>(y, out, m, threads);
        else
            run_banded<T>(y, out, m, threads);
    }

private:
    // The banded plan applied to the identity (n x n) in one tile: A (q x n).
    void identity_image(double* out) const {
        const std::size_t n = static_cast<std::size_t>(tables_.n);
        std::vector<double> eye(n * n, 0.0);
        for (std::size_t i = 0; i < n; ++i) eye[i * n + i] = 1.0;
        std::vector<double> buf(plan_buffer_size(tables_.n, n));
        plan_tile(tables_, eye.data(), n, out, n, 0, n, buf.data());
    }

    template <class T>
    void run_banded(const T* y, T* out, std::size_t m, int threads) const {
        const std::size_t tw = plan_tile_width(tables_.n, sizeof(T), m);
        const std::size_t work = m * static_cast<std::size_t>(tables_.n + tables_.q);
        // Each thread runs a contiguous stretch of tiles (thread_pool.hpp), so
        // its next tile is the adjacent one: that is the one worth prefetching.
        const std::size_t prefetch_cols = tw;
        // (The generic kernel streams float64 only: see dispatch.cpp.)
        const bool stream = static_cast<std::size_t>(tables_.q) * m * sizeof(T) >= kStreamMinBytes;
        for_each_tile(
            m, tw, work, threads,
            [&](std::size_t c0, std::size_t w) {
                double* buf = tls_scratch<double>(plan_buffer_size(tables_.n, w));
                plan_tile(tables_, y, m, out, m, c0, w, buf, stream, prefetch_cols);
            },
            stream ? columns_to_line(out, m) : 0);
    }

    ReinschFactor factor_;
    PlanTables tables_;
    bool dense_f32_ = false, dense_f64_ = false;
    DenseMap dense_;
};

}  // namespace driver
}  // namespace letcc
