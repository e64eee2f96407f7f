// Evaluation of a natural cubic spline given by values g and second
// derivatives gamma at the knots, with linear extension outside [x_0, x_{n-1}].
//
// Every evaluation (value, 1st or 2nd derivative) at a point is a linear
// combination of g_k, g_{k+1}, gamma_k, gamma_{k+1} for the interval k the
// point falls in. The interval search is done once per query point and shared
// by all columns: these tables are what the kernels stream with.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "reinsch.hpp"

namespace letcc {

// out = cg0 * g[k] + cg1 * g[k+1] + cc0 * gamma[k] + cc1 * gamma[k+1]
struct EvalTerm {
    std::int64_t k = 0;  // left knot of the interval; k+1 <= n-1 unless n == 1
    double cg0 = 0, cg1 = 0, cc0 = 0, cc1 = 0;
};

inline EvalTerm eval_term(const std::vector<double>& x, double t, int nu) {
    const std::size_t n = x.size();
    EvalTerm e;
    if (!std::isfinite(t))
        throw std::invalid_argument("evaluation point " + std::to_string(t) + " is not finite");
    if (n == 1) {  // constant
        e.k = 0;
        e.cg0 = (nu == 0) ? 1.0 : 0.0;
        return e;
    }
    if (t < x[0]) {  // linear extension on the left, slope s'(x_0)
        const double h = x[1] - x[0];
        e.k = 0;
        const double dx = (nu == 0) ? t - x[0] : (nu == 1 ? 1.0 : 0.0);
        // s'(x_0) = (g1 - g0)/h - h/6 (2 gamma0 + gamma1)
        e.cg0 = (nu == 0 ? 1.0 : 0.0) - dx / h;
        e.cg1 = dx / h;
        e.cc0 = -dx * h / 3.0;
        e.cc1 = -dx * h / 6.0;
        return e;
    }
    if (t > x[n - 1]) {  // linear extension on the right, slope s'(x_{n-1})
        const double h = x[n - 1] - x[n - 2];
        e.k = static_cast<std::int64_t>(n - 2);
        const double dx = (nu == 0) ? t - x[n - 1] : (nu == 1 ? 1.0 : 0.0);
        // s'(x_{n-1}) = (g_{n-1} - g_{n-2})/h + h/6 (gamma_{n-2} + 2 gamma_{n-1})
        e.cg0 = -dx / h;
        e.cg1 = (nu == 0 ? 1.0 : 0.0) + dx / h;
        e.cc0 = dx * h / 6.0;
        e.cc1 = dx * h / 3.0;
        return e;
    }
    // interval k with x_k <= t <= x_{k+1}
    std::size_t k = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), t) - x.begin());
    k = (k == 0) ? 0 : k - 1;
    if (k > n - 2) k = n - 2;
    const double h = x[k + 1] - x[k];
    const double a = (x[k + 1] - t) / h, b = 1.0 - a;  // (t - x_k)/h
    const double bb = (t - x[k]) / h;                   // exact at the knots
    e.k = static_cast<std::int64_t>(k);
    if (nu == 0) {
        e.cg0 = a;
        e.cg1 = bb;
        e.cc0 = (a * a * a - a) * h * h / 6.0;
        e.cc1 = (bb * bb * bb - bb) * h * h / 6.0;
    } else if (nu == 1) {
        e.cg0 = -1.0 / h;
        e.cg1 = 1.0 / h;
        e.cc0 = -(3.0 * a * a - 1.0) * h / 6.0;
        e.cc1 = (3.0 * b * b - 1.0) * h / 6.0;
    } else {
        e.cc0 = a;
        e.cc1 = b;
    }
    return e;
}

// The fused plan row for one query point: the value at t of the spline fitted
// to y with the factor f, written as
//     out = cy0 y[k] + cy1 y[k+1] + sum_{j=0..3} cgam[j] * gamma[k-1+j]
// by substituting g = y - lam W^-1 Q gamma (gamma is 0 at both end knots, and
// rows k-1 .. k+2 outside 0..n-1 have zero coefficients).
struct PlanRow {
    std::int64_t k = 0;
    double cy0 = 0, cy1 = 0;
    double cgam[4] = {0, 0, 0, 0};
};

inline PlanRow plan_row(const ReinschFactor& f, double t, int nu) {
    const EvalTerm e = eval_term(f.x, t, nu);
    PlanRow r;
    r.k = e.k;
    const std::int64_t n = static_cast<std::int64_t>(f.n);
    const std::int64_t k = e.k;
    r.cy0 = e.cg0;
    r.cy1 = (n > 1) ? e.cg1 : 0.0;
    auto add_gamma = [&](std::int64_t j, double c) {
        // gamma[j] sits in cgam[j - (k - 1)]; end knots carry gamma = 0.
        if (j <= 0 || j >= n - 1 || c == 0.0) return;
        r.cgam[j - (k - 1)] += c;
    };
    add_gamma(k, e.cc0);
    add_gamma(k + 1, e.cc1);
    if (f.lam != 0.0 && n >= 3) {
        // g_j = y_j - (lam/w_j) (Q gamma)_j,
        // (Q gamma)_j = gamma_{j-1}/h_{j-1} - gamma_j (1/h_{j-1} + 1/h_j) + gamma_{j+1}/h_j
        auto add_g = [&](std::int64_t j, double c) {
            if (c == 0.0) return;
            const double s = -c * f.lam_over_w[j];
            const double ihl = (j >= 1) ? 1.0 / f.h[j - 1] : 0.0;
            const double ihr = (j + 1 < n) ? 1.0 / f.h[j] : 0.0;
            if (j >= 1) add_gamma(j - 1, s * ihl);
            add_gamma(j, -s * (ihl + ihr));
            if (j + 1 < n) add_gamma(j + 1, s * ihr);
        };
        add_g(k, e.cg0);
        add_g(k + 1, e.cg1);
    }
    return r;
}

}  // namespace letcc
