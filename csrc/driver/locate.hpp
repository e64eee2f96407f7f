// The spline locator's steps (letcc.codes.robust.spline_locate; the module
// docstring there says what each step is for and what was measured): the
// clean-round test, the single and pair erasures, the rescoring of the
// answers kept, and the swap step, in one compiled call. The Python loop
// it replaced cost 20-25 us a round beside 15-25 us of passes at m = 1000,
// and a round with 2 answers erased took 4.7x the plain decode there; now
// 2.9x (bench/results/robust_decode.md).
//
//   first step:   one scoring pass over the n answers (driver::locator_scores,
//                 with the pair products while 2 or more erasures are left),
//                 its sums kept
//   later steps:  the answers kept rescored from those sums and one pass of
//                 cross products (driver::locator_rescore_sets: one pass for
//                 every candidate a pair choice or swap weighs); where that would
//                 lose accuracy, a pass of their own with the first step's
//                 lam (a detection spline built here for the knots kept)
//   each step:    the test's masks (erasable_masks of the knots kept), the
//                 top score, the median loo, the statistics against the
//                 thresholds, then erase one answer, a pair, or stop
//   last:         the swap step, where the budget was spent with another
//                 answer above the threshold
//   then:         the gap step, where the first step tested pairs and its
//                 single test fired
//
// Thresholds come from the caller per number of answers kept (a calibrated
// test calibrates a size when first asked, so only the sizes a round reaches
// are asked for; the gap step asks for n - 2, the size its candidates leave,
// also in a round that stopped after one erasure). No Python here: csrc/bindings.cpp converts the
// arrays and wraps a Python threshold callable; the GIL is released around
// the whole locate and taken again only inside such a callable.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "../locator.hpp"
#include "linear_maps.hpp"
#include "locator.hpp"

