// pybind11 bindings of the compiled waiting rule (round_waiter.hpp):
// letcc._core.CountedWaiter, the base of letcc.runtime.virtual_time's
// CountedRoundWaiter, registered from the module definition in bindings.cpp.
// Every call is O(N) or less on a few arrays, so the GIL stays held: a
// release would cost more than the work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "round_waiter.hpp"

namespace py = pybind11;

namespace {

using letcc::CountedWaiter;
using letcc::CoverageRule;
using letcc::WaitDecision;
using letcc::WaitRule;

const char* rule_name(WaitRule r) {
    switch (r) {
        case WaitRule::count: return "count";
        case WaitRule::complete: return "complete";
        case WaitRule::deadline: return "deadline";
        default: return "all";
    }
}

CountedWaiter make_waiter(const std::vector<int>& dispatched,
                          const py::array_t<double, py::array::c_style | py::array::forcecast>& delays,
                          const py::array_t<bool, py::array::c_style | py::array::forcecast>& never,
                          const py::object& count, double deadline, const py::dict& hang_at,
                          const CoverageRule& decodable, const CoverageRule& complete, const py::object& may_complete,
                          bool complete_needs_all) {
    if (delays.ndim() != 1 || delays.size() < 1)
        throw py::value_error("delays must be 1-D with one entry per worker (at least one)");
    const auto N = static_cast<std::size_t>(delays.size());
    const int n_workers = static_cast<int>(N);
    if (never.ndim() != 1 || static_cast<std::size_t>(never.size()) != N)
        throw py::value_error("never has " + std::to_string(never.size()) + " entries for " + std::to_string(N) +
                              " workers");
    std::vector<double> hang(N, std::numeric_limits<double>::infinity());
    std::vector<char> has(N, 0);
    for (auto item : hang_at) {
        const int j = py::cast<int>(item.first);
        if (j < 0 || j >= n_workers) continue;     // a limit for a worker outside the round: never read
        hang[static_cast<std::size_t>(j)] = py::cast<double>(item.second);
        has[static_cast<std::size_t>(j)] = 1;
    }
    const long c = count.is_none() ? -1 : py::cast<long>(count);
    const int may = may_complete.is_none() ? -1 : (py::cast<bool>(may_complete) ? 1 : 0);
    try {
        return CountedWaiter(n_workers, dispatched, std::vector<double>(delays.data(), delays.data() + N),
                             std::vector<char>(never.data(), never.data() + N), c, deadline, std::move(hang),
                             std::move(has), decodable, complete, may, complete_needs_all);
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
}

}  // namespace

void register_waiter(py::module_& mod) {
    // letcc.codes.waiting_rule.Coverage's (group, need), converted once per rule
    py::class_<CoverageRule>(mod, "CoverageRule")
        .def(py::init([](const std::vector<int>& group, const std::vector<int>& need) {
                 try {
                     return CoverageRule(group, need);
                 } catch (const std::invalid_argument& e) {
                     throw py::value_error(e.what());
                 }
             }),
             py::arg("group"), py::arg("need"))
        .def("first_prefix", [](const CoverageRule& r, const std::vector<int>& workers) -> py::object {
            const long p = r.first_prefix(workers.data(), workers.size());
            return p < 0 ? py::none() : py::object(py::int_(p));
        }, py::arg("workers"));
    py::class_<CountedWaiter>(mod, "CountedWaiter", py::dynamic_attr())
        .def(py::init(&make_waiter), py::arg("dispatched"), py::arg("delays"),
             py::arg("never"), py::arg("count"), py::arg("deadline"), py::arg("hang_at"), py::arg("decodable"),
             py::arg("complete"), py::arg("may_complete"), py::arg("complete_needs_all"))
        .def("result", &CountedWaiter::result, py::arg("j"), py::arg("elapsed"))
        .def(
            "results",
            [](CountedWaiter& w, const std::vector<int>& js, const std::vector<double>& ts, double t0) {
                if (js.size() != ts.size())
                    throw py::value_error(std::to_string(js.size()) + " workers but " + std::to_string(ts.size()) +
                                          " times");
                for (std::size_t i = 0; i < js.size(); ++i) w.result(js[i], ts[i] - t0);
            },
            py::arg("workers"), py::arg("times"), py::arg("t0"))
        .def("_fail", &CountedWaiter::fail, py::arg("j"))
        .def("answers_needed", &CountedWaiter::answers_needed)
        .def("horizon", &CountedWaiter::horizon, py::arg("elapsed"))
        .def("decodable", [](const CountedWaiter& w, const py::iterable& workers) {
            return w.decodable(py::cast<std::vector<int>>(workers));
        }, py::arg("workers"))
        .def(
            "_decide",
            [](const CountedWaiter& w, double elapsed) -> py::object {
                WaitDecision d;
                if (!w.decide(elapsed, d)) return py::none();
                py::tuple answered(d.answered.size());
                for (std::size_t i = 0; i < d.answered.size(); ++i) answered[i] = py::int_(d.answered[i]);
                return py::make_tuple(answered, d.at, rule_name(d.rule));
            },
            py::arg("elapsed"))
        .def("next_change", &CountedWaiter::next_change, py::arg("elapsed"))
        .def("hung", &CountedWaiter::hung, py::arg("elapsed"))
        .def_property_readonly("arrived", [](const CountedWaiter& w) {
            py::dict out;       // worker -> virtual time, in the order recorded (as the Python waiter's dict)
            for (int j : w.arrival_log()) out[py::int_(j)] = w.arrived_at(j);
            return out;
        })
        .def_property_readonly("real", [](const CountedWaiter& w) {
            py::dict out;       // worker -> real elapsed time of its answer, by worker
            for (int j = 0; j < w.n_workers(); ++j)
                if (!std::isnan(w.real_at(j))) out[py::int_(j)] = w.real_at(j);
            return out;
        })
        .def_property_readonly("pending", [](const CountedWaiter& w) {
            py::set out;
            for (int j = 0; j < w.n_workers(); ++j)
                if (w.pending(j)) out.add(py::int_(j));
            return out;
        })
        .def_property_readonly("count", [](const CountedWaiter& w) -> py::object {
            return w.count() < 0 ? py::none() : py::object(py::int_(w.count()));
        })
        .def_property_readonly("deadline", &CountedWaiter::deadline);
}
