// letcc._core.log_prepare and letcc._core.softmax_last_axis: the compiled
// passes of LeTCC's log output space (output_space.hpp), registered from the
// module definition in bindings.cpp.
//
// Each pass is built three times, for AVX-512, AVX2+FMA and baseline x86-64
// (as dispatch.cpp builds the spline kernels, and for the same reason not
// with target_clones), and runs the build letcc._core.kernel_isa() names, so
// set_kernel_isa reaches these passes too. Both release the GIL around the
// compute from kGilReleaseMinElems elements (output_space.hpp says why not
// below), as the plan and dense-operator calls do.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "bindings_arrays.hpp"
#include "dispatch.hpp"
#include "output_space.hpp"

namespace py = pybind11;

namespace {

using namespace letcc;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LETCC_NO_CLONES)
#define LETCC_OS_DISPATCH 1
#define LETCC_OS_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define LETCC_OS_AVX2 __attribute__((target("avx2,fma")))
#else
#define LETCC_OS_AVX512
#define LETCC_OS_AVX2
#endif

// NAME_avx512 / NAME_avx2 / NAME_baseline: BODY compiled for each ISA (the
// header's inline functions are built with the caller's target).
#define LETCC_OS_VERSIONS(RET, NAME, PARAMS, BODY)   \
    LETCC_OS_AVX512 RET NAME##_avx512 PARAMS BODY   \
    LETCC_OS_AVX2 RET NAME##_avx2 PARAMS BODY       \
    RET NAME##_baseline PARAMS BODY

template <class T>
struct Passes {
    bool (*check)(const T*, std::size_t, std::size_t, bool, double);
    void (*log)(const T*, T*, std::size_t, T);
    void (*softmax)(T*, std::size_t, std::size_t, double*);
};

#define LETCC_OS_TYPED(T, SUF)                                                                         \
    LETCC_OS_VERSIONS(bool, check_##SUF, (const T* y, std::size_t rows, std::size_t m, bool sums, double tol), \
                      { return outspace::probability_rows<T>(y, rows, m, sums, tol); })               \
    LETCC_OS_VERSIONS(void, log_##SUF, (const T* y, T* out, std::size_t count, T floor),              \
                      { outspace::log_floor<T>(y, out, count, floor); })                               \
    LETCC_OS_VERSIONS(void, softmax_##SUF, (T * z, std::size_t rows, std::size_t m, double* buf),     \
                      { outspace::softmax_rows<T>(z, rows, m, buf); })

LETCC_OS_TYPED(double, f64)
LETCC_OS_TYPED(float, f32)

// The build kernel_isa() names ("avx512", "avx2", "baseline"; "native" off x86-64).
int isa_index() {
#if defined(LETCC_OS_DISPATCH)
    const char* isa = kernel_isa();
    if (std::strcmp(isa, "avx512") == 0) return 0;
    if (std::strcmp(isa, "avx2") == 0) return 1;
#endif
    return 2;
}

template <class T>
Passes<T> passes();

template <>
Passes<double> passes<double>() {
    switch (isa_index()) {
        case 0: return {check_f64_avx512, log_f64_avx512, softmax_f64_avx512};
        case 1: return {check_f64_avx2, log_f64_avx2, softmax_f64_avx2};
        default: return {check_f64_baseline, log_f64_baseline, softmax_f64_baseline};
    }
}

template <>
Passes<float> passes<float>() {
    switch (isa_index()) {
        case 0: return {check_f32_avx512, log_f32_avx512, softmax_f32_avx512};
        case 1: return {check_f32_avx2, log_f32_avx2, softmax_f32_avx2};
        default: return {check_f32_baseline, log_f32_baseline, softmax_f32_baseline};
    }
}