namespace letcc {

// An answer whose nearest answering neighbour lies more than this many
// typical gaps away (the median gap between consecutive answering knots) is
// never erased by a test: its leave-one-out residual is an extrapolation
// across the hole, large for honest answers too, and the decode leans on it
// most (measured, bench/adversarial.py's smooth f: the only clean-round false
// alarms at false_alarm=1e-3 were worker 0 with workers 1 and 2 straggling,
// each costing 1100-3100x that round's MSE). 2.5: one missing neighbour (a
// gap of 2) keeps an answer erasable, two missing in a row on every side (3)
// do not.
constexpr double kIsolatedGaps = 2.5;

// The hole an erased pair leaves, from the answer before it to the answer
// after it, may span at most this many typical gaps for a test to erase the
// pair: 3 when nothing else is missing there, so one more missing node next
// to the pair (4) keeps it. Pairs at either end (no answer on one side) are
// never erased by the test either: the decode would extrapolate over them.
// Measured (bench/adversarial.py's smooth f, honest rounds): without this
// rule the only pair-test false alarms were workers 0 and 1 with 2 and 3
// straggling, each costing ~1000x that round's MSE.
constexpr double kPairHoleGaps = 3.5;

// Answers a step needs to test pairs: a pair erased leaves at least 3.
constexpr std::size_t kPairMinAnswers = 5;

// The gap step (locate_detail::gap_refine; rounds of at least kPairMinAnswers
// + 2 answers, so that its rests are pair-tested): the two answers around an erased
// one replace the erasures only where both scored above kGapGate times the
// first step's threshold level (the wrong ones around an honest answer score
// high: wrong, honest, wrong) and the rest they leave passes both tests with
// a round statistic kGapMargin times smaller than the erasures' rest.
// Measured on the smooth f of bench/adversarial.py (N = 24, S = 2, 1600
// rounds each, E = 2): MSE -16% under shift(+1), -3% colluding, sign-flip
// unchanged; no round changed with one liar (adversaries = 2) or none. A
// first version that took the pair test's masked view of the rest gained
// -29% under shift(+1) but traded a correct erasure for a wrong one in 2 of
// 300 synthetic wrong, honest, wrong rounds (tests/test_pair_stage.py's
// shapes): the rest's holes mask the pair two wrong answers form there.
constexpr double kGapGate = 0.5;
constexpr double kGapMargin = 4.0;

// later_ratio (the looser tests after a round's first erasure) applies only
// where the first step's evidence was this many times its threshold (the
// single or the pair statistic over its own): a false alarm on an honest
// round is a statistic just above the threshold, and a looser second test
// there erased a second honest answer. Measured (bench/adversarial.py, same
// weights, default false_alarm): without this rule the clean-round MSE cost
// on RepVGG-A0 rose from +0.43% to +1.14% and false_alarm=1e-2's on the
// smooth f from +22.6% to +38.6%.
constexpr double kLaterEvidence = 2.0;

// Which answers (and adjacent pairs) of the ascending detection knots a test
// may not erase: not_single[i] where answer i's nearest answering neighbour
// is more than kIsolatedGaps median gaps away (none with fewer than 3
// answers); not_pair[i] (pair i, i + 1) unless both members are erasable,
// there is an answer on either side and knots[i + 2] - knots[i - 1] is at
// most kPairHoleGaps median gaps (every pair with fewer than 4 answers).
struct ErasableMasks {
    std::vector<char> not_single;   // n
    std::vector<char> not_pair;     // n - 1 (0 for n = 0)
    bool any_single = false;        // some not_single set
};

inline ErasableMasks erasable_masks(const double* knots, std::size_t n) {
    ErasableMasks m;
    m.not_single.assign(n, 0);
    m.not_pair.assign(n >= 1 ? n - 1 : 0, 1);
    if (n < 3) return m;
    std::vector<double> gaps(n - 1);
    bool nan = false;
    for (std::size_t i = 0; i + 1 < n; ++i) {
        gaps[i] = knots[i + 1] - knots[i];
        nan = nan || std::isnan(gaps[i]);
    }
    // numpy's median and minimum: NaN in, NaN out (and nothing erasable)
    const double med = nan ? std::numeric_limits<double>::quiet_NaN() : np_sorted_median(gaps.data(), gaps.size());
    const double inf = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < n; ++i) {
        const double left = i >= 1 ? gaps[i - 1] : inf, right = i + 1 < n ? gaps[i] : inf;
        m.not_single[i] = !(locator_detail::np_min(left, right) <= kIsolatedGaps * med);
        m.any_single = m.any_single || m.not_single[i];
    }
    if (n < 4) return m;
    for (std::size_t i = 1; i + 2 < n; ++i) {
        const bool span_ok = knots[i + 2] - knots[i - 1] <= kPairHoleGaps * med;
        m.not_pair[i] = !(span_ok && !m.not_single[i] && !m.not_single[i + 1]);
    }
    return m;
}

