// letcc._core.copy_rows: the serving master's copies of its requests' inputs
// (the caller's copy at submit, a round's inputs padded to K), made with the
// GIL held where they are small, registered from the module definition in
// bindings.cpp.
//
// Why not numpy: numpy releases the GIL around any copy whose inner loop is
// longer than 500 elements (one 28x28 image is 784). Where other threads of
// the process wait for the GIL (a server's callers submitting while its
// dispatcher pads a round), each release hands it over, and taking it back
// waits for the other thread to block or for the interpreter's switch
// interval: a context switch or two per input. Measured (bench/gil_handoffs.py,
// CodedServer with LeTCC(8, 16), 4 callers, full rounds of 4 groups,
// interleaved turns on one build): 48.7 us of master CPU a request with
// numpy's copies, 32.9 us with these (bench/results/gil_handoffs.md). One copy
// beside a busy thread: 3.35 us of CPU and 170 us of wall with numpy's, 1.27
// us and 2.4 us with these. From kCopyReleaseMinBytes the copy is long
// enough for a release to pay and the GIL is released around it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bindings_arrays.hpp"

namespace py = pybind11;

namespace {

// 1 MiB: about 50-100 us of memcpy, far more than a GIL handover costs.
constexpr std::size_t kCopyReleaseMinBytes = std::size_t(1) << 20;

std::string dtype_text(const py::array& a) { return std::string(py::str(a.dtype())); }

// out[i] = parts[i] for i < len(parts), the rows after them = parts[-1].
void copy_rows(const py::object& outobj, const py::sequence& parts) {
    if (!py::isinstance<py::array>(outobj))
        throw py::type_error("out must be a numpy array, got " + std::string(py::str(py::type::of(outobj))));
    py::array out = py::reinterpret_borrow<py::array>(outobj);
    if (!(out.flags() & py::array::c_style) || !out.writeable())
        throw py::value_error("out must be a writeable C-contiguous array");
    if (out.ndim() < 1) throw py::value_error("out must have a first axis of rows, got a 0-d array");
    const std::size_t rows = static_cast<std::size_t>(out.shape(0));
    const std::size_t n = py::len(parts);
    if (n == 0) throw py::value_error("copy_rows needs at least one part");
    if (n > rows)
        throw py::value_error("got " + std::to_string(n) + " parts for " + std::to_string(rows) + " rows of out");
    const std::size_t row_bytes = rows ? static_cast<std::size_t>(out.nbytes()) / rows : 0;
    std::vector<py::array> held;            // the parts alive until the copy is done
    held.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        const py::object obj = parts[i];
        if (!py::isinstance<py::array>(obj))
            throw py::type_error("part " + std::to_string(i) + " must be a numpy array, got " +
                                 std::string(py::str(py::type::of(obj))));
        const py::array a = py::reinterpret_borrow<py::array>(obj);
        if (!a.dtype().is(out.dtype()))
            throw py::type_error("part " + std::to_string(i) + " has dtype " + dtype_text(a) + " but out has " +
                                 dtype_text(out));
        if (!(a.flags() & py::array::c_style))
            throw py::value_error("part " + std::to_string(i) + " must be C-contiguous");
        if (static_cast<std::size_t>(a.nbytes()) != row_bytes)
            throw py::value_error("part " + std::to_string(i) + " has " + std::to_string(a.size()) +
                                  " elements but a row of out has " +
                                  std::to_string(rows ? static_cast<std::size_t>(out.size()) / rows : 0));
        if (letcc::bind::ranges_overlap(a, out))
            throw py::value_error("part " + std::to_string(i) + " overlaps out");
        held.push_back(a);
    }
    char* dst = static_cast<char*>(out.mutable_data());
    std::vector<const char*> src(n);
    for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<const char*>(held[i].data());
    std::optional<py::gil_scoped_release> release;
    if (rows * row_bytes >= kCopyReleaseMinBytes) release.emplace();
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(dst + r * row_bytes, src[r < n ? r : n - 1], row_bytes);
}

}  // namespace

void register_copy(py::module_& mod) {
    mod.def("copy_rows", &copy_rows, py::arg("out"), py::arg("parts"),
            "Copy parts[i] into out[i] (out C-contiguous and writeable, (rows, ...); each part C-contiguous, "
            "out's dtype, one row's elements) and parts[-1] into the rows after the last part, with the GIL "
            "held below 1 MiB.");
}
