// pybind11 bindings of the CUDA core (letcc._cuda). Deliberately low level:
// arrays arrive as raw device pointers with the caller's stream handle;
// python/letcc/splines/cuda_dispatch.py validates torch / CuPy arrays,
// allocates outputs with the input's own library and calls in here. Launches
// run with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include <cuda_runtime_api.h>

#include "device_plan.hpp"

namespace py = pybind11;
using letcc::cuda::DevicePlan;
using letcc::cuda::GammaStore;
using letcc::cuda::LaunchConfig;
using letcc::cuda::Tuning;

namespace {

using F64Array = py::array_t<double, py::array::c_style | py::array::forcecast>;

F64Array vector_arg(const py::array& a, const char* name) {
    F64Array arr = F64Array::ensure(a);
    if (!arr || arr.ndim() != 1) throw py::value_error(std::string(name) + " must be a 1-D float64 array");
    return arr;
}

Tuning tuning(int store, int tile, int depth) {
    if (store < 0 || store > 2) throw py::value_error("store must be 0 (auto), 1 (shared) or 2 (global), got " + std::to_string(store));
    if (depth < 0 || depth > 64) throw py::value_error("depth must be in 0..64, got " + std::to_string(depth));
    Tuning t;
    t.store = store;
    t.tile = tile;
    t.depth = depth;
    return t;
}

std::unique_ptr<DevicePlan> make_plan(const py::array& x, const py::array& w, double lam, const py::array& at,
                                      int device) {
    const F64Array xv = vector_arg(x, "x"), wv = vector_arg(w, "w"), av = vector_arg(at, "at");
    if (wv.size() != xv.size())
        throw py::value_error("w has length " + std::to_string(wv.size()) + " but x has length " +
                              std::to_string(xv.size()));
    py::gil_scoped_release release;
    return std::make_unique<DevicePlan>(xv.data(), wv.data(), static_cast<std::size_t>(xv.size()), lam, av.data(),
                                        static_cast<std::size_t>(av.size()), device);
}

// The kernels' column code run on the host (letcc.splines.cuda_dispatch tests
// use it where there is no GPU): y a C-contiguous float32/float64 (n, m) array.
py::array emulate(const py::array& x, const py::array& w, double lam, const py::array& at, const py::array& y,
                  int tile, int depth) {
    const F64Array xv = vector_arg(x, "x"), wv = vector_arg(w, "w"), av = vector_arg(at, "at");
    if (wv.size() != xv.size()) throw py::value_error("w and x differ in length");
    const bool f64 = py::isinstance<py::array_t<double>>(y);
    if (!(f64 || py::isinstance<py::array_t<float>>(y)) || y.ndim() != 2 || !(y.flags() & py::array::c_style))
        throw py::type_error("y must be a C-contiguous 2-D float32 or float64 array");
    if (y.shape(0) != xv.size()) throw py::value_error("y must have one row per knot");
    if (tile < 1 || depth < 1 || depth > 64) throw py::value_error("tile >= 1 and depth in 1..64 required");
    const letcc::cuda::PackedPlan pp = letcc::cuda::pack_plan(xv.data(), wv.data(), static_cast<std::size_t>(xv.size()),
                                                              lam, av.data(), static_cast<std::size_t>(av.size()));
    const long long m = y.shape(1);
    if (f64) {
        py::array_t<double> out({static_cast<py::ssize_t>(pp.q), static_cast<py::ssize_t>(m)});
        letcc::cuda::emulate_plan_f64(pp.view(), static_cast<const double*>(y.data()), out.mutable_data(), m, tile, depth);
        return std::move(out);
    }
    py::array_t<float> out({static_cast<py::ssize_t>(pp.q), static_cast<py::ssize_t>(m)});
    letcc::cuda::emulate_plan_f32(pp.view(), static_cast<const float*>(y.data()), out.mutable_data(), m, tile, depth);
    return std::move(out);
}

}  // namespace

PYBIND11_MODULE(_cuda, mod) {
    mod.doc() = "letcc's CUDA core: smoothing-spline plans applied to device arrays (one thread per column)";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const std::invalid_argument& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        }
    });

    mod.def("probe", []() {
        const auto r = letcc::cuda::probe_devices();
        return py::make_tuple(r.first, r.second);
    }, "(number of CUDA devices, '' or the CUDA runtime's error) without raising");
    mod.def("runtime_version", []() {
        int v = 0;
        cudaRuntimeGetVersion(&v);
        return v;
    });
    mod.def("driver_version", []() {
        int v = 0;
        cudaDriverGetVersion(&v);  // 0 when no driver is installed
        return v;
    });
    mod.attr("compiled_archs") = LETCC_CUDA_ARCHS;
    mod.def("emulate", &emulate, py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("at"), py::arg("y"),
            py::arg("tile") = 32, py::arg("depth") = 32,
            "the kernels' per-column code run on the host, for checks without a GPU");

    py::class_<DevicePlan>(mod, "Plan")
        .def(py::init(&make_plan), py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("at"), py::arg("device"))
        .def_property_readonly("n", &DevicePlan::n)
        .def_property_readonly("q", &DevicePlan::q)
        .def_property_readonly("device", &DevicePlan::device)
        .def_property_readonly("device_bytes", &DevicePlan::device_bytes)
        .def(
            "apply",
            [](DevicePlan& p, std::uintptr_t y, std::uintptr_t out, long long m, bool f64, std::uintptr_t stream,
               int store, int tile, int depth) {
                const Tuning t = tuning(store, tile, depth);
                py::gil_scoped_release release;
                p.apply(reinterpret_cast<const void*>(y), reinterpret_cast<void*>(out), m, f64,
                        reinterpret_cast<cudaStream_t>(stream), t);
            },
            py::arg("y"), py::arg("out"), py::arg("m"), py::arg("f64"), py::arg("stream"), py::arg("store") = 0,
            py::arg("tile") = 0, py::arg("depth") = 0,
            "out (q x m) = plan(y (n x m)): raw device pointers, C-contiguous, on this plan's device; "
            "enqueued on `stream` (a cudaStream_t as an integer)")
        .def(
            "config",
            [](const DevicePlan& p, long long m, bool f64, int store, int tile, int depth) {
                const LaunchConfig c = p.config(m, f64, tuning(store, tile, depth));
                py::dict d;
                d["store"] = c.store == GammaStore::Shared ? "shared" : "global";
                d["tile"] = c.tile;
                d["depth"] = c.depth;
                d["grid"] = c.grid;
                d["shared_bytes"] = c.shared_bytes;
                return d;
            },
            py::arg("m"), py::arg("f64"), py::arg("store") = 0, py::arg("tile") = 0, py::arg("depth") = 0,
            "the launch configuration apply would use");
}
