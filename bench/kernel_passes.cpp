// Where the banded plan kernel's time goes (issue 2: "record what you reach and
// what limits it"). bench/kernel_passes.py compiles this file together with
// csrc/dispatch.cpp and runs it; it prints one JSON object.
//
// One plan (n Chebyshev knots of the second kind, K = n query points of the
// first kind, lam = 1e-3, as in bench/spline.py) applied to float32 input with
// letcc's hand-written kernels, AVX2 and (where the CPU has its features)
// AVX-512, side by side: every measurement of every kernel runs once per round
// (after an untimed call of its own), the rounds interleave all of them, and
// the best round is kept (steady_clock):
//
//   cache_*        the kernel's passes on two tiles that stay in cache, one
//                  thread, in plan_tile's order and on the buffer placed as
//                  the dispatcher places it: forward (Q^T y and the forward
//                  substitution), forward_back (the walk with the evaluation
//                  doing nothing: forward, then the back substitution),
//                  tile (all three passes: the evaluation is tile - forward_back);
//   full_1t/2t     the whole plan on m columns the way letcc runs it (its tile
//                  width, line-aligned tiles, the dispatcher's plan_tile_f32,
//                  non-temporal output, the next tile prefetched), 1 and 2 threads;
//   in_cached_1t   the same walk on one thread, but every tile reads its input
//                  from one tile-sized block that stays in cache (the output
//                  still goes to memory);
//   out_cached_1t  the same, every tile writing its output to one block that
//                  stays in cache (the input still comes from memory);
//   cache_eval_*   the in-cache walk with the evaluation's loop replaced by
//                  one part of its work (see EvalWork in csrc/plan_walk.hpp);
//   *_unfused_s    for a kernel with wide-register loops (AVX-512), the
//                  in-cache tile and the full size on 2 threads on the walk
//                  as it was before them (EvalWork::kFullUnfused), side by side;
//   *_f64eval_s    for a kernel with the float32 evaluation (AVX-512), the
//                  same two on its walk with the float64 evaluation instead
//                  (EvalWork::kFullF64Eval: the walk before it), side by side;
//   clock_ghz      a chain of dependent integer adds (one per cycle on any
//                  x86-64 core): the clock this core ran at;
//   clock_ghz_512  the same chain beside independent 512-bit FMAs: the clock
//                  while 512-bit arithmetic runs (0 without AVX-512);
//   fma*_per_cycle independent 256- and 512-bit float64 FMAs per cycle (the
//                  core's FMA pipes of each width).
//
// Usage: kernel_passes N M ROUNDS [KERNELS]   (KERNELS: comma-separated, default
// avx2,avx512; a kernel this CPU cannot run is left out and reported false)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <immintrin.h>
#include <sys/mman.h>

#include "dispatch.hpp"
#include "kernels_avx2.hpp"
#include "kernels_avx512.hpp"
#include "plan.hpp"
#include "thread_pool.hpp"

using namespace letcc;

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double seconds(const std::function<void()>& f) {
    const double t0 = now();
    f();
    return now() - t0;
}

// A chain of dependent register-register adds: one per cycle on any x86-64
// core. (Not add-immediate: Intel's Golden Cove and later cores fold chains of
// those in the renamer; on an AVX-512 Xeon that read 17.7 GHz.)
double clock_ghz(int rounds) {
    const long iters = 20'000'000;
    double best = 1e300;
    for (int r = 0; r < rounds; ++r) {
        best = std::min(best, seconds([&] {
            long x = 0, one = 1;
            for (long i = 0; i < iters; ++i)
                asm volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                             "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                             : "+r"(x)
                             : "r"(one));
        }));
    }
    return 8.0 * static_cast<double>(iters) / best * 1e-9;
}

