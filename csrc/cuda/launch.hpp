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
//   qcoef  q x 8 doubles,       query j = cy0, cy1, cgam0..3, 0, 0
//   qidx   q x (int32 k, int32 k1)
constexpr int kRowStride = 8;
constexpr int kQueryStride = 8;

struct PlanView {
    const double* rows = nullptr;
    const double* qcoef = nullptr;
    const int* qidx = nullptr;  // pairs (k, k1)
    int n = 0;
    int q = 0;
};

// Where the per-column gamma vector lives while a column is processed.
enum class GammaStore : int {
    Shared = 1,  // dynamic shared memory: tile x (n + 3) float64 per block
    Global = 2,  // a per-block slot of a global float64 scratch (large n)
};

struct LaunchConfig {
    GammaStore store = GammaStore::Shared;
    int tile = 32;        // columns per block = threads per block
    int depth = 16;       // rows of y prefetched per thread in the forward pass (16 or 64)
    long long grid = 1;   // blocks
    std::size_t shared_bytes = 0;
    double* scratch = nullptr;  // Global only: grid x tile x (n + 3) doubles
};

// Per-column float64 gamma buffer rows (knot r - 1 in row r, zero padded).
inline int gamma_rows(int n) { return n + 3; }

// Raises the dynamic shared-memory limit of the shared-memory kernels on the
// current device to `bytes` (the device's opt-in maximum).
cudaError_t prepare_kernels(std::size_t bytes);

// Occupancy of the global-scratch kernel (blocks per multiprocessor).
cudaError_t global_blocks_per_sm(bool f64, int depth, int tile, int* blocks);

// out (q x m) = plan applied to y (n x m), both C-contiguous, on `stream`.
cudaError_t launch_plan_f32(const PlanView& p, const float* y, float* out, long long m, const LaunchConfig& cfg,
                            cudaStream_t stream);
cudaError_t launch_plan_f64(const PlanView& p, const double* y, double* out, long long m, const LaunchConfig& cfg,
                            cudaStream_t stream);

}  // namespace cuda
}  // namespace letcc
