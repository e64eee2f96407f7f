// The plan's column-tile kernel written with AVX2/FMA intrinsics: the same
// three passes and the same float64 arithmetic as kernels.hpp, faster where it
// matters (bench/results/spline.md, "AVX2 kernel"):
//
// - float32 rows are widened with one vcvtps2pd per 4 elements; the compiler's
//   version of kernels.hpp splits that into two 128-bit halves and inserts.
// - The gamma buffer is 64-byte aligned with rows a multiple of 4 doubles
//   apart, so every buffer access is an aligned 32-byte load or store (a
//   16-byte-aligned buffer splits half of them across cache lines).
// - Outputs far larger than the caches are written with non-temporal stores
//   for float32 too (16-byte stores of 4 converted lanes).
// - The next tile's rows are prefetched one cache line every few vectors of the
//   evaluation loop, so the prefetches are spread evenly over the back
//   substitution and evaluation (which interleave) instead of coming in
//   bursts; see plan_tile.
//
// Every function here is compiled for AVX2+FMA through the target attribute
// (no lambdas: they would not inherit it); dispatch.cpp calls them only on a
// CPU that has both.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LETCC_NO_CLONES)
#define LETCC_HAVE_AVX2_KERNEL 1

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "plan.hpp"

#define LETCC_AVX2_FN __attribute__((target("avx2,fma"), always_inline)) inline

