// A precomputed smoothing plan: fit on fixed knots (x, w, lam) and evaluate at
// fixed points. Applying it to y (n x m, row-major) is three streaming passes
// over a tile of columns (forward substitution fused with Q^T y, back
// substitution, evaluation), with the tile's gamma rows held in a float64
// buffer small enough to stay in L2. y is read from memory once and the output
// written once; the column tiles are independent, so threads split them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "eval_coeffs.hpp"
#include "reinsch.hpp"

namespace letcc {

// Everything a kernel needs, flat and padded so the inner loops have no
// branches: knot-indexed arrays have two extra zero entries at the end.
struct PlanTables {
    std::int64_t n = 0, q = 0;
    std::vector<double> qa, qb, qc, l1, l2, inv_d;  // size n + 2
    std::vector<std::int64_t> k;                   // size q
    std::vector<std::int64_t> k1;                  // min(k + 1, n - 1)
    std::vector<double> cy;                        // 2 per query
    std::vector<double> cgam;                      // 4 per query, gamma rows k-1 .. k+2
    // Queries grouped by interval, so the kernel can evaluate them during the
    // back substitution while their gamma rows are still in L1: the queries
    // with k == kk are order[by_k[kk] .. by_k[kk + 1]).
    std::vector<std::int64_t> order, by_k;          // size q, n + 1
    // Per query: |cy0| + |cy1| <= 1 (value queries inside the knots and at
    // them, second derivatives), so its y terms are a convex combination of two
    // input rows and may be formed in float32 arithmetic (kernels_avx512.hpp's
    // float32 evaluation; the error bound is there). Not for first derivatives
    // (+-1/h) or extrapolation (1 + 2 dx/h): their y terms cancel each other.
    std::vector<std::uint8_t> convex_y;             // size q
};

// The largest |cy0| + |cy1| that PlanTables::convex_y admits: 1 and the
// rounding of (x_{k+1} - t) / h + (t - x_k) / h.
constexpr double kConvexYWeight = 1.0 + 1e-12;

inline PlanTables make_plan_tables(const ReinschFactor& f, const double* at, std::size_t q, int nu) {
    PlanTables p;
    p.n = static_cast<std::int64_t>(f.n);
    p.q = static_cast<std::int64_t>(q);
    auto pad = [&](const std::vector<double>& v) {
        std::vector<double> out(f.n + 2, 0.0);
        for (std::size_t i = 0; i < v.size() && i < f.n; ++i) out[i] = v[i];
        return out;
    };
    p.qa = pad(f.qa); p.qb = pad(f.qb); p.qc = pad(f.qc);
    p.l1 = pad(f.l1); p.l2 = pad(f.l2); p.inv_d = pad(f.inv_d);
    p.k.resize(q); p.k1.resize(q); p.cy.resize(2 * q); p.cgam.resize(4 * q); p.convex_y.resize(q);
    for (std::size_t j = 0; j < q; ++j) {
        const PlanRow r = plan_row(f, at[j], nu);
        p.k[j] = r.k;
        p.k1[j] = (r.k + 1 < p.n) ? r.k + 1 : p.n - 1;
        p.cy[2 * j] = r.cy0;
        p.cy[2 * j + 1] = r.cy1;
        p.convex_y[j] = std::abs(r.cy0) + std::abs(r.cy1) <= kConvexYWeight;
        for (int t = 0; t < 4; ++t) p.cgam[4 * j + t] = r.cgam[t];
    }
    p.by_k.assign(f.n + 1, 0);
    for (std::size_t j = 0; j < q; ++j) p.by_k[static_cast<std::size_t>(p.k[j]) + 1]++;
    for (std::size_t kk = 0; kk < f.n; ++kk) p.by_k[kk + 1] += p.by_k[kk];
    p.order.resize(q);
    std::vector<std::int64_t> fill(p.by_k.begin(), p.by_k.end() - 1);
    for (std::size_t j = 0; j < q; ++j) p.order[fill[static_cast<std::size_t>(p.k[j])]++] = static_cast<std::int64_t>(j);
    return p;
}

// Gamma buffer layout for one tile: row r holds knot r - 1 (r = 0 .. n + 2),
// so that rows for knots -1, 0, n - 1, n are zero and the kernels never branch.
inline std::size_t gamma_rows(std::int64_t n) { return static_cast<std::size_t>(n) + 3; }

// The widest hand-written kernel's vectors (AVX-512: 8 doubles).
constexpr std::size_t kMaxLanes = 8;

// Buffer rows of a tile tw columns wide are padded_width(tw, lanes) doubles
// apart in a kernel of `lanes`-double vectors (a power of two, at most
// kMaxLanes), so it sees every row aligned to its vectors.
inline std::size_t padded_width(std::size_t tw, std::size_t lanes) { return (tw + lanes - 1) & ~(lanes - 1); }

// The rows knot i's forward substitution reads (input rows i - 1 .. i + 1) and
// writes (its gamma-buffer row; rows bs doubles apart, row r = knot r - 1) in
// a tile at column c0: z = qa y[i-1] + qb y[i] + qc y[i+1] - l1 z[-bs] - l2 z[-2 bs].
template <class T>
struct KnotRows {
    const T* ym;
    const T* y0;
    const T* yp;
    double* z;
};

template <class T>
inline KnotRows<T> knot_rows(std::int64_t i, const T* y, std::size_t ldy, std::size_t c0, std::size_t bs,
                             double* buf) {
    const T* ym = y + static_cast<std::size_t>(i - 1) * ldy + c0;
    return {ym, ym + ldy, ym + 2 * ldy, buf + static_cast<std::size_t>(i + 1) * bs};
}

// Where one query's evaluation reads and writes for a tile at column c0 whose
// gamma rows are bs doubles apart: out[qi] = c[0] y[k] + c[1] y[k+1] +
// sum_t c[2 + t] gamma[k-1+t].
template <class T>
struct QueryRows {
    const T* ya;        // input row k
    const T* yb;        // input row min(k + 1, n - 1)
    const double* g0;   // gamma row of knot k - 1 (knot k - 1 + t: g0 + t * bs)
    T* o;               // output row qi
    double c[6];        // cy0, cy1, cgam[0..3]
};

template <class T>
inline QueryRows<T> query_rows(const PlanTables& p, std::int64_t qi, const T* y, std::size_t ldy, T* out,
                                std::size_t ldo, std::size_t c0, std::size_t bs, const double* buf) {
    const std::int64_t k = p.k[qi];
    const double* cg = &p.cgam[4 * qi];
    return {y + static_cast<std::size_t>(k) * ldy + c0,
            y + static_cast<std::size_t>(p.k1[qi]) * ldy + c0,
            buf + static_cast<std::size_t>(k) * bs,
            out + static_cast<std::size_t>(qi) * ldo + c0,
            {p.cy[2 * qi], p.cy[2 * qi + 1], cg[0], cg[1], cg[2], cg[3]}};
}

// Where the dispatcher puts the gamma buffer inside the caller's scratch: this
// many bytes past the tile's first input element, modulo 4 KiB (and 64-byte
// aligned). The passes load float32 input 16 bytes per step and store float64
// rows 32 bytes per step, so some stores come to match the low 12 address bits
// of loads a few steps later ("4K aliasing": the CPU holds such loads back);
// where that happens depends on the buffer's place relative to the input. With
// the buffer wherever the allocator left it, n = q = 64, m = 150528 float32
// took 9.4-18 ms on one thread depending on that place (C++ harness, five input
// placements x 32 buffer placements); this offset ran at the fast end (9.0-9.4
// ms) for every input placement measured.
constexpr std::size_t kBufferLeadBytes = 1280;

// The gamma buffer inside a caller's scratch of plan_buffer_size doubles:
// 64-byte aligned and kBufferLeadBytes past the tile's first input element
// modulo 4 KiB.
inline double* placed_buffer(double* buf, const void* tile_input) {
    const std::uintptr_t base = (reinterpret_cast<std::uintptr_t>(buf) + 63) & ~std::uintptr_t(63);
    const std::uintptr_t want = (reinterpret_cast<std::uintptr_t>(tile_input) + kBufferLeadBytes) & 4095;
    return reinterpret_cast<double*>(base + (((want - base) & 4095) & ~std::uintptr_t(63)));
}

// Columns before the first 64-byte line boundary of `out` (0 when it is on one,
// or when its rows are not whole elements apart from a line: then no shift
// lines up). Banded plan tiles start there, so every tile's output rows are
// whole cache lines: a tile edge inside a line leaves partial lines of
// non-temporal stores at both tiles' edges. Measured at n = q = 64, m = 150528,
// float32, 2 threads, numpy's default placement (16 bytes past a page): 5.7 ms
// with the edges inside lines, 5.3 ms on line boundaries.
template <class T>
std::size_t columns_to_line(const T* out, std::size_t m) {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(out);
    if (a % sizeof(T) != 0 || (m * sizeof(T)) % 64 != 0) return 0;
    return ((64 - a % 64) % 64) / sizeof(T);
}

// Doubles of scratch a caller gives plan_tile_f64/f32 for a tile of tw columns
// (any alignment: the dispatcher places the buffer inside, see kBufferLeadBytes).
// Rows are sized for the widest kernel's padding (kMaxLanes doubles).
inline std::size_t plan_buffer_size(std::int64_t n, std::size_t tw) {
    return gamma_rows(n) * padded_width(tw, kMaxLanes) + (4096 + 64) / sizeof(double);
}

// Columns per tile for the generic kernel (kernels.hpp): the float64 gamma
// buffer plus the input rows of a tile stay within about half of a 512 KiB L2,
// rounded to a multiple of 32 columns.
inline std::size_t tile_width(std::int64_t n, std::size_t elem_size, std::size_t m) {
    const std::size_t bytes_per_col = (gamma_rows(n)) * 8 + static_cast<std::size_t>(n) * elem_size;
    std::size_t tw = (192 * 1024) / (bytes_per_col ? bytes_per_col : 1);
    tw = tw / 32 * 32;
    if (tw < 32) tw = 32;
    if (tw > 4096) tw = 4096;
    if (tw > m) tw = m;
    return tw;
}

}  // namespace letcc

