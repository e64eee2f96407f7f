// The spline locator's scores (LeTCC's robust decoder, letcc.codes.robust):
// what the one pass over the answers adds up (locator_kernel.hpp, per column
// tile; driver/locator.hpp over tiles and threads) and the scores made from
// those sums, the formula's one home:
//
//   loo_i  = rss_i / (1 - H_ii)^2          the leave-one-out residual, exact
//                                          for a smoothing spline (H: its hat
//                                          matrix at the knots, rss_i = ||y_i - (H y)_i||^2)
//   nn_i   = min ||y_i - y_k||^2 over the 2 nearest answers k on either side
//   side_i = min over the two sides with 2 answers of the larger
//            ||y_i - y_k||^2 of that side's 2 answers (no such side: 0)
//   s_i    = min(loo_i, max(nn_i, kSideWeight * side_i))
//
// (why each part: robust.py's module docstring). min and max propagate NaN
// as numpy's minimum and maximum do, so a NaN answer gives the scores the
// numpy formulas gave.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "plan.hpp"
#include "reinsch.hpp"

namespace letcc {

// weight of the one-side test: (1/2)^2, the farther answer of a side may lie
// twice as far as the nearest (the one value tried: robust.py's docstring).
// The 2 answers on either side are the kernel's d1, d2.
constexpr double kSideWeight = 0.25;

// The per-knot coefficients of the residual besides the Reinsch factors:
// r_i = y_i - g_i = ra[i] gamma_{i-1} + rb[i] gamma_i + rc[i] gamma_{i+1}
// (lam / w_i times row i of Q: 1/h_{i-1}, -(1/h_{i-1} + 1/h_i), 1/h_i).
struct LocatorCoeffs {
    std::vector<double> ra, rb, rc;   // size n
};

inline LocatorCoeffs locator_coeffs(const ReinschFactor& f) {
    const std::size_t n = f.n;
    LocatorCoeffs c;
    c.ra.assign(n, 0.0);
    c.rb.assign(n, 0.0);
    c.rc.assign(n, 0.0);
    for (std::size_t i = 0; i < n && n >= 3; ++i) {
        const double il = (i >= 1) ? 1.0 / f.h[i - 1] : 0.0;
        const double ir = (i + 1 < n) ? 1.0 / f.h[i] : 0.0;
        const double s = f.lam_over_w[i];
        c.ra[i] = s * il;
        c.rb[i] = -s * (il + ir);
        c.rc[i] = s * ir;
    }
    return c;
}

// Doubles of scratch a tile of tw columns needs (the gamma rows, plan.hpp's
// layout with rows tw apart).
inline std::size_t locator_buffer_size(std::int64_t n, std::size_t tw) { return gamma_rows(n) * tw; }

// The rescoring kernel's blocks (locator_kernel.hpp's rescore_tile), in
// vectors of columns, and the doubles of scratch it takes: one accumulator
// vector (at most 8 lanes) for each of the n nx products and nd distances.
constexpr std::size_t kRescoreBlock = 8;
inline std::size_t rescore_buffer_size(std::size_t n, std::size_t nx, std::size_t nd) { return (n * nx + nd) * 8; }

// What one pass adds up: rss (n), d1 (n - 1), d2 (n - 2) packed as
// sums[i], sums[n + i], sums[2 n + i] (d1[i] = ||y_i - y_{i+1}||^2,
// d2[i] = ||y_i - y_{i+2}||^2); with `pairs`, also the adjacent residuals'
// dot products rr[i] = r_i . r_{i+1} (n - 1) at sums[3 n + i].
inline std::size_t locator_sums_size(std::int64_t n, bool pairs = false) {
    return (pairs ? 4 : 3) * static_cast<std::size_t>(n);
}

// A pass's sums by name (locator_sums_size's layout; rr only with pairs).
struct LocatorSums {
    const double *rss, *d1, *d2, *rr;
    LocatorSums(const double* sums, std::size_t n) : rss(sums), d1(sums + n), d2(sums + 2 * n), rr(sums + 3 * n) {}
};

namespace locator_detail {
inline double np_min(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a); }
inline double np_max(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (b > a ? b : a); }
}  // namespace locator_detail