namespace letcc {
namespace kernels_avx2 {

LETCC_AVX2_FN __m256d load4(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
LETCC_AVX2_FN __m256d load4(const double* p) { return _mm256_loadu_pd(p); }
LETCC_AVX2_FN void store4(float* p, __m256d v) { _mm_storeu_ps(p, _mm256_cvtpd_ps(v)); }
LETCC_AVX2_FN void store4(double* p, __m256d v) { _mm256_storeu_pd(p, v); }
LETCC_AVX2_FN void stream4(float* p, __m256d v) { _mm_stream_ps(p, _mm256_cvtpd_ps(v)); }
// Two 16-byte halves: a 32-byte streaming store would need 32-byte-aligned
// rows, and numpy aligns arrays to 16 bytes only.
LETCC_AVX2_FN void stream4(double* p, __m256d v) {
    _mm_stream_pd(p, _mm256_castpd256_pd128(v));
    _mm_stream_pd(p + 2, _mm256_extractf128_pd(v, 1));
}

// Issues the next tile's prefetches a few lines at a time, row by row. The
// evaluation loop issues one line whenever its column counter has no bits in
// common with eval_mask (every (eval_mask + 1) / 4 vectors); every
// back-substitution row issues back_lines more (what the evaluation has too
// few vectors for).
struct PrefetchCursor {
    const char* base = nullptr;
    std::size_t stride = 0, row_bytes = 0, b = 0;
    std::int64_t rows = 0, r = 0;
    std::size_t eval_mask = ~std::size_t(0), back_lines = 0;
    LETCC_AVX2_FN void step(std::size_t lines) {
        for (std::size_t t = 0; t < lines && r < rows; ++t) {
            _mm_prefetch(base + static_cast<std::size_t>(r) * stride + b, _MM_HINT_T1);
            b += 64;
            if (b >= row_bytes) { b = 0; ++r; }
        }
    }
};

// Paces the next tile's `lines` prefetches: one every `interval` vectors of the
// evaluation loop (q queries of `vectors` vectors each), the largest interval
// (a power of two, at most 32) at which the evaluation still issues them all;
// whatever it cannot issue (few queries) goes to the back substitution's
// `back_rows` rows. Spread like this the prefetches leave the passes' own
// loads alone. Against bursts of about 30 lines per back-substitution step
// (the previous pacing; C++ harness, interleaved runs, best of 10-40, 1 / 2
// threads): n = q = 64, m = 150528, float32 0.91-0.93x / 0.83-0.94x, float64
// 0.89x / 0.92x; n = q = 256 float32 0.91x / 0.94x, float64 0.81x / 0.95x;
// n = 64, q = 16 0.94x / 1.0x. One line every 2 vectors instead of 4 (n = q =
// 64, float32) gained only 0-7%.
inline void set_prefetch_pace(PrefetchCursor& pc, std::int64_t q, std::size_t vectors, std::size_t lines,
                              std::size_t back_rows) {
    const std::size_t queries = static_cast<std::size_t>(q);
    std::size_t interval = 0, issued = 0;
    if (vectors > 0 && queries > 0) {
        interval = 1;
        while (interval < 32 && queries * ((vectors + 2 * interval - 1) / (2 * interval)) >= lines) interval *= 2;
        pc.eval_mask = 4 * interval - 1;
        issued = queries * ((vectors + interval - 1) / interval);
    }
    pc.back_lines = issued >= lines ? 0 : (lines - issued) / back_rows + 1;
}

// Forward substitution fused with z = Q^T y; buffer row r = knot r - 1, rows
// bs doubles apart (bs: tw rounded up to a multiple of 4, buf 32-byte aligned).
// Two knots per pass: rows i and i+1 share three input rows and z_{i-1}, so
// each input row is widened twice instead of three times and z_i feeds the
// next knot from a register (3-5% faster than one knot per pass at n = 64).
template <class T>
LETCC_AVX2_FN void forward_one(const PlanTables& p, std::int64_t i, const T* __restrict__ y, std::size_t ldy,
                               std::size_t c0, std::size_t tw, std::size_t bs, double* __restrict__ buf) {
    const T* __restrict__ ym = y + static_cast<std::size_t>(i - 1) * ldy + c0;
    const T* __restrict__ y0 = ym + ldy;
    const T* __restrict__ yp = y0 + ldy;
    double* __restrict__ z = buf + static_cast<std::size_t>(i + 1) * bs;
    const double* __restrict__ z1 = z - bs;
    const double* __restrict__ z2 = z - 2 * bs;
    const double a = p.qa[i], b = p.qb[i], c = p.qc[i], l1 = p.l1[i], l2 = p.l2[i];
    const __m256d A = _mm256_set1_pd(a), B = _mm256_set1_pd(b), C = _mm256_set1_pd(c);
    const __m256d L1 = _mm256_set1_pd(-l1), L2 = _mm256_set1_pd(-l2);
    const std::size_t tw4 = tw & ~std::size_t(3);
    for (std::size_t j = 0; j < tw4; j += 4) {
        __m256d r = _mm256_mul_pd(A, load4(ym + j));
        r = _mm256_fmadd_pd(B, load4(y0 + j), r);
        r = _mm256_fmadd_pd(C, load4(yp + j), r);
        r = _mm256_fmadd_pd(L2, _mm256_load_pd(z2 + j), r);
        r = _mm256_fmadd_pd(L1, _mm256_load_pd(z1 + j), r);
        _mm256_store_pd(z + j, r);
    }
    // The tail with the vector loop's operations in its order (explicit fma):
    // a column's result never depends on whether a tile puts it in a tail.
    for (std::size_t j = tw4; j < tw; ++j) {
        double r = a * static_cast<double>(ym[j]);
        r = std::fma(b, static_cast<double>(y0[j]), r);
        r = std::fma(c, static_cast<double>(yp[j]), r);
        r = std::fma(-l2, z2[j], r);
        z[j] = std::fma(-l1, z1[j], r);
    }
}

template <class T>
LETCC_AVX2_FN void forward_two(const PlanTables& p, std::int64_t i, const T* __restrict__ y, std::size_t ldy,
                               std::size_t c0, std::size_t tw, std::size_t bs, double* __restrict__ buf) {
    const T* __restrict__ ym = y + static_cast<std::size_t>(i - 1) * ldy + c0;
    const T* __restrict__ y0 = ym + ldy;
    const T* __restrict__ yp = y0 + ldy;
    const T* __restrict__ ypp = yp + ldy;
    double* __restrict__ z = buf + static_cast<std::size_t>(i + 1) * bs;  // knot i
    double* __restrict__ zn = z + bs;                                     // knot i + 1
    const double* __restrict__ z1 = z - bs;
    const double* __restrict__ z2 = z - 2 * bs;
    const __m256d A = _mm256_set1_pd(p.qa[i]), B = _mm256_set1_pd(p.qb[i]), C = _mm256_set1_pd(p.qc[i]);
    const __m256d L1 = _mm256_set1_pd(-p.l1[i]), L2 = _mm256_set1_pd(-p.l2[i]);
    const __m256d A2 = _mm256_set1_pd(p.qa[i + 1]), B2 = _mm256_set1_pd(p.qb[i + 1]), C2 = _mm256_set1_pd(p.qc[i + 1]);
    const __m256d M1 = _mm256_set1_pd(-p.l1[i + 1]), M2 = _mm256_set1_pd(-p.l2[i + 1]);
    const std::size_t tw4 = tw & ~std::size_t(3);
    for (std::size_t j = 0; j < tw4; j += 4) {
        const __m256d Y0 = load4(y0 + j), Yp = load4(yp + j), Z1 = _mm256_load_pd(z1 + j);
        __m256d r = _mm256_mul_pd(A, load4(ym + j));
        r = _mm256_fmadd_pd(B, Y0, r);
        r = _mm256_fmadd_pd(C, Yp, r);
        r = _mm256_fmadd_pd(L2, _mm256_load_pd(z2 + j), r);
        r = _mm256_fmadd_pd(L1, Z1, r);
        _mm256_store_pd(z + j, r);
        __m256d s = _mm256_mul_pd(A2, Y0);
        s = _mm256_fmadd_pd(B2, Yp, s);
        s = _mm256_fmadd_pd(C2, load4(ypp + j), s);
        s = _mm256_fmadd_pd(M2, Z1, s);
        s = _mm256_fmadd_pd(M1, r, s);
        _mm256_store_pd(zn + j, s);
    }
    if (tw4 < tw) {
        forward_one(p, i, y, ldy, c0 + tw4, tw - tw4, bs, buf + tw4);
        forward_one(p, i + 1, y, ldy, c0 + tw4, tw - tw4, bs, buf + tw4);
    }
}

template <class T>
LETCC_AVX2_FN void forward(const PlanTables& p, const T* __restrict__ y, std::size_t ldy, std::size_t c0,
                           std::size_t tw, std::size_t bs, double* __restrict__ buf) {
    const std::int64_t n = p.n;
    const std::size_t rows = gamma_rows(n);
    for (std::size_t r = 0; r < rows; ++r)
        if (r <= 1 || r >= static_cast<std::size_t>(n)) std::fill(buf + r * bs, buf + r * bs + tw, 0.0);
    std::int64_t i = 1;
    for (; i + 2 < n; i += 2) forward_two(p, i, y, ldy, c0, tw, bs, buf);
    for (; i + 1 < n; ++i) forward_one(p, i, y, ldy, c0, tw, bs, buf);
}

// One step of the back substitution: gamma at knot i from knots i+1, i+2.
LETCC_AVX2_FN void back_one(const PlanTables& p, std::int64_t i, std::size_t tw, std::size_t bs,
                            double* __restrict__ buf) {
    double* __restrict__ g = buf + static_cast<std::size_t>(i + 1) * bs;
    const double* __restrict__ g1 = g + bs;
    const double* __restrict__ g2 = g + 2 * bs;
    const double d = p.inv_d[i], u1 = p.l1[i + 1], u2 = p.l2[i + 2];
    const __m256d D = _mm256_set1_pd(d), U1 = _mm256_set1_pd(-u1), U2 = _mm256_set1_pd(-u2);
    const std::size_t tw4 = tw & ~std::size_t(3);
    for (std::size_t j = 0; j < tw4; j += 4) {
        __m256d r = _mm256_mul_pd(D, _mm256_load_pd(g + j));
        r = _mm256_fmadd_pd(U2, _mm256_load_pd(g2 + j), r);
        r = _mm256_fmadd_pd(U1, _mm256_load_pd(g1 + j), r);
        _mm256_store_pd(g + j, r);
    }
    for (std::size_t j = tw4; j < tw; ++j) g[j] = std::fma(-u1, g1[j], std::fma(-u2, g2[j], d * g[j]));
}

// Two steps, knots i and i - 1: gamma_{i+1} is loaded once and gamma_i feeds
// knot i - 1 from a register (4-6% faster overall than one knot per pass).
LETCC_AVX2_FN void back_two(const PlanTables& p, std::int64_t i, std::size_t tw, std::size_t bs,
                            double* __restrict__ buf) {
    double* __restrict__ g = buf + static_cast<std::size_t>(i + 1) * bs;  // knot i
    double* __restrict__ gm = g - bs;                                     // knot i - 1
    const double* __restrict__ g1 = g + bs;
    const double* __restrict__ g2 = g + 2 * bs;
    const __m256d D = _mm256_set1_pd(p.inv_d[i]), U1 = _mm256_set1_pd(-p.l1[i + 1]);
    const __m256d U2 = _mm256_set1_pd(-p.l2[i + 2]), Dm = _mm256_set1_pd(p.inv_d[i - 1]);
    const __m256d V1 = _mm256_set1_pd(-p.l1[i]), V2 = _mm256_set1_pd(-p.l2[i + 1]);
    const std::size_t tw4 = tw & ~std::size_t(3);
    for (std::size_t j = 0; j < tw4; j += 4) {
        const __m256d G1 = _mm256_load_pd(g1 + j);
        __m256d r = _mm256_mul_pd(D, _mm256_load_pd(g + j));
        r = _mm256_fmadd_pd(U2, _mm256_load_pd(g2 + j), r);
        r = _mm256_fmadd_pd(U1, G1, r);
        _mm256_store_pd(g + j, r);
        __m256d s = _mm256_mul_pd(Dm, _mm256_load_pd(gm + j));
        s = _mm256_fmadd_pd(V2, G1, s);
        s = _mm256_fmadd_pd(V1, r, s);
        _mm256_store_pd(gm + j, s);
    }
    if (tw4 < tw) {
        back_one(p, i, tw - tw4, bs, buf + tw4);
        back_one(p, i - 1, tw - tw4, bs, buf + tw4);
    }
}

// Rows of a tile shorter than this are never streamed: with 128-byte rows
// (n = 256 under the old 32-column tiles) streaming measured 10-30% slower.
constexpr std::size_t kMinStreamRowBytes = 512;

// Whether a store to `dst` is a few lines ahead of `src` modulo 4 KiB. Loads
// from src then match the low 12 address bits of stores to dst made a few
// iterations earlier, and the CPU holds each such load back as if it depended
// on the store ("4K aliasing"): with the output 16 bytes past the input modulo
// 4 KiB, n = q = 64, m = 150528 float32 ran 1.7x slower.
LETCC_AVX2_FN bool store_runs_ahead_of(const void* dst, const void* src) {
    const std::uintptr_t d = (reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) & 4095;
    return d != 0 && d <= 512;
}

// out[qi] = cy0 y[k] + cy1 y[k+1] + sum_t cgam[t] gamma[k-1+t] for one query.
template <class T>
LETCC_AVX2_FN void eval_query(const PlanTables& p, std::int64_t qi, const T* __restrict__ y, std::size_t ldy,
                              T* __restrict__ out, std::size_t ldo, std::size_t c0, std::size_t tw, std::size_t bs,
                              const double* __restrict__ buf, bool stream, PrefetchCursor& pc) {
    const std::int64_t k = p.k[qi];
    const T* __restrict__ ya = y + static_cast<std::size_t>(k) * ldy + c0;
    const T* __restrict__ yb = y + static_cast<std::size_t>(p.k1[qi]) * ldy + c0;
    const double* __restrict__ g0 = buf + static_cast<std::size_t>(k) * bs;  // knot k - 1
    const double* __restrict__ g1 = g0 + bs;
    const double* __restrict__ g2 = g0 + 2 * bs;
    const double* __restrict__ g3 = g0 + 3 * bs;
    const double* cg = &p.cgam[4 * qi];
    const double ca = p.cy[2 * qi], cb = p.cy[2 * qi + 1], e0 = cg[0], e1 = cg[1], e2 = cg[2], e3 = cg[3];
    const __m256d CA = _mm256_set1_pd(ca), CB = _mm256_set1_pd(cb), E0 = _mm256_set1_pd(e0);
    const __m256d E1 = _mm256_set1_pd(e1), E2 = _mm256_set1_pd(e2), E3 = _mm256_set1_pd(e3);
    T* __restrict__ o = out + static_cast<std::size_t>(qi) * ldo + c0;
    const std::size_t tw4 = tw & ~std::size_t(3);
    // Streaming needs 16-byte-aligned rows; the same columns take the vector
    // path either way, so the result never depends on the output's alignment.
    const bool nt = stream && (reinterpret_cast<std::uintptr_t>(o) % 16) == 0 && tw * sizeof(T) >= kMinStreamRowBytes;
    // Walk the row downwards when the output runs just ahead of an input row
    // modulo 4 KiB (see store_runs_ahead_of): later loads are then below the
    // stores. The order does not change any column's arithmetic.
    const bool down = store_runs_ahead_of(o, ya) || store_runs_ahead_of(o, yb);
    for (std::size_t t = 0; t < tw4; t += 4) {
        if ((t & pc.eval_mask) == 0) pc.step(1);
        const std::size_t j = down ? tw4 - 4 - t : t;
        __m256d r = _mm256_mul_pd(CA, load4(ya + j));
        r = _mm256_fmadd_pd(CB, load4(yb + j), r);
        r = _mm256_fmadd_pd(E0, _mm256_load_pd(g0 + j), r);
        r = _mm256_fmadd_pd(E1, _mm256_load_pd(g1 + j), r);
        r = _mm256_fmadd_pd(E2, _mm256_load_pd(g2 + j), r);
        r = _mm256_fmadd_pd(E3, _mm256_load_pd(g3 + j), r);
        if (nt)
            stream4(o + j, r);
        else
            store4(o + j, r);
    }
    for (std::size_t j = tw4; j < tw; ++j) {
        double r = ca * static_cast<double>(ya[j]);
        r = std::fma(cb, static_cast<double>(yb[j]), r);
        r = std::fma(e0, g0[j], r);
        r = std::fma(e1, g1[j], r);
        r = std::fma(e2, g2[j], r);
        o[j] = static_cast<T>(std::fma(e3, g3[j], r));
    }
}

template <class T>
LETCC_AVX2_FN void eval_interval(const PlanTables& p, std::int64_t kk, const T* __restrict__ y, std::size_t ldy,
                                 T* __restrict__ out, std::size_t ldo, std::size_t c0, std::size_t tw,
                                 std::size_t bs, const double* __restrict__ buf, bool stream,
                                 PrefetchCursor& pc) {
    for (std::int64_t t = p.by_k[kk]; t < p.by_k[kk + 1]; ++t)
        eval_query(p, p.order[t], y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
}

// The whole plan on one column tile (see kernels::plan_tile). buf: 32-byte
// aligned, plan_buffer_size(n, tw) doubles.
template <class T>
__attribute__((target("avx2,fma"))) inline void plan_tile(const PlanTables& p, const T* __restrict__ y,
                                                          std::size_t ldy, T* __restrict__ out, std::size_t ldo,
                                                          std::size_t c0, std::size_t tw,
                                                          double* __restrict__ buf, bool stream,
                                                          std::size_t prefetch_cols) {
    const std::int64_t n = p.n;
    const std::size_t bs = padded_width(tw);
    PrefetchCursor pc;
    if (prefetch_cols && c0 + prefetch_cols + tw <= ldy && n > 2) {
        pc.base = reinterpret_cast<const char*>(y + c0 + prefetch_cols);
        pc.stride = ldy * sizeof(T);
        pc.row_bytes = tw * sizeof(T);
        pc.rows = n;
        set_prefetch_pace(pc, p.q, tw / 4, static_cast<std::size_t>(n) * ((pc.row_bytes + 63) / 64),
                          static_cast<std::size_t>(n - 2));
    }
    forward(p, y, ldy, c0, tw, bs, buf);
    // Each query is evaluated as soon as the four gamma rows it reads are
    // final: interval k needs knots k-1 .. k+2.
    std::int64_t i = n - 2;
    for (; i >= 2; i -= 2) {
        pc.step(2 * pc.back_lines);
        back_two(p, i, tw, bs, buf);
        eval_interval(p, i + 1, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
        eval_interval(p, i, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
    }
    for (; i >= 1; --i) {
        pc.step(pc.back_lines);
        back_one(p, i, tw, bs, buf);
        eval_interval(p, i + 1, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
    }
    const std::int64_t last = (n >= 3) ? std::min<std::int64_t>(1, n - 1) : n - 1;
    for (std::int64_t kk = last; kk >= 0; --kk) eval_interval(p, kk, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
    // Non-temporal stores are weakly ordered: fence them before the thread
    // pool tells the caller this tile is done.
    if (stream) _mm_sfence();
}

}  // namespace kernels_avx2
}  // namespace letcc

#undef LETCC_AVX2_FN
#endif