// Independent float64 FMAs per second on vectors of one width (twelve
// chains, more than latency x pipes on any core): over clock_ghz, how many FMA
// pipes of that width the core has (2 and 2 on an AVX-512 Xeon; 2 and 1 on AMD
// Zen 4, which splits a 512-bit FMA in two 256-bit halves). One body per
// width: a target attribute cannot follow a template parameter.
#define LETCC_FMA_THROUGHPUT(NAME, TARGET, V, SET1, FMA)                                                   \
    __attribute__((target(TARGET))) double NAME(int rounds) {                                              \
        const long iters = 2'000'000;                                                                      \
        double best = 1e300;                                                                               \
        for (int r = 0; r < rounds; ++r) {                                                                 \
            const V b = SET1(0.999999), c = SET1(1e-9);                                                    \
            V a0 = SET1(1.0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;                                 \
            V a6 = a0, a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;                                      \
            const double t0 = now();                                                                       \
            for (long i = 0; i < iters; ++i) {                                                             \
                a0 = FMA(a0, b, c), a1 = FMA(a1, b, c), a2 = FMA(a2, b, c), a3 = FMA(a3, b, c);            \
                a4 = FMA(a4, b, c), a5 = FMA(a5, b, c), a6 = FMA(a6, b, c), a7 = FMA(a7, b, c);            \
                a8 = FMA(a8, b, c), a9 = FMA(a9, b, c), a10 = FMA(a10, b, c), a11 = FMA(a11, b, c);        \
                asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),    \
                             "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));                          \
            }                                                                                              \
            best = std::min(best, now() - t0);                                                             \
        }                                                                                                  \
        return 12.0 * static_cast<double>(iters) / best;                                                   \
    }

LETCC_FMA_THROUGHPUT(fma256_per_second, "avx2,fma", __m256d, _mm256_set1_pd, _mm256_fmadd_pd)
#if defined(LETCC_HAVE_AVX512_KERNEL)
LETCC_FMA_THROUGHPUT(fma512_per_second, "avx512f", __m512d, _mm512_set1_pd, _mm512_fmadd_pd)

// clock_ghz's chain of adds with eight independent 512-bit FMAs beside every
// sixteen adds (off the chain, half the FMA pipes busy): the clock the core
// runs at while it executes 512-bit arithmetic, which some Intel cores lower
// (on the AVX-512 Xeon: 3.13-3.18 GHz against 3.38-3.48 without).
__attribute__((target("avx512f"))) double clock_ghz_512(int rounds) {
    const long iters = 5'000'000;
    double best = 1e300;
    for (int r = 0; r < rounds; ++r) {
        const __m512d b = _mm512_set1_pd(0.999999), c = _mm512_set1_pd(1e-9);
        __m512d a0 = _mm512_set1_pd(1.0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        long x = 0, one = 1;
        const double t0 = now();
        for (long i = 0; i < iters; ++i) {
            asm volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                         "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                         "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                         "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                         : "+r"(x)
                         : "r"(one));
            a0 = _mm512_fmadd_pd(a0, b, c), a1 = _mm512_fmadd_pd(a1, b, c), a2 = _mm512_fmadd_pd(a2, b, c);
            a3 = _mm512_fmadd_pd(a3, b, c), a4 = _mm512_fmadd_pd(a4, b, c), a5 = _mm512_fmadd_pd(a5, b, c);
            a6 = _mm512_fmadd_pd(a6, b, c), a7 = _mm512_fmadd_pd(a7, b, c);
            asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7));
        }
        best = std::min(best, now() - t0);
    }
    return 16.0 * static_cast<double>(iters) / best * 1e-9;
}
#endif
#undef LETCC_FMA_THROUGHPUT

// float storage placed as numpy places a large array: on transparent huge pages
// (numpy advises them for large allocations), 16 bytes past a line boundary.
struct Array {
    void* raw = nullptr;
    float* data = nullptr;
    explicit Array(std::size_t count) {
        const std::size_t huge = std::size_t(2) << 20;
        const std::size_t bytes = (count * sizeof(float) + 64 + huge - 1) / huge * huge;
        raw = std::aligned_alloc(huge, bytes);
        if (!raw) throw std::bad_alloc();
        madvise(raw, bytes, MADV_HUGEPAGE);
        std::memset(raw, 0, bytes);
        data = reinterpret_cast<float*>(static_cast<char*>(raw) + 16);
    }
    ~Array() { std::free(raw); }
    Array(const Array&) = delete;
    Array& operator=(const Array&) = delete;
};

std::vector<double>& scratch(std::size_t size) {
    thread_local std::vector<double> buf;
    if (buf.size() < size) buf.resize(size);
    return buf;
}

}  // namespace