namespace driver {

// The detection spline of the round's n answers (robust.DetectionSpline), as
// the locate reads it; everything borrowed.
struct LocateSpline {
    const SplinePlan* plan = nullptr;   // at the ascending knots (its factor and tables)
    const double* omd = nullptr;        // 1 - H_ii (n)
    const double* pair_inv = nullptr;   // (I - H_PP)^-1 of each adjacent pair, 4 (n - 1)
    const double* hat = nullptr;        // H (n x n, row-major)
    const double* knots = nullptr;      // the ascending detection knots (n)
    double lam = 0.0;                   // its lam (the answers kept are scored with it)
    std::size_t n = 0;
};

// The thresholds on the round statistic per number of answers kept; an empty
// ratio: untested (erase `steps` answers); an empty pair_ratio: no pair stage.
// later_ratio (empty: ratio): the threshold of every test after the first
// step's (fewer answers kept: later steps, the swap and gap steps' rests)
// where the first step's statistic was at least kLaterEvidence times its
// threshold; looser where the caller calibrated it so (letcc.codes.clean_round:
// such a round is attacked).
// Ablation switches for the bench and the tests: pair_choice (the answers one
// apart around a firing pair are weighed against it), swap (the swap step)
// and gap (the gap step).
struct LocateTests {
    std::function<double(std::size_t)> ratio, pair_ratio, later_ratio;
    bool pair_choice = true, swap = true, gap = true;
};

// What the first step saw (robust.spline_locate's report).
struct LocateReport {
    std::int64_t top = -1;          // -1: no first pass (no steps: E = 0 or n <= 3)
    double statistic = 0.0, threshold = std::numeric_limits<double>::quiet_NaN();   // NaN: untested
    bool has_pair = false;
    std::int64_t pair_top = -1;     // the pair pair_top, pair_top + 1
    double pair_statistic = 0.0, pair_threshold = 0.0;
    bool swap_ran = false;          // the swap step ran (the budget spent, another answer above the threshold)
    bool gap_ran = false;           // the gap step replaced the erasures
};

namespace locate_detail {

// round_statistic's quotient: top over the median loo (0 when top is 0 or
// less, inf when only the median is); NaN stays NaN as in Python.
inline double over(double top, double med) {
    if (top <= 0.0) return 0.0;
    return med > 0.0 ? top / med : std::numeric_limits<double>::infinity();
}

// numpy's max of a with the positions skip_a, skip_b left out (NaN first).
inline double max_without(const std::vector<double>& a, std::size_t skip_a, std::size_t skip_b) {
    double best = -std::numeric_limits<double>::infinity();
    bool any = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (i == skip_a || i == skip_b) continue;
        if (std::isnan(a[i])) return a[i];
        if (!any || a[i] > best) best = a[i];
        any = true;
    }
    return best;
}


template <class T>
class Locate {
public:
    Locate(const LocateSpline& d, const T* const* rows, std::size_t m, int threads, const LocateTests& tests)
        : d_(d), rows_(rows), m_(m), threads_(threads), tests_(tests) {}

    // The threshold for k answers kept (each size asked of the caller once):
    // the first step's for all n answers, else the later steps'.
    double ratio(std::size_t k) {
        if (k == d_.n || !tests_.later_ratio || !later_) return cached(ratio_, tests_.ratio, k);
        return cached(later_ratio_, tests_.later_ratio, k);
    }
    // Whether the later tests take later_ratio (the first step's evidence).
    void allow_later(bool on) { later_ = on; }
    double pair_ratio(std::size_t k) { return cached(pair_ratio_, tests_.pair_ratio, k); }

    // The first step's scores of all n answers; the pass's sums kept.
    RescoredScores first(bool pairs, const PassDecode<T>& dec) {
        const std::size_t n = d_.n;
        RescoredScores sc{true, std::vector<double>(n), std::vector<double>(n),
                          std::vector<double>(pairs ? n - 1 : 0)};
        first_sums_.assign(locator_sums_size(static_cast<std::int64_t>(n), pairs), 0.0);
        locator_scores<T>(d_.plan->factor(), d_.plan->tables(), rows_, m_, d_.omd, threads_, sc.s.data(),
                          sc.loo.data(), pairs ? d_.pair_inv : nullptr, sc.pair.data(), first_sums_.data(), dec);
        return sc;
    }

    // The scores of the answers kept after erasing the positions `erased`
    // (robust.locator_rescored): from the first pass's sums where that is
    // accurate, else a pass of their own with the first step's lam.
    RescoredScores rescored(const std::vector<std::size_t>& erased, bool pairs) {
        return std::move(rescored_sets({erased}, pairs)[0]);
    }

    // rescored() of several sets of erasures, their cross products formed in
    // one pass (locator_rescore_sets); a set that declines gets its own pass.
    std::vector<RescoredScores> rescored_sets(const std::vector<std::vector<std::size_t>>& sets, bool pairs) {
        std::vector<RescoredScores> r =
            locator_rescore_sets<T>(d_.hat, first_sums_.data(), rows_, d_.n, m_, sets, pairs, threads_);
        for (std::size_t c = 0; c < sets.size(); ++c)
            if (!r[c].ok) r[c] = own_pass(sets[c], pairs);
        return r;
    }

