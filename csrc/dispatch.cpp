// Instantiates the tile kernels for each dtype and, on x86-64 with GCC or
// Clang, builds the compiler-vectorised ones three times: for AVX-512, for
// AVX2 with FMA, and for baseline x86-64. A wheel built anywhere runs on any
// x86-64 and still uses the wide vectors and fused multiply-adds where the CPU
// has them; the build is chosen once per process from the CPU's features.
//
// Not GCC's target_clones: it splits a clone string at commas, so
// target_clones("avx2,fma") makes one clone for AVX2 *without* FMA and one for
// FMA without AVX2, and its resolver picked the AVX2 one (mul + add, no FMA)
// on every AVX2+FMA CPU.
#include "dispatch.hpp"

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "dense_kernel.hpp"
#include "kernels.hpp"
#include "kernels_avx2.hpp"
#include "kernels_avx512.hpp"
#include "locator_kernel.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LETCC_NO_CLONES)
#define LETCC_X86_DISPATCH 1
#define LETCC_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define LETCC_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace letcc {

namespace {

// The instruction set the compiler-vectorised kernels were built for and run
// with on this CPU, decided once.
enum class Isa : int { kBaseline, kAvx2Fma, kAvx512 };

#if defined(LETCC_X86_DISPATCH)
bool cpu_has_avx2_fma() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

Isa detect_isa() {
    if (!cpu_has_avx2_fma()) return Isa::kBaseline;
    return __builtin_cpu_supports("avx512f") ? Isa::kAvx512 : Isa::kAvx2Fma;
}

// NAME_avx512, NAME_avx2 and NAME_baseline: the same CALL compiled for each
// instruction set (the kernels it inlines are built with the caller's target),
// and NAME calling the one this CPU runs. PARAMS and ARGS are parenthesised.
#define LETCC_MULTIVERSION(NAME, PARAMS, ARGS, CALL)                                        \
    LETCC_TARGET_AVX512 static void NAME##_avx512 PARAMS { CALL; }                           \
    LETCC_TARGET_AVX2 static void NAME##_avx2 PARAMS { CALL; }                               \
    static void NAME##_baseline PARAMS { CALL; }                                             \
    void NAME PARAMS {                                                                       \
        pick_isa(NAME##_avx512, NAME##_avx2, NAME##_baseline) ARGS;                          \
    }
#else
bool cpu_has_avx2_fma() { return false; }
Isa detect_isa() { return Isa::kBaseline; }
#define LETCC_MULTIVERSION(NAME, PARAMS, ARGS, CALL) \
    void NAME PARAMS { CALL; }
#endif

Isa cpu_isa() {
    static const Isa isa = detect_isa();
    return isa;
}

// set_kernel_isa's choice (-1: the CPU's best). Read on every tile call (one
// relaxed load); a switch during a call from another thread mixes builds across
// its tiles, which is still correct, only not bit-for-bit repeatable.
std::atomic<int> g_isa_override{-1};

Isa active_isa() {
    const int o = g_isa_override.load(std::memory_order_relaxed);
    return o < 0 ? cpu_isa() : static_cast<Isa>(o);
}

template <class F>
F pick_isa(F avx512, F avx2, F baseline) {
    switch (active_isa()) {
        case Isa::kAvx512: return avx512;
        case Isa::kAvx2Fma: return avx2;
        default: return baseline;
    }
}

// The compiler-vectorised plan kernel (kernels.hpp). It was measured with
// non-temporal stores helping float64 only, so float32 never streams here.
LETCC_MULTIVERSION(plan_tile_generic_f64,
                   (const PlanTables& p, const double* y, std::size_t ldy, double* out, std::size_t ldo,
                    std::size_t c0, std::size_t tw, double* buf, bool stream, std::size_t prefetch_cols),
                   (p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols),
                   kernels::plan_tile<double>(p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols))

LETCC_MULTIVERSION(plan_tile_generic_f32,
                   (const PlanTables& p, const float* y, std::size_t ldy, float* out, std::size_t ldo,
                    std::size_t c0, std::size_t tw, double* buf, bool stream, std::size_t prefetch_cols),
                   (p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols),
                   ((void)stream, kernels::plan_tile<float>(p, y, ldy, out, ldo, c0, tw, buf, false, prefetch_cols)))

// The hand-written kernels: one walk (plan_walk_isa.hpp) per ISA, each
// compiled for its own target.
#if defined(LETCC_HAVE_AVX2_KERNEL)
constexpr auto plan_tile_avx2_f64 = &kernels_avx2::Walk::plan_tile<double>;
constexpr auto plan_tile_avx2_f32 = &kernels_avx2::Walk::plan_tile<float>;
#define AVX2_OR_NULL(f) f
#else
#define AVX2_OR_NULL(f) nullptr
#endif

#if defined(LETCC_HAVE_AVX512_KERNEL)
constexpr auto plan_tile_avx512_f64 = &kernels_avx512::Walk::plan_tile<double>;
constexpr auto plan_tile_avx512_f32 = &kernels_avx512::Walk::plan_tile<float>;
#define AVX512_OR_NULL(f) f
#else
#define AVX512_OR_NULL(f) nullptr
#endif

// The first of the CPU features the AVX-512 plan kernel uses (avx512f,
// avx512vl, avx2, fma, as __builtin_cpu_supports names them; it also checks
// that the OS saves the 512-bit state) that this CPU lacks, nullptr when none;
// checked once.
const char* missing_avx512_feature() {
#if defined(LETCC_HAVE_AVX512_KERNEL)
    static const char* const missing = [] {
        __builtin_cpu_init();
        // __builtin_cpu_supports wants string literals, not a loop variable.
        if (!__builtin_cpu_supports("avx512f")) return "avx512f";
        if (!__builtin_cpu_supports("avx512vl")) return "avx512vl";
        if (!__builtin_cpu_supports("avx2")) return "avx2";
        if (!__builtin_cpu_supports("fma")) return "fma";
        return static_cast<const char*>(nullptr);
    }();
    return missing;
#else
    return "an x86-64 GCC/Clang build";
#endif
}

// Which plan kernel runs: set_plan_kernel's choice, or the fastest one this
// CPU has (decided once). Read per tile: switching during a call from another
// thread mixes kernels across its tiles, which is still correct (all compute
// the same float64 arithmetic) but not bit-for-bit repeatable.
enum PlanKernel : int { kAuto = 0, kGeneric = 1, kAvx2 = 2, kAvx512 = 3 };
std::atomic<int> g_plan_kernel{kAuto};

// The hand-written kernel in use (kAvx512, kAvx2) or kGeneric. "auto" follows
// set_kernel_isa: the AVX-512 kernel where the active build is avx512 and the
// CPU has every feature it uses, the AVX2 one where the build is avx2 (or
// avx512 without those features), the generic one for a forced baseline.
int plan_kernel_in_use() {
    const int k = g_plan_kernel.load(std::memory_order_relaxed);
    if (k != kAuto) return k;
    switch (active_isa()) {
        case Isa::kAvx512: return (AVX512_OR_NULL(plan_tile_avx512_f64) != nullptr && !missing_avx512_feature()) ? kAvx512 : kAvx2;
        case Isa::kAvx2Fma: return kAvx2;
        default: return kGeneric;
    }
}

}  // namespace

// Both dtypes: the hand-written kernel where it is chosen, else the generic
// builds; either way on the buffer placed in the caller's scratch
// (placed_buffer).
template <class T, class Fn>
void plan_tile_dispatch(Fn avx512, Fn avx2, Fn generic, const PlanTables& p, const T* y, std::size_t ldy, T* out,
                        std::size_t ldo, std::size_t c0, std::size_t tw, double* buf, bool stream,
                        std::size_t prefetch_cols) {
    double* placed = placed_buffer(buf, y + c0);
    const int k = plan_kernel_in_use();
    Fn f = (k == kAvx512 && avx512) ? avx512 : (k == kAvx2 && avx2) ? avx2 : generic;
    f(p, y, ldy, out, ldo, c0, tw, placed, stream, prefetch_cols);
}

using PlanFnF64 = void (*)(const PlanTables&, const double*, std::size_t, double*, std::size_t, std::size_t,
                           std::size_t, double*, bool, std::size_t);
using PlanFnF32 = void (*)(const PlanTables&, const float*, std::size_t, float*, std::size_t, std::size_t,
                           std::size_t, double*, bool, std::size_t);

void plan_tile_f64(const PlanTables& p, const double* y, std::size_t ldy, double* out, std::size_t ldo,
                   std::size_t c0, std::size_t tw, double* buf, bool stream, std::size_t prefetch_cols) {
    plan_tile_dispatch<double, PlanFnF64>(AVX512_OR_NULL(plan_tile_avx512_f64), AVX2_OR_NULL(plan_tile_avx2_f64),
                                          plan_tile_generic_f64, p, y, ldy, out, ldo, c0, tw, buf, stream,
                                          prefetch_cols);
}

void plan_tile_f32(const PlanTables& p, const float* y, std::size_t ldy, float* out, std::size_t ldo,
                   std::size_t c0, std::size_t tw, double* buf, bool stream, std::size_t prefetch_cols) {
    plan_tile_dispatch<float, PlanFnF32>(AVX512_OR_NULL(plan_tile_avx512_f32), AVX2_OR_NULL(plan_tile_avx2_f32),
                                         plan_tile_generic_f32, p, y, ldy, out, ldo, c0, tw, buf, stream,
                                         prefetch_cols);
}

void set_plan_kernel(const std::string& name) {
    if (name == "auto") {
        g_plan_kernel = kAuto;
    } else if (name == "generic") {
        g_plan_kernel = kGeneric;
    } else if (name == "avx2") {
        if (!cpu_has_avx2_fma() || AVX2_OR_NULL(plan_tile_avx2_f64) == nullptr)
            throw std::invalid_argument(
                "plan kernel 'avx2' needs an x86-64 GCC/Clang build and a CPU with AVX2 and FMA; this CPU or build "
                "lacks them (plan_kernel() says which kernel runs)");
        g_plan_kernel = kAvx2;
    } else if (name == "avx512") {
        if (const char* missing = missing_avx512_feature())
            throw std::invalid_argument(std::string("plan kernel 'avx512' needs a CPU with ") +
                                        "avx512f, avx512vl, avx2 and fma (and an x86-64 GCC/Clang build); this one " +
                                        "lacks " + missing + " (plan_kernel() says which kernel runs)");
        g_plan_kernel = kAvx512;
    } else {
        throw std::invalid_argument("plan kernel must be 'auto', 'generic', 'avx2' or 'avx512', got '" + name + "'");
    }
}

std::size_t plan_tile_width(std::int64_t n, std::size_t elem_size, std::size_t m) {
    return plan_kernel_in_use() == kGeneric ? tile_width(n, elem_size, m) : tile_width_avx2(n, elem_size, m);
}

std::string plan_kernel() {
    switch (plan_kernel_in_use()) {
        case kAvx512: return "avx512";
        case kAvx2: return "avx2";
        default: return std::string("generic-") + kernel_isa();
    }
}

LETCC_MULTIVERSION(fit_tile_f64,
                   (const PlanTables& p, const double* lam_over_w, const double* ih, const double* y,
                    std::size_t ldy, double* g, double* gam, std::size_t ldo, std::size_t c0, std::size_t tw,
                    double* buf),
                   (p, lam_over_w, ih, y, ldy, g, gam, ldo, c0, tw, buf),
                   (kernels::solve_tile<double>(p, y, ldy, c0, tw, buf),
                    kernels::fit_tile<double>(p, lam_over_w, ih, y, ldy, g, gam, ldo, c0, tw, buf)))

LETCC_MULTIVERSION(fit_tile_f32,
                   (const PlanTables& p, const double* lam_over_w, const double* ih, const float* y,
                    std::size_t ldy, float* g, float* gam, std::size_t ldo, std::size_t c0, std::size_t tw,
                    double* buf),
                   (p, lam_over_w, ih, y, ldy, g, gam, ldo, c0, tw, buf),
                   (kernels::solve_tile<float>(p, y, ldy, c0, tw, buf),
                    kernels::fit_tile<float>(p, lam_over_w, ih, y, ldy, g, gam, ldo, c0, tw, buf)))

LETCC_MULTIVERSION(dense_tile_f64,
                   (const double* A, std::int64_t q, std::int64_t n, const double* y, std::size_t ldy,
                    double* out, std::size_t ldo, std::size_t c0, std::size_t tw, double* pack),
                   (A, q, n, y, ldy, out, ldo, c0, tw, pack),
                   kernels::dense_tile<double>(A, q, n, y, ldy, out, ldo, c0, tw, pack))

LETCC_MULTIVERSION(dense_tile_f32,
                   (const float* A, std::int64_t q, std::int64_t n, const float* y, std::size_t ldy,
                    float* out, std::size_t ldo, std::size_t c0, std::size_t tw, float* pack),
                   (A, q, n, y, ldy, out, ldo, c0, tw, pack),
                   kernels::dense_tile<float>(A, q, n, y, ldy, out, ldo, c0, tw, pack))

LETCC_MULTIVERSION(dense_tile_rows_f64,
                   (const double* A, std::int64_t q, std::int64_t n, const double* const* rows, double* out,
                    std::size_t ldo, std::size_t c0, std::size_t tw, double* pack),
                   (A, q, n, rows, out, ldo, c0, tw, pack),
                   kernels::dense_tile_rows<double>(A, q, n, rows, out, ldo, c0, tw, pack))

LETCC_MULTIVERSION(dense_tile_rows_f32,
                   (const float* A, std::int64_t q, std::int64_t n, const float* const* rows, float* out,
                    std::size_t ldo, std::size_t c0, std::size_t tw, float* pack),
                   (A, q, n, rows, out, ldo, c0, tw, pack),
                   kernels::dense_tile_rows<float>(A, q, n, rows, out, ldo, c0, tw, pack))

// The locator kernel (locator_kernel.hpp) with vectors as wide as each build's
// registers: 8 float64 lanes on AVX-512, 4 on AVX2, 2 baseline (with 8
// everywhere the AVX2 build ran 5x slower than with 4: GCC splits the wider
// vectors badly).
#if defined(LETCC_X86_DISPATCH)
#define LETCC_MULTIVERSION_LANES(NAME, PARAMS, ARGS, KERNEL, T)                        \
    LETCC_TARGET_AVX512 static void NAME##_avx512 PARAMS { KERNEL<T, 8> ARGS; } \
    LETCC_TARGET_AVX2 static void NAME##_avx2 PARAMS { KERNEL<T, 4> ARGS; }     \
    static void NAME##_baseline PARAMS { KERNEL<T, 2> ARGS; }                 \
    void NAME PARAMS {                                                        \
        pick_isa(NAME##_avx512, NAME##_avx2, NAME##_baseline) ARGS;           \
    }
#else
#define LETCC_MULTIVERSION_LANES(NAME, PARAMS, ARGS, KERNEL, T) \
    void NAME PARAMS { KERNEL<T, 2> ARGS; }
#endif

LETCC_MULTIVERSION_LANES(locator_tile_f64,
                         (const PlanTables& p, const LocatorCoeffs& c, const double* const* rows, std::size_t c0,
                          std::size_t tw, double* buf, double* sums, std::size_t prefetch_cols, bool pairs),
                         (p, c, rows, c0, tw, buf, sums, prefetch_cols, pairs), kernels::locator_tile, double)

LETCC_MULTIVERSION_LANES(locator_tile_f32,
                         (const PlanTables& p, const LocatorCoeffs& c, const float* const* rows, std::size_t c0,
                          std::size_t tw, double* buf, double* sums, std::size_t prefetch_cols, bool pairs),
                         (p, c, rows, c0, tw, buf, sums, prefetch_cols, pairs), kernels::locator_tile, float)

LETCC_MULTIVERSION_LANES(rescore_tile_f64,
                         (const double* ihx, std::size_t nx, std::size_t n, const double* const* rows,
                          const std::size_t* da, const std::size_t* db, std::size_t nd, std::size_t c0,
                          std::size_t tw, double* buf, double* out, std::size_t prefetch_cols),
                         (ihx, nx, n, rows, da, db, nd, c0, tw, buf, out, prefetch_cols), kernels::rescore_tile, double)

LETCC_MULTIVERSION_LANES(rescore_tile_f32,
                         (const double* ihx, std::size_t nx, std::size_t n, const float* const* rows,
                          const std::size_t* da, const std::size_t* db, std::size_t nd, std::size_t c0,
                          std::size_t tw, double* buf, double* out, std::size_t prefetch_cols),
                         (ihx, nx, n, rows, da, db, nd, c0, tw, buf, out, prefetch_cols), kernels::rescore_tile, float)
#if defined(LETCC_X86_DISPATCH)
namespace {
const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::kAvx512: return "avx512";
        case Isa::kAvx2Fma: return "avx2";
        default: return "baseline";
    }
}
}  // namespace
#endif

const char* kernel_isa() {
#if defined(LETCC_X86_DISPATCH)
    return isa_name(active_isa());
#else
    return "native";
#endif
}

void set_kernel_isa(const std::string& name) {
    if (name == "auto") {
        g_isa_override = -1;
        return;
    }
#if defined(LETCC_X86_DISPATCH)
    for (Isa isa : {Isa::kBaseline, Isa::kAvx2Fma, Isa::kAvx512}) {
        if (name != isa_name(isa)) continue;
        if (static_cast<int>(isa) > static_cast<int>(cpu_isa()))
            throw std::invalid_argument("kernel ISA '" + name + "' is not available on this CPU, which runs at most '" +
                                        isa_name(cpu_isa()) + "' (avx2 needs AVX2 and FMA; avx512 also AVX-512F)");
        g_isa_override = static_cast<int>(isa);
        return;
    }
    throw std::invalid_argument("kernel ISA must be 'auto', 'baseline', 'avx2' or 'avx512', got '" + name + "'");
#else
    if (name != "native")
        throw std::invalid_argument("kernel ISA must be 'auto' or 'native' in this build (no x86-64 dispatch), got '" +
                                    name + "'");
#endif
}

}  // namespace letcc
