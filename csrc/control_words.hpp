// The local runtime's control segment: its layout, and the two sides that use
// it: the master posting tasks (TaskPoster) and a worker taking them and
// reporting answers (WorkerPort). No Python here; bindings_control.cpp wraps
// both. letcc.runtime.worker_main's docstring describes the same layout for
// the Python side (control_layout), which must agree with ControlWords.
//
// int64 words, N workers, R ring slots (rounds in flight):
//     [0, R*N)              wanted[k][j]: the round the master still wants from j in k
//     [R*N, (R+1)*N)        input slot of each worker's next probe
//     [(R+1)*N, (R+2)*N)    the last round each worker finished
//     [(R+2)*N, (R+3)*N)    when (float64 bits, monotonic seconds)
//     (R+3)*N               the round counter (round_counter.hpp)
//     (R+3)*N + 1           the count at which a finishing worker rings the master
//     [(R+3)*N+2, (R+4)*N+2) mail counters (task_doorbell.hpp)
//     (R+4)*N + 2           the task doorbell (task_doorbell.hpp)
//     (R+4)*N + 3 ...       task records [k][j], kRecordWords each
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <unistd.h>

#include "round_counter.hpp"
#include "task_doorbell.hpp"

namespace letcc {

struct ControlWords {
    std::int64_t* base;
    std::int64_t n, ring;

    static std::int64_t size(std::int64_t n, std::int64_t ring) {
        return (ring + 4) * n + 3 + kRecordWords * ring * n;
    }
    std::int64_t* wanted(std::int64_t k, std::int64_t j) const { return base + k * n + j; }
    std::int64_t* done_round(std::int64_t j) const { return base + (ring + 1) * n + j; }
    std::int64_t* done_time(std::int64_t j) const { return base + (ring + 2) * n + j; }
    std::int64_t* counter() const { return base + (ring + 3) * n; }
    std::int64_t* answer_target() const { return base + (ring + 3) * n + 1; }
    std::int64_t* mail(std::int64_t j) const { return base + (ring + 3) * n + 2 + j; }
    std::int64_t* task_bell() const { return base + (ring + 4) * n + 2; }
    std::int64_t* record(std::int64_t k, std::int64_t j) const {
        return base + (ring + 4) * n + 3 + kRecordWords * (k * n + j);
    }
};

// ---- the master's side --------------------------------------------------------

class TaskPoster {
public:
    explicit TaskPoster(ControlWords w) : w_(w) {}

    // Round r in ring slot k to `count` workers: wanted words, records, one
    // wake-up for all of them. sleeps / slots: per worker (indexed by rank) or
    // null (0 s / kOwnSlot).
    void post(std::int64_t k, std::int64_t r, const std::int64_t* workers, std::int64_t count, std::int64_t b,
              const double* sleeps, std::int64_t chunk_rows, const std::int64_t* slots) const {
        std::uint32_t mask = 0;
        TaskRecord t;
        t.round = r;
        t.b = b;
        t.chunk_rows = chunk_rows;
        for (std::int64_t i = 0; i < count; ++i) {
            const std::int64_t j = workers[i];
            __atomic_store_n(w_.wanted(k, j), r, __ATOMIC_RELAXED);
            t.sleep_s = sleeps ? sleeps[j] : 0.0;
            t.slot = slots ? slots[j] : kOwnSlot;
            write_record(w_.record(k, j), t);        // its release store publishes wanted too
            mask |= worker_bit(j);
        }
        ring_doorbell(w_.task_bell(), mask);
    }

    // Worker j has a new message in its pipe.
    void mail(std::int64_t j) const {
        __atomic_fetch_add(w_.mail(j), 1, __ATOMIC_SEQ_CST);
        ring_doorbell(w_.task_bell(), worker_bit(j));
    }

    // Wake every worker (shutdown: after kStop is written everywhere).
    void ring_all() const { ring_doorbell(w_.task_bell(), ~std::uint32_t(0)); }

