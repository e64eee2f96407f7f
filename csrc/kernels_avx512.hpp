// The plan's column-tile kernel written with AVX-512 intrinsics (AVX-512F and
// VL): the AVX2 kernel's walk (kernels_avx2.hpp: forward substitution two knots
// per pass, back substitution two knots per step with each query evaluated as
// soon as its four gamma rows are final, paced prefetches of the next tile,
// non-temporal stores for large outputs) on 8 float64 lanes instead of 4, with
// the same operations in the same order on every column, so its results are
// bit-for-bit those of the AVX2 kernel.
//
// What AVX-512 changes besides the width:
// - Tails (tile widths that are not a multiple of 8) run through the same
//   vector code under a lane mask instead of a scalar loop.
// - The gamma buffer's rows are a multiple of 8 doubles apart (the buffer is
//   64-byte aligned), so every buffer access is one aligned 64-byte line.
// - Non-temporal stores of a row use the widest store its alignment allows
//   (numpy aligns arrays to 16 bytes only).
//
// Every function here is compiled for AVX-512 through the target attribute (no
// lambdas: they would not inherit it); dispatch.cpp calls them only on a CPU
// that has all the features LETCC_AVX512_TARGET names
// (missing_avx512_feature).
#pragma once

#include "kernels_avx2.hpp"

#if defined(LETCC_HAVE_AVX2_KERNEL)
#define LETCC_HAVE_AVX512_KERNEL 1

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "plan.hpp"

#define LETCC_AVX512_TARGET "avx512f,avx512vl,avx2,fma"
#define LETCC_AVX512_FN __attribute__((target(LETCC_AVX512_TARGET), always_inline)) inline