// s and loo (n each) from a pass's sums and 1 - H_ii (omd, n).
inline void locator_scores_from_sums(std::size_t n, const double* sums, const double* omd, double* s, double* loo) {
    using locator_detail::np_max;
    using locator_detail::np_min;
    const double inf = std::numeric_limits<double>::infinity();
    const LocatorSums v(sums, n);
    const double *rss = v.rss, *d1 = v.d1, *d2 = v.d2;
    for (std::size_t i = 0; i < n; ++i) {
        loo[i] = np_max(rss[i] / (omd[i] * omd[i]), 0.0);
        double left = inf, right = inf, lside = inf, rside = inf;
        if (i >= 1) left = d1[i - 1];
        if (i + 2 <= n) right = d1[i];
        if (i >= 2) {
            left = np_min(left, d2[i - 2]);
            lside = np_max(d1[i - 1], d2[i - 2]);
        }
        if (i + 3 <= n) {
            right = np_min(right, d2[i]);
            rside = np_max(d1[i], d2[i]);
        }
        const double nn = np_min(left, right);
        double side = np_min(rside, lside);
        if (std::isinf(side)) side = 0.0;
        const double agree = np_max(np_max(nn, kSideWeight * side), 0.0);
        s[i] = np_min(loo[i], agree);
    }
}

// (I - H_PP)^-1 of each adjacent pair P = {i, i + 1} (n - 1 of them, 4
// doubles each, row-major, out): with a = 1 - H_ii, d = 1 - H_{i+1,i+1},
// b = H_{i,i+1} (upper[i]), c = H_{i+1,i} (lower[i]),
// [[a, -b], [-c, d]]^-1 = [[d, b], [c, a]] / (a d - b c).
inline void pair_inverses(std::size_t n, const double* omd, const double* upper, const double* lower, double* out) {
    for (std::size_t i = 0; i + 1 < n; ++i) {
        const double a = omd[i], d = omd[i + 1], b = upper[i], c = lower[i];
        const double det = a * d - b * c;
        out[4 * i] = d / det;
        out[4 * i + 1] = b / det;
        out[4 * i + 2] = c / det;
        out[4 * i + 3] = a / det;
    }
}

// The pair scores p (n - 1) from a pass's sums (with pairs): for the
// adjacent answers i, i + 1 (P), their leave-two-out residuals
//
//   e_P = (I - H_PP)^-1 r_P        (the spline fitted without both, exact
//                                   for a smoothing spline as loo_i is)
//
// with inv (n - 1, 4) = that 2 x 2 inverse per pair, row-major; member a's
// squared norm from rss and rr (no second pass). Each member's agreement
// with the answers on its outer side: out_i = min(d1[i - 1], d2[i - 2])
// (answers i - 1, i - 2), out_{i+1} = min(d1[i + 1], d2[i + 1]) (i + 2,
// i + 3), inf where there are none. Then
//
//   p_i = min(e_i, e_{i+1}, out_i, out_{i+1})
//
// large only when both members disagree with the spline through the rest
// and with their outer neighbours: two wrong answers side by side, which
// vouch for each other in the single scores (robust.py's docstring).
inline void locator_pair_scores_from_sums(std::size_t n, const double* sums, const double* inv, double* p) {
    using locator_detail::np_max;
    using locator_detail::np_min;
    const double inf = std::numeric_limits<double>::infinity();
    const LocatorSums v(sums, n);
    const double *rss = v.rss, *d1 = v.d1, *d2 = v.d2, *rr = v.rr;
    for (std::size_t i = 0; i + 1 < n; ++i) {
        const double* a = inv + 4 * i;
        const double e0 = a[0] * a[0] * rss[i] + 2.0 * a[0] * a[1] * rr[i] + a[1] * a[1] * rss[i + 1];
        const double e1 = a[2] * a[2] * rss[i] + 2.0 * a[2] * a[3] * rr[i] + a[3] * a[3] * rss[i + 1];
        double out0 = inf, out1 = inf;
        if (i >= 1) out0 = d1[i - 1];
        if (i >= 2) out0 = np_min(out0, d2[i - 2]);
        if (i + 2 < n) out1 = d1[i + 1];
        if (i + 3 < n) out1 = np_min(out1, d2[i + 1]);
        p[i] = np_max(np_min(np_min(e0, e1), np_min(out0, out1)), 0.0);
    }
}

// What a locator step's test reads from its scores (robust.py's
// spline_locate, round_statistic): the position of the top score and the
// median of loo. argmax as numpy's (the first NaN, else the first largest);
// the median as robust._median takes it (sorted with NaN last, the middle
// one or the mean of the middle two). n >= 1.
inline std::size_t np_argmax(const double* a, std::size_t n) {
    std::size_t top = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (std::isnan(a[i])) return i;
        if (a[i] > a[top]) top = i;
    }
    return top;
}

inline double np_sorted_median(const double* a, std::size_t n) {
    std::vector<double> v(a, a + n);
    std::sort(v.begin(), v.end(), [](double x, double y) { return !std::isnan(x) && (std::isnan(y) || x < y); });
    const std::size_t k = n / 2;
    return n % 2 ? v[k] : (v[k - 1] + v[k]) / 2.0;
}

}  // namespace letcc
