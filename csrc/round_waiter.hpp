// The waiting rule of one round on a virtual clock, for codes that state
// their rule as counts (letcc.codes.waiting_rule.Coverage): the compiled form
// of letcc.runtime.virtual_time.RoundWaiter, number for number.
//
// Why compiled: the master runs this on every answer and every wake-up of
// every round. The Python waiter kept a set of pending workers, a dict of
// arrivals, a sorted list and minima recomputed by generators after each
// answer: about 26 us of a N = 16 round's master CPU, growing with N. Here a
// round's state is a few arrays of N entries; an answer is O(log N) and each
// question (decide, next_change, answers_needed, hung) one O(N) scan.
//
// The rule (virtual_time.py's module docstring): worker j's answer that
// arrives e_j s after dispatch counts at virtual time v_j = e_j + delay_j;
// an answer is confirmed once v_j <= H(e) = e + min over pending delays; the
// rule reads confirmed answers in virtual order, (v, j) ascending, and the
// first prefix that meets the count rule (count answers and decodable) or is
// complete ends the round (count first), else the deadline, else nothing
// pending.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace letcc {

// At least need[g] answers of each group g; group[j] the group of worker j
// (-1: none). One group holding every worker is a plain count.
class CoverageRule {
public:
    CoverageRule() = default;
    CoverageRule(std::vector<int> group, std::vector<int> need) : group_(std::move(group)), need_(std::move(need)) {
        if (need_.empty()) throw std::invalid_argument("a coverage rule needs at least one group");
        for (int g : group_)
            if (g < -1 || g >= static_cast<int>(need_.size()))
                throw std::invalid_argument("group " + std::to_string(g) + " is not -1 or one of the " +
                                            std::to_string(need_.size()) + " groups");
        for (int m : need_)
            if (m < 1) throw std::invalid_argument("every group needs >= 1 answer, got " + std::to_string(m));
        bool one = need_.size() == 1;
        for (int g : group_) one = one && g == 0;
        single_ = one ? need_[0] : -1;
    }

    // The smallest p with the rule holding for js[0 .. p), or -1 when it does
    // not hold for all n of them (distinct workers).
    long first_prefix(const int* js, std::size_t n) const {
        if (single_ >= 0) return n >= static_cast<std::size_t>(single_) ? single_ : -1;
        counts_.assign(need_.size(), 0);
        std::size_t left = need_.size();
        for (std::size_t i = 0; i < n; ++i) {
            const int j = js[i];
            if (j < 0 || j >= static_cast<int>(group_.size()))
                throw std::out_of_range("worker " + std::to_string(j) + " is not one of the rule's " +
                                        std::to_string(group_.size()) + " workers");
            const int g = group_[j];
            if (g >= 0 && ++counts_[g] == need_[g] && --left == 0) return static_cast<long>(i) + 1;
        }
        return -1;
    }

private:
    std::vector<int> group_, need_;
    int single_ = -1;
    mutable std::vector<int> counts_;   // scratch (one waiter per round, one thread)
};

enum class WaitRule { count, complete, deadline, all };

struct WaitDecision {
    std::vector<int> answered;   // in virtual arrival order
    double at = 0.0;             // virtual time the round was decided
    WaitRule rule = WaitRule::all;
};

class CountedWaiter {
public:
    static constexpr double inf = std::numeric_limits<double>::infinity();

