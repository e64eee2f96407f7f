// The plan's column-tile kernel on AVX2/FMA: the walk of plan_walk_isa.hpp on
// the 4-lane traits below (faster than the compiler-vectorised kernels.hpp
// where it matters: bench/results/spline.md, "AVX2 kernel").
//
// Everything here is compiled for AVX2+FMA through the target attribute (no
// lambdas: they would not inherit it); dispatch.cpp calls it only on a CPU
// that has both.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LETCC_NO_CLONES)
#define LETCC_HAVE_AVX2_KERNEL 1

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "plan.hpp"
#include "plan_walk.hpp"

#define LETCC_AVX2_TARGET "avx2,fma"
#define LETCC_WALK_FN __attribute__((target(LETCC_AVX2_TARGET), always_inline)) inline
#define LETCC_WALK_ENTRY __attribute__((target(LETCC_AVX2_TARGET))) inline

namespace letcc {
namespace kernels_avx2 {

// The SIMD traits (plan_walk.hpp) on 4 float64 lanes.
struct Avx2 {
    using V = __m256d;
    struct Mask {
        __m256i d;  // 64-bit lanes, for double rows
        __m128i f;  // 32-bit lanes, for float rows
    };
    static constexpr std::size_t kLanes = 4;
    static constexpr int kRegisters = 16;
    // float64 arithmetic for float32 data throughout (no float32 evaluation).
    static constexpr bool kFloat32YTerms = false;
    using F = void;
    LETCC_WALK_FN static V set1(double x) { return _mm256_set1_pd(x); }
    LETCC_WALK_FN static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
    LETCC_WALK_FN static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
    LETCC_WALK_FN static V load(const double* p) { return _mm256_load_pd(p); }
    LETCC_WALK_FN static void store(double* p, V v) { _mm256_store_pd(p, v); }
    LETCC_WALK_FN static V loadu(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
    LETCC_WALK_FN static V loadu(const double* p) { return _mm256_loadu_pd(p); }
    LETCC_WALK_FN static void storeu(float* p, V v) { _mm_storeu_ps(p, _mm256_cvtpd_ps(v)); }
    LETCC_WALK_FN static void storeu(double* p, V v) { _mm256_storeu_pd(p, v); }
    LETCC_WALK_FN static Mask lanes(std::size_t r) {
        const __m128i f = _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(r)), _mm_setr_epi32(0, 1, 2, 3));
        return {_mm256_cvtepi32_epi64(f), f};
    }
    LETCC_WALK_FN static V loadu(const float* p, Mask k) { return _mm256_cvtps_pd(_mm_maskload_ps(p, k.f)); }
    LETCC_WALK_FN static V loadu(const double* p, Mask k) { return _mm256_maskload_pd(p, k.d); }
    LETCC_WALK_FN static void storeu(float* p, V v, Mask k) { _mm_maskstore_ps(p, k.f, _mm256_cvtpd_ps(v)); }
    LETCC_WALK_FN static void storeu(double* p, V v, Mask k) { _mm256_maskstore_pd(p, k.d, v); }
    // 16-byte non-temporal stores whatever the row's alignment beyond 16 (as
    // measured when this kernel was written; numpy aligns arrays to 16 bytes).
    LETCC_WALK_FN static void stream(float* p, V v, unsigned) { _mm_stream_ps(p, _mm256_cvtpd_ps(v)); }
    LETCC_WALK_FN static void stream(double* p, V v, unsigned) {
        _mm_stream_pd(p, _mm256_castpd256_pd128(v));
        _mm_stream_pd(p + 2, _mm256_extractf128_pd(v, 1));
    }
};

#include "plan_walk_isa.hpp"

using Walk = PlanWalk<Avx2>;

}  // namespace kernels_avx2
}  // namespace letcc

#undef LETCC_WALK_FN
#undef LETCC_WALK_ENTRY
#endif