#if defined(LETCC_HAVE_AVX2_KERNEL)
// The in-cache loops, for either kernel's walk K (kernels_avx2::Walk,
// kernels_avx512::Walk): `times` sweeps over the tiles of [0, mc), each tile
// through K::forward alone, or through K::plan_tile with its evaluation doing
// one part of its work (plan_walk::EvalWork: nothing is forward_back, all of
// it is the tile, the others take the evaluation apart where it really runs).
using plan_walk::EvalWork;

template <class K>
void sweep_forward(const PlanTables& p, const float* y, std::size_t mc, std::size_t tw, double* scratch, int times) {
    for (int k = 0; k < times; ++k)
        for (std::size_t c0 = 0; c0 < mc; c0 += tw)
            K::template forward<float>(p, y, mc, c0, tw, K::padded(tw), placed_buffer(scratch, y + c0));
}

template <class K, EvalWork W>
void sweep_tiles(const PlanTables& p, const float* y, float* out, std::size_t mc, std::size_t tw, double* scratch,
                 int times) {
    for (int k = 0; k < times; ++k)
        for (std::size_t c0 = 0; c0 < mc; c0 += tw)
            K::template plan_tile<float, W>(p, y, mc, out, mc, c0, tw, placed_buffer(scratch, y + c0), false, 0);
}
#endif

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: kernel_passes N M ROUNDS [KERNELS]\n");
        return 2;
    }
    const std::int64_t n = std::atol(argv[1]);
    const std::size_t m = static_cast<std::size_t>(std::atol(argv[2]));
    const int rounds = std::atoi(argv[3]);
    const std::string wanted = argc == 5 ? argv[4] : "avx2,avx512";
    auto wants = [&](const char* k) { return ("," + wanted + ",").find(std::string(",") + k + ",") != std::string::npos; };
    if (n < 4 || m < 8 || rounds < 1) {
        std::fprintf(stderr, "need N >= 4, M >= 8, ROUNDS >= 1 (got %ld, %zu, %d)\n", static_cast<long>(n), m, rounds);
        return 2;
    }
#if !defined(LETCC_HAVE_AVX2_KERNEL)
    std::printf("{\"avx2\": false}\n");
    return 0;