// (rows, m) of a C-contiguous float32/float64 ndarray with a class axis
// (ndim >= 2, no axis of length 0): rows = every axis but the last.
bool class_rows(const py::object& obj, py::array& arr, bind::FloatKind& kind, std::size_t& rows, std::size_t& m) {
    if (!py::isinstance<py::array>(obj)) return false;
    arr = py::reinterpret_borrow<py::array>(obj);
    kind = bind::float_kind(arr);
    if (kind == bind::FloatKind::none || arr.ndim() < 2) return false;
    m = static_cast<std::size_t>(arr.shape(arr.ndim() - 1));
    rows = 1;
    for (py::ssize_t d = 0; d + 1 < arr.ndim(); ++d) rows *= static_cast<std::size_t>(arr.shape(d));
    return m >= 1 && rows >= 1;
}

template <class T>
py::object prepare(const py::array& y, std::size_t rows, std::size_t m, bool check_sums, double tol, double floor) {
    const T* yp = static_cast<const T*>(y.data());
    // allocated before the check, so that the GIL is released once (a failed
    // check wastes one allocation; releasing twice cost more at 10 classes)
    py::array_t<T> out(std::vector<py::ssize_t>(y.shape(), y.shape() + y.ndim()));
    T* op = out.mutable_data();
    bool ok;
    {
        std::optional<py::gil_scoped_release> release;
        if (rows * m >= kGilReleaseMinElems) release.emplace();
        ok = log_prepare_rows(yp, op, rows, m, check_sums, tol, floor);
    }
    if (!ok) return py::none();
    return std::move(out);
}

// The robust decoder's check, answer by answer (y's first axis: answers of
// `per` class vectors of m): prob[a] true where answer a passes the check of
// prepare; once more than max_bad answers have failed the scan ends (prob
// false for the rest) and the result is (prob, None). Otherwise (prob, z),
// z = log(max(y, floor)) in the rows of the answers that passed and 0 in
// the others: the check and log of probability_answers_logged in one call.
template <class T>
py::tuple prepare_answers(const py::array& y, std::size_t answers, std::size_t per, std::size_t m, double tol,
                          double floor, std::size_t max_bad) {
    const T* yp = static_cast<const T*>(y.data());
    py::array_t<bool> prob(static_cast<py::ssize_t>(answers));
    bool* ok = prob.mutable_data();
    std::fill(ok, ok + answers, false);
    const Passes<T> p = passes<T>();
    const std::size_t stride = per * m;
    std::size_t bad = 0;
    {
        std::optional<py::gil_scoped_release> release;
        if (answers * stride >= kGilReleaseMinElems) release.emplace();
        for (std::size_t a = 0; a < answers && bad <= max_bad; ++a) {
            ok[a] = p.check(yp + a * stride, per, m, true, tol);
            bad += ok[a] ? 0 : 1;
        }
    }
    if (bad > max_bad) return py::make_tuple(prob, py::none());
    py::array_t<T> out(std::vector<py::ssize_t>(y.shape(), y.shape() + y.ndim()));
    T* op = out.mutable_data();
    {
        std::optional<py::gil_scoped_release> release;
        if (answers * stride >= kGilReleaseMinElems) release.emplace();
        for (std::size_t a = 0; a < answers; ++a) {
            if (ok[a]) p.log(yp + a * stride, op + a * stride, stride, static_cast<T>(floor));
            else std::fill(op + a * stride, op + (a + 1) * stride, T(0));
        }
    }
    return py::make_tuple(prob, std::move(out));
}

template <class T>
void softmax(py::array& z, std::size_t rows, std::size_t m) {
    T* zp = static_cast<T*>(z.mutable_data());
    std::optional<py::gil_scoped_release> release;
    if (rows * m >= kGilReleaseMinElems) release.emplace();
    softmax_last_axis_rows(zp, rows, m);
}

template <class T>
bool prepare_rows(const T* y, T* out, std::size_t rows, std::size_t m, bool check_sums, double tol, double floor) {
    const Passes<T> p = passes<T>();
    if (!p.check(y, rows, m, check_sums, tol)) return false;
    p.log(y, out, rows * m, static_cast<T>(floor));
    return true;
}

