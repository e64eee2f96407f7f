// Instantiates the tile kernels for each dtype and, on x86-64 with GCC or
// Clang, clones them for AVX-512, AVX2+FMA and baseline x86-64: a wheel built
// anywhere runs on any x86-64 and still uses the wide vectors where the CPU
// has them (the loader's ifunc resolver picks once, at load time).
#include "dispatch.hpp"

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "dense_kernel.hpp"
#include "kernels.hpp"
#include "kernels_avx2.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LETCC_NO_CLONES)
#define LETCC_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define LETCC_CLONES
#endif

namespace letcc {

namespace {

// The compiler-vectorised plan kernel (kernels.hpp), cloned per instruction set.
// It was measured with non-temporal stores helping float64 only, so float32
// never streams here.
LETCC_CLONES void plan_tile_generic_f64(const PlanTables& p, const double* y, std::size_t ldy, double* out,
                                        std::size_t ldo, std::size_t c0, std::size_t tw, double* buf, bool stream,
                                        std::size_t prefetch_cols) {
    kernels::plan_tile<double>(p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols);
}

LETCC_CLONES void plan_tile_generic_f32(const PlanTables& p, const float* y, std::size_t ldy, float* out,
                                        std::size_t ldo, std::size_t c0, std::size_t tw, double* buf, bool,
                                        std::size_t prefetch_cols) {
    kernels::plan_tile<float>(p, y, ldy, out, ldo, c0, tw, buf, false, prefetch_cols);
}

#if defined(LETCC_HAVE_AVX2_KERNEL)
__attribute__((target("avx2,fma"))) void plan_tile_avx2_f64(const PlanTables& p, const double* y, std::size_t ldy,
                                                            double* out, std::size_t ldo, std::size_t c0,
                                                            std::size_t tw, double* buf, bool stream,
                                                            std::size_t prefetch_cols) {
    kernels_avx2::plan_tile<double>(p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols);
}

__attribute__((target("avx2,fma"))) void plan_tile_avx2_f32(const PlanTables& p, const float* y, std::size_t ldy,
                                                            float* out, std::size_t ldo, std::size_t c0,
                                                            std::size_t tw, double* buf, bool stream,
                                                            std::size_t prefetch_cols) {
    kernels_avx2::plan_tile<float>(p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols);
}

#define AVX2_OR_NULL(f) f
bool cpu_has_avx2_fma() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define AVX2_OR_NULL(f) nullptr
bool cpu_has_avx2_fma() { return false; }
#endif

// Which plan kernel runs: set_plan_kernel's choice, or the fastest one this
// CPU has (decided once). Read per tile: switching during a call from another
// thread mixes kernels across its tiles, which is still correct (both compute
// the same float64 arithmetic) but not bit-for-bit repeatable.
enum PlanKernel : int { kAuto = 0, kGeneric = 1, kAvx2 = 2 };
std::atomic<int> g_plan_kernel{kAuto};

bool use_avx2_kernel() {
    static const bool has = cpu_has_avx2_fma();
    const int k = g_plan_kernel.load(std::memory_order_relaxed);
    return k == kAvx2 || (k == kAuto && has);
}

double* aligned64(double* buf) {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(buf);
    return reinterpret_cast<double*>((a + 63) & ~std::uintptr_t(63));
}

}  // namespace

// Both dtypes: the AVX2 kernel where it is chosen, else the generic clones;
// either way on the caller's buffer aligned up to 64 bytes.
template <class T, class Avx2, class Generic>
void plan_tile_dispatch(Avx2 avx2, Generic generic, const PlanTables& p, const T* y, std::size_t ldy, T* out,
                        std::size_t ldo, std::size_t c0, std::size_t tw, double* buf, bool stream,
                        std::size_t prefetch_cols) {
    (void)avx2;
#if defined(LETCC_HAVE_AVX2_KERNEL)
    if (use_avx2_kernel()) return avx2(p, y, ldy, out, ldo, c0, tw, aligned64(buf), stream, prefetch_cols);
#endif
    generic(p, y, ldy, out, ldo, c0, tw, aligned64(buf), stream, prefetch_cols);
}

void plan_tile_f64(const PlanTables& p, const double* y, std::size_t ldy, double* out, std::size_t ldo,
                   std::size_t c0, std::size_t tw, double* buf, bool stream, std::size_t prefetch_cols) {
    plan_tile_dispatch<double>(AVX2_OR_NULL(plan_tile_avx2_f64), plan_tile_generic_f64, p, y, ldy, out, ldo, c0, tw,
                               buf, stream, prefetch_cols);
}

void plan_tile_f32(const PlanTables& p, const float* y, std::size_t ldy, float* out, std::size_t ldo,
                   std::size_t c0, std::size_t tw, double* buf, bool stream, std::size_t prefetch_cols) {
    plan_tile_dispatch<float>(AVX2_OR_NULL(plan_tile_avx2_f32), plan_tile_generic_f32, p, y, ldy, out, ldo, c0, tw,
                              buf, stream, prefetch_cols);
}

void set_plan_kernel(const std::string& name) {
    if (name == "auto") {
        g_plan_kernel = kAuto;
    } else if (name == "generic") {
        g_plan_kernel = kGeneric;
    } else if (name == "avx2") {
        if (!cpu_has_avx2_fma())
            throw std::invalid_argument(
                "plan kernel 'avx2' needs an x86-64 GCC/Clang build and a CPU with AVX2 and FMA; this CPU or build "
                "lacks them (plan_kernel() says which kernel runs)");
        g_plan_kernel = kAvx2;
    } else {
        throw std::invalid_argument("plan kernel must be 'auto', 'generic' or 'avx2', got '" + name + "'");
    }
}

std::size_t plan_tile_width(std::int64_t n, std::size_t elem_size, std::size_t m) {
    return use_avx2_kernel() ? tile_width_avx2(n, elem_size, m) : tile_width(n, elem_size, m);
}

std::string plan_kernel() {
    if (use_avx2_kernel()) return "avx2";
    return std::string("generic-") + kernel_isa();
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