namespace letcc {

// Columns per tile for the AVX2 kernel (kernels_avx2.hpp): the L2 rule above
// while it gives at least 128 columns (small n), else 256 columns with the
// gamma buffer kept under 4 MiB. The kernel's passes stream through the buffer
// row by row, so for large n long contiguous rows matter more than staying in
// L2. Measured with a C++ harness around this kernel, 2 threads, float32,
// m = 150528: n = 256 ran 1.5-2x faster with 128-256 columns than with the L2
// rule's 32; n = 1024 (m = 20480) was fastest at 256 (buffer in L3), 1.35x
// faster than at 128; at n = 16 and 64 the L2 rule's 896 and 224 were as fast
// as 256 or faster (float64, n = 64: 160 beat 256 by 3-10%).
// bench/results/spline.md's n = 256 rows compare it with the generic kernel.
inline std::size_t tile_width_avx2(std::int64_t n, std::size_t elem_size, std::size_t m) {
    const std::size_t l2 = tile_width(n, elem_size, std::size_t(-1));
    std::size_t tw = l2;
    if (l2 < 128) {
        tw = (std::size_t(4) << 20) / (gamma_rows(n) * 8);
        tw = std::max<std::size_t>(32, std::min<std::size_t>(256, tw / 32 * 32));
    }
    return std::min(tw, m);
}

}  // namespace letcc