    // dispatched: the workers sent the round; delays[j] (N): the master's
    // virtual delays; never[j]: never counts; count < 0: no count rule;
    // hang_at[j]: silent past it is hung (inf where has_hang[j] is false: no
    // limit); may_complete < 0:
    // asked of `complete` here; complete_needs_all: the code completes only
    // with every pending worker (answers_needed may not stop at 1).
    CountedWaiter(int n_workers, const std::vector<int>& dispatched, std::vector<double> delays,
                  const std::vector<char>& never, long count, double deadline, std::vector<double> hang_at,
                  std::vector<char> has_hang, CoverageRule decodable, CoverageRule complete, int may_complete,
                  bool complete_needs_all)
        : n_(n_workers), delays_(std::move(delays)), count_(count), deadline_(deadline),
          hang_at_(std::move(hang_at)), has_hang_(std::move(has_hang)), decodable_(std::move(decodable)),
          complete_(std::move(complete)), complete_needs_all_(complete_needs_all),
          pending_(static_cast<std::size_t>(n_workers), 0), arrived_(static_cast<std::size_t>(n_workers), nan()),
          real_(static_cast<std::size_t>(n_workers), nan()) {
        const auto N = static_cast<std::size_t>(n_workers);
        if (delays_.size() != N || never.size() != N || hang_at_.size() != N || has_hang_.size() != N)
            throw std::invalid_argument("delays, never and the hang limits need one entry per worker (" +
                                        std::to_string(N) + ")");
        for (int j : dispatched) {
            check_worker(j);
            if (!never[static_cast<std::size_t>(j)] && !pending_[static_cast<std::size_t>(j)]) {
                pending_[static_cast<std::size_t>(j)] = 1;
                ++n_pending_;
            }
        }
        if (may_complete < 0) {
            std::vector<int> js = pending_list();
            may_complete_ = !js.empty() && complete_.first_prefix(js.data(), js.size()) >= 0;
        } else {
            may_complete_ = may_complete != 0;
        }
    }

    int n_workers() const { return n_; }

    // Worker j answered `elapsed` s after dispatch; true when it counts.
    bool result(int j, double elapsed) {
        check_worker(j);
        const auto u = static_cast<std::size_t>(j);
        real_[u] = elapsed;
        if (!pending_[u]) return false;
        leave(u);
        const double v = elapsed + delays_[u];
        arrived_[u] = v;
        ++n_arrived_;
        log_.push_back(j);
        const std::pair<double, int> key(v, j);
        order_.insert(std::upper_bound(order_.begin(), order_.end(), key), key);
        return true;
    }

    // Worker j will not answer (crashed, raised, hung); true when the reason
    // is to be recorded (it was pending or had not arrived).
    bool fail(int j) {
        check_worker(j);
        const auto u = static_cast<std::size_t>(j);
        const bool was_pending = pending_[u] != 0;
        if (!was_pending && !std::isnan(arrived_[u])) return false;
        leave(u);
        if (was_pending && may_complete_) {     // can the workers still in the race complete?
            std::vector<int> js = pending_list();
            for (int k = 0; k < n_; ++k)
                if (!std::isnan(arrived_[static_cast<std::size_t>(k)])) js.push_back(k);
            may_complete_ = complete_.first_prefix(js.data(), js.size()) >= 0;
        }
        return true;
    }

    // At least how many more answers decide() needs before it can end the
    // round other than by time passing or a failure; >= 1.
    long answers_needed() const {
        long need = n_pending_;
        if (count_ >= 0) need = std::min(need, count_ - static_cast<long>(n_arrived_));
        if (may_complete_ && !complete_needs_all_) need = 1;
        return std::max(1L, need);
    }

    double horizon(double elapsed) const { return elapsed + min_pending_delay(); }

    bool decodable(const std::vector<int>& workers) const {
        return decodable_.first_prefix(workers.data(), workers.size()) >= 0;
    }

    // The round's answering set if final at real elapsed time `elapsed`.
    bool decide(double elapsed, WaitDecision& out) const {
        const double horizon = this->horizon(elapsed);
        const double limit = std::min(horizon, deadline_);
        std::size_t n = 0;
        while (n < order_.size() && order_[n].first <= limit) ++n;
        js_.resize(n);
        for (std::size_t i = 0; i < n; ++i) js_[i] = order_[i].second;
        long best = -1;
        WaitRule rule = WaitRule::all;
        if (n && count_ >= 0 && static_cast<long>(n) >= count_) {
            const long p = decodable_.first_prefix(js_.data(), n);
            if (p >= 0) {
                best = std::max(p, count_);
                rule = WaitRule::count;
            }
        }
        if (n && may_complete_) {
            const long hi = best < 0 ? static_cast<long>(n) : best - 1;
            if (hi >= 1) {
                const long p = complete_.first_prefix(js_.data(), static_cast<std::size_t>(hi));
                if (p >= 0) {
                    best = std::max(p, 1L);
                    rule = WaitRule::complete;
                }
            }
        }
        if (best >= 0) {
            out.answered.assign(js_.begin(), js_.begin() + best);
            out.at = order_[static_cast<std::size_t>(best) - 1].first;
            out.rule = rule;
            return true;
        }
        if (horizon > deadline_) {
            out.answered = js_;
            out.at = deadline_;
            out.rule = WaitRule::deadline;
            return true;
        }
        if (n_pending_ == 0) {
            out.answered = js_;
            out.at = n ? order_[n - 1].first : 0.0;
            out.rule = WaitRule::all;
            return true;
        }
        return false;
    }

