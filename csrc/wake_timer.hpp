// A one-shot timer the master's poll can wait on, set from any thread
// (letcc.runtime.local_backend: LocalBackend.wake_at; letcc.serving.inbox).
//
// Why: a request that arrives while the server's dispatcher sleeps with
// nothing to do used to wake it at once, only for the dispatcher to compute
// that the request's round leaves max_batch_delay later and sleep again: one
// extra trip round its loop (about a third of a partial round's master CPU,
// bench/results/master_overhead-*.md). The caller now sets this timer to the
// round's due time instead; the dispatcher's epoll wait sees the timer's file
// descriptor become readable then, and wakes once.
//
// Linux: a timerfd on CLOCK_MONOTONIC (the clock Python's time.perf_counter
// reads there), set relative to now so the caller's clock needs no
// conversion. Elsewhere supported() is false and the backend wakes at once
// instead (correct, one trip more).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <cstring>

#if defined(__linux__)
#include <sys/timerfd.h>
#include <unistd.h>
#endif

namespace letcc {

class WakeTimer {
public:
    static constexpr bool supported() {
#if defined(__linux__)
        return true;
#else
        return false;
#endif
    }

    WakeTimer() {
#if defined(__linux__)
        fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (fd_ < 0) throw std::runtime_error(std::string("timerfd_create failed: ") + std::strerror(errno));
#else
        throw std::runtime_error("WakeTimer needs Linux's timerfd");
#endif
    }
    WakeTimer(const WakeTimer&) = delete;
    WakeTimer& operator=(const WakeTimer&) = delete;
    ~WakeTimer() { close(); }

    // The descriptor to wait on (readable once the timer fired, until clear()); -1 once closed.
    int fd() const { return fd_; }

    // Fire `seconds` from now (<= 0: at once; a finite value only), replacing any earlier setting.
    void set(double seconds) {
        if (!std::isfinite(seconds))
            throw std::invalid_argument("a wake-up time must be finite, got " + std::to_string(seconds));
        // 1 ns, not 0: an it_value of zero would disarm the timer; 1e9 s (31
        // years) at most, inside time_t and int64 everywhere
        const double s = seconds > 1e-9 ? (seconds < 1e9 ? seconds : 1e9) : 1e-9;
        // rounded up to whole nanoseconds: never earlier than asked
        std::int64_t sec = std::int64_t(s), nsec = std::int64_t(std::ceil((s - std::floor(s)) * 1e9));
        if (nsec >= 1000000000) {
            sec += 1;
            nsec -= 1000000000;
        }
        arm(sec, nsec);
    }

    // Not armed any more; an expiry not yet read is dropped (the descriptor is no longer readable).
    void disarm() {
        arm(0, 0);
        clear();
    }

    // Read the expiry count, if any (the descriptor stops being readable); true if the timer had fired.
    bool clear() {
#if defined(__linux__)
        if (fd_ < 0) return false;
        std::uint64_t ticks = 0;
        return ::read(fd_, &ticks, sizeof ticks) == ssize_t(sizeof ticks) && ticks > 0;
#else
        return false;
#endif
    }

    void close() {
#if defined(__linux__)
        if (fd_ >= 0) ::close(fd_);
#endif
        fd_ = -1;
    }

private:
    void arm(std::int64_t sec, std::int64_t nsec) {
#if defined(__linux__)
        if (fd_ < 0) throw std::runtime_error("this WakeTimer is closed");
        itimerspec spec{};
        spec.it_value.tv_sec = time_t(sec);
        spec.it_value.tv_nsec = long(nsec < 0 ? 0 : nsec > 999999999 ? 999999999 : nsec);
        if (timerfd_settime(fd_, 0, &spec, nullptr) != 0)
            throw std::runtime_error(std::string("timerfd_settime failed: ") + std::strerror(errno));
#else
        (void)sec;
        (void)nsec;
#endif
    }

    int fd_ = -1;
};

}  // namespace letcc