namespace letcc {
namespace kernels_avx512 {

using kernels_avx2::PrefetchCursor;
using kernels_avx2::kMinStreamRowBytes;
using kernels_avx2::store_runs_ahead_of;

// Buffer rows of a tile are padded_width8(tw) doubles apart (see plan.hpp's
// plan_buffer_size, which leaves room for this padding).
inline std::size_t padded_width8(std::size_t tw) { return (tw + 7) & ~std::size_t(7); }

// Lanes [0, r) of a vector (r in 1..8); full vectors use all eight.
LETCC_AVX512_FN __mmask8 lanes(std::size_t r) { return static_cast<__mmask8>((1u << r) - 1u); }

LETCC_AVX512_FN __m512d load8(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
LETCC_AVX512_FN __m512d load8(const double* p) { return _mm512_loadu_pd(p); }
LETCC_AVX512_FN __m512d load8(const float* p, __mmask8 k) { return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, p)); }
LETCC_AVX512_FN __m512d load8(const double* p, __mmask8 k) { return _mm512_maskz_loadu_pd(k, p); }
LETCC_AVX512_FN void store8(float* p, __m512d v) { _mm256_storeu_ps(p, _mm512_cvtpd_ps(v)); }
LETCC_AVX512_FN void store8(double* p, __m512d v) { _mm512_storeu_pd(p, v); }
LETCC_AVX512_FN void store8(float* p, __m512d v, __mmask8 k) { _mm256_mask_storeu_ps(p, k, _mm512_cvtpd_ps(v)); }
LETCC_AVX512_FN void store8(double* p, __m512d v, __mmask8 k) { _mm512_mask_storeu_pd(p, k, v); }

// Non-temporal stores of 8 results at p, whose alignment allows stores of
// `wide` bytes (16, 32 or 64; decided once per row).
LETCC_AVX512_FN void stream8(float* p, __m512d v, unsigned wide) {
    const __m256 f = _mm512_cvtpd_ps(v);
    if (wide >= 32) {
        _mm256_stream_ps(p, f);
    } else {
        _mm_stream_ps(p, _mm256_castps256_ps128(f));
        _mm_stream_ps(p + 4, _mm256_extractf128_ps(f, 1));
    }
}
LETCC_AVX512_FN void stream8(double* p, __m512d v, unsigned wide) {
    if (wide >= 64) {
        _mm512_stream_pd(p, v);
    } else if (wide >= 32) {
        _mm256_stream_pd(p, _mm512_castpd512_pd256(v));
        _mm256_stream_pd(p + 4, _mm512_extractf64x4_pd(v, 1));
    } else {
        const __m256d lo = _mm512_castpd512_pd256(v), hi = _mm512_extractf64x4_pd(v, 1);
        _mm_stream_pd(p, _mm256_castpd256_pd128(lo));
        _mm_stream_pd(p + 2, _mm256_extractf128_pd(lo, 1));
        _mm_stream_pd(p + 4, _mm256_castpd256_pd128(hi));
        _mm_stream_pd(p + 6, _mm256_extractf128_pd(hi, 1));
    }
}

// The largest of 64, 32, 16 bytes that p is aligned to (0: not even 16).
inline unsigned stream_width(const void* p) {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
    return (a % 64 == 0) ? 64u : (a % 32 == 0) ? 32u : (a % 16 == 0) ? 16u : 0u;
}

// forward_one/forward_two of kernels_avx2.hpp on 8 lanes; the last, partial
// vector of a row runs masked (k), with the same operations.
template <class T>
LETCC_AVX512_FN void forward_one(const PlanTables& p, std::int64_t i, const T* __restrict__ y, std::size_t ldy,
                                 std::size_t c0, std::size_t tw, std::size_t bs, double* __restrict__ buf) {
    const T* __restrict__ ym = y + static_cast<std::size_t>(i - 1) * ldy + c0;
    const T* __restrict__ y0 = ym + ldy;
    const T* __restrict__ yp = y0 + ldy;
    double* __restrict__ z = buf + static_cast<std::size_t>(i + 1) * bs;
    const double* __restrict__ z1 = z - bs;
    const double* __restrict__ z2 = z - 2 * bs;
    const __m512d A = _mm512_set1_pd(p.qa[i]), B = _mm512_set1_pd(p.qb[i]), C = _mm512_set1_pd(p.qc[i]);
    const __m512d L1 = _mm512_set1_pd(-p.l1[i]), L2 = _mm512_set1_pd(-p.l2[i]);
    for (std::size_t j = 0; j < tw; j += 8) {
        const __mmask8 k = lanes(std::min<std::size_t>(8, tw - j));
        __m512d r = _mm512_mul_pd(A, load8(ym + j, k));
        r = _mm512_fmadd_pd(B, load8(y0 + j, k), r);
        r = _mm512_fmadd_pd(C, load8(yp + j, k), r);
        r = _mm512_fmadd_pd(L2, _mm512_load_pd(z2 + j), r);
        r = _mm512_fmadd_pd(L1, _mm512_load_pd(z1 + j), r);
        // The whole vector: the padding lanes come out 0 (their inputs are
        // masked to 0 and the zero rows are zeroed across their padding), so
        // the back substitution never meets garbage there.
        _mm512_store_pd(z + j, r);
    }
}

template <class T>
LETCC_AVX512_FN void forward_two(const PlanTables& p, std::int64_t i, const T* __restrict__ y, std::size_t ldy,
                                 std::size_t c0, std::size_t tw, std::size_t bs, double* __restrict__ buf) {
    const T* __restrict__ ym = y + static_cast<std::size_t>(i - 1) * ldy + c0;
    const T* __restrict__ y0 = ym + ldy;
    const T* __restrict__ yp = y0 + ldy;
    const T* __restrict__ ypp = yp + ldy;
    double* __restrict__ z = buf + static_cast<std::size_t>(i + 1) * bs;  // knot i
    double* __restrict__ zn = z + bs;                                     // knot i + 1
    const double* __restrict__ z1 = z - bs;
    const double* __restrict__ z2 = z - 2 * bs;
    const __m512d A = _mm512_set1_pd(p.qa[i]), B = _mm512_set1_pd(p.qb[i]), C = _mm512_set1_pd(p.qc[i]);
    const __m512d L1 = _mm512_set1_pd(-p.l1[i]), L2 = _mm512_set1_pd(-p.l2[i]);
    const __m512d A2 = _mm512_set1_pd(p.qa[i + 1]), B2 = _mm512_set1_pd(p.qb[i + 1]);
    const __m512d C2 = _mm512_set1_pd(p.qc[i + 1]);
    const __m512d M1 = _mm512_set1_pd(-p.l1[i + 1]), M2 = _mm512_set1_pd(-p.l2[i + 1]);
    const std::size_t tw8 = tw & ~std::size_t(7);
    for (std::size_t j = 0; j < tw8; j += 8) {
        const __m512d Y0 = load8(y0 + j), Yp = load8(yp + j), Z1 = _mm512_load_pd(z1 + j);
        __m512d r = _mm512_mul_pd(A, load8(ym + j));
        r = _mm512_fmadd_pd(B, Y0, r);
        r = _mm512_fmadd_pd(C, Yp, r);
        r = _mm512_fmadd_pd(L2, _mm512_load_pd(z2 + j), r);
        r = _mm512_fmadd_pd(L1, Z1, r);
        _mm512_store_pd(z + j, r);
        __m512d s = _mm512_mul_pd(A2, Y0);
        s = _mm512_fmadd_pd(B2, Yp, s);
        s = _mm512_fmadd_pd(C2, load8(ypp + j), s);
        s = _mm512_fmadd_pd(M2, Z1, s);
        s = _mm512_fmadd_pd(M1, r, s);
        _mm512_store_pd(zn + j, s);
    }
    if (tw8 < tw) {
        forward_one(p, i, y, ldy, c0 + tw8, tw - tw8, bs, buf + tw8);
        forward_one(p, i + 1, y, ldy, c0 + tw8, tw - tw8, bs, buf + tw8);
    }
}

template <class T>
LETCC_AVX512_FN void forward(const PlanTables& p, const T* __restrict__ y, std::size_t ldy, std::size_t c0,
                             std::size_t tw, std::size_t bs, double* __restrict__ buf) {
    const std::int64_t n = p.n;
    const std::size_t rows = gamma_rows(n);
    // Whole padded rows, padding included (see forward_one).
    for (std::size_t r = 0; r < rows; ++r)
        if (r <= 1 || r >= static_cast<std::size_t>(n)) std::fill(buf + r * bs, buf + r * bs + bs, 0.0);
    std::int64_t i = 1;
    for (; i + 2 < n; i += 2) forward_two(p, i, y, ldy, c0, tw, bs, buf);
    for (; i + 1 < n; ++i) forward_one(p, i, y, ldy, c0, tw, bs, buf);
}

// back_one/back_two of kernels_avx2.hpp on 8 lanes, over whole padded rows
// (the padding columns hold zeros and are never stored out).
LETCC_AVX512_FN void back_one(const PlanTables& p, std::int64_t i, std::size_t bs, double* __restrict__ buf) {
    double* __restrict__ g = buf + static_cast<std::size_t>(i + 1) * bs;
    const double* __restrict__ g1 = g + bs;
    const double* __restrict__ g2 = g + 2 * bs;
    const __m512d D = _mm512_set1_pd(p.inv_d[i]), U1 = _mm512_set1_pd(-p.l1[i + 1]);
    const __m512d U2 = _mm512_set1_pd(-p.l2[i + 2]);
    for (std::size_t j = 0; j < bs; j += 8) {
        __m512d r = _mm512_mul_pd(D, _mm512_load_pd(g + j));
        r = _mm512_fmadd_pd(U2, _mm512_load_pd(g2 + j), r);
        r = _mm512_fmadd_pd(U1, _mm512_load_pd(g1 + j), r);
        _mm512_store_pd(g + j, r);
    }
}

LETCC_AVX512_FN void back_two(const PlanTables& p, std::int64_t i, std::size_t bs, double* __restrict__ buf) {
    double* __restrict__ g = buf + static_cast<std::size_t>(i + 1) * bs;  // knot i
    double* __restrict__ gm = g - bs;                                     // knot i - 1
    const double* __restrict__ g1 = g + bs;
    const double* __restrict__ g2 = g + 2 * bs;
    const __m512d D = _mm512_set1_pd(p.inv_d[i]), U1 = _mm512_set1_pd(-p.l1[i + 1]);
    const __m512d U2 = _mm512_set1_pd(-p.l2[i + 2]), Dm = _mm512_set1_pd(p.inv_d[i - 1]);
    const __m512d V1 = _mm512_set1_pd(-p.l1[i]), V2 = _mm512_set1_pd(-p.l2[i + 1]);
    for (std::size_t j = 0; j < bs; j += 8) {
        const __m512d G1 = _mm512_load_pd(g1 + j);
        __m512d r = _mm512_mul_pd(D, _mm512_load_pd(g + j));
        r = _mm512_fmadd_pd(U2, _mm512_load_pd(g2 + j), r);
        r = _mm512_fmadd_pd(U1, G1, r);
        _mm512_store_pd(g + j, r);
        __m512d s = _mm512_mul_pd(Dm, _mm512_load_pd(gm + j));
        s = _mm512_fmadd_pd(V2, G1, s);
        s = _mm512_fmadd_pd(V1, r, s);
        _mm512_store_pd(gm + j, s);
    }
}

// One query's row (kernels_avx2::eval_query on 8 lanes), the loop templated on
// its direction and on how it stores: the choice is made once per row.
template <class T, bool kDown, int kMode>
LETCC_AVX512_FN void eval_row(const T* __restrict__ ya, const T* __restrict__ yb, const double* __restrict__ g0,
                              std::size_t bs, T* __restrict__ o, std::size_t tw8, const double* coef,
                              unsigned wide, PrefetchCursor& pc) {
    const double* __restrict__ g1 = g0 + bs;
    const double* __restrict__ g2 = g0 + 2 * bs;
    const double* __restrict__ g3 = g0 + 3 * bs;
    const __m512d CA = _mm512_set1_pd(coef[0]), CB = _mm512_set1_pd(coef[1]), E0 = _mm512_set1_pd(coef[2]);
    const __m512d E1 = _mm512_set1_pd(coef[3]), E2 = _mm512_set1_pd(coef[4]), E3 = _mm512_set1_pd(coef[5]);
    for (std::size_t t = 0; t < tw8; t += 8) {
        if ((t & pc.eval_mask) == 0) pc.step(1);
        const std::size_t j = kDown ? tw8 - 8 - t : t;
        __m512d r = _mm512_mul_pd(CA, load8(ya + j));
        r = _mm512_fmadd_pd(CB, load8(yb + j), r);
        r = _mm512_fmadd_pd(E0, _mm512_load_pd(g0 + j), r);
        r = _mm512_fmadd_pd(E1, _mm512_load_pd(g1 + j), r);
        r = _mm512_fmadd_pd(E2, _mm512_load_pd(g2 + j), r);
        r = _mm512_fmadd_pd(E3, _mm512_load_pd(g3 + j), r);
        if (kMode)
            stream8(o + j, r, wide);
        else
            store8(o + j, r);
    }
}

template <class T>
LETCC_AVX512_FN void eval_query(const PlanTables& p, std::int64_t qi, const T* __restrict__ y, std::size_t ldy,
                                T* __restrict__ out, std::size_t ldo, std::size_t c0, std::size_t tw,
                                std::size_t bs, const double* __restrict__ buf, bool stream, PrefetchCursor& pc) {
    const std::int64_t k = p.k[qi];
    const T* __restrict__ ya = y + static_cast<std::size_t>(k) * ldy + c0;
    const T* __restrict__ yb = y + static_cast<std::size_t>(p.k1[qi]) * ldy + c0;
    const double* __restrict__ g0 = buf + static_cast<std::size_t>(k) * bs;  // knot k - 1
    const double* cg = &p.cgam[4 * qi];
    const double coef[6] = {p.cy[2 * qi], p.cy[2 * qi + 1], cg[0], cg[1], cg[2], cg[3]};
    T* __restrict__ o = out + static_cast<std::size_t>(qi) * ldo + c0;
    const std::size_t tw8 = tw & ~std::size_t(7);
    // As in the AVX2 kernel: streaming needs 16-byte-aligned rows, and the same
    // columns take the vector path either way; the row walks downwards when
    // the output runs just ahead of an input row modulo 4 KiB.
    const unsigned wide = stream_width(o);
    const bool nt = stream && wide >= 16 && tw * sizeof(T) >= kMinStreamRowBytes;
    const bool down = store_runs_ahead_of(o, ya) || store_runs_ahead_of(o, yb);
    if (nt) {
        if (down) eval_row<T, true, 1>(ya, yb, g0, bs, o, tw8, coef, wide, pc);
        else eval_row<T, false, 1>(ya, yb, g0, bs, o, tw8, coef, wide, pc);
    } else {
        if (down) eval_row<T, true, 0>(ya, yb, g0, bs, o, tw8, coef, wide, pc);
        else eval_row<T, false, 0>(ya, yb, g0, bs, o, tw8, coef, wide, pc);
    }
    if (tw8 < tw) {
        // The tail under a mask, with the vector loop's operations.
        const __mmask8 km = lanes(tw - tw8);
        const std::size_t j = tw8;
        __m512d r = _mm512_mul_pd(_mm512_set1_pd(coef[0]), load8(ya + j, km));
        r = _mm512_fmadd_pd(_mm512_set1_pd(coef[1]), load8(yb + j, km), r);
        r = _mm512_fmadd_pd(_mm512_set1_pd(coef[2]), _mm512_load_pd(g0 + j), r);
        r = _mm512_fmadd_pd(_mm512_set1_pd(coef[3]), _mm512_load_pd(g0 + bs + j), r);
        r = _mm512_fmadd_pd(_mm512_set1_pd(coef[4]), _mm512_load_pd(g0 + 2 * bs + j), r);
        r = _mm512_fmadd_pd(_mm512_set1_pd(coef[5]), _mm512_load_pd(g0 + 3 * bs + j), r);
        store8(o + j, r, km);
    }
}

template <class T>
LETCC_AVX512_FN void eval_interval(const PlanTables& p, std::int64_t kk, const T* __restrict__ y, std::size_t ldy,
                                   T* __restrict__ out, std::size_t ldo, std::size_t c0, std::size_t tw,
                                   std::size_t bs, const double* __restrict__ buf, bool stream,
                                   PrefetchCursor& pc) {
    for (std::int64_t t = p.by_k[kk]; t < p.by_k[kk + 1]; ++t)
        kernels_avx512::eval_query(p, p.order[t], y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
}

// The whole plan on one column tile (see kernels::plan_tile). buf: 64-byte
// aligned, plan_buffer_size(n, tw) doubles.
template <class T>
__attribute__((target(LETCC_AVX512_TARGET))) inline void plan_tile(const PlanTables& p, const T* __restrict__ y,
                                                                   std::size_t ldy, T* __restrict__ out,
                                                                   std::size_t ldo, std::size_t c0, std::size_t tw,
                                                                   double* __restrict__ buf, bool stream,
                                                                   std::size_t prefetch_cols) {
    const std::int64_t n = p.n;
    const std::size_t bs = padded_width8(tw);
    PrefetchCursor pc;
    if (prefetch_cols && c0 + prefetch_cols + tw <= ldy && n > 2) {
        pc.base = reinterpret_cast<const char*>(y + c0 + prefetch_cols);
        pc.stride = ldy * sizeof(T);
        pc.row_bytes = tw * sizeof(T);
        pc.rows = n;
        // set_prefetch_pace counts 4-column vectors and masks a column counter
        // that steps by 4; here it steps by 8, so pace on pairs of vectors.
        kernels_avx2::set_prefetch_pace(pc, p.q, tw / 8, static_cast<std::size_t>(n) * ((pc.row_bytes + 63) / 64),
                                        static_cast<std::size_t>(n - 2));
        if (pc.eval_mask != ~std::size_t(0)) pc.eval_mask = 2 * pc.eval_mask + 1;
    }
    forward(p, y, ldy, c0, tw, bs, buf);
    std::int64_t i = n - 2;
    for (; i >= 2; i -= 2) {
        pc.step(2 * pc.back_lines);
        back_two(p, i, bs, buf);
        kernels_avx512::eval_interval(p, i + 1, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
        kernels_avx512::eval_interval(p, i, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
    }
    for (; i >= 1; --i) {
        pc.step(pc.back_lines);
        back_one(p, i, bs, buf);
        kernels_avx512::eval_interval(p, i + 1, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
    }
    const std::int64_t last = (n >= 3) ? std::min<std::int64_t>(1, n - 1) : n - 1;
    for (std::int64_t kk = last; kk >= 0; --kk) kernels_avx512::eval_interval(p, kk, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
    if (stream) _mm_sfence();
}

}  // namespace kernels_avx512
}  // namespace letcc

#undef LETCC_AVX512_FN
#endif
