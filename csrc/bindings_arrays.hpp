// The array conversions every pybind11 file of letcc._core shares: float64
// vectors from array_likes, the one dtype dispatch (float32 / float64,
// ducc0's style: the compute is a template over T instantiated once per
// dtype, and the bindings branch on the dtype in one place, dispatch_float),
// and the guard on a compiled call's arrays that memory safety needs. The
// user-facing checks and their messages live in Python
// (letcc/splines/_validation.py); the guards here are for calls that reach
// letcc._core without them.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>
#include <vector>

namespace letcc {
namespace bind {

namespace py = pybind11;

inline std::vector<double> as_f64_vector(const py::array& a, const char* name) {
    auto arr = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
    if (!arr) throw py::type_error(std::string(name) + " must be convertible to float64");
    if (arr.ndim() != 1)
        throw py::value_error(std::string(name) + " must be 1-D, got ndim = " + std::to_string(arr.ndim()));
    return std::vector<double>(arr.data(), arr.data() + arr.size());
}

// The element type of a C-contiguous float32/float64 ndarray (none: neither,
// or not C-contiguous).
enum class FloatKind { none, f32, f64 };

inline FloatKind float_kind(const py::array& a) {
    if (!(a.flags() & py::array::c_style)) return FloatKind::none;
    if (py::isinstance<py::array_t<double>>(a)) return FloatKind::f64;
    if (py::isinstance<py::array_t<float>>(a)) return FloatKind::f32;
    return FloatKind::none;
}

// body(T{}) with T = double for f64, float for f32 (kind must not be none):
// the one place a binding turns a dtype into a type.
template <class F>
decltype(auto) dispatch_float(FloatKind kind, F&& body) {
    if (kind == FloatKind::f64) return body(double{});
    return body(float{});
}

// Product of the axes after the first (the columns of an (n, ...) array).
inline std::size_t columns_of(const py::array& y) {
    std::size_t m = 1;
    for (py::ssize_t d = 1; d < y.ndim(); ++d) m *= static_cast<std::size_t>(y.shape(d));
    return m;
}

// y's shape with its first axis set to rows.
inline std::vector<py::ssize_t> shape_with_rows(const py::array& y, py::ssize_t rows) {
    std::vector<py::ssize_t> shape(y.shape(), y.shape() + y.ndim());
    shape[0] = rows;
    return shape;
}

inline bool ranges_overlap(const py::array& a, const py::array& b) {
    const char* a0 = static_cast<const char*>(a.data());
    const char* b0 = static_cast<const char*>(b.data());
    const char* a1 = a0 + a.nbytes();
    const char* b1 = b0 + b.nbytes();
    return a0 < b1 && b0 < a1;
}

// The memory-safety guard of a compiled call's data array: a C-contiguous
// float32/float64 array with n rows along its first axis.
inline FloatKind checked_float_array(const py::array& y, const char* name, py::ssize_t n) {
    const FloatKind kind = float_kind(y);
    if (kind == FloatKind::none) {
        if (py::isinstance<py::array_t<double>>(y) || py::isinstance<py::array_t<float>>(y))
            throw py::value_error(std::string(name) + " must be C-contiguous");
        throw py::type_error(std::string(name) + " must be float32 or float64, got " + std::string(py::str(y.dtype())));
    }
    if (y.ndim() < 1 || y.shape(0) != n)
        throw py::value_error(std::string(name) + " must have " + std::to_string(n) + " rows (one per knot), got " +
                              (y.ndim() < 1 ? std::string("a 0-d array") : std::to_string(y.shape(0))));
    return kind;
}

}  // namespace bind
}  // namespace letcc