    // The answers to round r recorded in the done words and not yet marked in
    // `reported` (n flags, marked here), as (time, worker) in the order the
    // workers finished (ties: by worker). Nothing is scanned while the round's
    // counter is not past `n_reported` (a worker writes its words, then
    // counts: an answer written and not yet counted is found once it is).
    void answers(std::int64_t r, std::uint8_t* reported, std::int64_t n_reported,
                 std::vector<std::pair<double, std::int64_t>>& out) const {
        out.clear();
        if (round_counter_count(w_.counter(), r) <= n_reported) return;
        for (std::int64_t j = 0; j < w_.n; ++j) {
            if (reported[j] || __atomic_load_n(w_.done_round(j), __ATOMIC_SEQ_CST) != r) continue;
            const std::int64_t bits = __atomic_load_n(w_.done_time(j), __ATOMIC_SEQ_CST);
            double t;
            std::memcpy(&t, &bits, sizeof t);
            out.emplace_back(t, j);
            reported[j] = 1;
        }
        std::stable_sort(out.begin(), out.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
    }

private:
    ControlWords w_;
};

// ---- a worker's side ------------------------------------------------------------

enum class Next { kTask = 0, kMail = 1, kStop = 2, kTimeout = 3 };

class WorkerPort {
public:
    // Records posted before this worker started (to a worker of the same rank
    // that died) are not its tasks: it starts after them.
    WorkerPort(ControlWords w, std::int64_t rank, int answer_bell_fd)
        : w_(w), rank_(rank), bit_(worker_bit(rank)), bell_fd_(answer_bell_fd), taken_(std::size_t(w.ring), kNoTask) {
        for (std::int64_t k = 0; k < w_.ring; ++k) {
            TaskRecord t;
            int rc;
            while ((rc = read_record(w_.record(k, rank_), &t)) < 0) cpu_relax();
            if (rc > 0) taken_[std::size_t(k)] = t.round;
        }
        seen_mail_ = __atomic_load_n(w_.mail(rank_), __ATOMIC_SEQ_CST);
    }

    // The next thing to do: a task (the oldest new record, in *task and
    // *ring), mail (drain the pipe), stop, or a timeout (`timeout` seconds,
    // < 0: none). Spins `spin` seconds reading the doorbell before it sleeps.
    Next next(double timeout, double spin, TaskRecord* task, std::int64_t* ring) {
        const double start = (timeout >= 0 || spin > 0) ? monotonic_seconds() : 0.0;
        const double deadline = timeout >= 0 ? start + timeout : -1.0;
        const double spin_end = spin > 0 ? start + spin : 0.0;
        for (;;) {
            const std::uint32_t seq = doorbell_seq(w_.task_bell());
            const std::int64_t m = __atomic_load_n(w_.mail(rank_), __ATOMIC_SEQ_CST);
            if (m == kStop) return Next::kStop;
            if (m != seen_mail_) {
                seen_mail_ = m;
                return Next::kMail;
            }
            std::int64_t best = -1;
            bool busy = false;
            TaskRecord cand, t;
            for (std::int64_t k = 0; k < w_.ring; ++k) {
                const int rc = read_record(w_.record(k, rank_), &t);
                if (rc < 0) {
                    busy = true;
                } else if (rc > 0 && t.round > taken_[std::size_t(k)] && (best < 0 || t.round < cand.round)) {
                    cand = t;
                    best = k;
                }
            }
            if (best >= 0) {
                taken_[std::size_t(best)] = cand.round;
                *task = cand;
                *ring = best;
                return Next::kTask;
            }
            if (busy || (spin_end > 0 && monotonic_seconds() < spin_end)) {
                cpu_relax();
                continue;
            }
            if (!wait_doorbell(w_.task_bell(), seq, bit_, deadline)) return Next::kTimeout;
        }
    }

    // Sleep up to `seconds` or until the doorbell rings for this worker (or
    // its mail moved); true when woken early.
    bool nap(double seconds) const {
        const std::uint32_t seq = doorbell_seq(w_.task_bell());
        if (__atomic_load_n(w_.mail(rank_), __ATOMIC_SEQ_CST) != seen_mail_) return true;
        return wait_doorbell(w_.task_bell(), seq, bit_, monotonic_seconds() + seconds);
    }

    // Round r is done: its time and id in this worker's words, counted in the
    // round counter while the counter holds r, and the master's doorbell
    // (one byte into answer_bell_fd) rung by the answer that reaches its
    // target. false when the counter holds another round: then the answer
    // goes as a message.
    bool done(std::int64_t r) const {
        const double now = monotonic_seconds();
        std::int64_t bits;
        std::memcpy(&bits, &now, sizeof bits);
        __atomic_store_n(w_.done_time(rank_), bits, __ATOMIC_SEQ_CST);
        __atomic_store_n(w_.done_round(rank_), r, __ATOMIC_SEQ_CST);
        const std::int64_t count = round_counter_add(w_.counter(), r);
        if (count < 0) return false;
        if (count == __atomic_load_n(w_.answer_target(), __ATOMIC_SEQ_CST) && bell_fd_ >= 0) {
            const char byte = '!';
            ssize_t rc;
            do {
                rc = ::write(bell_fd_, &byte, 1);      // non-blocking: a full pipe has rung already
            } while (rc < 0 && errno == EINTR);
        }
        return true;
    }

    std::int64_t wanted(std::int64_t k) const { return __atomic_load_n(w_.wanted(k, rank_), __ATOMIC_SEQ_CST); }
    std::int64_t ring() const { return w_.ring; }

private:
    ControlWords w_;
    std::int64_t rank_;
    std::uint32_t bit_;
    int bell_fd_;
    std::vector<std::int64_t> taken_;
    std::int64_t seen_mail_ = 0;
};

}  // namespace letcc
