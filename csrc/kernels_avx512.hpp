// The plan's column-tile kernel on AVX-512 (F and VL): the walk of
// plan_walk_isa.hpp, the AVX2 kernel's, on the 8-lane traits below, with the
// same operations in the same order on every column, so its float64 results
// are bit-for-bit those of the AVX2 kernel. For float32 data it has the
// float32 evaluation (kFloat32YTerms; why it stays within the float32 bound:
// PlanWalk::f32_eval), so its float32 results are within a few float32
// roundings of the float64 ones, not the AVX2 kernel's bits. What the traits
// change besides the width: tails run under a lane mask register, and non-temporal stores of a row
// use the widest store its alignment allows (numpy aligns arrays to 16 bytes
// only); and its 32 registers (kRegisters) let the walk run its wide-register
// loops (PlanWalk::kWideRegisters: forward_four, back_two_fused), which keep
// the same operations in the same order.
//
// Everything here is compiled for AVX-512 through the target attribute (no
// lambdas: they would not inherit it); dispatch.cpp calls it only on a CPU that
// has all the features LETCC_AVX512_TARGET names (missing_avx512_feature).
#pragma once

#include "kernels_avx2.hpp"

#if defined(LETCC_HAVE_AVX2_KERNEL)
#define LETCC_HAVE_AVX512_KERNEL 1

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "plan.hpp"
#include "plan_walk.hpp"

#define LETCC_AVX512_TARGET "avx512f,avx512vl,avx2,fma"
#define LETCC_WALK_FN __attribute__((target(LETCC_AVX512_TARGET), always_inline)) inline
#define LETCC_WALK_ENTRY __attribute__((target(LETCC_AVX512_TARGET))) inline

namespace letcc {
namespace kernels_avx512 {

// The SIMD traits (plan_walk.hpp) on 8 float64 lanes.
struct Avx512 {
    using V = __m512d;
    using Mask = __mmask8;
    static constexpr std::size_t kLanes = 8;
    static constexpr int kRegisters = 32;
    LETCC_WALK_FN static V set1(double x) { return _mm512_set1_pd(x); }
    LETCC_WALK_FN static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
    LETCC_WALK_FN static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
    LETCC_WALK_FN static V load(const double* p) { return _mm512_load_pd(p); }
    LETCC_WALK_FN static void store(double* p, V v) { _mm512_store_pd(p, v); }
    LETCC_WALK_FN static V loadu(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
    LETCC_WALK_FN static V loadu(const double* p) { return _mm512_loadu_pd(p); }
    LETCC_WALK_FN static void storeu(float* p, V v) { _mm256_storeu_ps(p, _mm512_cvtpd_ps(v)); }
    LETCC_WALK_FN static void storeu(double* p, V v) { _mm512_storeu_pd(p, v); }
    LETCC_WALK_FN static Mask lanes(std::size_t r) { return static_cast<Mask>((1u << r) - 1u); }
    LETCC_WALK_FN static V loadu(const float* p, Mask k) { return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, p)); }
    LETCC_WALK_FN static V loadu(const double* p, Mask k) { return _mm512_maskz_loadu_pd(k, p); }
    LETCC_WALK_FN static void storeu(float* p, V v, Mask k) { _mm256_mask_storeu_ps(p, k, _mm512_cvtpd_ps(v)); }
    LETCC_WALK_FN static void storeu(double* p, V v, Mask k) { _mm512_mask_storeu_pd(p, k, v); }
    LETCC_WALK_FN static void stream(float* p, V v, unsigned wide) { streamf(p, narrow(v), wide); }
    // The float32 evaluation (kFloat32YTerms; PlanWalk::f32_eval): a query's
    // y terms in float32 on the 8 float32 lanes of one float64 vector's
    // columns, added to its gamma terms narrowed from float64.
    static constexpr bool kFloat32YTerms = true;
    using F = __m256;
    LETCC_WALK_FN static F set1f(float x) { return _mm256_set1_ps(x); }
    LETCC_WALK_FN static F narrow(V v) { return _mm512_cvtpd_ps(v); }
    LETCC_WALK_FN static F fmaf(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    LETCC_WALK_FN static F loadf(const float* p) { return _mm256_loadu_ps(p); }
    LETCC_WALK_FN static F loadf(const float* p, Mask k) { return _mm256_maskz_loadu_ps(k, p); }
    LETCC_WALK_FN static void storef(float* p, F f) { _mm256_storeu_ps(p, f); }
    LETCC_WALK_FN static void storef(float* p, F f, Mask k) { _mm256_mask_storeu_ps(p, k, f); }
    LETCC_WALK_FN static void streamf(float* p, F f, unsigned wide) {
        if (wide >= 32) {
            _mm256_stream_ps(p, f);
        } else {
            _mm_stream_ps(p, _mm256_castps256_ps128(f));
            _mm_stream_ps(p + 4, _mm256_extractf128_ps(f, 1));
        }
    }
    LETCC_WALK_FN static void stream(double* p, V v, unsigned wide) {
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
};

#include "plan_walk_isa.hpp"

using Walk = PlanWalk<Avx512>;

}  // namespace kernels_avx512
}  // namespace letcc

#undef LETCC_WALK_FN
#undef LETCC_WALK_ENTRY
#endif
