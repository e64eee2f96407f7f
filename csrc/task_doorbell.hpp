// Tasks handed to local worker processes through shared memory, and one
// doorbell that wakes exactly the workers a post concerns
// (letcc.runtime.local_backend, letcc.runtime.worker_main).
//
// Why: a round used to write one task message into each of N pipes from
// Python. Each write woke a sleeping worker on the spot, which on a machine
// with fewer cores than workers preempted the master between writes: 16
// writes took ~300 us of a 0.5 ms round (cProfile, N = 16, 2 cores). Here the
// master writes N small records in memory and makes one futex system call.
//
// Records: one per (ring slot k, worker j), 5 int64 words
//     [round, rows per slot b, sleep seconds (float64 bits), chunk rows (0:
//      none), input slot (kOwnSlot: the worker's rank)]
// guarded like a seqlock: the master sets round to kWriting, writes the other
// words, then publishes the round (release); a reader accepts a record only
// when it reads the same non-negative round before and after the other words.
// Rounds only grow, so a worker takes record k when its round is above the
// last it took from k. A record the master replaces before the worker took
// it (ring slot k reused for a later round: the earlier round had ended) is
// never run; the master's bookkeeping acknowledges every task up to the
// round a reply names, so nothing waits for it.
//
// Doorbell: the low 32 bits of one int64 word, a sequence number the master
// bumps on every post; workers sleep on it with FUTEX_WAIT_BITSET, worker j
// with bit (j mod 32), and a post wakes the union of its workers' bits in one
// FUTEX_WAKE_BITSET call (with more than 32 workers a few others wake too,
// find nothing new and sleep again). A worker reads the sequence before it
// scans its records and sleeps only while the sequence is unchanged, so a
// post between its scan and its sleep is never missed.
//
// Mail: one int64 counter per worker, bumped after the master wrote a
// message into that worker's pipe (layout, probe, stop): the worker drains
// its pipe when its counter moved, so pipe messages keep their order before
// the tasks posted after them. kStop in a worker's counter means shut down.
//
// Linux uses futex(2). Elsewhere the waits poll the sequence with short
// sleeps (up to 1 ms): correct, with more latency and some idle CPU.
#pragma once

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <ctime>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#include <unistd.h>
#endif

#include "round_counter.hpp"

namespace letcc {

constexpr std::int64_t kNoTask = -1;     // a record never posted
constexpr std::int64_t kStop = -2;       // a mail counter (or any word) after shutdown
constexpr std::int64_t kWriting = -3;    // a record being rewritten
constexpr std::int64_t kOwnSlot = -2;    // input slot: the worker's own rank
constexpr int kRecordWords = 5;

struct TaskRecord {
    std::int64_t round = kNoTask;
    std::int64_t b = 0;
    double sleep_s = 0.0;
    std::int64_t chunk_rows = 0;
    std::int64_t slot = kOwnSlot;
};

inline double monotonic_seconds() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);      // what Python's time.perf_counter reads on Linux
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// The 32-bit sequence inside an int64 word (its low half on either byte order).
inline std::uint32_t* bell_seq(std::int64_t* word) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return reinterpret_cast<std::uint32_t*>(word) + 1;
#else
    return reinterpret_cast<std::uint32_t*>(word);
#endif
}

inline std::uint32_t worker_bit(std::int64_t rank) { return std::uint32_t(1) << (rank & 31); }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// ---- records --------------------------------------------------------------

inline void write_record(std::int64_t* rec, const TaskRecord& t) {
    __atomic_store_n(&rec[0], kWriting, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    std::int64_t sleep_bits;
    std::memcpy(&sleep_bits, &t.sleep_s, sizeof sleep_bits);
    __atomic_store_n(&rec[1], t.b, __ATOMIC_RELAXED);
    __atomic_store_n(&rec[2], sleep_bits, __ATOMIC_RELAXED);
    __atomic_store_n(&rec[3], t.chunk_rows, __ATOMIC_RELAXED);
    __atomic_store_n(&rec[4], t.slot, __ATOMIC_RELAXED);
    __atomic_store_n(&rec[0], t.round, __ATOMIC_RELEASE);
}

// 1: a consistent record (in *out), 0: none posted (or shut down), -1: being
// rewritten now (read again).
inline int read_record(const std::int64_t* rec, TaskRecord* out) {
    const std::int64_t r1 = __atomic_load_n(&rec[0], __ATOMIC_ACQUIRE);
    if (r1 == kWriting) return -1;
    if (r1 < 0) return 0;
    const std::int64_t b = __atomic_load_n(&rec[1], __ATOMIC_RELAXED);
    const std::int64_t sleep_bits = __atomic_load_n(&rec[2], __ATOMIC_RELAXED);
    const std::int64_t chunk = __atomic_load_n(&rec[3], __ATOMIC_RELAXED);
    const std::int64_t slot = __atomic_load_n(&rec[4], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&rec[0], __ATOMIC_RELAXED) != r1) return -1;
    out->round = r1;
    out->b = b;
    std::memcpy(&out->sleep_s, &sleep_bits, sizeof sleep_bits);
    out->chunk_rows = chunk;
    out->slot = slot;
    return 1;
}

// ---- the doorbell -----------------------------------------------------------

// Bump the sequence and wake the sleepers whose bit is in `mask`.
inline void ring_doorbell(std::int64_t* word, std::uint32_t mask) {
    std::uint32_t* seq = bell_seq(word);
    __atomic_fetch_add(seq, 1u, __ATOMIC_SEQ_CST);
    if (mask == 0) return;
#if defined(__linux__)
    // shared (not FUTEX_PRIVATE_FLAG): the word is in memory mapped by other processes
    syscall(SYS_futex, seq, FUTEX_WAKE_BITSET, INT_MAX, nullptr, nullptr, mask);
#endif
}

inline std::uint32_t doorbell_seq(std::int64_t* word) {
    return __atomic_load_n(bell_seq(word), __ATOMIC_SEQ_CST);
}

// Sleep while the sequence still reads `seen`, until rung for `bit` or until
// `deadline` (monotonic seconds; < 0: no limit). false on timeout. May return
// early (a signal, another bit's post): callers re-read what they wait for.
inline bool wait_doorbell(std::int64_t* word, std::uint32_t seen, std::uint32_t bit, double deadline) {
    std::uint32_t* seq = bell_seq(word);
    if (__atomic_load_n(seq, __ATOMIC_SEQ_CST) != seen) return true;
#if defined(__linux__)
    timespec abs_ts;
    timespec* ts = nullptr;
    if (deadline >= 0) {
        double whole = 0;
        whole = double(std::int64_t(deadline));
        abs_ts.tv_sec = time_t(whole);
        abs_ts.tv_nsec = long((deadline - whole) * 1e9);
        if (abs_ts.tv_nsec >= 1000000000L) abs_ts.tv_nsec = 999999999L;
        ts = &abs_ts;                    // FUTEX_WAIT_BITSET: an absolute CLOCK_MONOTONIC time
    }
    const long rc = syscall(SYS_futex, seq, FUTEX_WAIT_BITSET, seen, ts, nullptr, bit);
    if (rc == -1 && errno == ETIMEDOUT) return false;
    return true;
#else
    (void)bit;
    for (long pause_us = 20;; pause_us = pause_us < 1000 ? pause_us * 2 : 1000) {
        if (__atomic_load_n(seq, __ATOMIC_SEQ_CST) != seen) return true;
        if (deadline >= 0 && monotonic_seconds() >= deadline) return false;
        usleep(useconds_t(pause_us));
    }
#endif
}

}  // namespace letcc
