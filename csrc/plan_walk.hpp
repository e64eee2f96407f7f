// What the hand-written plan kernels (kernels_avx2.hpp, kernels_avx512.hpp)
// share besides their walk (plan_walk_isa.hpp): the next tile's prefetch
// pacing, the stores' 4K-aliasing and streaming rules, and the SIMD-traits
// interface each ISA implements.
//
// The walk is one template, PlanWalk<S>, over a traits type S:
//
//   using V = ...;                        a vector of kLanes float64
//   using Mask = ...;                     which lanes of a row's partial last vector
//   static constexpr std::size_t kLanes;  4 (AVX2) or 8 (AVX-512), at most kMaxLanes
//   static V set1(double);                broadcast
//   static V mul(V a, V b);               a * b
//   static V fma(V a, V b, V c);          a * b + c, one rounding
//   static V load(const double*);         gamma buffer (aligned to the vector)
//   static void store(double*, V);
//   static V loadu(const T*);             an input row, float32 widened exactly
//   static void storeu(T*, V);            an output row, float32 rounded to nearest
//   static Mask lanes(std::size_t r);     lanes [0, r), 0 < r < kLanes
//   static V loadu(const T*, Mask);       masked lanes read as 0, never touched
//   static void storeu(T*, V, Mask);      masked lanes left as they are
//   static void stream(T*, V, unsigned wide);  non-temporal, p aligned to `wide`
//                                         bytes (16, 32 or 64; see stream_width)
//   static constexpr int kRegisters;      vector registers (16 or 32): with 32 the
//                                         walk runs its wider loops
//                                         (PlanWalk::kWideRegisters)
//   static constexpr bool kFloat32YTerms; whether float32 data gets the float32
//                                         evaluation (PlanWalk::f32_eval); then also
//   using F = ...;                        kLanes float32 (one V's columns), and
//   static F set1f(float); static F narrow(V);  static F fmaf(F, F, F);
//   static F loadf(const float*[, Mask]); static void storef(float*, F[, Mask]);
//   static void streamf(float*, F, unsigned wide);
//
// for T = float and double. Every one of them is always-inline and compiled
// for the ISA (target attribute). So is every function of the walk: GCC and
// Clang refuse to inline a target-specific always-inline function into one
// compiled without that target, and a target attribute cannot depend on a
// template parameter, so the walk's text (plan_walk_isa.hpp) is included once
// per ISA, inside that ISA's namespace and with LETCC_WALK_FN naming its
// target (as Highway's foreach_target does). One source, one template; each
// ISA gets its own compiled copy and nothing is compiled for a wider ISA than
// the CPU the dispatcher checked.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "plan.hpp"