    // The answers kept scored by a pass of their own: the detection spline
    // of their knots with the first step's lam (robust.DetectionSplines.get(
    // knots kept, lam)), where the rescoring identity would lose accuracy.
    RescoredScores own_pass(const std::vector<std::size_t>& erased, bool pairs) {
        const std::size_t nk = d_.n - erased.size();
        RescoredScores sc{true, std::vector<double>(nk), std::vector<double>(nk),
                          std::vector<double>(pairs ? nk - 1 : 0)};
        const std::vector<std::size_t> kept = kept_of(erased);
        std::vector<double> xk(nk), ones(nk, 1.0);
        std::vector<const T*> rk(nk);
        for (std::size_t t = 0; t < nk; ++t) {
            xk[t] = d_.knots[kept[t]];
            rk[t] = rows_[kept[t]];
        }
        const SplinePlan plan(xk, ones, d_.lam, xk, 0, "banded");
        std::vector<double> H(nk * nk), omd(nk), upper(nk - 1), lower(nk - 1), pinv(4 * (nk - 1));
        plan.matrix(H.data());
        for (std::size_t t = 0; t < nk; ++t) omd[t] = 1.0 - H[t * nk + t];
        for (std::size_t t = 0; t + 1 < nk; ++t) {
            upper[t] = H[t * nk + t + 1];
            lower[t] = H[(t + 1) * nk + t];
        }
        pair_inverses(nk, omd.data(), upper.data(), lower.data(), pinv.data());
        locator_scores<T>(plan.factor(), plan.tables(), rk.data(), m_, omd.data(), threads_, sc.s.data(),
                          sc.loo.data(), pairs ? pinv.data() : nullptr, sc.pair.data());
        return sc;
    }

    // The masks of the answers kept (their positions, ascending).
    ErasableMasks masks(const std::vector<std::size_t>& kept) const {
        std::vector<double> xk(kept.size());
        for (std::size_t t = 0; t < kept.size(); ++t) xk[t] = d_.knots[kept[t]];
        return erasable_masks(xk.data(), xk.size());
    }

    // The round statistic of the answers kept after erasing each of `sets`
    // (robust._rest_statistic), the test's view of their scores (0 where not
    // erasable) and, with pairs, the pair statistic over every pair (none
    // masked: a pair the rest's holes make unerasable may still hold two
    // wrong answers vouching for each other; the first step must have taken
    // pair sums); one pass of cross products for all of them.
    struct RestStatistic {
        double stat, pair_stat;     // pair_stat 0 without pairs
        std::vector<double> s;
    };
    std::vector<RestStatistic> rest_statistics(const std::vector<std::vector<std::size_t>>& sets,
                                               bool pairs = false) {
        std::vector<RescoredScores> sc = rescored_sets(sets, pairs);
        std::vector<RestStatistic> out;
        out.reserve(sets.size());
        for (std::size_t c = 0; c < sets.size(); ++c) {
            apply_mask(sc[c].s, masks(kept_of(sets[c])).not_single);
            const double med = np_sorted_median(sc[c].loo.data(), sc[c].loo.size());
            const double stat = over(sc[c].s[np_argmax(sc[c].s.data(), sc[c].s.size())], med);
            const double pair_stat =
                pairs ? over(sc[c].pair[np_argmax(sc[c].pair.data(), sc[c].pair.size())], med) : 0.0;
            out.push_back({stat, pair_stat, std::move(sc[c].s)});
        }
        return out;
    }

    std::vector<std::size_t> kept_of(const std::vector<std::size_t>& erased) const {
        std::vector<char> gone(d_.n, 0);
        for (std::size_t e : erased) gone[e] = 1;
        std::vector<std::size_t> kept;
        kept.reserve(d_.n - erased.size());
        for (std::size_t i = 0; i < d_.n; ++i)
            if (!gone[i]) kept.push_back(i);
        return kept;
    }

    static void apply_mask(std::vector<double>& a, const std::vector<char>& mask) {
        for (std::size_t i = 0; i < a.size() && i < mask.size(); ++i)
            if (mask[i]) a[i] = 0.0;
    }

private:
    static double cached(std::map<std::size_t, double>& held, const std::function<double(std::size_t)>& f,
                         std::size_t k) {
        const auto it = held.find(k);
        if (it != held.end()) return it->second;
        return held[k] = f(k);
    }

