// The local node gap around each output point, for a decoder that smooths
// more where its answering nodes are sparse (letcc.codes.lam_defaults'
// LocalGapLam): phi_k = max(h_k, end_factor * x_k), h_k the length of the
// interval of the nodes b (extended by the domain ends -1 and 1) that holds
// t_k, x_k how far t_k lies outside [b_first, b_last]; lam_k = c phi_k^3.
//
// The same arithmetic, in the same order, as local_gaps() in Python (which
// the tests hold it to, bit for bit): this exists because a decoder for a new
// answering set is built on the master's critical path every round the set
// changes, and there a dozen small numpy calls cost more than the whole
// smoother_rows build.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace letcc {

// b: n >= 1 strictly increasing nodes; t: K points; lam: K outputs.
inline void local_gap_lams(const double* b, std::size_t n, const double* t, std::size_t K, double c,
                           double end_factor, double* lam) {
    const double lo = b[0], hi = b[n - 1];
    std::vector<double> e;
    e.reserve(n + 2);
    if (lo > -1.0) e.push_back(-1.0);
    e.insert(e.end(), b, b + n);
    if (hi < 1.0) e.push_back(1.0);
    const std::ptrdiff_t last = static_cast<std::ptrdiff_t>(e.size()) - 2;
    for (std::size_t k = 0; k < K; ++k) {
        const double a = t[k];
        // numpy.searchsorted(e, a) (side="left") - 1, clipped to [0, len(e) - 2]
        std::ptrdiff_t j = std::lower_bound(e.begin(), e.end(), a) - e.begin() - 1;
        j = std::min(std::max<std::ptrdiff_t>(j, 0), last);
        const double h = e[static_cast<std::size_t>(j) + 1] - e[static_cast<std::size_t>(j)];
        const double x = std::max(lo - a, 0.0) + std::max(a - hi, 0.0);
        const double phi = std::max(h, end_factor * x);
        lam[k] = c * phi * phi * phi;
    }
}

}  // namespace letcc