    // Real elapsed time at which decide() may change without a new answer
    // (an answer confirmed, the deadline passing, a worker hanging); inf if never.
    double next_change(double elapsed) const {
        const double dmin = min_pending_delay();
        const double hmin = min_pending_hang();
        times_.clear();
        if (hmin > elapsed) {                      // the usual case: nobody hung, the earliest counts
            if (std::isfinite(hmin)) times_.push_back(hmin);
        } else {
            for (int j = 0; j < n_; ++j) {
                const auto u = static_cast<std::size_t>(j);
                if (pending_[u] && has_hang_[u]) times_.push_back(hang_at_[u]);
            }
        }
        if (std::isfinite(dmin)) {
            const double horizon = elapsed + dmin;
            double first = inf;
            bool any = false;
            for (const auto& [v, j] : order_)
                if (horizon < v && v <= deadline_) {
                    first = any ? std::min(first, v) : v;
                    any = true;
                }
            if (any) times_.push_back(first - dmin);
            if (std::isfinite(deadline_)) times_.push_back(deadline_ - dmin);
        }
        double later = inf;
        bool any_later = false;
        for (double t : times_)
            if (t > elapsed) {
                later = any_later ? std::min(later, t) : t;
                any_later = true;
            }
        return any_later ? later : (times_.empty() ? inf : elapsed);
    }

    // Pending workers past their hang limit, ascending.
    std::vector<int> hung(double elapsed) const {
        std::vector<int> out;
        if (elapsed < min_pending_hang()) return out;
        for (int j = 0; j < n_; ++j) {
            const auto u = static_cast<std::size_t>(j);
            if (pending_[u] && hang_at_[u] <= elapsed) out.push_back(j);
        }
        return out;
    }

    // ---- state, for reports --------------------------------------------------
    bool pending(int j) const { return pending_[static_cast<std::size_t>(j)] != 0; }
    double arrived_at(int j) const { return arrived_[static_cast<std::size_t>(j)]; }   // NaN: not arrived
    double real_at(int j) const { return real_[static_cast<std::size_t>(j)]; }         // NaN: no answer
    // the workers whose answers counted, in the order they were recorded
    const std::vector<int>& arrival_log() const { return log_; }
    long count() const { return count_; }
    double deadline() const { return deadline_; }

private:
    static double nan() { return std::numeric_limits<double>::quiet_NaN(); }

    void check_worker(int j) const {
        if (j < 0 || j >= n_)
            throw std::out_of_range("worker " + std::to_string(j) + " is not one of the round's " +
                                    std::to_string(n_) + " workers");
    }

    void leave(std::size_t u) {
        if (pending_[u]) {
            pending_[u] = 0;
            --n_pending_;
        }
    }

    std::vector<int> pending_list() const {
        std::vector<int> js;
        for (int j = 0; j < n_; ++j)
            if (pending_[static_cast<std::size_t>(j)]) js.push_back(j);
        return js;
    }

    double min_pending_delay() const {
        double m = inf;
        for (int j = 0; j < n_; ++j)
            if (pending_[static_cast<std::size_t>(j)]) m = std::min(m, delays_[static_cast<std::size_t>(j)]);
        return m;
    }

    double min_pending_hang() const {
        double m = inf;
        for (int j = 0; j < n_; ++j) {
            const auto u = static_cast<std::size_t>(j);
            if (pending_[u]) m = std::min(m, hang_at_[u]);
        }
        return m;
    }

    int n_;
    std::vector<double> delays_;
    long count_;
    double deadline_;
    std::vector<double> hang_at_;
    std::vector<char> has_hang_;
    CoverageRule decodable_, complete_;
    bool complete_needs_all_;
    bool may_complete_ = false;
    std::vector<char> pending_;
    long n_pending_ = 0;
    std::vector<double> arrived_, real_;
    std::size_t n_arrived_ = 0;
    std::vector<std::pair<double, int>> order_;   // (virtual time, worker), ascending
    std::vector<int> log_;
    mutable std::vector<int> js_;
    mutable std::vector<double> times_;
};

}  // namespace letcc