    const LocateSpline& d_;
    const T* const* rows_;
    std::size_t m_;
    int threads_;
    const LocateTests& tests_;
    std::vector<double> first_sums_;
    std::map<std::size_t, double> ratio_, pair_ratio_, later_ratio_;
    bool later_ = true;
};

// The two positions (into the answers kept, `keep`) a firing pair test
// erases (robust's pair choice): the top pair j, j + 1, or one of the two
// answers one apart around it (j - 1, j + 1 or j, j + 2, both erasable),
// whichever leaves the answers kept the smallest round statistic (all of
// them rescored from one pass of cross products). Two wrong answers with an honest one
// between them (wrong, honest, wrong) make the pairs of each with the honest
// one score high too, and erasing such a pair left the second wrong answer in
// and the honest one out (bench/results/pair_stage.md); two wrong answers
// side by side leave the smallest statistic when both go.
template <class T>
std::pair<std::size_t, std::size_t> pair_to_erase(Locate<T>& loc, const std::vector<std::size_t>& erased,
                                                  const std::vector<std::size_t>& keep, const ErasableMasks& mk,
                                                  std::size_t j, bool choose) {
    const std::size_t n = keep.size();
    std::vector<std::pair<std::size_t, std::size_t>> options{{j, j + 1}};
    if (choose) {
        if (j >= 1 && j + 1 < n && !mk.not_single[j - 1] && !mk.not_single[j + 1]) options.push_back({j - 1, j + 1});
        if (j + 2 < n && !mk.not_single[j] && !mk.not_single[j + 2]) options.push_back({j, j + 2});
    }
    if (options.size() == 1) return options[0];
    std::vector<std::vector<std::size_t>> cands;
    for (const auto& o : options) {
        cands.push_back(erased);
        cands.back().push_back(keep[o.first]);
        cands.back().push_back(keep[o.second]);
    }
    const auto rest = loc.rest_statistics(cands);
    double best = std::numeric_limits<double>::infinity();
    std::pair<std::size_t, std::size_t> pick = options[0];
    for (std::size_t c = 0; c < options.size(); ++c)
        if (rest[c].stat < best) {
            best = rest[c].stat;
            pick = options[c];
        }
    return pick;
}

// The erased positions after the swap step (robust's swap step): while the
// answers kept still fail the test, the top-scored answer kept replaces the
// erased one whose return leaves the smallest statistic, if that rest then
// passes; at most len(erased) swaps, the candidates of a swap rescored
// from one pass of cross products. Greedy steps erase an honest answer first where it scores highest,
// as the one between two wrong ones does (wrong, honest, wrong: its residual
// carries both of theirs), and the budget runs out with a wrong answer kept;
// the swap gives it back (bench/results/pair_stage.md).
template <class T>
std::vector<std::size_t> swap_refine(Locate<T>& loc, std::vector<std::size_t> erased, std::size_t n) {
    const std::size_t none = static_cast<std::size_t>(-1);
    for (std::size_t round = 0, swaps = erased.size(); round < swaps; ++round) {
        auto now = std::move(loc.rest_statistics({erased})[0]);
        const double rest = now.stat;
        const double r = loc.ratio(n - erased.size());
        if (!(rest > r)) break;
        const std::vector<std::size_t> kept = loc.kept_of(erased);
        const std::size_t k = kept[np_argmax(now.s.data(), now.s.size())];
        // each erased answer given back for k: one pass for all of them
        std::vector<std::vector<std::size_t>> cands;
        for (std::size_t e : erased) {
            cands.emplace_back();
            for (std::size_t x : erased)
                if (x != e) cands.back().push_back(x);
            cands.back().push_back(k);
        }
        const auto st = loc.rest_statistics(cands);
        double best = rest;
        std::size_t pick = none;
        for (std::size_t c = 0; c < cands.size(); ++c)
            if (st[c].stat < best) {
                best = st[c].stat;
                pick = c;
            }
        if (pick == none || !(best <= r)) break;
        erased = cands[pick];
    }
    return erased;
}

// The erased positions after the gap step: wrong, honest, wrong where the
// greedy steps took the honest answer (its residual carries both wrong ones')
// and then an answer beside it, or stopped with the two wrong ones side by
// side in the answers kept (they vouch for each other there). For each
// erased answer e with both neighbours e - 1 and e + 1 scored above kGapGate
// times the first step's threshold level (s1: the first step's test scores,
// 0 where not erasable; med1: its median loo), e still erasable without them,
// the pair {e - 1, e + 1} is weighed against the erasures made: it replaces
// them where the rest it leaves passes the single and the pair test for n - 2
// answers, its single statistic kGapMargin times smaller than theirs (all
// rescored from one pass of cross products). On the smooth f at E = 2,
// 18-23 of the 59 rounds of 1600 in which a shift(+1) liar stayed in had
// this shape; bench/results/pair_stage.md measures the step.
template <class T>
std::vector<std::size_t> gap_refine(Locate<T>& loc, const std::vector<std::size_t>& erased,
                                    const std::vector<double>& s1, double med1, std::size_t n, bool& replaced) {
    const double level = kGapGate * loc.ratio(n) * med1;
    std::vector<std::vector<std::size_t>> sets{erased};
    // the answer between them still erasable once they go (else the test's
    // view of their rest hides it: a lone liar beside an end answer was
    // traded for two honest ones so). The pair may hold an end answer: the
    // two wrong ones at n - 3 and n - 1 are such a pair, and keeping end
    // answers out of it changed no round of the benches' except to leave
    // such liars in (tests/test_pair_stage.py)
    for (std::size_t e : erased)
        if (e >= 1 && e + 1 < n && s1[e - 1] > level && s1[e + 1] > level &&
            !loc.masks(loc.kept_of({e - 1, e + 1})).not_single[e - 1])
            sets.push_back({e - 1, e + 1});
    if (sets.size() == 1) return erased;
    const auto st = loc.rest_statistics(sets, true);
    const double r = loc.ratio(n - 2), r2 = loc.pair_ratio(n - 2);
    std::size_t pick = 0;
    double best = st[0].stat / kGapMargin;
    // the rest must pass the pair test too: two wrong answers left side by
    // side (the pair around a wrong answer erased) vouch for each other in
    // the single test
    for (std::size_t c = 1; c < sets.size(); ++c)
        if (st[c].stat < best && st[c].stat <= r && st[c].pair_stat <= r2) {
            best = st[c].stat;
            pick = c;
        }
    if (pick == 0) return erased;
    replaced = true;
    return sets[pick];
}

}  // namespace locate_detail

