// The spline locator's column-tile kernel (letcc.codes.robust): for the
// answers y_0 .. y_{n-1} (rows of the caller's array, any rows in any order,
// through row pointers) and columns [c0, c0 + tw), in one pass over the tile:
//
//   rss[i] = sum_j r_ij^2, r = y - g the residual of the smoothing spline
//            fitted at the knots (g = H y), formed as lam W^-1 Q gamma from the
//            spline's second derivatives (as driver::gcv does: no cancellation
//            of y - g where the spline follows y closely);
//   d1[i]  = sum_j (y_ij - y_{i+1,j})^2,  d2[i] = sum_j (y_ij - y_{i+2,j})^2.
//
// The Reinsch forward substitution (fused with Q^T y) computes d1, d2 of the
// rows it reads; the back substitution computes each knot's residual as soon
// as the three gamma rows it needs are final, while they are in registers.
// float64 arithmetic for both storage types (float32 rows are widened
// exactly). The sums over the tile's columns run in 8 fixed lanes (column j
// into lane j mod 8, the lanes added in a fixed order at the end): the same
// result whatever the thread that runs the tile, and vectorised without
// reassociation. Compiled per instruction set by dispatch.cpp (the GCC/Clang
// vector extension: one zmm on AVX-512, two ymm on AVX2, four xmm baseline;
// every function here is inlined into its ISA's entry point, so GCC's -Wpsabi
// note on 64-byte vectors passed without AVX-512 does not apply: dispatch.cpp
// is compiled with -Wno-psabi).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "locator.hpp"
#include "plan.hpp"

#if defined(__GNUC__)
#define LETCC_LOC_INLINE inline __attribute__((always_inline))
#else
#define LETCC_LOC_INLINE inline
#endif

