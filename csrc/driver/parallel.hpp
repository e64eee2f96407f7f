// How the driver splits a call over column tiles and threads: the size
// thresholds below which a call stays on the calling thread, and the
// per-thread scratch the kernels write into. No Python here: csrc/driver/ is
// what the bindings, the C++ tests (csrc/test/) and any other host code call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "../thread_pool.hpp"

namespace letcc {
namespace driver {

// Below this many elements a call runs on the calling thread: waking the pool
// costs more than it saves.
constexpr std::size_t kParallelMinElems = 1 << 16;
// The same for the dense kernel, which does far less work per element than the
// banded one: on the 2-core dev machine, where a pool thread takes around
// 100 us to wake, calls with m * (n + q) up to 5e5 ran as fast on one thread as
// on two (the helper mostly woke after the caller had finished: 1 vs 2 threads
// 1.0x in most of 40 cases, 0.8-1.65x in the noisy rest), and 1.1-1.85x faster
// on two from 8e5 (q x n from 8 x 12 to 32 x 32, float32 and float64). Below
// the threshold the call does not wake the pool: the other core stays free.
constexpr std::size_t kDenseParallelMinElems = 1 << 19;
// Outputs at least this large are written with non-temporal stores:
// they do not stay in the caches anyway, and streaming saves reading every
// destination line before writing it.
constexpr std::size_t kStreamMinBytes = std::size_t(16) << 20;

// This thread's scratch, at least `count` elements of T (kept between calls;
// one float64 buffer per thread whatever T).
template <class T>
T* tls_scratch(std::size_t count) {
    static_assert(sizeof(T) <= sizeof(double) && alignof(T) <= alignof(double), "scratch is a float64 buffer");
    thread_local std::vector<double> buf;
    const std::size_t doubles = (count * sizeof(T) + sizeof(double) - 1) / sizeof(double);
    if (buf.size() < doubles) buf.resize(doubles);
    return reinterpret_cast<T*>(buf.data());
}

// body(c0, w) for column tiles [c0, c0 + w) covering [0, m): a first tile of
// `lead` columns (0: none), then tiles of tw columns. `work` (elements
// touched) below kParallelMinElems runs on the calling thread.
template <class F>
void for_each_tile(std::size_t m, std::size_t tw, std::size_t work, int threads, F&& body, std::size_t lead = 0) {
    if (m == 0 || tw == 0) return;
    if (lead >= m) lead = 0;
    const std::size_t ntiles = (lead ? 1 : 0) + (m - lead + tw - 1) / tw;
    const int nthreads = (work < kParallelMinElems) ? 1 : threads;
    ThreadPool::instance().parallel_for(ntiles, nthreads, [&](std::size_t t) {
        if (lead && t == 0) return body(std::size_t(0), lead);
        const std::size_t c0 = lead + (lead ? t - 1 : t) * tw;
        const std::size_t w = std::min(tw, m - c0);
        body(c0, w);
    });
}

}  // namespace driver
}  // namespace letcc
