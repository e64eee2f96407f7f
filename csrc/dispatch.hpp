// Entry points of the compiled kernels, one per (operation, dtype). They are
// plain functions so that the dispatch file can build each one for several
// instruction sets and pick at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "locator.hpp"
#include "plan.hpp"

namespace letcc {

// out (q x m, ldo) = plan applied to y (n x m, ldy), columns [c0, c0 + tw).
// buf: plan_buffer_size(n, tw) doubles of scratch, any alignment.
// stream: non-temporal output stores; prefetch_cols: where this thread's next
// tile starts, relative to c0 (0: no prefetch). Runs the AVX-512 kernel
// (kernels_avx512.hpp) where the CPU has AVX-512F and VL, the AVX2 kernel
// (kernels_avx2.hpp) where it has AVX2 and FMA, else kernels.hpp.
void plan_tile_f64(const PlanTables& p, const double* y, std::size_t ldy, double* out, std::size_t ldo,
                   std::size_t c0, std::size_t tw, double* buf, bool stream = false,
                   std::size_t prefetch_cols = 0);
void plan_tile_f32(const PlanTables& p, const float* y, std::size_t ldy, float* out, std::size_t ldo,
                   std::size_t c0, std::size_t tw, double* buf, bool stream = false,
                   std::size_t prefetch_cols = 0);

// g and gamma (n x m) of the spline fitted to y, columns [c0, c0 + tw).
void fit_tile_f64(const PlanTables& p, const double* lam_over_w, const double* ih, const double* y,
                  std::size_t ldy, double* g, double* gam, std::size_t ldo, std::size_t c0,
                  std::size_t tw, double* buf);
void fit_tile_f32(const PlanTables& p, const double* lam_over_w, const double* ih, const float* y,
                  std::size_t ldy, float* g, float* gam, std::size_t ldo, std::size_t c0,
                  std::size_t tw, double* buf);

// out (q x m) = A (q x n, row-major) y (n x m), columns [c0, c0 + tw), tw <= kDenseTile;
// pack: n * kDenseTile elements of scratch.
void dense_tile_f64(const double* A, std::int64_t q, std::int64_t n, const double* y, std::size_t ldy,
                    double* out, std::size_t ldo, std::size_t c0, std::size_t tw, double* pack);
void dense_tile_f32(const float* A, std::int64_t q, std::int64_t n, const float* y, std::size_t ldy,
                    float* out, std::size_t ldo, std::size_t c0, std::size_t tw, float* pack);

// The same with row i of y at rows[i] (the spline locator's pass decoding the
// answers it scores): the same numbers as dense_tile on those rows.
void dense_tile_rows_f64(const double* A, std::int64_t q, std::int64_t n, const double* const* rows, double* out,
                         std::size_t ldo, std::size_t c0, std::size_t tw, double* pack);
void dense_tile_rows_f32(const float* A, std::int64_t q, std::int64_t n, const float* const* rows, float* out,
                         std::size_t ldo, std::size_t c0, std::size_t tw, float* pack);

// The spline locator's sums (locator.hpp) over columns [c0, c0 + tw) of the
// rows rows[0 .. n) (each a pointer to a row of m elements, any rows of the
// caller's array): sums (locator_sums_size(n, pairs) doubles) is overwritten
// with this tile's rss, d1, d2 and, with pairs, rr. buf:
// locator_buffer_size(n, tw) doubles, any alignment. prefetch_cols: where this thread's next tile starts, relative to
// c0 (0: no prefetch). Compiler-vectorised, built per instruction set like the dense
// kernel (locator_kernel.hpp).
void locator_tile_f64(const PlanTables& p, const LocatorCoeffs& c, const double* const* rows, std::size_t c0,
                      std::size_t tw, double* buf, double* sums, std::size_t prefetch_cols = 0,
                      bool pairs = false);
void locator_tile_f32(const PlanTables& p, const LocatorCoeffs& c, const float* const* rows, std::size_t c0,
                      std::size_t tw, double* buf, double* sums, std::size_t prefetch_cols = 0,
                      bool pairs = false);

// The locator's rescoring pass (locator_rescore.hpp, locator_kernel.hpp's
// rescore_tile) over columns [c0, c0 + tw): out (n nx + nd doubles) is
// overwritten with this tile's y_j . r_x and distances; buf:
// rescore_buffer_size(n, nx, nd) doubles (locator.hpp), whatever tw.
void rescore_tile_f64(const double* ihx, std::size_t nx, std::size_t n, const double* const* rows,
                      const std::size_t* da, const std::size_t* db, std::size_t nd, std::size_t c0, std::size_t tw,
                      double* buf, double* out, std::size_t prefetch_cols = 0);
void rescore_tile_f32(const double* ihx, std::size_t nx, std::size_t n, const float* const* rows,
                      const std::size_t* da, const std::size_t* db, std::size_t nd, std::size_t c0, std::size_t tw,
                      double* buf, double* out, std::size_t prefetch_cols = 0);

// The same entry points overloaded on the element type, so that code
// templated on T (csrc/driver/) calls one name and never branches on dtype.
inline void plan_tile(const PlanTables& p, const double* y, std::size_t ldy, double* out, std::size_t ldo,
                      std::size_t c0, std::size_t tw, double* buf, bool stream = false, std::size_t prefetch_cols = 0) {
    plan_tile_f64(p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols);
}
inline void plan_tile(const PlanTables& p, const float* y, std::size_t ldy, float* out, std::size_t ldo,
                      std::size_t c0, std::size_t tw, double* buf, bool stream = false, std::size_t prefetch_cols = 0) {
    plan_tile_f32(p, y, ldy, out, ldo, c0, tw, buf, stream, prefetch_cols);
}
inline void fit_tile(const PlanTables& p, const double* lam_over_w, const double* ih, const double* y,
                     std::size_t ldy, double* g, double* gam, std::size_t ldo, std::size_t c0, std::size_t tw,
                     double* buf) {
    fit_tile_f64(p, lam_over_w, ih, y, ldy, g, gam, ldo, c0, tw, buf);
}
inline void fit_tile(const PlanTables& p, const double* lam_over_w, const double* ih, const float* y,
                     std::size_t ldy, float* g, float* gam, std::size_t ldo, std::size_t c0, std::size_t tw,
                     double* buf) {
    fit_tile_f32(p, lam_over_w, ih, y, ldy, g, gam, ldo, c0, tw, buf);
}
inline void dense_tile(const double* A, std::int64_t q, std::int64_t n, const double* y, std::size_t ldy,
                       double* out, std::size_t ldo, std::size_t c0, std::size_t tw, double* pack) {
    dense_tile_f64(A, q, n, y, ldy, out, ldo, c0, tw, pack);
}
inline void dense_tile(const float* A, std::int64_t q, std::int64_t n, const float* y, std::size_t ldy,
                       float* out, std::size_t ldo, std::size_t c0, std::size_t tw, float* pack) {
    dense_tile_f32(A, q, n, y, ldy, out, ldo, c0, tw, pack);
}

inline void dense_tile_rows(const double* A, std::int64_t q, std::int64_t n, const double* const* rows, double* out,
                            std::size_t ldo, std::size_t c0, std::size_t tw, double* pack) {
    dense_tile_rows_f64(A, q, n, rows, out, ldo, c0, tw, pack);
}
inline void dense_tile_rows(const float* A, std::int64_t q, std::int64_t n, const float* const* rows, float* out,
                            std::size_t ldo, std::size_t c0, std::size_t tw, float* pack) {
    dense_tile_rows_f32(A, q, n, rows, out, ldo, c0, tw, pack);
}

inline void locator_tile(const PlanTables& p, const LocatorCoeffs& c, const double* const* rows, std::size_t c0,
                         std::size_t tw, double* buf, double* sums, std::size_t prefetch_cols = 0,
                         bool pairs = false) {
    locator_tile_f64(p, c, rows, c0, tw, buf, sums, prefetch_cols, pairs);
}
inline void locator_tile(const PlanTables& p, const LocatorCoeffs& c, const float* const* rows, std::size_t c0,
                         std::size_t tw, double* buf, double* sums, std::size_t prefetch_cols = 0,
                         bool pairs = false) {
    locator_tile_f32(p, c, rows, c0, tw, buf, sums, prefetch_cols, pairs);
}

inline void rescore_tile(const double* ihx, std::size_t nx, std::size_t n, const double* const* rows,
                         const std::size_t* da, const std::size_t* db, std::size_t nd, std::size_t c0, std::size_t tw,
                         double* buf, double* out, std::size_t prefetch_cols = 0) {
    rescore_tile_f64(ihx, nx, n, rows, da, db, nd, c0, tw, buf, out, prefetch_cols);
}
inline void rescore_tile(const double* ihx, std::size_t nx, std::size_t n, const float* const* rows,
                         const std::size_t* da, const std::size_t* db, std::size_t nd, std::size_t c0, std::size_t tw,
                         double* buf, double* out, std::size_t prefetch_cols = 0) {
    rescore_tile_f32(ihx, nx, n, rows, da, db, nd, c0, tw, buf, out, prefetch_cols);
}

// The instruction set the compiler-vectorised kernels (dense, fit, generic
// plan) run with: "avx512", "avx2" (with FMA) or "baseline" on x86-64, "native"
// elsewhere. The CPU's best unless set_kernel_isa chose another.
const char* kernel_isa();

// Run the compiler-vectorised kernels with another build: "auto" (the CPU's
// best), "baseline", "avx2" or "avx512" (std::invalid_argument where the CPU
// lacks it). For tests and benchmarks: every build stays reachable on one CPU.
void set_kernel_isa(const std::string& name);

// Choose the plan kernel: "auto" (the default: the widest hand-written kernel
// the active kernel_isa and the CPU allow), "generic" (kernels.hpp, built per
// instruction set), "avx2" or "avx512" (std::invalid_argument naming what the
// CPU lacks). For tests and benchmarks.
void set_plan_kernel(const std::string& name);
// The plan kernel in use: "avx512", "avx2" or "generic-<isa>".
std::string plan_kernel();
// Columns per tile for plan_tile_f64/f32 with the kernel in use (plan.hpp).
std::size_t plan_tile_width(std::int64_t n, std::size_t elem_size, std::size_t m);

}  // namespace letcc
