// Reinsch's algorithm for cubic smoothing splines (Green & Silverman, ch. 2).
//
// Minimise  sum_i w_i (y_i - g(x_i))^2 + lam * integral g''(t)^2 dt
// (the parametrisation of scipy.interpolate.make_smoothing_spline: a plain
// weighted sum, no 1/n). The minimiser is the natural cubic spline with values
// g and second derivatives gamma at the knots, where
//     (R + lam Q^T W^-1 Q) gamma_int = Q^T y,   g = y - lam W^-1 Q gamma.
// The (n-2)x(n-2) matrix is symmetric positive definite and pentadiagonal; it
// depends only on (x, w, lam), so it is factored once here (banded LDL^T, O(n))
// and the factors are applied to every column of y by the kernels.
//
// Header-only, no Python: the bindings and the CUDA plan builder include it.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace letcc {

// Factors of the Reinsch system for fixed (x, w, lam). All float64: the
// float32 kernels use these too, which is what keeps float32 results within
// 1e-6 of float64 ones (a float32-only factorisation loses ~1e-4 at n = 1024).
struct ReinschFactor {
    std::size_t n = 0;        // number of knots
    double lam = 0.0;
    std::vector<double> x, w, h;            // knots, weights, gaps (n-1)
    // Q^T y at interior knot i (1..n-2) = qa[i] y[i-1] + qb[i] y[i] + qc[i] y[i+1]
    std::vector<double> qa, qb, qc;         // indexed by knot, size n
    // LDL^T of the interior system, indexed by knot i (1..n-2):
    // l1[i] = L[i, i-1], l2[i] = L[i, i-2], inv_d[i] = 1 / D[i].
    std::vector<double> l1, l2, inv_d;
    // B = Q^T W^-1 Q band, kept for the GCV trace: b0[i] = B[i,i],
    // b1[i] = B[i,i+1], b2[i] = B[i,i+2].
    std::vector<double> b0, b1, b2;
    // lam / w[j] for the correction g = y - lam W^-1 Q gamma.
    std::vector<double> lam_over_w;
};