#else
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
        std::printf("{\"avx2\": false}\n");
        return 0;
    }
    std::vector<double> x(n), at(n), w(n, 1.0);
    for (std::int64_t i = 0; i < n; ++i) x[i] = -std::cos(static_cast<double>(i) * M_PI / static_cast<double>(n - 1));
    for (std::int64_t i = 0; i < n; ++i)
        at[i] = -std::cos(static_cast<double>(2 * (n - i) - 1) * M_PI / static_cast<double>(2 * n));
    const ReinschFactor f = factor_reinsch(x.data(), w.data(), n, 1e-3);
    const PlanTables p = make_plan_tables(f, at.data(), static_cast<std::size_t>(n), 0);
    const std::size_t tw = plan_tile_width(n, sizeof(float), m);
    const std::size_t rows = static_cast<std::size_t>(n);

    std::mt19937 gen(1);
    std::normal_distribution<float> normal;
    Array y(rows * m), out(rows * m);
    for (std::size_t i = 0; i < rows * m; ++i) y.data[i] = normal(gen);

    // In cache: two tiles of real input, one thread.
    const std::size_t mc = 2 * tw;
    Array yc(rows * mc), oc(rows * mc);
    for (std::size_t i = 0; i < rows; ++i) std::copy(y.data + i * m, y.data + i * m + std::min(mc, m), yc.data + i * mc);
    std::vector<double> cache_scratch(plan_buffer_size(n, tw));
    const int inner = 20;

    // One tile-sized block of real input, and one for output, that stay in
    // cache, for the cached variants (they run on one thread).
    Array in_block(rows * tw), out_block(rows * tw);
    for (std::size_t i = 0; i < rows; ++i) std::copy(y.data + i * m, y.data + i * m + tw, in_block.data + i * tw);

    // Full size, the library's walk (csrc/driver/linear_maps.hpp SplinePlan::run_banded).
    enum class Src { kMemory, kInputCached, kOutputCached };
    // The walk a full-size run calls: the dispatcher's (nullptr), or one kernel's
    // walk directly (the previous walk, EvalWork::kFullUnfused, on the buffer
    // placed as the dispatcher places it).
    using TileFn = void (*)(const PlanTables&, const float*, std::size_t, float*, std::size_t, std::size_t,
                            std::size_t, double*, bool, std::size_t);
    TileFn walk = nullptr;
    auto full = [&](int threads, Src src) {
        const std::size_t lead = (src == Src::kOutputCached) ? 0 : columns_to_line(out.data, m);
        const std::size_t ntiles = (lead ? 1 : 0) + (m - lead + tw - 1) / tw;
        ThreadPool::instance().parallel_for(ntiles, threads, [&](std::size_t t) {
            const std::size_t c0 = (lead && t == 0) ? 0 : lead + (lead ? t - 1 : t) * tw;
            const std::size_t wt = (lead && t == 0) ? lead : std::min(tw, m - c0);
            double* kbuf = scratch(plan_buffer_size(n, tw)).data();
            switch (src) {
                case Src::kMemory:
                    if (walk)
                        walk(p, y.data, m, out.data, m, c0, wt, placed_buffer(kbuf, y.data + c0), true, tw);
                    else
                        plan_tile_f32(p, y.data, m, out.data, m, c0, wt, kbuf, true, tw);
                    break;
                case Src::kInputCached:
                    plan_tile_f32(p, in_block.data, tw, out.data + c0, m, 0, wt, kbuf, true, 0);
                    break;
                case Src::kOutputCached:
                    plan_tile_f32(p, y.data + c0, m, out_block.data, tw, 0, wt, kbuf, false, tw);
                    break;
            }
        });
    };
    ThreadPool::instance().set_num_threads(2);
    for (Src s : {Src::kMemory, Src::kInputCached, Src::kOutputCached}) full(1, s);  // first touch

    // Every measurement once per round, rounds interleaved, the best kept: a
    // busy spell on this shared machine then slows all of them alike. Each
    // timed call follows an untimed one of its own kind: a call after another
    // kind (a core left idle, other caches) runs slower and is not what a loop
    // calling the plan sees.
    struct Measure {
        std::string kernel;
        const char* name;
        std::function<void()> run;
        double divisor, best;
    };
    std::vector<Measure> measures;
    std::vector<std::string> kernels;
    auto add_cache_measures = [&](const std::string& kernel, auto walk) {
        using K = decltype(walk);
        kernels.push_back(kernel);
        double* sc = cache_scratch.data();
        auto add = [&](const char* name, std::function<void()> run) {
            measures.push_back({kernel, name, std::move(run), double(inner), 1e300});
        };
        add("cache_forward_s", [&, sc] { sweep_forward<K>(p, yc.data, mc, tw, sc, inner); });
        add("cache_forward_back_s", [&, sc] { sweep_tiles<K, EvalWork::kNone>(p, yc.data, oc.data, mc, tw, sc, inner); });
        add("cache_tile_s", [&, sc] { sweep_tiles<K, EvalWork::kFull>(p, yc.data, oc.data, mc, tw, sc, inner); });
        if (K::kWideRegisters)
            add("cache_tile_unfused_s",
                [&, sc] { sweep_tiles<K, EvalWork::kFullUnfused>(p, yc.data, oc.data, mc, tw, sc, inner); });
        if (K::template f32_eval<float, EvalWork::kFull>)
            add("cache_tile_f64eval_s",
                [&, sc] { sweep_tiles<K, EvalWork::kFullF64Eval>(p, yc.data, oc.data, mc, tw, sc, inner); });
        add("cache_eval_arith_s",
            [&, sc] { sweep_tiles<K, EvalWork::kArithmetic>(p, yc.data, oc.data, mc, tw, sc, inner); });
        add("cache_eval_arith_store_s",
            [&, sc] { sweep_tiles<K, EvalWork::kArithmeticStore>(p, yc.data, oc.data, mc, tw, sc, inner); });
        add("cache_eval_loads_store_s",
            [&, sc] { sweep_tiles<K, EvalWork::kLoadsStore>(p, yc.data, oc.data, mc, tw, sc, inner); });
    };
    if (wants("avx2")) add_cache_measures("avx2", kernels_avx2::Walk{});
    bool has512 = false;
