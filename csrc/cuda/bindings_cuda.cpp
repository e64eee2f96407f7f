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
    if (depth < 0 || depth > 64) throw py::value_error("depth must be in 0..64 (0 = automatic), got " + std::to_string(depth));
    if (tile != 0 && tile != 32 && tile != 64 && tile != 128 && tile != 256)
        throw py::value_error("tile must be 0 (automatic), 32, 64, 128 or 256, got " + std::to_string(tile));
    Tuning t;
    t.store = store;
    t.tile = tile;
    t.depth = depth;
    return t;
}

std::unique_ptr<DevicePlan> make_plan(const py::array& x, const py::array& w, double lam, const py::array& at,
                                      int device, int nu) {
    const F64Array xv = vector_arg(x, "x"), wv = vector_arg(w, "w"), av = vector_arg(at, "at");
    if (wv.size() != xv.size())
        throw py::value_error("w has length " + std::to_string(wv.size()) + " but x has length " +
                              std::to_string(xv.size()));
    py::gil_scoped_release release;
    return std::make_unique<DevicePlan>(xv.data(), wv.data(), static_cast<std::size_t>(xv.size()), lam, av.data(),
                                        static_cast<std::size_t>(av.size()), device, nu);
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

py::dict config_dict(const LaunchConfig& c) {
    py::dict d;
    d["store"] = c.store == GammaStore::Shared ? "shared" : "global";
    d["tile"] = c.tile;
    d["depth"] = c.depth;
    d["grid"] = c.grid;
    d["shared_bytes"] = c.shared_bytes;
    return d;
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
    mod.def(
        "choose_launch",
        [](int n, long long m, bool f64, int store, int tile, int depth, int sm_count, std::size_t shared_optin,
           int global_blocks_per_sm) {
            if (n < 1 || m < 0) throw py::value_error("need n >= 1 and m >= 0");
            return config_dict(letcc::cuda::choose_launch(n, m, f64 ? 8 : 4, tuning(store, tile, depth), sm_count,
                                                          shared_optin, global_blocks_per_sm));
        },
        py::arg("n"), py::arg("m"), py::arg("f64"), py::arg("store") = 0, py::arg("tile") = 0, py::arg("depth") = 0,
        py::arg("sm_count") = 132, py::arg("shared_optin") = 232448, py::arg("global_blocks_per_sm") = 4,
        "the launch configuration for a device described by its numbers (defaults: H100/H200)");
    mod.def("emulate", &emulate, py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("at"), py::arg("y"),
            py::arg("tile") = 32, py::arg("depth") = 32,
            "the kernels' per-column code run on the host, for checks without a GPU");

    py::class_<DevicePlan>(mod, "Plan")
        .def(py::init(&make_plan), py::arg("x"), py::arg("w"), py::arg("lam"), py::arg("at"), py::arg("device"),
             py::arg("nu") = 0)
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
                return config_dict(p.config(m, f64, tuning(store, tile, depth)));
            },
            py::arg("m"), py::arg("f64"), py::arg("store") = 0, py::arg("tile") = 0, py::arg("depth") = 0,
            "the launch configuration apply would use");
}