template <class T>
void softmax_rows_tls(T* z, std::size_t rows, std::size_t m) {
    thread_local std::vector<double> buf;
    const std::size_t need = outspace::softmax_buffer_size(rows, m);
    if (buf.size() < need) buf.resize(need);
    passes<T>().softmax(z, rows, m, buf.data());
}

}  // namespace

namespace letcc {
bool log_prepare_rows(const double* y, double* out, std::size_t rows, std::size_t m, bool check_sums, double tol,
                      double floor) {
    return prepare_rows<double>(y, out, rows, m, check_sums, tol, floor);
}
bool log_prepare_rows(const float* y, float* out, std::size_t rows, std::size_t m, bool check_sums, double tol,
                      double floor) {
    return prepare_rows<float>(y, out, rows, m, check_sums, tol, floor);
}
void softmax_last_axis_rows(double* z, std::size_t rows, std::size_t m) { softmax_rows_tls<double>(z, rows, m); }
void softmax_last_axis_rows(float* z, std::size_t rows, std::size_t m) { softmax_rows_tls<float>(z, rows, m); }
}  // namespace letcc

void register_output_space(py::module_& mod) {
    mod.def(
        "log_prepare",
        [](const py::object& y, bool check_sums, double tol, double floor) -> py::object {
            py::array arr;
            bind::FloatKind kind;
            std::size_t rows = 0, m = 0;
            if (!class_rows(y, arr, kind, rows, m)) return py::bool_(false);
            return bind::dispatch_float(
                kind, [&](auto tag) { return prepare<decltype(tag)>(arr, rows, m, check_sums, tol, floor); });
        },
        py::arg("y"), py::arg("check_sums"), py::arg("tol"), py::arg("floor"),
        "log(max(y, floor)) as a new array of y's shape and dtype, when y (a C-contiguous float32/float64\n"
        "ndarray, ndim >= 2) holds finite entries >= 0 and, with check_sums, every row of its last axis sums\n"
        "to 1 within tol (summed in float64). None when the entries fail that check; False when y is not\n"
        "such an array (the caller then takes its own path).");
    mod.def(
        "log_prepare_answers",
        [](const py::object& y, double tol, double floor, std::size_t max_bad) -> py::object {
            py::array arr;
            bind::FloatKind kind;
            std::size_t rows = 0, m = 0;
            if (!class_rows(y, arr, kind, rows, m)) return py::bool_(false);
            const std::size_t answers = static_cast<std::size_t>(arr.shape(0));
            return bind::dispatch_float(kind, [&](auto tag) {
                return prepare_answers<decltype(tag)>(arr, answers, rows / answers, m, tol, floor, max_bad);
            });
        },
        py::arg("y"), py::arg("tol"), py::arg("floor"), py::arg("max_bad"),
        "The probability check of log_prepare (check_sums) answer by answer, y's first axis the answers:\n"
        "(prob, z), prob (answers,) bool, True where every class vector of that answer passes, and z the\n"
        "log(max(y, floor)) of the answers that pass (0 in the rows of the others); once more than\n"
        "max_bad answers have failed the scan ends: (prob, None), prob False for the answers not looked at.\n"
        "False when y is not a C-contiguous float32/float64 ndarray with ndim >= 2.");
    mod.def(
        "softmax_last_axis",
        [](const py::object& z) -> bool {
            py::array arr;
            bind::FloatKind kind;
            std::size_t rows = 0, m = 0;
            if (!class_rows(z, arr, kind, rows, m) || !arr.writeable()) return false;
            bind::dispatch_float(kind, [&](auto tag) { softmax<decltype(tag)>(arr, rows, m); });
            return true;
        },
        py::arg("z"),
        "The softmax of z over its last axis, in place (z a writeable C-contiguous float32/float64 ndarray,\n"
        "ndim >= 2): True; False (z untouched) for any other z.");
}
