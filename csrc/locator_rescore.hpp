// The spline locator's scores of the answers kept after erasures, without
// another pass of the scoring kernel (letcc.codes.robust's later steps).
//
// The first pass scored n answers with the detection spline of hat matrix H
// (n x n, at the round's knots) and left its sums (locator.hpp's layout).
// Erasing the answers E (q of them) leaves K. The spline with the same lam
// fitted to K alone has, by the leave-out identity that makes loo_i exact
// (Green & Silverman 3.2: the fit without E is the fit to all n answers with
// y_E replaced by that fit's own values there), the residuals
//
//   r'_K = r_K + C r_E,   C = H_KE (I - H_EE)^-1            (|K| x q)
//   H'   = H_KK + C H_EK                                    (its hat matrix)
//
// so every sum a pass over K would make follows from the first pass's sums
// and the residual cross products G[j, x] = r_j . r_x for the answers x in E
// (and, for the pair scores, the answers just right of each new hole):
//
//   ||r'_a||^2    = rss_a + 2 C_a . G[a, E] + C_a G[E, E] C_a^T
//   r'_a . r'_b   = r_a . r_b + C_a . G[b, E] + C_b . G[a, E] + C_a G[E, E] C_b^T
//
// and the distances between answers that become neighbours across a hole,
// ||y_a - y_b||^2, which the first pass did not form. Those cross products
// and distances take one pass over the rows (locator_kernel.hpp's
// rescore_tile: r_x = ((I - H) Y)_x, then y_j . r_x and the distances, two
// multiply-adds an element per x against the ~15 of a scoring pass), the
// algebra here is O(n^2 q).
//
// lam stays that of the first pass: the later steps score the answers kept
// with the round's detection spline, not with the one lam_scale would pick
// for the knots kept (robust.py's docstring).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "locator.hpp"

