// Instantiates the tile kernels for each dtype and, on x86-64 with GCC or
// Clang, clones them for AVX-512, AVX2+FMA and baseline x86-64: a wheel built
// anywhere runs on any x86-64 and still uses the wide vectors where the CPU
// has them (the loader's ifunc resolver picks once, at load time).
#include "dispatch.hpp"

#include "dense_kernel.hpp"
#include "kernels.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LETCC_NO_CLONES)
#define LETCC_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define LETCC_CLONES
#endif

namespace letcc {

LETCC_CLONES void plan_tile_f64(const PlanTables& p, const double* y, std::size_t ldy, double* out,
                                std::size_t ldo, std::size_t c0, std::size_t tw, double* buf, bool stream,
                                std::size_t prefetch_cols) {
    kernels::plan_tile<double>(p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols);
}

LETCC_CLONES void plan_tile_f32(const PlanTables& p, const float* y, std::size_t ldy, float* out,
                                std::size_t ldo, std::size_t c0, std::size_t tw, double* buf, bool stream,
                                std::size_t prefetch_cols) {
    kernels::plan_tile<float>(p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols);
}

LETCC_CLONES void fit_tile_f64(const PlanTables& p, const double* lam_over_w, const double* ih,
                               const double* y, std::size_t ldy, double* g, double* gam, std::size_t ldo,
                               std::size_t c0, std::size_t tw, double* buf) {
    kernels::solve_tile<double>(p, y, ldy, c0, tw, buf);
    kernels::fit_tile<double>(p, lam_over_w, ih, y, ldy, g, gam, ldo, c0, tw, buf);
}

LETCC_CLONES void fit_tile_f32(const PlanTables& p, const double* lam_over_w, const double* ih,
                               const float* y, std::size_t ldy, float* g, float* gam, std::size_t ldo,
                               std::size_t c0, std::size_t tw, double* buf) {
    kernels::solve_tile<float>(p, y, ldy, c0, tw, buf);
    kernels::fit_tile<float>(p, lam_over_w, ih, y, ldy, g, gam, ldo, c0, tw, buf);
}

LETCC_CLONES void dense_tile_f64(const double* A, std::int64_t q, std::int64_t n, const double* y,
                                 std::size_t ldy, double* out, std::size_t ldo, std::size_t c0, std::size_t tw,
                                 double* pack) {
    kernels::dense_tile<double>(A, q, n, y, ldy, out, ldo, c0, tw, pack);
}

LETCC_CLONES void dense_tile_f32(const float* A, std::int64_t q, std::int64_t n, const float* y,
                                 std::size_t ldy, float* out, std::size_t ldo, std::size_t c0, std::size_t tw,
                                 float* pack) {
    kernels::dense_tile<float>(A, q, n, y, ldy, out, ldo, c0, tw, pack);
}

const char* kernel_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LETCC_NO_CLONES)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "avx512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
    return "baseline";
#else
    return "native";
#endif
}

}  // namespace letcc
