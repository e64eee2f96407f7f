// Lock-free words in memory shared between processes (the local runtime's
// control segment), for the master to sleep until enough workers finished a
// round instead of waking once per answer (letcc.runtime.local_backend).
//
// A round counter is one int64: the round id in the high bits, the number of
// workers that finished that round in the low kCountBits. A worker adds to
// it only while it still holds its own round (compare-and-swap), so an answer
// to an older round can never be counted in the current one.
#pragma once

#include <cstdint>

namespace letcc {

constexpr int kCountBits = 24;
constexpr std::int64_t kCountMask = (std::int64_t(1) << kCountBits) - 1;

inline std::int64_t round_counter_start(std::int64_t round) { return round << kCountBits; }

// Adds one for `round`; the new count, or -1 when the counter holds another round.
inline std::int64_t round_counter_add(std::int64_t* word, std::int64_t round) {
    std::int64_t v = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    for (;;) {
        if ((v >> kCountBits) != round) return -1;
        // on failure v is reloaded with the current value
        if (__atomic_compare_exchange_n(word, &v, v + 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return (v & kCountMask) + 1;
    }
}

// The count of `round` (0 when the counter holds another round).
inline std::int64_t round_counter_count(const std::int64_t* word, std::int64_t round) {
    const std::int64_t v = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    return (v >> kCountBits) == round ? (v & kCountMask) : 0;
}

}  // namespace letcc