namespace letcc {

namespace kernels {

constexpr std::size_t kLocLanes = 8;
#if defined(__GNUC__)
typedef double LocV __attribute__((vector_size(64)));      // 8 float64 lanes

LETCC_LOC_INLINE LocV loc_load(const double* p) {
    LocV v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
LETCC_LOC_INLINE LocV loc_load(const float* p) {
    typedef float F8 __attribute__((vector_size(32)));
    F8 f;
    std::memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, LocV);
}
LETCC_LOC_INLINE LocV loc_set1(double x) { return LocV{x, x, x, x, x, x, x, x}; }
#else
// Other compilers: the same 8 lanes, lane by lane (the same sums).
struct LocV {
    double v[kLocLanes];
};
inline LocV loc_op(LocV a, LocV b, double (*f)(double, double)) {
    for (std::size_t t = 0; t < kLocLanes; ++t) a.v[t] = f(a.v[t], b.v[t]);
    return a;
}
inline LocV operator+(LocV a, LocV b) { return loc_op(a, b, [](double x, double y) { return x + y; }); }
inline LocV operator-(LocV a, LocV b) { return loc_op(a, b, [](double x, double y) { return x - y; }); }
inline LocV operator*(LocV a, LocV b) { return loc_op(a, b, [](double x, double y) { return x * y; }); }
inline LocV& operator+=(LocV& a, LocV b) { return a = a + b; }
template <class T>
inline LocV loc_load(const T* p) {
    LocV r;
    for (std::size_t t = 0; t < kLocLanes; ++t) r.v[t] = static_cast<double>(p[t]);
    return r;
}
inline LocV loc_set1(double x) {
    LocV r;
    for (double& e : r.v) e = x;
    return r;
}
#endif
LETCC_LOC_INLINE void loc_store(double* p, LocV v) { std::memcpy(p, &v, sizeof v); }

// The lanes' sum in a fixed order, plus the tail's columns (lane j - j0 each).
LETCC_LOC_INLINE double loc_sum(LocV a, const double* tail) {
    double l[kLocLanes];
    std::memcpy(l, &a, sizeof l);
    for (std::size_t t = 0; t < kLocLanes; ++t) l[t] += tail[t];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

template <class T>
LETCC_LOC_INLINE void locator_tile(const PlanTables& p, const LocatorCoeffs& rc_, const T* const* rows,
                                   std::size_t c0, std::size_t tw, double* buf, double* sums,
                                   std::size_t prefetch_cols = 0) {
    const std::int64_t n = p.n;
    const std::size_t nn = static_cast<std::size_t>(n);
    const std::size_t full = tw / kLocLanes * kLocLanes;
    double* rss = sums;
    double* d1 = sums + nn;
    double* d2 = sums + 2 * nn;
    for (std::size_t i = 0; i < locator_sums_size(n); ++i) sums[i] = 0.0;
    if (n < 2) return;

    // d1 of the last pair (the forward substitution covers pairs 0 .. n - 3)
    {
        const T* a = rows[n - 2] + c0;
        const T* b = rows[n - 1] + c0;
        LocV acc = loc_set1(0.0);
        for (std::size_t j = 0; j < full; j += kLocLanes) {
            const LocV e = loc_load(a + j) - loc_load(b + j);
            acc += e * e;
        }
        double tail[kLocLanes] = {0};
        for (std::size_t j = full; j < tw; ++j) {
            const double e = static_cast<double>(a[j]) - static_cast<double>(b[j]);
            tail[j - full] += e * e;
        }
        d1[n - 2] = loc_sum(acc, tail);
    }
    if (n < 3) return;      // n = 2: the line through both points, no residual

    const std::size_t grows = gamma_rows(n);
    for (std::size_t r = 0; r < grows; ++r)
        if (r <= 1 || r >= nn) std::memset(buf + r * tw, 0, tw * sizeof(double));

    // forward substitution fused with Q^T y; d1[i - 1], d2[i - 1] from its rows
    for (std::int64_t i = 1; i + 1 < n; ++i) {
        const T* ym = rows[i - 1] + c0;
        const T* y0 = rows[i] + c0;
        const T* yp = rows[i + 1] + c0;
        double* z = buf + static_cast<std::size_t>(i + 1) * tw;
        const double* z1 = z - tw;
        const double* z2 = z - 2 * tw;
        const double qa = p.qa[i], qb = p.qb[i], qc = p.qc[i], l1 = p.l1[i], l2 = p.l2[i];
#if defined(__GNUC__)
        // Rows of a tile are m elements apart: more streams than the hardware
        // prefetcher follows. Ask for the rows this step reads first of the
        // tile this thread takes next (prefetch_cols columns on), as
        // kernels.hpp's forward substitution does.
        if (prefetch_cols) {
            for (std::int64_t r = (i == 1 ? 0 : i + 1); r <= i + 1; ++r) {
                const char* nxt = reinterpret_cast<const char*>(rows[r] + c0 + prefetch_cols);
                for (std::size_t b0 = 0; b0 < tw * sizeof(T); b0 += 64) __builtin_prefetch(nxt + b0, 0, 1);
            }
        }
#endif
        const LocV va = loc_set1(qa), vb = loc_set1(qb), vc = loc_set1(qc), v1 = loc_set1(l1), v2 = loc_set1(l2);
        LocV a1 = loc_set1(0.0), a2 = loc_set1(0.0);
        for (std::size_t j = 0; j < full; j += kLocLanes) {
            const LocV m = loc_load(ym + j), c = loc_load(y0 + j), q = loc_load(yp + j);
            loc_store(z + j, va * m + vb * c + vc * q - v1 * loc_load(z1 + j) - v2 * loc_load(z2 + j));
            const LocV e1 = m - c, e2 = m - q;
            a1 += e1 * e1;
            a2 += e2 * e2;
        }
        double t1[kLocLanes] = {0}, t2[kLocLanes] = {0};
        for (std::size_t j = full; j < tw; ++j) {
            const double m = static_cast<double>(ym[j]), c = static_cast<double>(y0[j]),
                         q = static_cast<double>(yp[j]);
            z[j] = qa * m + qb * c + qc * q - l1 * z1[j] - l2 * z2[j];
            t1[j - full] += (m - c) * (m - c);
            t2[j - full] += (m - q) * (m - q);
        }
        d1[i - 1] = loc_sum(a1, t1);
        d2[i - 1] = loc_sum(a2, t2);
    }

    // back substitution: gamma at knot i from knots i + 1, i + 2; then knot
    // i + 1's residual from gamma i .. i + 2, all final
    for (std::int64_t i = n - 2; i >= 1; --i) {
        double* g = buf + static_cast<std::size_t>(i + 1) * tw;
        const double* g1 = g + tw;
        const double* g2 = g + 2 * tw;
        const double d = p.inv_d[i], u1 = p.l1[i + 1], u2 = p.l2[i + 2];
        const std::size_t k = static_cast<std::size_t>(i + 1);
        const double ra = rc_.ra[k], rb = rc_.rb[k], rcc = rc_.rc[k];
        const LocV vd = loc_set1(d), vu1 = loc_set1(u1), vu2 = loc_set1(u2);
        const LocV vra = loc_set1(ra), vrb = loc_set1(rb), vrc = loc_set1(rcc);
        LocV acc = loc_set1(0.0);
        for (std::size_t j = 0; j < full; j += kLocLanes) {
            const LocV h1 = loc_load(g1 + j), h2 = loc_load(g2 + j);
            const LocV h0 = loc_load(g + j) * vd - vu1 * h1 - vu2 * h2;
            loc_store(g + j, h0);
            const LocV r = vra * h0 + vrb * h1 + vrc * h2;
            acc += r * r;
        }
        double t[kLocLanes] = {0};
        for (std::size_t j = full; j < tw; ++j) {
            const double h1 = g1[j], h2 = g2[j];
            const double h0 = g[j] * d - u1 * h1 - u2 * h2;
            g[j] = h0;
            const double r = ra * h0 + rb * h1 + rcc * h2;
            t[j - full] += r * r;
        }
        rss[k] = loc_sum(acc, t);
    }

    // knots 1 and 0 (gamma at knot 0 is zero: the natural end)
    {
        const double* g1 = buf + 2 * tw;      // knot 1
        const double* g2 = buf + 3 * tw;      // knot 2 (zero row when n = 3)
        const double rb1 = rc_.rb[1], rc1 = rc_.rc[1], rc0 = rc_.rc[0];
        const LocV vb1 = loc_set1(rb1), vc1 = loc_set1(rc1), vc0 = loc_set1(rc0);
        LocV a0 = loc_set1(0.0), a1 = loc_set1(0.0);
        for (std::size_t j = 0; j < full; j += kLocLanes) {
            const LocV h1 = loc_load(g1 + j), h2 = loc_load(g2 + j);
            const LocV r1 = vb1 * h1 + vc1 * h2, r0 = vc0 * h1;
            a1 += r1 * r1;
            a0 += r0 * r0;
        }
        double t0[kLocLanes] = {0}, t1[kLocLanes] = {0};
        for (std::size_t j = full; j < tw; ++j) {
            const double r1 = rb1 * g1[j] + rc1 * g2[j], r0 = rc0 * g1[j];
            t1[j - full] += r1 * r1;
            t0[j - full] += r0 * r0;
        }
        rss[1] = loc_sum(a1, t1);
        rss[0] = loc_sum(a0, t0);
    }
}

}  // namespace kernels
}  // namespace letcc
