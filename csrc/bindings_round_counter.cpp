// pybind11 bindings of the local runtime's shared-memory atomics
// (round_counter.hpp), part of letcc._core: registered from the module
// definition in bindings.cpp, so they are imported from letcc._core as before.
// They have nothing to do with splines; they share the extension module only
// to avoid building and loading a second one.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "round_counter.hpp"

namespace py = pybind11;

void register_round_counter(py::module_& mod) {
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
}
