// The spline locator's one pass over the answers (letcc.codes.robust): the
// scores of locator.hpp for n answers (any n rows of a row-major (rows x m)
// array, in knot order) from the detection spline's Reinsch factors, in
// O(n m), over column tiles and threads. No Python here: csrc/bindings.cpp
// converts arrays, releases the GIL and calls locator_scores; the C++ tests
// (csrc/test/) call it directly.
//
// Deterministic: each tile's sums are formed in a fixed order (locator_kernel.hpp)
// and the tiles' sums added in tile order on the calling thread, and the tiles
// depend only on (n, m, the element type): the same scores bit for bit
// whatever the thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../dense_kernel.hpp"
#include "../dispatch.hpp"
#include "../locator.hpp"
#include "../locator_rescore.hpp"
#include "../plan.hpp"
#include "parallel.hpp"

namespace letcc {
namespace driver {

// A decode made in the locator's pass (letcc.codes.robust: a clean round's
// estimates without a second read of the answers): out (q x m, row-major) =
// A (q x n, row-major) times the n rows the pass scores, with the dense
// kernel on the tiles the pass has in cache (dense_tile_rows), so the same
// numbers bit for bit as DenseMap::run<T> on those rows.
template <class T>
struct PassDecode {
    const T* A = nullptr;       // null: no decode
    std::int64_t q = 0;
    T* out = nullptr;
};

// sums (locator_sums_size(n, pairs)) of the rows rows[0 .. n) of m elements
// each, for the spline whose factor and tables are f, p (n knots); with
// dec.A, also dec's decode of those rows.
template <class T>
void locator_sums(const ReinschFactor& f, const PlanTables& p, const T* const* rows, std::size_t m, int threads,
                  double* sums, bool pairs = false, const PassDecode<T>& dec = {}) {
    const std::int64_t n = p.n;
    const std::size_t ns = locator_sums_size(n, pairs);
    for (std::size_t i = 0; i < ns; ++i) sums[i] = 0.0;
    if (m == 0 || n < 2) return;
    const LocatorCoeffs c = locator_coeffs(f);
    const std::size_t tw = tile_width(n, sizeof(T), m);
    const std::size_t ntiles = (m + tw - 1) / tw;
    std::vector<double> part(ntiles * ns);
    for_each_tile(m, tw, m * static_cast<std::size_t>(n), threads, [&](std::size_t c0, std::size_t w) {
        double* buf = tls_scratch<double>(locator_buffer_size(n, w));
        // each thread runs a contiguous stretch of tiles (thread_pool.hpp):
        // its next tile is the adjacent one
        locator_tile(p, c, rows, c0, w, buf, part.data() + (c0 / tw) * ns, c0 + 2 * tw <= m ? tw : 0, pairs);
        if (dec.A == nullptr) return;
        // the tile's columns again, while in cache (buf is free now: the pack may reuse it)
        T* pack = tls_scratch<T>(static_cast<std::size_t>(n) * kernels::kDenseTile);
        for (std::size_t d0 = c0; d0 < c0 + w; d0 += kernels::kDenseTile)
            dense_tile_rows(dec.A, dec.q, n, rows, dec.out, m, d0, std::min(kernels::kDenseTile, c0 + w - d0), pack);
    });
    for (std::size_t t = 0; t < ntiles; ++t)
        for (std::size_t i = 0; i < ns; ++i) sums[i] += part[t * ns + i];
}

// s and loo (n each) of the rows rows[0 .. n): locator.hpp's scores, omd
// (n) = 1 - H_ii of the detection spline. pair_inv (n - 1 rows of 4, the
// 2 x 2 (I - H_PP)^-1 of each adjacent pair) not null: also the pair scores
// pair (n - 1) in the same pass (locator_pair_scores_from_sums). sums_out
// not null: the pass's sums too (locator_sums_size(n, pairs)), for the
// rescoring after an erasure (letcc.codes.robust).
template <class T>
void locator_scores(const ReinschFactor& f, const PlanTables& p, const T* const* rows, std::size_t m,
                    const double* omd, int threads, double* s, double* loo, const double* pair_inv = nullptr,
                    double* pair = nullptr, double* sums_out = nullptr, const PassDecode<T>& dec = {}) {
    const std::size_t n = static_cast<std::size_t>(p.n);
    const bool pairs = pair_inv != nullptr;
    std::vector<double> sums(locator_sums_size(p.n, pairs));
    locator_sums<T>(f, p, rows, m, threads, sums.data(), pairs, dec);
    locator_scores_from_sums(n, sums.data(), omd, s, loo);
    if (pairs) locator_pair_scores_from_sums(n, sums.data(), pair_inv, pair);
    if (sums_out != nullptr) std::copy(sums.begin(), sums.end(), sums_out);
}

// The scores (s, loo and, with pairs, pair) of the answers kept after
// erasing `erased` (positions into rows[0 .. n)) from the n answers a first
// pass scored, without another scoring pass (locator_rescore.hpp): first is
// that pass's sums (locator_sums_size(n, pairs)), H the detection spline's
// hat matrix (n x n, row-major). The outputs have n - |erased| entries
// (pair one fewer). Deterministic as locator_sums (tiles of a fixed width,
// their sums added in tile order). False, outputs untouched, where the
// identity would lose float64 accuracy (LocatorRescore::accurate) or a cross
// product or distance the pass forms is not finite (an erased answer
// holding NaN or inf, which the identity cannot take out again).
template <class T>
bool locator_rescore(const double* H, const double* first, const T* const* rows, std::size_t n, std::size_t m,
                     const std::vector<std::size_t>& erased, bool pairs, int threads, double* s, double* loo,
                     double* pair) {
    const LocatorRescore r = locator_rescore_plan(n, H, erased, pairs);
    if (!r.accurate) return false;
    const std::size_t nx = r.cross.size(), nd = r.da.size(), no = n * nx + nd;
    std::vector<double> total(no, 0.0);
    if (m > 0) {
        const std::size_t tw = tile_width(static_cast<std::int64_t>(n), sizeof(T), m);
        const std::size_t ntiles = (m + tw - 1) / tw;
        std::vector<double> part(ntiles * no);
        for_each_tile(m, tw, m * n * (nx + 1), threads, [&](std::size_t c0, std::size_t w) {
            double* buf = tls_scratch<double>(rescore_buffer_size(n, nx, nd));
            rescore_tile(r.ihx.data(), nx, n, rows, r.da.data(), r.db.data(), nd, c0, w, buf,
                         part.data() + (c0 / tw) * no, c0 + 2 * tw <= m ? tw : 0);
        });
        for (std::size_t t = 0; t < ntiles; ++t)
            for (std::size_t i = 0; i < no; ++i) total[i] += part[t * no + i];
    }
    for (double v : total)
        if (!std::isfinite(v)) return false;
    const std::vector<double> sums = locator_rescored_sums(r, H, first, total.data(), total.data() + n * nx, pairs);
    locator_scores_from_sums(r.nk, sums.data(), r.omd.data(), s, loo);
    if (pairs) {
        std::vector<double> pinv(r.nk >= 1 ? 4 * (r.nk - 1) : 0);
        pair_inverses(r.nk, r.omd.data(), r.upper.data(), r.lower.data(), pinv.data());
        locator_pair_scores_from_sums(r.nk, sums.data(), pinv.data(), pair);
    }
    return true;
}

}  // namespace driver
}  // namespace letcc