namespace letcc {

// When the identity loses float64 accuracy: it adds terms far larger than
// its result where an answer kept is nearly interpolated once E is out
// (1 - H'_aa much below 1 - H_aa: an answer left alone between holes) or
// where (I - H_EE) is nearly singular (C large). Inside these bounds the
// scores agree with dense refits to within 1e-6 of the largest score (about
// 1e-12 with one erasure among 22 answers; tests/test_locator_rescore.py
// checks against float64 refits, and these bounds were set against 80-bit
// ones, where the cases past them lost up to 4e-3); outside them the caller
// scores the answers kept with a pass of their own.
constexpr double kRescoreMinLeverageRatio = 1e-2;   // (1 - H'_aa) / (1 - H_aa)
constexpr double kRescoreMaxGain = 10.0;            // sum_e |C_ae|

// Everything of a rescoring but the pass over the rows.
struct LocatorRescore {
    bool accurate = true;               // within the bounds above
    std::size_t n = 0, q = 0, nk = 0;
    std::vector<std::size_t> kept;      // ascending, nk = n - q
    std::vector<std::size_t> cross;     // X: E (as given), then the answers right of a new hole (pairs)
    std::vector<double> ihx;            // (I - H)[X, :], |X| x n: r_x = sum_j ihx[x][j] y_j
    std::vector<double> C;              // nk x q
    std::vector<double> omd;            // 1 - H'_aa (nk)
    std::vector<double> upper, lower;   // H'_{a, next}, H'_{next, a} (nk - 1; pairs)
    std::vector<std::size_t> da, db;    // the answers whose distance the pass forms
};

// Solves in place: a (q x q, row-major) becomes its inverse (Gauss-Jordan
// with partial pivoting; q is the number of erasures, a handful).
inline void invert_small(std::vector<double>& a, std::size_t q) {
    std::vector<double> inv(q * q, 0.0);
    for (std::size_t i = 0; i < q; ++i) inv[i * q + i] = 1.0;
    for (std::size_t c = 0; c < q; ++c) {
        std::size_t piv = c;
        for (std::size_t r = c + 1; r < q; ++r)
            if (std::abs(a[r * q + c]) > std::abs(a[piv * q + c])) piv = r;
        if (!(std::abs(a[piv * q + c]) > 0.0))
            throw std::invalid_argument("I - H over the erased answers is singular: erase at most n - 3 answers");
        if (piv != c)
            for (std::size_t k = 0; k < q; ++k) {
                std::swap(a[c * q + k], a[piv * q + k]);
                std::swap(inv[c * q + k], inv[piv * q + k]);
            }
        const double d = 1.0 / a[c * q + c];
        for (std::size_t k = 0; k < q; ++k) {
            a[c * q + k] *= d;
            inv[c * q + k] *= d;
        }
        for (std::size_t r = 0; r < q; ++r) {
            if (r == c) continue;
            const double f = a[r * q + c];
            if (f == 0.0) continue;
            for (std::size_t k = 0; k < q; ++k) {
                a[r * q + k] -= f * a[c * q + k];
                inv[r * q + k] -= f * inv[c * q + k];
            }
        }
    }
    a.swap(inv);
}

// The rescoring of n answers (hat matrix H, row-major n x n) after erasing
// `erased` (positions 0 .. n - 1, distinct, at most n - 3).
inline LocatorRescore locator_rescore_plan(std::size_t n, const double* H, const std::vector<std::size_t>& erased,
                                           bool pairs) {
    LocatorRescore r;
    r.n = n;
    r.q = erased.size();
    if (r.q + 3 > n)
        throw std::invalid_argument("erasing " + std::to_string(r.q) + " of " + std::to_string(n) +
                                    " answers leaves fewer than 3");
    std::vector<char> gone(n, 0);
    for (std::size_t e : erased) {
        if (e >= n) throw std::invalid_argument("erased position " + std::to_string(e) + " is not one of the " +
                                                std::to_string(n) + " answers");
        if (gone[e]) throw std::invalid_argument("erased position " + std::to_string(e) + " is listed twice");
        gone[e] = 1;
    }
    for (std::size_t i = 0; i < n; ++i)
        if (!gone[i]) r.kept.push_back(i);
    const std::size_t q = r.q, nk = r.kept.size();
    r.nk = nk;
    const auto h = [&](std::size_t i, std::size_t j) { return H[i * n + j]; };

    // C = H_KE (I - H_EE)^-1
    std::vector<double> a(q * q);
    for (std::size_t e = 0; e < q; ++e)
        for (std::size_t f = 0; f < q; ++f) a[e * q + f] = (e == f ? 1.0 : 0.0) - h(erased[e], erased[f]);
    invert_small(a, q);
    r.C.assign(nk * q, 0.0);
    for (std::size_t t = 0; t < nk; ++t)
        for (std::size_t f = 0; f < q; ++f) {
            double c = 0.0;
            for (std::size_t e = 0; e < q; ++e) c += h(r.kept[t], erased[e]) * a[e * q + f];
            r.C[t * q + f] = c;
        }
    // H'_ab = H_ab + C_a . H_{E, b}
    const auto hk = [&](std::size_t t, std::size_t u) {
        double v = h(r.kept[t], r.kept[u]);
        for (std::size_t e = 0; e < q; ++e) v += r.C[t * q + e] * h(erased[e], r.kept[u]);
        return v;
    };
    r.omd.resize(nk);
    for (std::size_t t = 0; t < nk; ++t) {
        r.omd[t] = 1.0 - hk(t, t);
        double gain = 0.0;
        for (std::size_t e = 0; e < q; ++e) gain += std::abs(r.C[t * q + e]);
        const double before = 1.0 - h(r.kept[t], r.kept[t]);
        if (!(r.omd[t] >= kRescoreMinLeverageRatio * before) || !(gain <= kRescoreMaxGain)) r.accurate = false;
    }
    if (pairs && nk >= 2) {
        r.upper.resize(nk - 1);
        r.lower.resize(nk - 1);
        for (std::size_t t = 0; t + 1 < nk; ++t) {
            r.upper[t] = hk(t, t + 1);
            r.lower[t] = hk(t + 1, t);
        }
    }
    r.cross = erased;
    if (pairs)
        for (std::size_t t = 0; t + 1 < nk; ++t)
            if (r.kept[t + 1] - r.kept[t] > 1) r.cross.push_back(r.kept[t + 1]);
    r.ihx.assign(r.cross.size() * n, 0.0);
    for (std::size_t x = 0; x < r.cross.size(); ++x)
        for (std::size_t j = 0; j < n; ++j) r.ihx[x * n + j] = (j == r.cross[x] ? 1.0 : 0.0) - h(r.cross[x], j);
    // neighbours (1 and 2 apart among the kept) that were not 1 or 2 apart
    for (std::size_t t = 0; t + 1 < nk; ++t) {
        if (r.kept[t + 1] - r.kept[t] > 2) {
            r.da.push_back(r.kept[t]);
            r.db.push_back(r.kept[t + 1]);
        }
        if (t + 2 < nk && r.kept[t + 2] - r.kept[t] > 2) {
            r.da.push_back(r.kept[t]);
            r.db.push_back(r.kept[t + 2]);
        }
    }
    return r;
}

// The sums of the answers kept (locator_sums_size(nk, pairs), locator.hpp's
// layout) from the first pass's `first` (locator_sums_size(n, pairs)) and
// what the rescoring pass formed: u (n x |X|, u[j][x] = y_j . r_x) and dist
// (one per da/db pair). H as for locator_rescore_plan.
inline std::vector<double> locator_rescored_sums(const LocatorRescore& r, const double* H, const double* first,
                                                 const double* u, const double* dist, bool pairs) {
    const std::size_t n = r.n, q = r.q, nk = r.nk, nx = r.cross.size();
    const LocatorSums f(first, n);
    // G[a][x] = r_a . r_x = u[a][x] - sum_j H_aj u[j][x]
    std::vector<double> G(n * nx);
    for (std::size_t a = 0; a < n; ++a)
        for (std::size_t x = 0; x < nx; ++x) {
            double v = u[a * nx + x];
            for (std::size_t j = 0; j < n; ++j) v -= H[a * n + j] * u[j * nx + x];
            G[a * nx + x] = v;
        }
    const auto g = [&](std::size_t a, std::size_t x) { return G[a * nx + x]; };
    const auto c = [&](std::size_t t, std::size_t e) { return r.C[t * q + e]; };
    // r'_t . r'_w from the base product r_a . r_b
    const auto cross = [&](std::size_t t, std::size_t w, double base) {
        const std::size_t a = r.kept[t], b = r.kept[w];
        double v = base;
        for (std::size_t e = 0; e < q; ++e) v += c(t, e) * g(b, e) + c(w, e) * g(a, e);
        for (std::size_t e = 0; e < q; ++e)
            for (std::size_t k = 0; k < q; ++k) v += c(t, e) * c(w, k) * g(r.cross[e], k);
        return v;
    };
    std::vector<double> sums(locator_sums_size(static_cast<std::int64_t>(nk), pairs), 0.0);
    double* rss = sums.data();
    double* d1 = rss + nk;
    double* d2 = rss + 2 * nk;
    double* rr = rss + 3 * nk;
    for (std::size_t t = 0; t < nk; ++t) rss[t] = cross(t, t, f.rss[r.kept[t]]);
    std::size_t next = 0;      // the next of the pass's distances (da/db's order)
    for (std::size_t t = 0; t + 1 < nk; ++t) {
        const std::size_t a = r.kept[t], gap = r.kept[t + 1] - a;
        d1[t] = gap == 1 ? f.d1[a] : gap == 2 ? f.d2[a] : dist[next++];
        if (t + 2 < nk) d2[t] = r.kept[t + 2] - a == 2 ? f.d2[a] : dist[next++];
    }
    if (pairs) {
        std::size_t hole = q;  // X's entries after E: the answers right of each new hole, in order
        for (std::size_t t = 0; t + 1 < nk; ++t) {
            const std::size_t a = r.kept[t];
            const double base = r.kept[t + 1] == a + 1 ? f.rr[a] : g(a, hole++);
            rr[t] = cross(t, t + 1, base);
        }
    }
    return sums;
}

}  // namespace letcc
