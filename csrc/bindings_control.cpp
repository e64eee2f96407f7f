// pybind11 bindings of the local runtime's control segment: its atomic words
// (round_counter.hpp) and the two sides of its task records and doorbell
// (control_words.hpp: TaskPoster for the master, WorkerPort for a worker),
// part of letcc._core: registered from the module definition in bindings.cpp.
// They have nothing to do with splines; they share the extension module only
// to avoid building and loading a second one.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "control_words.hpp"
#include "round_counter.hpp"
#include "wake_timer.hpp"

namespace py = pybind11;

void register_control(py::module_& mod) {
    using namespace letcc;
    // Atomic words of a writable C-contiguous int64 array (round_counter.hpp);
    // noconvert: a copy (another dtype, a strided view) would be silently useless.
    auto word = [](py::array_t<std::int64_t, py::array::c_style>& a, py::ssize_t i) {
        if (!a.writeable()) throw py::value_error("the control array is read-only");
        if (i < 0 || i >= a.size())
            throw py::index_error("word " + std::to_string(i) + " is outside the " + std::to_string(a.size()) +
                                  "-word control array");
        return a.mutable_data() + i;
    };
    mod.def(
        "round_counter_start",
        [word](py::array_t<std::int64_t, py::array::c_style> a, py::ssize_t i, std::int64_t round) {
            __atomic_store_n(word(a, i), round_counter_start(round), __ATOMIC_SEQ_CST);
        },
        py::arg("a").noconvert(), py::arg("i"), py::arg("round"));
    mod.def(
        "round_counter_add",
        [word](py::array_t<std::int64_t, py::array::c_style> a, py::ssize_t i, std::int64_t round) {
            return round_counter_add(word(a, i), round);
        },
        py::arg("a").noconvert(), py::arg("i"), py::arg("round"));
    mod.def(
        "round_counter_count",
        [word](py::array_t<std::int64_t, py::array::c_style> a, py::ssize_t i, std::int64_t round) {
            return round_counter_count(word(a, i), round);
        },
        py::arg("a").noconvert(), py::arg("i"), py::arg("round"));
    mod.def(
        "atomic_store",
        [word](py::array_t<std::int64_t, py::array::c_style> a, py::ssize_t i, std::int64_t v) {
            __atomic_store_n(word(a, i), v, __ATOMIC_SEQ_CST);
        },
        py::arg("a").noconvert(), py::arg("i"), py::arg("value"));
    mod.def(
        "atomic_load",
        [word](py::array_t<std::int64_t, py::array::c_style> a, py::ssize_t i) {
            return __atomic_load_n(word(a, i), __ATOMIC_SEQ_CST);
        },
        py::arg("a").noconvert(), py::arg("i"));

    mod.def("control_words", &ControlWords::size, py::arg("n"), py::arg("ring"),
            "Size in int64 words of the control segment of n workers and `ring` ring slots.");
    mod.attr("OWN_SLOT") = kOwnSlot;
    mod.attr("STOP") = kStop;

    // The control array, checked once: each class keeps a reference to it (the
    // memory stays mapped while one exists) and raw pointers into it.
    auto words = [](py::array_t<std::int64_t, py::array::c_style>& a, std::int64_t n, std::int64_t ring) {
        if (!a.writeable()) throw py::value_error("the control array is read-only");
        if (n < 1 || ring < 1)
            throw py::value_error("n and ring must be >= 1, got n=" + std::to_string(n) + ", ring=" +
                                  std::to_string(ring));
        if (a.ndim() != 1 || a.size() != ControlWords::size(n, ring))
            throw py::value_error("the control array has " + std::to_string(a.size()) + " words; " +
                                  std::to_string(n) + " workers and " + std::to_string(ring) +
                                  " ring slots need " + std::to_string(ControlWords::size(n, ring)));
        return ControlWords{a.mutable_data(), n, ring};
    };

    // After release() the raw pointers would dangle: every method checks.
    struct PyPoster {
        py::object keep;                 // the control array; None once released
        ControlWords w;
        TaskPoster poster;
        const TaskPoster& get() const {
            if (keep.is_none()) throw std::runtime_error("this TaskPoster was released");
            return poster;
        }
    };
    py::class_<PyPoster>(mod, "TaskPoster",
                         "The master's side of the task records and doorbell (csrc/control_words.hpp).")
        .def(py::init([words](py::array_t<std::int64_t, py::array::c_style> a, std::int64_t n, std::int64_t ring) {
                 ControlWords w = words(a, n, ring);
                 return PyPoster{a, w, TaskPoster(w)};
             }),
             py::arg("ctl").noconvert(), py::arg("n"), py::arg("ring"))
        .def(
            "post",
            [](const PyPoster& p, std::int64_t k, std::int64_t r, py::array_t<std::int64_t, py::array::c_style> workers,
               std::int64_t b, py::object sleeps, std::int64_t chunk_rows, py::object slots) {
                if (k < 0 || k >= p.w.ring)
                    throw py::value_error("ring slot " + std::to_string(k) + " is outside [0, " +
                                          std::to_string(p.w.ring) + ")");
                if (r < 0) throw py::value_error("round ids are >= 0, got " + std::to_string(r));
                const std::int64_t* wk = workers.data();
                for (py::ssize_t i = 0; i < workers.size(); ++i)
                    if (wk[i] < 0 || wk[i] >= p.w.n)
                        throw py::value_error("worker " + std::to_string(wk[i]) + " is outside [0, " +
                                              std::to_string(p.w.n) + ")");
                py::array_t<double, py::array::c_style> sl;
                py::array_t<std::int64_t, py::array::c_style> st;
                if (!sleeps.is_none()) {
                    sl = py::array_t<double, py::array::c_style>::ensure(sleeps);
                    if (!sl || sl.ndim() != 1 || sl.size() != p.w.n)
                        throw py::value_error("sleeps must be None or " + std::to_string(p.w.n) + " seconds");
                }
                if (!slots.is_none()) {
                    st = py::array_t<std::int64_t, py::array::c_style>::ensure(slots);
                    if (!st || st.ndim() != 1 || st.size() != p.w.n)
                        throw py::value_error("slots must be None or " + std::to_string(p.w.n) + " input slots");
                }
                p.get().post(k, r, wk, workers.size(), b, sleeps.is_none() ? nullptr : sl.data(), chunk_rows,
                              slots.is_none() ? nullptr : st.data());
            },
            py::arg("ring"), py::arg("round"), py::arg("workers").noconvert(), py::arg("b"), py::arg("sleeps"),
            py::arg("chunk_rows"), py::arg("slots"),
            "Post round `round` in ring slot `ring` to `workers` and wake them with one system call.")
        .def(
            "mail",
            [](const PyPoster& p, std::int64_t j) {
                if (j < 0 || j >= p.w.n) throw py::value_error("worker " + std::to_string(j) + " out of range");
                p.get().mail(j);
            },
            py::arg("worker"), "Worker `worker` has a new message in its pipe: bump its mail and wake it.")
        .def(
            "answers",
            [](const PyPoster& p, std::int64_t r, py::array_t<bool, py::array::c_style> reported,
               std::int64_t n_reported) -> py::object {
                if (!reported.writeable() || reported.ndim() != 1 || reported.size() != p.w.n)
                    throw py::value_error("reported must be a writeable bool array of " + std::to_string(p.w.n) +
                                          " flags");
                std::vector<std::pair<double, std::int64_t>> got;
                p.get().answers(r, reinterpret_cast<std::uint8_t*>(reported.mutable_data()), n_reported, got);
                if (got.empty()) return py::none();
                py::tuple js(got.size()), ts(got.size());
                for (std::size_t i = 0; i < got.size(); ++i) {
                    js[i] = py::int_(got[i].second);
                    ts[i] = py::float_(got[i].first);
                }
                return py::make_tuple(js, ts);
            },
            py::arg("round"), py::arg("reported").noconvert(), py::arg("n_reported"),
            "The answers to `round` in the done words not yet marked in `reported` (marked now), as (workers, "
            "times) in the order they finished; None when there are none (the round's count is not past "
            "`n_reported`, or nothing new).")
        .def("ring_all", [](const PyPoster& p) { p.get().ring_all(); }, "Wake every worker.")
        .def("release", [](PyPoster& p) { p.keep = py::none(); },
             "Drop the reference to the control array (before its memory is unmapped).");

    struct PyPort {
        py::object keep;                 // the control array; None once released
        WorkerPort port;
        WorkerPort& get() {
            if (keep.is_none()) throw std::runtime_error("this WorkerPort was released");
            return port;
        }
    };
    py::class_<PyPort>(mod, "WorkerPort",
                       "A worker's side of the task records and doorbell (csrc/control_words.hpp).")
        .def(py::init([words](py::array_t<std::int64_t, py::array::c_style> a, std::int64_t n, std::int64_t ring,
                              std::int64_t rank, int answer_bell_fd) {
                 ControlWords w = words(a, n, ring);
                 if (rank < 0 || rank >= n)
                     throw py::value_error("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(n) + ")");
                 return PyPort{a, WorkerPort(w, rank, answer_bell_fd)};
             }),
             py::arg("ctl").noconvert(), py::arg("n"), py::arg("ring"), py::arg("rank"), py::arg("answer_bell_fd"))
        .def(
            "next",
            [](PyPort& p, double timeout, double spin) -> py::object {
                TaskRecord t;
                std::int64_t k = 0;
                Next what;
                WorkerPort& port = p.get();
                {
                    py::gil_scoped_release nogil;
                    what = port.next(timeout, spin, &t, &k);
                }
                if (what != Next::kTask) return py::int_(int(what));
                return py::make_tuple(t.round, t.b, t.sleep_s,
                                      t.chunk_rows > 0 ? py::object(py::int_(t.chunk_rows)) : py::object(py::none()),
                                      t.slot, k);
            },
            py::arg("timeout"), py::arg("spin") = 0.0,
            "(round, b, sleep_s, chunk_rows or None, slot, ring) of the next task, or 1 (mail), 2 (stop), "
            "3 (timeout); waits up to `timeout` seconds (< 0: no limit) with the GIL released.")
        .def(
            "nap",
            [](PyPort& p, double seconds) {
                const WorkerPort& port = p.get();
                py::gil_scoped_release nogil;
                return port.nap(seconds);
            },
            py::arg("seconds"), "Sleep until rung or `seconds` passed; True when rung.")
        .def("done", [](PyPort& p, std::int64_t r) { return p.get().done(r); }, py::arg("round"),
             "Report round `round` done through the control words; False: send it as a message.")
        .def("wanted", [](PyPort& p, std::int64_t k) {
                if (k < 0 || k >= p.get().ring()) throw py::value_error("ring slot " + std::to_string(k) + " out of range");
                return p.port.wanted(k);
            }, py::arg("ring"),
             "The round the master still wants from this worker in ring slot `ring`.")
        .def("release", [](PyPort& p) { p.keep = py::none(); },
             "Drop the reference to the control array (before its memory is unmapped).");

    // The dispatcher's timed wake-up (wake_timer.hpp); Linux only (wake_timer_supported).
    mod.attr("wake_timer_supported") = WakeTimer::supported();
    if (WakeTimer::supported())
        py::class_<WakeTimer>(mod, "WakeTimer",
                              "A one-shot timer with a file descriptor to poll (csrc/wake_timer.hpp); "
                              "set from any thread.")
            .def(py::init<>())
            .def("fileno", &WakeTimer::fd, "The descriptor, readable once the timer fired (-1: closed).")
            .def("set", &WakeTimer::set, py::arg("seconds"),
                 "Fire `seconds` from now (<= 0: at once), replacing an earlier setting.")
            .def("disarm", &WakeTimer::disarm, "Not armed any more; an expiry not yet read is dropped.")
            .def("clear", &WakeTimer::clear, "Read the expiry, if any; True when the timer had fired.")
            .def("close", &WakeTimer::close, "Close the descriptor (idempotent).");
}
