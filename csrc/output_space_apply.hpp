// A decoder's linear map applied in LeTCC's log output space in one call
// (Plan.apply_log and DenseOperator.apply_log in bindings.cpp; Map is a
// driver/linear_maps.hpp map): check that y
// holds probability rows and take log(max(y, floor)) into scratch, apply the
// map, take the softmax of the result over its last axis. The same passes as
// letcc._core.log_prepare / softmax_last_axis (output_space.hpp), without the
// two extra calls from Python and the log array they hand back and forth,
// which at 10 classes cost about as much as the passes.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bindings_arrays.hpp"
#include "output_space.hpp"

namespace letcc {

namespace detail_log_apply {

template <class T, class Map>
pybind11::object run(const Map& map, const pybind11::array& y, std::size_t rows, std::size_t m, bool check_sums,
                     double tol, double floor, const std::int64_t* order) {
    namespace py = pybind11;
    const std::size_t count = rows * m;
    thread_local std::vector<T> scratch, sorted;
    if (scratch.size() < count) scratch.resize(count);
    bool ok;
    {
        std::optional<py::gil_scoped_release> release;
        if (count >= kGilReleaseMinElems) release.emplace();
        const T* src = static_cast<const T*>(y.data());
        if (order) {
            // the answers into ascending worker order (row i <- y[order[i]]): the map's columns
            if (sorted.size() < count) sorted.resize(count);
            const std::size_t n = static_cast<std::size_t>(map.n()), per = count / n;
            for (std::size_t i = 0; i < n; ++i)
                std::memcpy(sorted.data() + i * per, src + static_cast<std::size_t>(order[i]) * per, per * sizeof(T));
            src = sorted.data();
        }
        ok = log_prepare_rows(src, scratch.data(), rows, m, check_sums, tol, floor);
    }
    if (!ok) return py::none();
    std::vector<py::ssize_t> shape(y.shape(), y.shape() + y.ndim());
    shape[0] = static_cast<py::ssize_t>(map.q());
    py::array_t<T> out(shape);
    const std::size_t cols = count / static_cast<std::size_t>(map.n());
    {
        T* op = out.mutable_data();
        py::gil_scoped_release release;
        map.template run<T>(scratch.data(), op, cols, 0);
    }
    {
        std::optional<py::gil_scoped_release> release;
        if (count >= kGilReleaseMinElems) release.emplace();
        softmax_last_axis_rows(out.mutable_data(), static_cast<std::size_t>(map.q()) * cols / m, m);
    }
    return std::move(out);
}

}  // namespace detail_log_apply

// The softmax of map(log(max(y, floor))) along y's first axis, as a new array
// (q, ...): y a C-contiguous float32/float64 ndarray (n, ..., classes), ndim
// >= 2, no axis of length 0. order: None (y's rows in the map's column order)
// or an int64 permutation of 0..n-1, the map then taking y[order] (the rows
// are gathered in the same pass as the check; ValueError for anything else). None when y's entries fail the check (finite, >=
// 0 and, with check_sums, rows summing to 1 within tol); False when y is not
// such an array or its first axis is not n long (the caller's own path then
// takes it, and says what is wrong).
template <class Map>
pybind11::object apply_log_space(const Map& map, const pybind11::object& yobj, bool check_sums, double tol,
                                 double floor, const pybind11::object& order_obj) {
    namespace py = pybind11;
    if (!py::isinstance<py::array>(yobj)) return py::bool_(false);
    py::array y = py::reinterpret_borrow<py::array>(yobj);
    const bind::FloatKind kind = bind::float_kind(y);
    if (kind == bind::FloatKind::none || y.ndim() < 2 || y.shape(0) != map.n()) return py::bool_(false);
    const std::size_t m = static_cast<std::size_t>(y.shape(y.ndim() - 1));
    const std::size_t rows = static_cast<std::size_t>(y.size()) / (m ? m : 1);
    if (m == 0 || rows == 0) return py::bool_(false);
    const std::int64_t* order = nullptr;
    py::array_t<std::int64_t, py::array::c_style> ord;
    if (!order_obj.is_none()) {
        ord = py::array_t<std::int64_t, py::array::c_style>::ensure(order_obj);
        if (!ord || ord.ndim() != 1 || ord.shape(0) != map.n())
            throw py::value_error("order must be a 1-D int64 permutation of the plan's " + std::to_string(map.n()) +
                                  " rows");
        std::vector<char> seen(static_cast<std::size_t>(map.n()), 0);
        for (py::ssize_t i = 0; i < ord.shape(0); ++i) {
            const std::int64_t v = ord.data()[i];
            if (v < 0 || v >= map.n() || seen[static_cast<std::size_t>(v)])
                throw py::value_error("order must be a permutation of 0.." + std::to_string(map.n() - 1) + ", got " +
                                      std::to_string(v) + " at " + std::to_string(i));
            seen[static_cast<std::size_t>(v)] = 1;
        }
        order = ord.data();
    }
    return bind::dispatch_float(kind, [&](auto tag) {
        return detail_log_apply::run<decltype(tag)>(map, y, rows, m, check_sums, tol, floor, order);
    });
}

}  // namespace letcc
