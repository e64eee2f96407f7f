// Rows of "fit a smoothing spline with lam_k, evaluate at t_k", one lam per
// row, in O(n) per row.
//
// The plan's value at t is cy . y[k, k+1] + cgam . gamma[k-1 .. k+2] with
// gamma = P M^-1 Q^T y (P: interior knots into all knots, M = R + lam Q^T W^-1 Q
// symmetric), so as a row vector acting on y it is
//     cy (at k, k+1)  +  Q M^-1 P^T cgam,
// one banded solve with the factors already used for the columns (L D L^T)
// and one multiplication by the tridiagonal Q. A decoder whose smoothing
// differs per output point (letcc.codes' local lam policy) is then built in
// microseconds instead of one plan and one n x n apply per row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "eval_coeffs.hpp"
#include "reinsch.hpp"

namespace letcc {

// row (n entries) of the spline of f evaluated at t (derivative nu); u:
// scratch (n entries).
inline void smoother_row(const ReinschFactor& f, double t, int nu, double* row, std::vector<double>& u) {
    const std::size_t n = f.n;
    for (std::size_t j = 0; j < n; ++j) row[j] = 0.0;
    const PlanRow r = plan_row(f, t, nu);
    const std::size_t k = static_cast<std::size_t>(r.k);
    row[k] += r.cy0;
    if (n > 1) row[std::min(k + 1, n - 1)] += r.cy1;
    if (n < 3) return;
    // u = P^T cgam on the interior knots 1 .. n-2 (knot-indexed, zero at the ends).
    u.assign(n, 0.0);
    for (std::size_t s = 0; s < 4; ++s) {
        const std::ptrdiff_t j = static_cast<std::ptrdiff_t>(k) - 1 + static_cast<std::ptrdiff_t>(s);
        if (j >= 1 && j <= static_cast<std::ptrdiff_t>(n) - 2) u[static_cast<std::size_t>(j)] += r.cgam[s];
    }
    // M u' = u with M = L D L^T: L[i, i-1] = l1[i], L[i, i-2] = l2[i].
    for (std::size_t i = 1; i + 1 < n; ++i) {
        if (i >= 2) u[i] -= f.l1[i] * u[i - 1];
        if (i >= 3) u[i] -= f.l2[i] * u[i - 2];
    }
    for (std::size_t i = n - 2; i >= 1; --i) {
        // u[n-1] = 0 (natural end) and l2 has n entries, hence the guard
        double v = u[i] * f.inv_d[i] - f.l1[i + 1] * u[i + 1];
        if (i + 2 <= n - 1) v -= f.l2[i + 2] * u[i + 2];
        u[i] = v;
    }
    // row += Q u: column j of Q^T has qa[j+1] (row j+1), qb[j] (row j), qc[j-1] (row j-1).
    for (std::size_t j = 0; j < n; ++j) {
        double s = 0.0;
        if (j + 1 <= n - 2) s += f.qa[j + 1] * u[j + 1];
        if (j >= 1 && j <= n - 2) s += f.qb[j] * u[j];
        if (j >= 2) s += f.qc[j - 1] * u[j - 1];
        row[j] += s;
    }
}

// (q x n) rows, row k fitted with lams[k] and evaluated at at[k]: the
// lam-free part of the factorisation once, its lam part again wherever lam
// changes from one row to the next (the local-gap decoder: nearly every row),
// no allocation per row.
inline std::vector<double> smoother_rows(const double* x, const double* w, std::size_t n, const double* lams,
                                         const double* at, std::size_t q, int nu) {
    std::vector<double> out(q * n, 0.0);
    ReinschFactor f = reinsch_structure(x, w, n);
    std::vector<double> d, u;
    for (std::size_t k = 0; k < q; ++k) {
        if (k == 0 || !(lams[k] == f.lam)) refactor_reinsch(f, lams[k], d);
        smoother_row(f, at[k], nu, out.data() + k * n, u);
    }
    return out;
}

}  // namespace letcc
