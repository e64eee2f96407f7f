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
// exactly). The sums over the tile's columns run in W fixed lanes (column j
// into lane j mod W, the lanes added in a fixed order at the end): the same
// result whatever the thread that runs the tile, and vectorised without
// reassociation. Compiled per instruction set by dispatch.cpp with W the
// register's width (the GCC/Clang vector extension: W = 8 on AVX-512, 4 on
// AVX2, 2 baseline; the sums' order, and so their last bits, differ between
// builds, never between runs).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "locator.hpp"
#include "plan.hpp"

#if defined(__GNUC__)
#define LETCC_LOC_INLINE inline __attribute__((always_inline))
#define LETCC_LOC_LAMBDA __attribute__((always_inline))
#else
#define LETCC_LOC_LAMBDA
#define LETCC_LOC_INLINE inline
#endif

namespace letcc {

namespace kernels {

// Vectors of W float64 lanes: W = 8, 4, 2 fill one AVX-512, AVX2 or SSE2
// register (dispatch.cpp picks W with the instruction set: a vector wider
// than the build's registers is split by GCC into slow pieces).
template <int W>
struct LocVec;
#if defined(__GNUC__)
template <>
struct LocVec<8> {
    typedef double V __attribute__((vector_size(64)));
    typedef float F __attribute__((vector_size(32)));
};
template <>
struct LocVec<4> {
    typedef double V __attribute__((vector_size(32)));
    typedef float F __attribute__((vector_size(16)));
};
template <>
struct LocVec<2> {
    typedef double V __attribute__((vector_size(16)));
    typedef float F __attribute__((vector_size(8)));
};

template <int W>
LETCC_LOC_INLINE typename LocVec<W>::V loc_load(const double* p) {
    typename LocVec<W>::V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <int W>
LETCC_LOC_INLINE typename LocVec<W>::V loc_load(const float* p) {
    typename LocVec<W>::F f;
    std::memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, typename LocVec<W>::V);
}
template <int W>
LETCC_LOC_INLINE typename LocVec<W>::V loc_set1(double x) {
    const typename LocVec<W>::V zero = {};
    return zero + x;
}
#else
// Other compilers: the same W lanes, lane by lane (the same sums).
template <int W>
struct LocLanes {
    double v[W];
    LocLanes operator+(LocLanes b) const { for (int t = 0; t < W; ++t) b.v[t] = v[t] + b.v[t]; return b; }
    LocLanes operator-(LocLanes b) const { for (int t = 0; t < W; ++t) b.v[t] = v[t] - b.v[t]; return b; }
    LocLanes operator*(LocLanes b) const { for (int t = 0; t < W; ++t) b.v[t] = v[t] * b.v[t]; return b; }
    LocLanes& operator+=(LocLanes b) { return *this = *this + b; }
};
template <int W>
struct LocVec {
    typedef LocLanes<W> V;
};
template <int W, class T>
inline LocLanes<W> loc_load(const T* p) {
    LocLanes<W> r;
    for (int t = 0; t < W; ++t) r.v[t] = static_cast<double>(p[t]);
    return r;
}
template <int W>
inline LocLanes<W> loc_set1(double x) {
    LocLanes<W> r;
    for (double& e : r.v) e = x;
    return r;
}
#endif
template <int W>
LETCC_LOC_INLINE void loc_store(double* p, typename LocVec<W>::V v) { std::memcpy(p, &v, sizeof v); }

// The lanes' sum in a fixed order (adjacent pairs, then pairs of pairs),
// plus the tail's columns (column full + t in lane t).
template <int W>
LETCC_LOC_INLINE double loc_sum(typename LocVec<W>::V a, const double* tail) {
    double l[W];
    std::memcpy(l, &a, sizeof l);
    for (int t = 0; t < W; ++t) l[t] += tail[t];
    for (int s = 1; s < W; s *= 2)
        for (int i = 0; i + s < W; i += 2 * s) l[i] += l[i + s];
    return l[0];
}

// Pairs: also rr[k] = r_k . r_{k+1} (locator.hpp's sums layout), r_{k+1}
// kept in a row of the buffer from the step before.
template <class T, int W, bool Pairs>
LETCC_LOC_INLINE void locator_tile_impl(const PlanTables& p, const LocatorCoeffs& rc_, const T* const* rows,
                                        std::size_t c0, std::size_t tw, double* buf, double* sums,
                                        std::size_t prefetch_cols) {
    const std::int64_t n = p.n;
    const std::size_t nn = static_cast<std::size_t>(n);
    using V = typename LocVec<W>::V;
    const std::size_t full = tw / W * W;
    double* rss = sums;
    double* d1 = sums + nn;
    double* d2 = sums + 2 * nn;
    double* rr = sums + 3 * nn;     // written only with Pairs
    for (std::size_t i = 0; i < locator_sums_size(n, Pairs); ++i) sums[i] = 0.0;
    if (n < 2) return;

    // d1 of the last pair (the forward substitution covers pairs 0 .. n - 3)
    {
        const T* a = rows[n - 2] + c0;
        const T* b = rows[n - 1] + c0;
        V acc = loc_set1<W>(0.0);
        for (std::size_t j = 0; j < full; j += W) {
            const V e = loc_load<W>(a + j) - loc_load<W>(b + j);
            acc += e * e;
        }
        double tail[W] = {0};
        for (std::size_t j = full; j < tw; ++j) {
            const double e = static_cast<double>(a[j]) - static_cast<double>(b[j]);
            tail[j - full] += e * e;
        }
        d1[n - 2] = loc_sum<W>(acc, tail);
    }
    if (n < 3) return;      // n = 2: the line through both points, no residual

    const std::size_t grows = gamma_rows(n);
    for (std::size_t r = 0; r < grows; ++r)
        if (r <= 1 || r >= nn) std::memset(buf + r * tw, 0, tw * sizeof(double));

    // forward substitution fused with Q^T y; d1[i - 1], d2[i - 1] from its
    // rows. Two knots a trip (i, i + 1; the last alone where their number is
    // odd): the second's z and distances take the first's rows and z from
    // registers, so a trip loads 6 rows for 2 knots, not 10 (the pass is
    // bound by its loads and stores as much as by its multiply-adds). Each
    // sum still runs over the columns in the same lanes and order.
    for (std::int64_t i = 1; i + 1 < n;) {
        const bool two = i + 2 < n;
        const T* ym = rows[i - 1] + c0;
        const T* y0 = rows[i] + c0;
        const T* yp = rows[i + 1] + c0;
        const T* yq = two ? rows[i + 2] + c0 : yp;
        double* z = buf + static_cast<std::size_t>(i + 1) * tw;
        double* zb = z + tw;
        const double* z1 = z - tw;
        const double* z2 = z - 2 * tw;
#if defined(__GNUC__)
        // Rows of a tile are m elements apart: more streams than the hardware
        // prefetcher follows. Ask for the rows this trip reads first of the
        // tile this thread takes next (prefetch_cols columns on), as
        // kernels.hpp's forward substitution does.
        if (prefetch_cols) {
            for (std::int64_t r = (i == 1 ? 0 : i + 1); r <= i + (two ? 2 : 1); ++r) {
                const char* nxt = reinterpret_cast<const char*>(rows[r] + c0 + prefetch_cols);
                for (std::size_t b0 = 0; b0 < tw * sizeof(T); b0 += 64) __builtin_prefetch(nxt + b0, 0, 1);
            }
        }
#endif
        const double qa = p.qa[i], qb = p.qb[i], qc = p.qc[i], l1 = p.l1[i], l2 = p.l2[i];
        const V va = loc_set1<W>(qa), vb = loc_set1<W>(qb), vc = loc_set1<W>(qc), v1 = loc_set1<W>(l1), v2 = loc_set1<W>(l2);
        V a1 = loc_set1<W>(0.0), a2 = loc_set1<W>(0.0);
        double t1[W] = {0}, t2[W] = {0};
        if (two) {
            const double qa2 = p.qa[i + 1], qb2 = p.qb[i + 1], qc2 = p.qc[i + 1], l12 = p.l1[i + 1],
                         l22 = p.l2[i + 1];
            const V wa = loc_set1<W>(qa2), wb = loc_set1<W>(qb2), wc = loc_set1<W>(qc2), w1 = loc_set1<W>(l12),
                    w2 = loc_set1<W>(l22);
            V b1 = loc_set1<W>(0.0), b2 = loc_set1<W>(0.0);
            for (std::size_t j = 0; j < full; j += W) {
                const V m = loc_load<W>(ym + j), c = loc_load<W>(y0 + j), q = loc_load<W>(yp + j),
                        u = loc_load<W>(yq + j);
                const V zp = loc_load<W>(z1 + j);
                const V za = va * m + vb * c + vc * q - v1 * zp - v2 * loc_load<W>(z2 + j);
                loc_store<W>(z + j, za);
                loc_store<W>(zb + j, wa * c + wb * q + wc * u - w1 * za - w2 * zp);
                const V e1 = m - c, e2 = m - q, f1 = c - q, f2 = c - u;
                a1 += e1 * e1;
                a2 += e2 * e2;
                b1 += f1 * f1;
                b2 += f2 * f2;
            }
            double s1[W] = {0}, s2[W] = {0};
            for (std::size_t j = full; j < tw; ++j) {
                const double m = static_cast<double>(ym[j]), c = static_cast<double>(y0[j]),
                             q = static_cast<double>(yp[j]), u = static_cast<double>(yq[j]);
                const double za = qa * m + qb * c + qc * q - l1 * z1[j] - l2 * z2[j];
                z[j] = za;
                zb[j] = qa2 * c + qb2 * q + qc2 * u - l12 * za - l22 * z1[j];
                t1[j - full] += (m - c) * (m - c);
                t2[j - full] += (m - q) * (m - q);
                s1[j - full] += (c - q) * (c - q);
                s2[j - full] += (c - u) * (c - u);
            }
            d1[i] = loc_sum<W>(b1, s1);
            d2[i] = loc_sum<W>(b2, s2);
        } else {
            for (std::size_t j = 0; j < full; j += W) {
                const V m = loc_load<W>(ym + j), c = loc_load<W>(y0 + j), q = loc_load<W>(yp + j);
                loc_store<W>(z + j, va * m + vb * c + vc * q - v1 * loc_load<W>(z1 + j) - v2 * loc_load<W>(z2 + j));
                const V e1 = m - c, e2 = m - q;
                a1 += e1 * e1;
                a2 += e2 * e2;
            }
            for (std::size_t j = full; j < tw; ++j) {
                const double m = static_cast<double>(ym[j]), c = static_cast<double>(y0[j]),
                             q = static_cast<double>(yp[j]);
                z[j] = qa * m + qb * c + qc * q - l1 * z1[j] - l2 * z2[j];
                t1[j - full] += (m - c) * (m - c);
                t2[j - full] += (m - q) * (m - q);
            }
        }
        d1[i - 1] = loc_sum<W>(a1, t1);
        d2[i - 1] = loc_sum<W>(a2, t2);
        i += two ? 2 : 1;
    }

    // back substitution: gamma at knot i from knots i + 1, i + 2; then knot
    // i + 1's residual from gamma i .. i + 2, all final. With Pairs each
    // residual row also goes into rnext (the buffer's last row, zero at the
    // start and read by nothing else) for the next knot's product. Two knots
    // a trip (i, i - 1), as the forward substitution: the second's gamma and
    // residual take the first's from registers, and only the second's
    // residual goes to rnext.
    double* rnext = buf + (grows - 1) * tw;
    for (std::int64_t i = n - 2; i >= 1;) {
        const bool two = i >= 2;
        double* g = buf + static_cast<std::size_t>(i + 1) * tw;
        double* gb = g - tw;
        const double* g1 = g + tw;
        const double* g2 = g + 2 * tw;
        const double d = p.inv_d[i], u1 = p.l1[i + 1], u2 = p.l2[i + 2];
        const std::size_t k = static_cast<std::size_t>(i + 1);
        const double ra = rc_.ra[k], rb = rc_.rb[k], rcc = rc_.rc[k];
        const V vd = loc_set1<W>(d), vu1 = loc_set1<W>(u1), vu2 = loc_set1<W>(u2);
        const V vra = loc_set1<W>(ra), vrb = loc_set1<W>(rb), vrc = loc_set1<W>(rcc);
        V acc = loc_set1<W>(0.0), accp = loc_set1<W>(0.0);
        double t[W] = {0}, tp[W] = {0};
        if (two) {
            // knot i - 1's gamma (d, u1, u2 of i - 1) and knot i's residual (ra .. rc of i)
            const double db = p.inv_d[i - 1], w1 = p.l1[i], w2 = p.l2[i + 1];
            const double sa = rc_.ra[k - 1], sb = rc_.rb[k - 1], sc = rc_.rc[k - 1];
            const V wd = loc_set1<W>(db), vw1 = loc_set1<W>(w1), vw2 = loc_set1<W>(w2);
            const V vsa = loc_set1<W>(sa), vsb = loc_set1<W>(sb), vsc = loc_set1<W>(sc);
            V accb = loc_set1<W>(0.0), accpb = loc_set1<W>(0.0);
            for (std::size_t j = 0; j < full; j += W) {
                const V h1 = loc_load<W>(g1 + j), h2 = loc_load<W>(g2 + j);
                const V h0 = loc_load<W>(g + j) * vd - vu1 * h1 - vu2 * h2;
                loc_store<W>(g + j, h0);
                const V hb = loc_load<W>(gb + j) * wd - vw1 * h0 - vw2 * h1;
                loc_store<W>(gb + j, hb);
                const V r = vra * h0 + vrb * h1 + vrc * h2;
                const V rbv = vsa * hb + vsb * h0 + vsc * h1;
                acc += r * r;
                accb += rbv * rbv;
                if constexpr (Pairs) {
                    accp += r * loc_load<W>(rnext + j);
                    accpb += rbv * r;
                    loc_store<W>(rnext + j, rbv);
                }
            }
            double tb[W] = {0}, tpb[W] = {0};
            for (std::size_t j = full; j < tw; ++j) {
                const double h1 = g1[j], h2 = g2[j];
                const double h0 = g[j] * d - u1 * h1 - u2 * h2;
                g[j] = h0;
                const double hb = gb[j] * db - w1 * h0 - w2 * h1;
                gb[j] = hb;
                const double r = ra * h0 + rb * h1 + rcc * h2;
                const double rbs = sa * hb + sb * h0 + sc * h1;
                t[j - full] += r * r;
                tb[j - full] += rbs * rbs;
                if (Pairs) {
                    tp[j - full] += r * rnext[j];
                    tpb[j - full] += rbs * r;
                    rnext[j] = rbs;
                }
            }
            rss[k - 1] = loc_sum<W>(accb, tb);
            if (Pairs) rr[k - 1] = loc_sum<W>(accpb, tpb);
        } else {
            for (std::size_t j = 0; j < full; j += W) {
                const V h1 = loc_load<W>(g1 + j), h2 = loc_load<W>(g2 + j);
                const V h0 = loc_load<W>(g + j) * vd - vu1 * h1 - vu2 * h2;
                loc_store<W>(g + j, h0);
                const V r = vra * h0 + vrb * h1 + vrc * h2;
                acc += r * r;
                if constexpr (Pairs) {
                    accp += r * loc_load<W>(rnext + j);
                    loc_store<W>(rnext + j, r);
                }
            }
            for (std::size_t j = full; j < tw; ++j) {
                const double h1 = g1[j], h2 = g2[j];
                const double h0 = g[j] * d - u1 * h1 - u2 * h2;
                g[j] = h0;
                const double r = ra * h0 + rb * h1 + rcc * h2;
                t[j - full] += r * r;
                if (Pairs) {
                    tp[j - full] += r * rnext[j];
                    rnext[j] = r;
                }
            }
        }
        rss[k] = loc_sum<W>(acc, t);
        if (Pairs && k + 1 < nn) rr[k] = loc_sum<W>(accp, tp);     // (knot n - 1 has no next)
        i -= two ? 2 : 1;
    }

    // knots 1 and 0 (gamma at knot 0 is zero: the natural end)
    {
        const double* g1 = buf + 2 * tw;      // knot 1
        const double* g2 = buf + 3 * tw;      // knot 2 (zero row when n = 3)
        const double rb1 = rc_.rb[1], rc1 = rc_.rc[1], rc0 = rc_.rc[0];
        const V vb1 = loc_set1<W>(rb1), vc1 = loc_set1<W>(rc1), vc0 = loc_set1<W>(rc0);
        V a0 = loc_set1<W>(0.0), a1 = loc_set1<W>(0.0);
        // with Pairs: rr[1] from r_2 (the last one the loop kept), and rr[0]
        V p0 = loc_set1<W>(0.0), p1 = loc_set1<W>(0.0);
        for (std::size_t j = 0; j < full; j += W) {
            const V h1 = loc_load<W>(g1 + j), h2 = loc_load<W>(g2 + j);
            const V r1 = vb1 * h1 + vc1 * h2, r0 = vc0 * h1;
            a1 += r1 * r1;
            a0 += r0 * r0;
            if constexpr (Pairs) {
                p1 += r1 * loc_load<W>(rnext + j);
                p0 += r0 * r1;
            }
        }
        double t0[W] = {0}, t1[W] = {0}, q0[W] = {0}, q1[W] = {0};
        for (std::size_t j = full; j < tw; ++j) {
            const double r1 = rb1 * g1[j] + rc1 * g2[j], r0 = rc0 * g1[j];
            t1[j - full] += r1 * r1;
            t0[j - full] += r0 * r0;
            if (Pairs) {
                q1[j - full] += r1 * rnext[j];
                q0[j - full] += r0 * r1;
            }
        }
        rss[1] = loc_sum<W>(a1, t1);
        rss[0] = loc_sum<W>(a0, t0);
        if (Pairs) {
            rr[1] = loc_sum<W>(p1, q1);
            rr[0] = loc_sum<W>(p0, q0);
        }
    }
}

// sums (locator_sums_size(n, pairs) doubles) of one tile: rss, d1, d2 and,
// with pairs, rr (locator.hpp).
template <class T, int W>
LETCC_LOC_INLINE void locator_tile(const PlanTables& p, const LocatorCoeffs& rc_, const T* const* rows,
                                   std::size_t c0, std::size_t tw, double* buf, double* sums,
                                   std::size_t prefetch_cols = 0, bool pairs = false) {
    if (pairs)
        locator_tile_impl<T, W, true>(p, rc_, rows, c0, tw, buf, sums, prefetch_cols);
    else
        locator_tile_impl<T, W, false>(p, rc_, rows, c0, tw, buf, sums, prefetch_cols);
}

// The rescoring pass (locator_rescore.hpp) over columns [c0, c0 + tw) of
// the rows rows[0 .. n): the residual rows r_x = sum_j ihx[x][j] y_j of the
// answers X (nx of them), then out[j nx + x] = y_j . r_x and
// out[n nx + t] = ||y_{da[t]} - y_{db[t]}||^2 (nd of them). float64
// arithmetic, in a fixed order: the same sums whatever thread runs the tile.
//
// The tile is taken a few vectors of columns at a time (rescore_chunk): the
// residuals of up to 4 answers of X over those columns are formed in 8
// registers (8 independent multiply-add chains; every element loaded once
// for all of them; up to 16 with AVX-512), and the products y_j . r_x over the same columns taken
// at once, with the residuals still in registers and the rows in L1, into
// one vector accumulator per product (the scratch, rescore_buffer_size).
// The first version formed the whole tile's residual rows, one chain a row,
// then read every row back from L2 against them: 1.5-2x the time at m =
// 1000 - 10^5 (bench/results/robust_decode.md). The next tile's rows are
// prefetched one 64-byte line at a time as the residuals' loop reads the
// same columns of this one (a burst of all of them fills the miss queue).

// The residuals of answers x0 .. x0 + XB - 1 of X over VB vectors from
// column col, then their products with every row added to acc.
template <class T, int W, int XB, int VB>
LETCC_LOC_INLINE void rescore_chunk(const double* ihx, std::size_t x0, std::size_t nx, std::size_t n,
                                    const T* const* rows, std::size_t col, double* acc, std::size_t prefetch_cols) {
    using V = typename LocVec<W>::V;
    V r[XB][VB];
    for (int x = 0; x < XB; ++x)
        for (int v = 0; v < VB; ++v) r[x][v] = loc_set1<W>(0.0);
    for (std::size_t j = 0; j < n; ++j) {
        const T* y = rows[j] + col;
#if defined(__GNUC__)
        if (prefetch_cols) {
            const char* nxt = reinterpret_cast<const char*>(y + prefetch_cols);
            for (std::size_t b = 0; b < VB * W * sizeof(T); b += 64) __builtin_prefetch(nxt + b, 0, 1);
        }
#endif
        V yv[VB];
        for (int v = 0; v < VB; ++v) yv[v] = loc_load<W>(y + v * W);
        for (int x = 0; x < XB; ++x) {
            const V vw = loc_set1<W>(ihx[(x0 + x) * n + j]);
            for (int v = 0; v < VB; ++v) r[x][v] += vw * yv[v];
        }
    }
    // sum_v y_v r[x][v] in two chains (even and odd v), added to acc
    for (std::size_t j = 0; j < n; ++j) {
        V yv[VB];
        for (int v = 0; v < VB; ++v) yv[v] = loc_load<W>(rows[j] + col + v * W);
        for (int x = 0; x < XB; ++x) {
            V e = yv[0] * r[x][0], o = loc_set1<W>(0.0);
            for (int v = 1; v < VB; ++v) {
                if (v % 2) o += yv[v] * r[x][v];
                else e += yv[v] * r[x][v];
            }
            double* a = acc + (j * nx + x0 + x) * W;
            loc_store<W>(a, loc_load<W>(a) + (e + o));
        }
    }
}

// ||y_a - y_b||^2 over NV vectors from column col, added to acc
template <class T, int W, int NV>
LETCC_LOC_INLINE void rescore_distances(const T* const* rows, const std::size_t* da, const std::size_t* db,
                                        std::size_t nd, std::size_t col, double* acc) {
    using V = typename LocVec<W>::V;
    for (std::size_t t = 0; t < nd; ++t) {
        const T* ya = rows[da[t]] + col;
        const T* yb = rows[db[t]] + col;
        V e = loc_set1<W>(0.0), o = e;
        for (int v = 0; v < NV; ++v) {
            const V d = loc_load<W>(ya + v * W) - loc_load<W>(yb + v * W);
            if (v % 2) o += d * d;
            else e += d * d;
        }
        double* a = acc + t * W;
        loc_store<W>(a, loc_load<W>(a) + (e + o));
    }
}

template <class T, int W>
LETCC_LOC_INLINE void rescore_tile(const double* ihx, std::size_t nx, std::size_t n, const T* const* rows,
                                   const std::size_t* da, const std::size_t* db, std::size_t nd, std::size_t c0,
                                   std::size_t tw, double* buf, double* out, std::size_t prefetch_cols) {
    constexpr std::size_t B = kRescoreBlock;
    static_assert(B == 8, "the chunks below cover 8 vectors");
    static_assert(W <= 8, "rescore_buffer_size counts 8 lanes an accumulator");
    const std::size_t full = tw / W * W;
    const std::size_t np = n * nx + nd;
    double* acc = buf;                      // np vectors: the products' accumulators
    for (std::size_t i = 0; i < np * W; ++i) acc[i] = 0.0;
    std::size_t c = 0;
    for (; c + B * W <= full; c += B * W) {
        const std::size_t col = c0 + c;
        for (std::size_t x0 = 0; x0 < nx;) {
            const std::size_t xb = std::min<std::size_t>(4, nx - x0);
            const std::size_t pf = x0 == 0 ? prefetch_cols : 0;
            // XB VB residual vectors in registers: 8 where the build has 16
            // vector registers, up to 16 with AVX-512's 32 (fewer products
            // to add to their accumulators per chunk)
            constexpr int wide = W == 8 ? 2 : 1;
            if (xb == 1) {
                rescore_chunk<T, W, 1, 8>(ihx, x0, nx, n, rows, col, acc, pf);
            } else if (xb == 2) {
                for (int v = 0; v < 8; v += 4 * wide)
                    rescore_chunk<T, W, 2, 4 * wide>(ihx, x0, nx, n, rows, col + v * W, acc, pf);
            } else if (xb == 3) {
                for (int v = 0; v < 8; v += 2 * wide)
                    rescore_chunk<T, W, 3, 2 * wide>(ihx, x0, nx, n, rows, col + v * W, acc, pf);
            } else {
                for (int v = 0; v < 8; v += 2 * wide)
                    rescore_chunk<T, W, 4, 2 * wide>(ihx, x0, nx, n, rows, col + v * W, acc, pf);
            }
            x0 += xb;
        }
        rescore_distances<T, W, 8>(rows, da, db, nd, col, acc + n * nx * W);
    }
    for (; c < full; c += W) {
        for (std::size_t x = 0; x < nx; ++x) rescore_chunk<T, W, 1, 1>(ihx, x, nx, n, rows, c0 + c, acc, 0);
        rescore_distances<T, W, 1>(rows, da, db, nd, c0 + c, acc + n * nx * W);
    }
    // the tail's columns (fewer than W), column full + k into lane k
    double tail[8];
    std::vector<double> rt;
    if (full < tw) {
        rt.assign(nx * (tw - full), 0.0);
        for (std::size_t x = 0; x < nx; ++x)
            for (std::size_t k = full; k < tw; ++k) {
                double a = 0.0;
                for (std::size_t j = 0; j < n; ++j) a += ihx[x * n + j] * static_cast<double>(rows[j][c0 + k]);
                rt[x * (tw - full) + (k - full)] = a;
            }
    }
    for (std::size_t i = 0; i < np; ++i) {
        for (int t = 0; t < W; ++t) tail[t] = 0.0;
        for (std::size_t k = full; k < tw; ++k) {
            double e;
            if (i < n * nx) {
                e = static_cast<double>(rows[i / nx][c0 + k]) * rt[(i % nx) * (tw - full) + (k - full)];
            } else {
                const std::size_t t = i - n * nx;
                e = static_cast<double>(rows[da[t]][c0 + k]) - static_cast<double>(rows[db[t]][c0 + k]);
                e *= e;
            }
            tail[k - full] = e;
        }
        out[i] = loc_sum<W>(loc_load<W>(acc + i * W), tail);
    }
}

}  // namespace kernels
}  // namespace letcc
