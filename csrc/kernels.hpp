// Column-tile kernels for the Reinsch plan, templated on the storage type T of
// y and the output (float or double). All arithmetic is float64. The inner
// loops run over contiguous columns of a tile with restrict pointers, so the
// compiler vectorises them (the dispatch file compiles them for AVX-512, AVX2
// and baseline x86-64 and picks at run time).
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <type_traits>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "plan.hpp"

#if defined(__GNUC__)
#define LETCC_INLINE inline __attribute__((always_inline))
#define LETCC_RESTRICT __restrict__
#else
#define LETCC_INLINE inline
#define LETCC_RESTRICT
#endif

namespace letcc {
namespace kernels {

// Forward substitution fused with z = Q^T y, then back substitution: leaves
// gamma for columns [c0, c0 + tw) in buf (row r = knot r - 1; see plan.hpp).
template <class T>
LETCC_INLINE void forward_tile(const PlanTables& p, const T* LETCC_RESTRICT y, std::size_t ldy,
                               std::size_t c0, std::size_t tw, double* LETCC_RESTRICT buf,
                               std::size_t prefetch_cols = 0) {
    const std::int64_t n = p.n;
    const std::size_t rows = gamma_rows(n);
    for (std::size_t r = 0; r < rows; ++r) {
        // Only the padding rows and the two end knots must be zero; interior
        // rows are overwritten below.
        if (r <= 1 || r >= static_cast<std::size_t>(n)) {
            double* LETCC_RESTRICT b = buf + r * tw;
            for (std::size_t j = 0; j < tw; ++j) b[j] = 0.0;
        }
    }
    for (std::int64_t i = 1; i + 1 < n; ++i) {
        const KnotRows<T> k = knot_rows(i, y, ldy, c0, tw, buf);  // gamma rows tw apart
        const T *LETCC_RESTRICT ym = k.ym, *LETCC_RESTRICT y0 = k.y0, *LETCC_RESTRICT yp = k.yp;
        double* LETCC_RESTRICT z = k.z;
        const double *LETCC_RESTRICT z1 = z - tw, *LETCC_RESTRICT z2 = z - 2 * tw;
        const double a = p.qa[i], b = p.qb[i], c = p.qc[i], l1 = p.l1[i], l2 = p.l2[i];
#if defined(__GNUC__)
        // Rows of a tile are m elements apart: more streams than the hardware
        // prefetcher follows. Ask for this row of the tile this thread takes
        // next (prefetch_cols columns on) now.
        if (prefetch_cols) {
            const char* nxt = reinterpret_cast<const char*>(yp + prefetch_cols);
            for (std::size_t b0 = 0; b0 < tw * sizeof(T); b0 += 64) __builtin_prefetch(nxt + b0, 0, 1);
        }
#endif
        for (std::size_t j = 0; j < tw; ++j)
            z[j] = a * static_cast<double>(ym[j]) + b * static_cast<double>(y0[j]) +
                   c * static_cast<double>(yp[j]) - l1 * z1[j] - l2 * z2[j];
    }
}

// One step of the back substitution: gamma at knot i from knots i+1, i+2.
LETCC_INLINE void back_row(const PlanTables& p, std::int64_t i, std::size_t tw, double* LETCC_RESTRICT buf) {
    double* LETCC_RESTRICT g = buf + static_cast<std::size_t>(i + 1) * tw;
    const double* LETCC_RESTRICT g1 = g + tw;
    const double* LETCC_RESTRICT g2 = g + 2 * tw;
    const double d = p.inv_d[i], u1 = p.l1[i + 1], u2 = p.l2[i + 2];
    for (std::size_t j = 0; j < tw; ++j) g[j] = g[j] * d - u1 * g1[j] - u2 * g2[j];
}

template <class T>
LETCC_INLINE void solve_tile(const PlanTables& p, const T* LETCC_RESTRICT y, std::size_t ldy,
                             std::size_t c0, std::size_t tw, double* LETCC_RESTRICT buf) {
    forward_tile(p, y, ldy, c0, tw, buf);
    for (std::int64_t i = p.n - 2; i >= 1; --i) back_row(p, i, tw, buf);
}

// out[qi] = cy0 y[k] + cy1 y[k+1] + sum_t cgam[t] gamma[k-1+t] for one query.
template <class T>
LETCC_INLINE void eval_query(const PlanTables& p, std::int64_t qi, const T* LETCC_RESTRICT y, std::size_t ldy,
                             T* LETCC_RESTRICT out, std::size_t ldo, std::size_t c0, std::size_t tw,
                             const double* LETCC_RESTRICT buf, bool stream = false) {
    const QueryRows<T> q = query_rows(p, qi, y, ldy, out, ldo, c0, tw, buf);  // gamma rows tw apart
    const T* LETCC_RESTRICT ya = q.ya;
    const T* LETCC_RESTRICT yb = q.yb;
    const double* LETCC_RESTRICT g0 = q.g0;  // knot k - 1
    const double* LETCC_RESTRICT g1 = g0 + tw;
    const double* LETCC_RESTRICT g2 = g0 + 2 * tw;
    const double* LETCC_RESTRICT g3 = g0 + 3 * tw;
    const double ca = q.c[0], cb = q.c[1], e0 = q.c[2], e1 = q.c[3], e2 = q.c[4], e3 = q.c[5];
    T* LETCC_RESTRICT o = q.o;
    std::size_t j = 0;
#if defined(__SSE2__) && defined(__GNUC__)
    if (stream) {
        // Non-temporal stores: the output goes straight to memory without
        // reading each destination line first (a third less memory traffic
        // for outputs far larger than the caches). Peel to 16-byte alignment.
        for (; j < tw && (reinterpret_cast<std::uintptr_t>(o + j) & 15u); ++j)
            o[j] = static_cast<T>(ca * static_cast<double>(ya[j]) + cb * static_cast<double>(yb[j]) +
                                  e0 * g0[j] + e1 * g1[j] + e2 * g2[j] + e3 * g3[j]);
        constexpr std::size_t L = 16 / sizeof(T);  // lanes of one 16-byte store
        typedef double vd __attribute__((vector_size(L * sizeof(double))));
        typedef T vt __attribute__((vector_size(16)));
        for (; j + L <= tw; j += L) {
            vt a, b;
            vd h0, h1, h2, h3;
            __builtin_memcpy(&a, ya + j, sizeof a);
            __builtin_memcpy(&b, yb + j, sizeof b);
            __builtin_memcpy(&h0, g0 + j, sizeof h0);
            __builtin_memcpy(&h1, g1 + j, sizeof h1);
            __builtin_memcpy(&h2, g2 + j, sizeof h2);
            __builtin_memcpy(&h3, g3 + j, sizeof h3);
            const vd r = ca * __builtin_convertvector(a, vd) + cb * __builtin_convertvector(b, vd) + e0 * h0 +
                         e1 * h1 + e2 * h2 + e3 * h3;
            if constexpr (std::is_same<T, float>::value)
                _mm_stream_ps(o + j, reinterpret_cast<__m128>(__builtin_convertvector(r, vt)));
            else
                _mm_stream_pd(o + j, reinterpret_cast<__m128d>(r));
        }
    }
#endif
    for (; j < tw; ++j)
        o[j] = static_cast<T>(ca * static_cast<double>(ya[j]) + cb * static_cast<double>(yb[j]) +
                              e0 * g0[j] + e1 * g1[j] + e2 * g2[j] + e3 * g3[j]);
}

// The whole plan on one column tile: forward substitution fused with Q^T y,
// then back substitution with each query evaluated as soon as the four gamma
// rows it needs are final (queries in interval k need knots k-1 .. k+2), so
// the evaluation reads gamma from L1 rather than making another pass.
//
// stream: write the output with non-temporal stores (for outputs far larger
// than the caches); prefetch_cols: where this thread's next tile starts,
// relative to c0 (0: no prefetch).
template <class T>
LETCC_INLINE void plan_tile(const PlanTables& p, const T* LETCC_RESTRICT y, std::size_t ldy,
                            T* LETCC_RESTRICT out, std::size_t ldo, std::size_t c0, std::size_t tw,
                            double* LETCC_RESTRICT buf, bool stream = false, std::size_t prefetch_cols = 0) {
    const std::int64_t n = p.n;
    forward_tile(p, y, ldy, c0, tw, buf, (c0 + prefetch_cols + tw <= ldy) ? prefetch_cols : 0);
    auto eval_interval = [&](std::int64_t kk) {
        for (std::int64_t t = p.by_k[kk]; t < p.by_k[kk + 1]; ++t)
            eval_query(p, p.order[t], y, ldy, out, ldo, c0, tw, buf, stream);
    };
    for (std::int64_t i = n - 2; i >= 1; --i) {
        back_row(p, i, tw, buf);
        eval_interval(i + 1);  // needs knots i .. i+3, all final now
    }
    const std::int64_t last = (n >= 3) ? std::min<std::int64_t>(1, n - 1) : n - 1;
    for (std::int64_t kk = last; kk >= 0; --kk) eval_interval(kk);
#if defined(__SSE2__) && defined(__GNUC__)
    // Non-temporal stores are weakly ordered: fence them before the thread
    // pool tells the caller this tile is done.
    if (stream) _mm_sfence();
#endif
}

// Fit only: g = y - lam W^-1 Q gamma and gamma at the knots, for the
// SmoothingSpline object (which evaluates later at arbitrary points).
template <class T>
LETCC_INLINE void fit_tile(const PlanTables& p, const double* lam_over_w, const double* ih,
                           const T* LETCC_RESTRICT y, std::size_t ldy, T* LETCC_RESTRICT gout,
                           T* LETCC_RESTRICT gamout, std::size_t ldo, std::size_t c0, std::size_t tw,
                           const double* LETCC_RESTRICT buf) {
    const std::int64_t n = p.n;
    for (std::int64_t i = 0; i < n; ++i) {
        const double* LETCC_RESTRICT gm = buf + static_cast<std::size_t>(i) * tw;  // knot i - 1
        const double* LETCC_RESTRICT g0 = gm + tw;
        const double* LETCC_RESTRICT gp = g0 + tw;
        const T* LETCC_RESTRICT yi = y + static_cast<std::size_t>(i) * ldy + c0;
        T* LETCC_RESTRICT go = gout + static_cast<std::size_t>(i) * ldo + c0;
        T* LETCC_RESTRICT ga = gamout + static_cast<std::size_t>(i) * ldo + c0;
        // (Q gamma)_i = gamma_{i-1}/h_{i-1} - gamma_i (1/h_{i-1} + 1/h_i) + gamma_{i+1}/h_i
        const double il = (i >= 1) ? ih[i - 1] : 0.0;
        const double ir = (i + 1 < n) ? ih[i] : 0.0;
        const double s = lam_over_w[i];
        const double a = s * il, b = -s * (il + ir), c = s * ir;
        for (std::size_t j = 0; j < tw; ++j) {
            go[j] = static_cast<T>(static_cast<double>(yi[j]) - (a * gm[j] + b * g0[j] + c * gp[j]));
            ga[j] = static_cast<T>(g0[j]);
        }
    }
}

}  // namespace kernels
}  // namespace letcc