namespace letcc {
namespace plan_walk {

// Issues the next tile's prefetches a few lines at a time, row by row. The
// evaluation loop issues one line whenever its column counter has no bits in
// common with eval_mask (every (eval_mask + 1) / lanes vectors); every
// back-substitution row issues back_lines more (what the evaluation has too
// few vectors for). No target attribute: it inlines into every ISA's walk.
struct PrefetchCursor {
    const char* base = nullptr;
    std::size_t stride = 0, row_bytes = 0, b = 0;
    std::int64_t rows = 0, r = 0;
    std::size_t eval_mask = ~std::size_t(0), back_lines = 0;
    __attribute__((always_inline)) inline void step(std::size_t lines) {
        for (std::size_t t = 0; t < lines && r < rows; ++t) {
            _mm_prefetch(base + static_cast<std::size_t>(r) * stride + b, _MM_HINT_T1);
            b += 64;
            if (b >= row_bytes) { b = 0; ++r; }
        }
    }
};

// Paces the next tile's `lines` prefetches: one every `interval` vectors of the
// evaluation loop (q queries of `vectors` vectors of `lanes` columns each), the
// largest interval (a power of two, at most 32) at which the evaluation still
// issues them all; whatever it cannot issue (few queries) goes to the back
// substitution's `back_rows` rows. Spread like this the prefetches leave the
// passes' own loads alone. Against bursts of about 30 lines per
// back-substitution step (the previous pacing; C++ harness, AVX2, interleaved
// runs, best of 10-40, 1 / 2 threads): n = q = 64, m = 150528, float32
// 0.91-0.93x / 0.83-0.94x, float64 0.89x / 0.92x; n = q = 256 float32 0.91x /
// 0.94x, float64 0.81x / 0.95x; n = 64, q = 16 0.94x / 1.0x. One line every 2
// vectors instead of 4 (n = q = 64, float32) gained only 0-7%.
inline void set_prefetch_pace(PrefetchCursor& pc, std::int64_t q, std::size_t vectors, std::size_t lanes,
                              std::size_t lines, std::size_t back_rows) {
    const std::size_t queries = static_cast<std::size_t>(q);
    std::size_t interval = 0, issued = 0;
    if (vectors > 0 && queries > 0) {
        interval = 1;
        while (interval < 32 && queries * ((vectors + 2 * interval - 1) / (2 * interval)) >= lines) interval *= 2;
        pc.eval_mask = lanes * interval - 1;  // the column counter steps by `lanes`
        issued = queries * ((vectors + interval - 1) / interval);
    }
    pc.back_lines = issued >= lines ? 0 : (lines - issued) / back_rows + 1;
}

// Rows of a tile shorter than this are never streamed: with 128-byte rows
// (n = 256 under the old 32-column tiles) streaming measured 10-30% slower.
constexpr std::size_t kMinStreamRowBytes = 512;

// Whether a store to `dst` is a few lines ahead of `src` modulo 4 KiB. Loads
// from src then match the low 12 address bits of stores to dst made a few
// iterations earlier, and the CPU holds each such load back as if it depended
// on the store ("4K aliasing"): with the output 16 bytes past the input modulo
// 4 KiB, n = q = 64, m = 150528 float32 ran 1.7x slower.
inline bool store_runs_ahead_of(const void* dst, const void* src) {
    const std::uintptr_t d = (reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) & 4095;
    return d != 0 && d <= 512;
}

// The largest of 64, 32, 16 bytes that p is aligned to (0: not even 16).
inline unsigned stream_width(const void* p) {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
    return (a % 64 == 0) ? 64u : (a % 32 == 0) ? 32u : (a % 16 == 0) ? 16u : 0u;
}

// What the evaluation loop does per vector: all of it (the library), or one
// part of its work for bench/kernel_passes.cpp, which takes the evaluation
// apart where it really runs (gamma rows just written, in L1):
//   kArithmetic       the multiply and five FMAs on operands held in registers
//                     (an empty asm keeps them opaque), result discarded;
//   kArithmeticStore  the same, converted to T and stored;
//   kLoadsStore       the six loads (the two input rows widened to float64)
//                     and the store, no arithmetic;
//   kNone             nothing (the walk is forward + back substitution);
//   kFullUnfused      all of it, on the walk as it was before its wide-register
//                     loops (PlanWalk::kWideRegisters: forward_four,
//                     back_two_fused): forward two knots per loop, every query
//                     in its own loop, float64 evaluation; for the harness to
//                     compare side by side;
//   kFullF64Eval      all of it on the library's walk, but with the float64
//                     evaluation for float32 data where the kernel has the
//                     float32 one (PlanWalk::f32_eval): the walk before it, for
//                     the harness to compare side by side.
// The parts (kArithmetic, kArithmeticStore, kLoadsStore) are those of kFull's
// evaluation, float32 or float64 as it is. Only kFull, kFullUnfused and
// kFullF64Eval evaluate the tail of a row.
enum class EvalWork { kFull, kArithmetic, kArithmeticStore, kLoadsStore, kNone, kFullUnfused, kFullF64Eval };

constexpr bool evaluates_all(EvalWork w) {
    return w == EvalWork::kFull || w == EvalWork::kFullUnfused || w == EvalWork::kFullF64Eval;
}

}  // namespace plan_walk
}  // namespace letcc
