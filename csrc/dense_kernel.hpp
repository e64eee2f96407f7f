// Dense alternative to the banded kernels: out = A y with the plan's explicit
// (q x n) operator A. For small n it is cheaper than the three banded passes
// (n FMAs per output element, 8 float32 lanes per instruction, against ~14
// float64 FMAs plus conversions); the plan chooses per (n, dtype) from the
// crossover measured by bench/spline.py. A float32 operator is accurate here:
// the error is about n * eps32 * ||A||_inf * max|y| (||A||_inf is O(1) for a
// smoothing spline evaluated inside the knots), far below 1e-6 for small n;
// it is the banded *solve* that needs float64, not the map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__GNUC__)
#define LETCC_DENSE_INLINE inline __attribute__((always_inline))
#else
#define LETCC_DENSE_INLINE inline
#endif

namespace letcc {
namespace kernels {

// 32-byte vectors (8 floats or 4 doubles) through GCC/Clang vector extensions:
// the same source becomes AVX/AVX2 or SSE pairs depending on the clone.
template <class T>
struct Vec;
template <>
struct Vec<float> {
    typedef float type __attribute__((vector_size(32)));
    static constexpr int lanes = 8;
};
template <>
struct Vec<double> {
    typedef double type __attribute__((vector_size(32)));
    static constexpr int lanes = 4;
};

// Columns per dense tile (a multiple of the 16-column register block).
constexpr std::size_t kDenseTile = 256;

// out[qi, c0:c0+tw] = sum_i A[qi, i] * y[i, c0:c0+tw], A row-major (q x n),
// tw <= kDenseTile. `pack` holds n * kDenseTile elements of scratch.
//
// The tile of y is first copied into `pack`, block of 2 vectors by block, rows
// contiguous: y's rows are ldy elements apart (a different page for every row
// when m is large), so reading them block by block in the micro-kernel costs a
// TLB miss per row and FMA; packing reads each row as one contiguous run.
//
// row(i) gives row i of y (its element 0): dense_tile's rows ldy apart, or
// dense_tile_rows' pointers (the spline locator's pass, which decodes the
// answers it scores, csrc/driver/locator.hpp). Each output element is the sum
// over i in order 0..n-1 whatever the blocking, so any split of the columns
// into tiles gives the same numbers bit for bit.
template <class T, class RowAt>
LETCC_DENSE_INLINE void dense_tile_at(const T* A, std::int64_t q, std::int64_t n, RowAt row_at, T* out,
                                      std::size_t ldo, std::size_t c0, std::size_t tw, T* pack) {
    typedef typename Vec<T>::type V;
    constexpr std::size_t L = Vec<T>::lanes;
    constexpr std::size_t W = 2 * L;  // columns per register block
    const std::size_t full = tw / W * W;
    const std::size_t nb = full / W;
    // the leftover columns (tw not a multiple of W) go through the same
    // vector code in a block padded with zeros: every column is computed the
    // same way wherever the tile starts (a scalar loop here rounded an ulp
    // differently from the vectors)
    const std::size_t rest = tw - full;
    const std::size_t nbt = nb + (rest ? 1 : 0);
    // pack[b][i][0:W] = y[i, c0 + b*W : c0 + (b+1)*W] (the last block: rest columns, then 0)
    for (std::int64_t i = 0; i < n; ++i) {
        const T* row = row_at(i) + c0;
        for (std::size_t b = 0; b < nb; ++b)
            std::memcpy(pack + (b * static_cast<std::size_t>(n) + static_cast<std::size_t>(i)) * W, row + b * W,
                        W * sizeof(T));
        if (rest) {
            T* blk = pack + (nb * static_cast<std::size_t>(n) + static_cast<std::size_t>(i)) * W;
            std::memcpy(blk, row + full, rest * sizeof(T));
            for (std::size_t j = rest; j < W; ++j) blk[j] = T(0);
        }
    }
    // The micro-kernel over blocks [b0, b1) of the pack, block b's results at
    // o + (b - b0) * W (rows ldo apart): the full blocks straight into out,
    // the padded one into a scratch block whose valid columns are copied after.
    auto blocks = [&](std::size_t b0, std::size_t b1, T* o, std::size_t ldo_o) {
        std::int64_t qb = 0;
        // Blocks of 4 output rows x 2 vectors: 8 accumulators stay in registers.
        for (; qb + 4 <= q; qb += 4) {
            const T* a0 = A + (qb + 0) * n;
            const T* a1 = A + (qb + 1) * n;
            const T* a2 = A + (qb + 2) * n;
            const T* a3 = A + (qb + 3) * n;
            for (std::size_t b = b0; b < b1; ++b) {
                V s00 = {}, s01 = {}, s10 = {}, s11 = {}, s20 = {}, s21 = {}, s30 = {}, s31 = {};
                const T* yp = pack + b * static_cast<std::size_t>(n) * W;
                for (std::int64_t i = 0; i < n; ++i, yp += W) {
                    V v0, v1;
                    std::memcpy(&v0, yp, sizeof(V));
                    std::memcpy(&v1, yp + L, sizeof(V));
                    s00 += a0[i] * v0; s01 += a0[i] * v1;
                    s10 += a1[i] * v0; s11 += a1[i] * v1;
                    s20 += a2[i] * v0; s21 += a2[i] * v1;
                    s30 += a3[i] * v0; s31 += a3[i] * v1;
                }
                T* ob = o + (b - b0) * W;
                std::memcpy(ob + (qb + 0) * ldo_o, &s00, sizeof(V)); std::memcpy(ob + (qb + 0) * ldo_o + L, &s01, sizeof(V));
                std::memcpy(ob + (qb + 1) * ldo_o, &s10, sizeof(V)); std::memcpy(ob + (qb + 1) * ldo_o + L, &s11, sizeof(V));
                std::memcpy(ob + (qb + 2) * ldo_o, &s20, sizeof(V)); std::memcpy(ob + (qb + 2) * ldo_o + L, &s21, sizeof(V));
                std::memcpy(ob + (qb + 3) * ldo_o, &s30, sizeof(V)); std::memcpy(ob + (qb + 3) * ldo_o + L, &s31, sizeof(V));
            }
        }
        // Leftover rows (q not a multiple of 4).
        for (; qb < q; ++qb) {
            const T* a = A + qb * n;
            for (std::size_t b = b0; b < b1; ++b) {
                V s0 = {}, s1 = {};
                const T* yp = pack + b * static_cast<std::size_t>(n) * W;
                for (std::int64_t i = 0; i < n; ++i, yp += W) {
                    V v0, v1;
                    std::memcpy(&v0, yp, sizeof(V));
                    std::memcpy(&v1, yp + L, sizeof(V));
                    s0 += a[i] * v0; s1 += a[i] * v1;
                }
                std::memcpy(o + qb * ldo_o + (b - b0) * W, &s0, sizeof(V));
                std::memcpy(o + qb * ldo_o + (b - b0) * W + L, &s1, sizeof(V));
            }
        }
    };
    blocks(0, nb, out + c0, ldo);
    if (rest) {
        thread_local std::vector<T> last;
        if (last.size() < static_cast<std::size_t>(q) * W) last.resize(static_cast<std::size_t>(q) * W);
        blocks(nb, nb + 1, last.data(), W);
        for (std::int64_t r = 0; r < q; ++r)
            std::memcpy(out + static_cast<std::size_t>(r) * ldo + c0 + full, last.data() + static_cast<std::size_t>(r) * W,
                        rest * sizeof(T));
    }
}

template <class T>
LETCC_DENSE_INLINE void dense_tile(const T* A, std::int64_t q, std::int64_t n, const T* y, std::size_t ldy,
                                   T* out, std::size_t ldo, std::size_t c0, std::size_t tw, T* pack) {
    dense_tile_at<T>(A, q, n, [y, ldy](std::int64_t i) { return y + static_cast<std::size_t>(i) * ldy; }, out, ldo,
                     c0, tw, pack);
}

// The same with row i of y at rows[i].
template <class T>
LETCC_DENSE_INLINE void dense_tile_rows(const T* A, std::int64_t q, std::int64_t n, const T* const* rows, T* out,
                                        std::size_t ldo, std::size_t c0, std::size_t tw, T* pack) {
    dense_tile_at<T>(A, q, n, [rows](std::int64_t i) { return rows[i]; }, out, ldo, c0, tw, pack);
}

}  // namespace kernels
}  // namespace letcc