// Positions (into the n answers, ascending knots) of the answers the spline
// locator erases, in the order erased (at most min(E, n - 3)); rows[i] the
// answer at knot i (m elements). Each step erases the top-scored answer only
// while the round statistic (top score over the median loo) exceeds the
// threshold for the answers kept (tests.ratio; empty: E steps untested); with
// tests.pair_ratio, a step with 2 or more erasures left and at least
// kPairMinAnswers answers also tests the top pair, and erases it where it
// fires, unless the single test fires too with its top answer in that pair
// or by a larger factor. A tested locate that spends its budget where its
// last step left another answer above the threshold ends with the swap step;
// one whose first step tested pairs and whose single test fired, with the gap
// step. rep: what the first step saw. dec (with its A): the first pass also
// decodes (driver::PassDecode), which the caller keeps where nothing is erased.
template <class T>
std::vector<std::size_t> spline_locate(const LocateSpline& d, const T* const* rows, std::size_t m, std::size_t E,
                                       const LocateTests& tests, int threads, LocateReport& rep,
                                       const PassDecode<T>& dec = {}) {
    using locate_detail::max_without;
    using locate_detail::over;
    const std::size_t n = d.n;
    const std::size_t none = static_cast<std::size_t>(-1);
    const std::size_t steps = n >= 3 ? std::min(E, n - 3) : 0;
    std::vector<std::size_t> erased;
    if (steps == 0) return erased;
    const bool tested = static_cast<bool>(tests.ratio);
    const bool pair_stage = tested && static_cast<bool>(tests.pair_ratio);
    locate_detail::Locate<T> loc(d, rows, m, threads, tests);
    std::vector<std::size_t> keep(n);
    for (std::size_t i = 0; i < n; ++i) keep[i] = i;
    bool suspect = false;       // the last erasure left another answer above the threshold (the swap step)
    std::vector<double> first_s;    // the first step's test scores and median loo (the gap step)
    double first_med = 0.0;
    while (erased.size() < steps) {
        const bool pairs = pair_stage && steps - erased.size() >= 2 && keep.size() >= kPairMinAnswers;
        RescoredScores sc = erased.empty() ? loc.first(pairs, dec) : loc.rescored(erased, pairs);
        const std::size_t nk = keep.size();
        ErasableMasks mk;
        if (tested) {
            mk = loc.masks(keep);
            locate_detail::Locate<T>::apply_mask(sc.s, mk.not_single);
            if (pairs) locate_detail::Locate<T>::apply_mask(sc.pair, mk.not_pair);
        }
        const std::size_t i = np_argmax(sc.s.data(), nk);
        const double med = np_sorted_median(sc.loo.data(), nk);
        const double stat = over(sc.s[i], med);
        const double r = tested ? loc.ratio(nk) : std::numeric_limits<double>::quiet_NaN();
        if (erased.empty()) {
            rep.top = static_cast<std::int64_t>(keep[i]);
            rep.statistic = stat;
            rep.threshold = r;
            if (pairs && tests.gap && stat > r && n >= kPairMinAnswers + 2) {   // where the gap step may run
                first_s = sc.s;
                first_med = med;
            }
            if (tested) loc.allow_later(stat >= kLaterEvidence * r);
        }
        if (pairs) {
            const std::size_t j = np_argmax(sc.pair.data(), nk - 1);
            const double stat2 = over(sc.pair[j], med);
            const double r2 = loc.pair_ratio(nk);
            if (erased.empty()) {
                if (stat2 >= kLaterEvidence * r2) loc.allow_later(true);
                rep.has_pair = true;
                rep.pair_top = static_cast<std::int64_t>(keep[j]);
                rep.pair_statistic = stat2;
                rep.pair_threshold = r2;
            }
            // the single test acts first where it fires and either its top
            // answer is in the top pair (erased alone: the rescoring exposes a
            // partner that is wrong too) or its excess is the larger
            const bool single_first = stat > r && (i == j || i == j + 1 || stat * r2 > stat2 * r);
            if (stat2 > r2 && !single_first) {
                const auto [a, b] = locate_detail::pair_to_erase(loc, erased, keep, mk, j, tests.pair_choice);
                if (erased.size() + 2 == steps) suspect = over(max_without(sc.s, a, b), med) > r;
                erased.push_back(keep[a]);
                erased.push_back(keep[b]);
                keep.erase(keep.begin() + static_cast<std::ptrdiff_t>(b));
                keep.erase(keep.begin() + static_cast<std::ptrdiff_t>(a));
                continue;
            }
        }
        if (tested && !(stat > r)) break;
        // the last erasure: the swap step is worth its rescoring only where
        // another answer scored above the threshold beside the one erased
        if (tested && erased.size() + 1 == steps) suspect = over(max_without(sc.s, i, none), med) > r;
        erased.push_back(keep[i]);
        keep.erase(keep.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (tested && tests.swap && !erased.empty() && erased.size() == steps && suspect) {
        rep.swap_ran = true;
        erased = locate_detail::swap_refine(loc, erased, n);
    }
    // the gap step: a round whose first single test fired, with pairs tested
    if (!first_s.empty() && !erased.empty())
        erased = locate_detail::gap_refine(loc, erased, first_s, first_med, n, rep.gap_ran);
    return erased;
}

}  // namespace driver
}  // namespace letcc