inline std::string format_g(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

// The caller's contract: x strictly increasing and finite, w positive and
// finite, lam finite and >= 0. Its one home, with the messages users see, is
// letcc/splines/_validation.py (as_knots, as_weights, as_lam), which every
// Python route into the core goes through; the C++ tests build valid input.
// Checked here is what memory safety needs (n >= 1); input that breaks the
// factorisation (extreme gaps or lam, NaN) is caught by the pivot check in
// factor_reinsch.
inline void check_knot_count(std::size_t n) {
    if (n == 0) throw std::invalid_argument("need at least one knot, got n = 0");
}

// The parts of the factorisation that do not depend on lam: knots, weights,
// gaps, Q and B = Q^T W^-1 Q (l1, l2, inv_d sized, zero). A decoder whose
// rows each have their own lam (smoother_rows) computes these once and
// refactor_reinsch per lam: the same numbers as factor_reinsch for each.
inline ReinschFactor reinsch_structure(const double* x, const double* w, std::size_t n) {
    check_knot_count(n);
    ReinschFactor f;
    f.n = n;
    f.x.assign(x, x + n);
    f.w.assign(w, w + n);
    f.h.assign(n > 1 ? n - 1 : 0, 0.0);
    for (std::size_t i = 0; i + 1 < n; ++i) f.h[i] = x[i + 1] - x[i];
    f.qa.assign(n, 0.0); f.qb.assign(n, 0.0); f.qc.assign(n, 0.0);
    f.l1.assign(n, 0.0); f.l2.assign(n, 0.0); f.inv_d.assign(n, 0.0);
    f.b0.assign(n, 0.0); f.b1.assign(n, 0.0); f.b2.assign(n, 0.0);
    f.lam_over_w.assign(n, 0.0);
    if (n < 3) return f;  // n = 1: constant, n = 2: the line through both points
    const auto& h = f.h;
    for (std::size_t i = 1; i + 1 < n; ++i) {
        f.qa[i] = 1.0 / h[i - 1];
        f.qc[i] = 1.0 / h[i];
        f.qb[i] = -f.qa[i] - f.qc[i];
    }
    // B = Q^T W^-1 Q, column i of Q has qa[i], qb[i], qc[i] in rows i-1, i, i+1.
    for (std::size_t i = 1; i + 1 < n; ++i) {
        f.b0[i] = f.qa[i] * f.qa[i] / w[i - 1] + f.qb[i] * f.qb[i] / w[i] + f.qc[i] * f.qc[i] / w[i + 1];
        if (i + 2 < n) f.b1[i] = f.qb[i] * f.qa[i + 1] / w[i] + f.qc[i] * f.qb[i + 1] / w[i + 1];
        if (i + 3 < n) f.b2[i] = f.qc[i] * f.qa[i + 2] / w[i + 1];
    }
    return f;
}

// f (from reinsch_structure) factored for lam, in place: lam, lam / w and
// the LDL^T of M = R + lam B. d: scratch of n entries.
inline void refactor_reinsch(ReinschFactor& f, double lam, std::vector<double>& d) {
    const std::size_t n = f.n;
    f.lam = lam;
    for (std::size_t j = 0; j < n; ++j) f.lam_over_w[j] = lam / f.w[j];
    if (n < 3) return;
    const auto& h = f.h;
    // M = R + lam B, banded LDL^T (bandwidth 2). d = D[i] kept as 1/D.
    d.assign(n, 0.0);
    for (std::size_t i = 1; i + 1 < n; ++i) {
        const double m0 = (h[i - 1] + h[i]) / 3.0 + lam * f.b0[i];
        // M[i, i-1] and M[i, i-2] (symmetric: row i-1's off-diagonals)
        const double m1 = (i >= 2) ? h[i - 1] / 6.0 + lam * f.b1[i - 1] : 0.0;
        const double m2 = (i >= 3) ? lam * f.b2[i - 2] : 0.0;
        double l2 = 0.0, l1 = 0.0;
        if (i >= 3) l2 = m2 / d[i - 2];
        if (i >= 2) l1 = (m1 - (i >= 3 ? l2 * f.l1[i - 1] * d[i - 2] : 0.0)) / d[i - 1];
        double di = m0 - (i >= 2 ? l1 * l1 * d[i - 1] : 0.0) - (i >= 3 ? l2 * l2 * d[i - 2] : 0.0);
        if (!(di > 0.0) || !std::isfinite(di))  // bad input (extreme gaps or lam): ValueError in Python
            throw std::invalid_argument("knots too close or too far apart for lam = " + format_g(lam) +
                                        " (or not strictly increasing and finite, which"
                                        " letcc's Python layer checks): the Reinsch system is not positive definite at x[" +
                                        std::to_string(i) + "] = " + format_g(f.x[i]) + " (pivot " +
                                        format_g(di) + ")");
        d[i] = di;
        f.l1[i] = l1;
        f.l2[i] = l2;
        f.inv_d[i] = 1.0 / di;
    }
}

inline ReinschFactor factor_reinsch(const double* x, const double* w, std::size_t n, double lam) {
    ReinschFactor f = reinsch_structure(x, w, n);
    std::vector<double> d;
    refactor_reinsch(f, lam, d);
    return f;
}

// n - tr S = lam * tr(M^-1 B) for the smoother matrix S (g = S y), in O(n)
// from the band of M^-1 (Hutchinson & de Hoog 1985). Kept as its own
// function because GCV divides by (n - tr S)^2: forming n - (n - lam t)
// cancels catastrophically as lam -> 0.
inline double smoother_trace_complement(const ReinschFactor& f) {
    const std::size_t n = f.n;
    if (n < 3) return 0.0;
    // s0[i] = Sigma[i,i], s1[i] = Sigma[i,i+1], s2[i] = Sigma[i,i+2], Sigma = M^-1,
    // from L^T Sigma = D^-1 L^-1, bottom-up. L[i+1,i] = l1[i+1], L[i+2,i] = l2[i+2].
    std::vector<double> s0(n + 2, 0.0), s1(n + 2, 0.0), s2(n + 2, 0.0);
    const std::size_t last = n - 2;  // last interior knot
    for (std::size_t i = last; i >= 1; --i) {
        const double a = (i + 1 <= last) ? f.l1[i + 1] : 0.0;
        const double b = (i + 2 <= last) ? f.l2[i + 2] : 0.0;
        s2[i] = -a * s1[i + 1] - b * s0[i + 2];
        s1[i] = -a * s0[i + 1] - b * s1[i + 1];
        s0[i] = f.inv_d[i] - a * s1[i] - b * s2[i];
    }
    double t = 0.0;
    for (std::size_t i = 1; i <= last; ++i)
        t += s0[i] * f.b0[i] + 2.0 * s1[i] * f.b1[i] + 2.0 * s2[i] * f.b2[i];
    return f.lam * t;
}

// Trace of the smoother matrix S (g = S y): the effective degrees of freedom.
inline double smoother_trace(const ReinschFactor& f) {
    return static_cast<double>(f.n) - smoother_trace_complement(f);
}

}  // namespace letcc
