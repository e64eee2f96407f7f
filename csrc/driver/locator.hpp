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

// The scores of the answers kept after one set of erasures (RescoreSets):
// ok false where the set declines (the identity would lose float64 accuracy,
// LocatorRescore::accurate, or a cross product or distance it needs is not
// finite: an erased answer holding NaN or inf, which the identity cannot take
// out again). s and loo have n - |erased| entries, pair one fewer (with pairs).
struct RescoredScores {
    bool ok = false;
    std::vector<double> s, loo, pair;
};

// The scores of the answers kept after erasing each of `sets` (positions
// into rows[0 .. n), as locator_rescore_plan takes them) from the n answers a
// first pass scored, without another scoring pass (locator_rescore.hpp):
// first is that pass's sums (locator_sums_size(n, pairs)), H the detection
// spline's hat matrix (n x n, row-major). Every set's cross products and
// distances come from ONE pass over the rows, against the union of the
// residual rows and answer pairs the sets need: the locator weighs several
// candidate erasures that share most of their answers (a pair choice's two
// or three pairs, the swap step's candidates), and a pass per candidate cost
// as many reads of the answers (bench/results/robust_decode.md). Deterministic
// as locator_sums (tiles of a fixed width, their sums added in tile order);
// a set's sums may differ in the last bits with the union it was formed in
// (the kernel groups residual rows by 4).
template <class T>
std::vector<RescoredScores> locator_rescore_sets(const double* H, const double* first, const T* const* rows,
                                                 std::size_t n, std::size_t m,
                                                 const std::vector<std::vector<std::size_t>>& sets, bool pairs,
                                                 int threads) {
    const std::size_t none = static_cast<std::size_t>(-1);
    std::vector<LocatorRescore> plans;
    plans.reserve(sets.size());
    for (const auto& e : sets) plans.push_back(locator_rescore_plan(n, H, e, pairs));
    // the union of the residual rows (X) and distances the accurate sets need
    std::vector<std::size_t> x_at(n, none), xs, da, db;
    std::vector<std::vector<std::size_t>> d_at;     // d_at[a]: (b, index) pairs
    d_at.resize(n);
    const auto dist_index = [&](std::size_t a, std::size_t b, bool add) {
        for (std::size_t k = 0; k + 1 < d_at[a].size(); k += 2)
            if (d_at[a][k] == b) return d_at[a][k + 1];
        if (!add) return none;
        d_at[a].push_back(b);
        d_at[a].push_back(da.size());
        da.push_back(a);
        db.push_back(b);
        return da.size() - 1;
    };
    for (const LocatorRescore& r : plans) {
        if (!r.accurate) continue;
        for (std::size_t x : r.cross)
            if (x_at[x] == none) {
                x_at[x] = xs.size();
                xs.push_back(x);
            }
        for (std::size_t t = 0; t < r.da.size(); ++t) dist_index(r.da[t], r.db[t], true);
    }
    const std::size_t nx = xs.size(), nd = da.size(), no = n * nx + nd;
    std::vector<double> ihx(nx * n);
    for (std::size_t x = 0; x < nx; ++x)
        for (std::size_t j = 0; j < n; ++j) ihx[x * n + j] = (j == xs[x] ? 1.0 : 0.0) - H[xs[x] * n + j];
    std::vector<double> total(no, 0.0);
    if (m > 0 && no > 0) {
        const std::size_t tw = tile_width(static_cast<std::int64_t>(n), sizeof(T), m);
        const std::size_t ntiles = (m + tw - 1) / tw;
        std::vector<double> part(ntiles * no);
        for_each_tile(m, tw, m * n * (nx + 1), threads, [&](std::size_t c0, std::size_t w) {
            double* buf = tls_scratch<double>(rescore_buffer_size(n, nx, nd));
            rescore_tile(ihx.data(), nx, n, rows, da.data(), db.data(), nd, c0, w, buf,
                         part.data() + (c0 / tw) * no, c0 + 2 * tw <= m ? tw : 0);
        });
        for (std::size_t t = 0; t < ntiles; ++t)
            for (std::size_t i = 0; i < no; ++i) total[i] += part[t * no + i];
    }
    std::vector<RescoredScores> out(sets.size());
    for (std::size_t c = 0; c < sets.size(); ++c) {
        const LocatorRescore& r = plans[c];
        if (!r.accurate) continue;
        // this set's products (u[j][x] = y_j . r_x over its own X) and distances
        const std::size_t cx = r.cross.size();
        std::vector<double> u(n * cx), dist(r.da.size());
        bool finite = true;
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t t = 0; t < cx; ++t) {
                u[j * cx + t] = total[j * nx + x_at[r.cross[t]]];
                finite = finite && std::isfinite(u[j * cx + t]);
            }
        for (std::size_t t = 0; t < r.da.size(); ++t) {
            dist[t] = total[n * nx + dist_index(r.da[t], r.db[t], false)];
            finite = finite && std::isfinite(dist[t]);
        }
        if (!finite) continue;
        const std::vector<double> sums = locator_rescored_sums(r, H, first, u.data(), dist.data(), pairs);
        RescoredScores& o = out[c];
        o.ok = true;
        o.s.resize(r.nk);
        o.loo.resize(r.nk);
        locator_scores_from_sums(r.nk, sums.data(), r.omd.data(), o.s.data(), o.loo.data());
        if (pairs) {
            std::vector<double> pinv(r.nk >= 1 ? 4 * (r.nk - 1) : 0);
            pair_inverses(r.nk, r.omd.data(), r.upper.data(), r.lower.data(), pinv.data());
            o.pair.resize(r.nk >= 1 ? r.nk - 1 : 0);
            locator_pair_scores_from_sums(r.nk, sums.data(), pinv.data(), o.pair.data());
        }
    }
    return out;
}

// The scores (s, loo and, with pairs, pair) of the answers kept after
// erasing `erased` (locator_rescore_sets with that one set) into s, loo and
// pair (n - |erased| entries, pair one fewer); false, outputs untouched,
// where the set declines.
template <class T>
bool locator_rescore(const double* H, const double* first, const T* const* rows, std::size_t n, std::size_t m,
                     const std::vector<std::size_t>& erased, bool pairs, int threads, double* s, double* loo,
                     double* pair) {
    const RescoredScores r = locator_rescore_sets<T>(H, first, rows, n, m, {erased}, pairs, threads)[0];
    if (!r.ok) return false;
    std::copy(r.s.begin(), r.s.end(), s);
    std::copy(r.loo.begin(), r.loo.end(), loo);
    if (pairs) std::copy(r.pair.begin(), r.pair.end(), pair);
    return true;
}

}  // namespace driver
}  // namespace letcc
