// Interface between the host code of letcc._cuda (device_plan.cpp, compiled
// by the C++ compiler) and the kernels (plan_kernels.cu, compiled by nvcc).
// Plain C++ types plus the CUDA runtime's stream type: no pybind11 here, so
// nvcc only ever sees the small kernel file.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace letcc {
namespace cuda {

// Device layout of a plan, one allocation (see device_plan.cpp, pack_plan):
//   rows   (n + 2) x 8 doubles, row i = qa, qb, qc, l1, l2, inv_d, l1[i+1], l2[i+2]
//   qcoef  q x 8 doubles, the queries sorted by interval k:
//          cy0, cy1, cgam0..3 (gamma rows k-1 .. k+2), 0, 0
//   qrow   q int32: output row of each sorted query
//   by_k   n + 1 int32: the queries of interval k are sorted entries by_k[k] .. by_k[k+1]-1
constexpr int kRowStride = 8;
constexpr int kQueryStride = 8;

struct PlanView {
    const double* rows = nullptr;
    const double* qcoef = nullptr;
    const int* qrow = nullptr;
    const int* by_k = nullptr;
    int n = 0;
    int q = 0;
};

// Doubles a packed plan occupies (the int32 parts rounded up to whole doubles).
inline std::size_t packed_words(int n, int q) {
    const std::size_t ints = static_cast<std::size_t>(q) + static_cast<std::size_t>(n) + 1;
    return static_cast<std::size_t>(n + 2) * kRowStride + static_cast<std::size_t>(q) * kQueryStride + (ints + 1) / 2;
}

// A view of a packed plan at `base` (host or device memory).
inline PlanView view_of(const void* base, int n, int q) {
    PlanView v;
    v.n = n;
    v.q = q;
    v.rows = static_cast<const double*>(base);
    v.qcoef = v.rows + static_cast<std::size_t>(n + 2) * kRowStride;
    v.qrow = reinterpret_cast<const int*>(v.qcoef + static_cast<std::size_t>(q) * kQueryStride);
    v.by_k = v.qrow + q;
    return v;
}

// Where the per-column vector z (forward substitution, float64, one per
// interior knot) lives between the forward and the backward pass.
enum class GammaStore : int {
    Shared = 1,  // dynamic shared memory: tile x n float64 per block
    Global = 2,  // a per-block slot of a global float64 scratch (large n)
};

struct LaunchConfig {
    GammaStore store = GammaStore::Shared;
    int tile = 32;        // columns per block = threads per block
    int depth = 32;       // rows of y per cp.async group (2 groups in flight), both passes
    long long grid = 1;   // blocks
    std::size_t shared_bytes = 0;  // Shared: gamma + ring; Global: ring only (see shared_bytes_for)
    double* scratch = nullptr;     // Global only: grid x tile x n doubles
};

// Dynamic shared memory of a launch: per column, the float64 z vector (n
// rows) when it lives in shared memory, plus the staging ring of 2 x depth
// elements of the data type.
inline std::size_t shared_bytes_for(GammaStore store, int n, int tile, int depth, std::size_t elem) {
    const std::size_t z = store == GammaStore::Shared ? static_cast<std::size_t>(n) * 8 : 0;
    return static_cast<std::size_t>(tile) * (z + 2 * static_cast<std::size_t>(depth) * elem);
}

// Raises the dynamic shared-memory limit of the kernels on the current device
// to `bytes` (the device's opt-in maximum).
cudaError_t prepare_kernels(std::size_t bytes);

// Occupancy of the global-scratch kernel (blocks per multiprocessor).
cudaError_t global_blocks_per_sm(bool f64, int tile, std::size_t shared_bytes, int* blocks);

// The same per-column code run on the host (no GPU needed), tile columns per
// emulated block: lets tests check the kernel body against the CPU core.
void emulate_plan_f32(const PlanView& p, const float* y, float* out, long long m, int tile, int depth);
void emulate_plan_f64(const PlanView& p, const double* y, double* out, long long m, int tile, int depth);

// out (q x m) = plan applied to y (n x m), both C-contiguous, on `stream`.
cudaError_t launch_plan_f32(const PlanView& p, const float* y, float* out, long long m, const LaunchConfig& cfg,
                            cudaStream_t stream);
cudaError_t launch_plan_f64(const PlanView& p, const double* y, double* out, long long m, const LaunchConfig& cfg,
                            cudaStream_t stream);

}  // namespace cuda
}  // namespace letcc
