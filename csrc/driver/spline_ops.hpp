// The spline's other compiled calls on row-major buffers: fit (values g and
// second derivatives gamma at the knots for every column of y), evaluate (a
// fitted spline at query points) and the GCV score of one lam. No Python
// here: csrc/bindings.cpp converts arrays, releases the GIL and calls these;
// the C++ tests (csrc/test/) call them directly. Inputs are the caller's
// contract, as in linear_maps.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <memory>
#include <vector>

#include "../dispatch.hpp"
#include "../eval_coeffs.hpp"
#include "../plan.hpp"
#include "../reinsch.hpp"
#include "parallel.hpp"

namespace letcc {
namespace driver {

// g and gamma (n x m each) of the spline fitted with the factor f to y (n x m).
template <class T>
void fit(const ReinschFactor& f, const T* y, T* g, T* gam, std::size_t m, int threads) {
    const PlanTables p = make_plan_tables(f, nullptr, 0, 0);
    std::vector<double> ih(f.h.size());
    for (std::size_t i = 0; i < ih.size(); ++i) ih[i] = 1.0 / f.h[i];
    const std::size_t tw = tile_width(p.n, sizeof(T), m);
    for_each_tile(m, tw, m * static_cast<std::size_t>(p.n) * 2, threads, [&](std::size_t c0, std::size_t w) {
        double* buf = tls_scratch<double>(gamma_rows(p.n) * w);
        fit_tile(p, f.lam_over_w.data(), ih.data(), y, m, g, gam, m, c0, w, buf);
    });
}

// out (q x m): the nu-th derivative (nu = 0, 1, 2) at the q points xq of the
// natural cubic spline with values g and second derivatives gam (n x m) at
// the knots x (n >= 1). std::invalid_argument for a non-finite point.
template <class T>
void evaluate(const std::vector<double>& x, const T* g, const T* gam, std::size_t m, const std::vector<double>& xq,
              int nu, T* out, int threads) {
    const std::size_t n = x.size();
    std::vector<EvalTerm> terms(xq.size());
    for (std::size_t i = 0; i < xq.size(); ++i) terms[i] = eval_term(x, xq[i], nu);
    const std::size_t tw = std::min<std::size_t>(m, 4096);
    for_each_tile(m, tw, m * xq.size(), threads, [&](std::size_t c0, std::size_t w) {
        for (std::size_t qi = 0; qi < terms.size(); ++qi) {
            const EvalTerm& e = terms[qi];
            const std::size_t k0 = static_cast<std::size_t>(e.k);
            const std::size_t k1 = std::min(k0 + 1, n - 1);
            const T* ga = g + k0 * m + c0;
            const T* gb = g + k1 * m + c0;
            const T* ca = gam + k0 * m + c0;
            const T* cb = gam + k1 * m + c0;
            T* o = out + qi * m + c0;
            const double cg1 = (n > 1) ? e.cg1 : 0.0, cc1 = (n > 1) ? e.cc1 : 0.0;
            for (std::size_t j = 0; j < w; ++j)
                o[j] = static_cast<T>(e.cg0 * static_cast<double>(ga[j]) + cg1 * static_cast<double>(gb[j]) +
                                      e.cc0 * static_cast<double>(ca[j]) + cc1 * static_cast<double>(cb[j]));
        }
    });
}

struct GcvScore {
    double score, trace, rss;
};

// Weighted GCV score of the factor's lam, all m columns of y (n x m) sharing it:
//   V(lam) = n * RSS_w / (n - tr S)^2,  RSS_w = sum_cols sum_i w_i (y_i - g_i)^2.
template <class T>
GcvScore gcv(const ReinschFactor& f, const T* y, std::size_t m, int threads) {
    const std::size_t n = f.n;
    std::unique_ptr<T[]> g(new T[n * m]), gam(new T[n * m]);
    fit<T>(f, y, g.get(), gam.get(), m, threads);
    const T* cp = gam.get();
    // Residuals straight from gamma, y - g = lam W^-1 Q gamma, rather than as
    // the difference y - g, which cancels as lam -> 0 (GCV's plateau there
    // would be rounding noise).
    double rss = 0.0;
    std::vector<double> ih(f.h.size());
    for (std::size_t i = 0; i < ih.size(); ++i) ih[i] = 1.0 / f.h[i];
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
        rss += f.w[i] * acc;
    }
    const double dn = static_cast<double>(n);
    const double dof_resid = smoother_trace_complement(f);  // n - tr S, without cancellation
    const double denom = dof_resid * dof_resid;
    const double score = denom > 0 ? dn * rss / denom : std::numeric_limits<double>::infinity();
    return {score, dn - dof_resid, rss};
}

}  // namespace driver
}  // namespace letcc