#if defined(LETCC_HAVE_AVX512_KERNEL)
    try {
        set_plan_kernel("avx512");
        has512 = true;
    } catch (const std::exception&) {
    }
    if (has512 && wants("avx512")) add_cache_measures("avx512", kernels_avx512::Walk{});
#endif
    // The full-size walks run through the dispatcher, with the kernel chosen
    // before each call (set_plan_kernel).
    for (const std::string& k : kernels) {
        auto with = [k](std::function<void()> f) {
            return [k, f] {
                set_plan_kernel(k);
                f();
            };
        };
        measures.insert(measures.end(), {
            {k, "full_1t_s", with([&] { full(1, Src::kMemory); }), 1.0, 1e300},
            {k, "full_2t_s", with([&] { full(2, Src::kMemory); }), 1.0, 1e300},
            {k, "in_cached_1t_s", with([&] { full(1, Src::kInputCached); }), 1.0, 1e300},
            {k, "out_cached_1t_s", with([&] { full(1, Src::kOutputCached); }), 1.0, 1e300}});
    }
#if defined(LETCC_HAVE_AVX512_KERNEL)
    if (has512 && wants("avx512"))
        measures.push_back({"avx512", "full_2t_unfused_s", [&] {
                                walk = &kernels_avx512::Walk::plan_tile<float, EvalWork::kFullUnfused>;
                                full(2, Src::kMemory);
                                walk = nullptr;
                            }, 1.0, 1e300});
    if (has512 && wants("avx512") && kernels_avx512::Walk::f32_eval<float, EvalWork::kFull>)
        measures.push_back({"avx512", "full_2t_f64eval_s", [&] {
                                walk = &kernels_avx512::Walk::plan_tile<float, EvalWork::kFullF64Eval>;
                                full(2, Src::kMemory);
                                walk = nullptr;
                            }, 1.0, 1e300});
#endif
    for (int r = 0; r < rounds; ++r)
        for (auto& mm : measures) {
            mm.run();
            mm.best = std::min(mm.best, seconds(mm.run) / mm.divisor);
        }
    set_plan_kernel("auto");
    const double ghz = clock_ghz(std::min(rounds, 5));
    const double fma256 = fma256_per_second(std::min(rounds, 5)) * 1e-9 / ghz;
    double fma512 = 0.0, ghz512 = 0.0;
#if defined(LETCC_HAVE_AVX512_KERNEL)
    if (has512) {
        fma512 = fma512_per_second(std::min(rounds, 5)) * 1e-9 / ghz;
        ghz512 = clock_ghz_512(std::min(rounds, 5));
    }
#endif

    std::printf("{\"avx2\": true, \"avx512\": %s, \"n\": %ld, \"m\": %zu, \"tile_width\": %zu, "
                "\"clock_ghz\": %.4f, \"clock_ghz_512\": %.4f, \"fma256_per_cycle\": %.3f, "
                "\"fma512_per_cycle\": %.3f, \"cache_columns\": %zu, \"kernels\": {",
                has512 ? "true" : "false", static_cast<long>(n), m, tw, ghz, ghz512, fma256, fma512, mc);
    for (std::size_t ki = 0; ki < kernels.size(); ++ki) {
        std::printf("%s\"%s\": {", ki ? ", " : "", kernels[ki].c_str());
        bool first = true;
        for (const auto& mm : measures) {
            if (mm.kernel != kernels[ki]) continue;
            std::printf("%s\"%s\": %.6e", first ? "" : ", ", mm.name, mm.best);
            first = false;
        }
        std::printf("}");
    }
    std::printf("}}\n");
    return 0;
#endif
}
