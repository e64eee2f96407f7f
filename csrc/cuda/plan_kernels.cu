// CUDA kernels applying a smoothing-spline plan to y (n x m, row-major):
// out (q x m) = evaluate-at-q-points( fit(y) ), one thread per column.
//
// Per column, three passes fused in one kernel (the CPU tile kernels in
// csrc/kernels.hpp do the same across a tile of columns):
//   1. forward substitution fused with z = Q^T y (reads y once, coalesced:
//      thread j reads y[i*m + j]; `Depth` rows are loaded ahead into registers
//      so that many loads are in flight per thread),
//   2. back substitution in place: z -> gamma,
//   3. evaluation at the q points: two y values (re-read, from L2 in the common
//      case) and four gamma values per point; out written once, coalesced.
// All arithmetic is float64 whatever the storage type T (float32 data keeps
// float64 factors and accumulation, as on the CPU).
//
// Where gamma lives (the design choice, made without a GPU to measure on):
// a column needs its whole gamma vector (8 (n + 3) bytes) between the forward
// pass and the evaluation, because the back substitution runs in reverse and
// the query points touch any row. Kept in device memory it would cost ~4
// float64 passes of traffic per column, far more than y itself (4 n bytes in
// float32), so it is kept on chip, in shared memory (row r of a block's buffer
// holds knot r - 1 for its `tile` columns: consecutive threads hit consecutive
// doubles, no bank conflicts). That caps the columns in flight per
// multiprocessor at about 228 KiB / (8 (n + 3)), which is why the forward pass
// prefetches deeply (Depth = 64 for n >= 48) rather than relying on many warps.
// Only when even a 32-column tile does not fit in shared memory (n > ~880 on
// Hopper) is gamma kept in a global scratch, one slot per block of a
// persistent grid, so the scratch stays small (and mostly in L2).
#include <cuda_runtime.h>

#include "launch.hpp"

namespace letcc {
namespace cuda {
namespace {

__device__ __forceinline__ double load(const float* p) { return static_cast<double>(__ldg(p)); }
__device__ __forceinline__ double load(const double* p) { return __ldg(p); }
__device__ __forceinline__ double2 load2(const double* p) { return __ldg(reinterpret_cast<const double2*>(p)); }
__device__ __forceinline__ void store(float* p, double v) { __stcs(p, static_cast<float>(v)); }
__device__ __forceinline__ void store(double* p, double v) { __stcs(p, v); }

// One row of the forward substitution fused with Q^T y:
// z_i = qa y_{i-1} + qb y_i + qc y_{i+1} - l2 z_{i-2} - l1 z_{i-1}, stored in row i + 1.
__device__ __forceinline__ void forward_step(const PlanView& p, int i, double yn, double& ya, double& yb, double& zm2,
                                             double& zm1, double* buf, int stride) {
    const double* c = p.rows + static_cast<long long>(i) * kRowStride;
    const double2 ab = load2(c), cl = load2(c + 2), l2d = load2(c + 4);
    // zm1 enters last: one dependent FMA per row on the critical path.
    const double z = ab.x * ya + ab.y * yb + cl.x * yn - l2d.x * zm2 - cl.y * zm1;
    buf[static_cast<long long>(i + 1) * stride] = z;
    zm2 = zm1;
    zm1 = z;
    ya = yb;
    yb = yn;
}

// One column j. buf points at this thread's element of row 0 of its gamma
// buffer; consecutive rows are `stride` doubles apart.
template <class T, int Depth>
__device__ __forceinline__ void plan_column(const PlanView& p, const T* __restrict__ y, T* __restrict__ out,
                                            long long m, long long j, double* buf, int stride) {
    const int n = p.n;
    // Rows for knots -1, 0, n-1, n, n+1 are zero so that no pass branches on
    // the ends (gamma is 0 at both end knots: natural spline).
    buf[0] = 0.0;
    buf[stride] = 0.0;
    for (int r = (n > 2 ? n : 2); r <= n + 2; ++r) buf[static_cast<long long>(r) * stride] = 0.0;

    const T* __restrict__ yc = y + j;
    if (n >= 3) {
        // Forward substitution, rows i = 1..n-2.
        double ya = load(yc), yb = load(yc + m);
        double zm2 = 0.0, zm1 = 0.0;
        // Full chunks of Depth rows: all loads issued before the first use, no
        // branches between them (so the scheduler keeps them in flight).
        int i0 = 1;
        for (; i0 + Depth - 1 <= n - 2; i0 += Depth) {
            T v[Depth];
#pragma unroll
            for (int u = 0; u < Depth; ++u) v[u] = y[static_cast<long long>(i0 + 1 + u) * m + j];
#pragma unroll
            for (int u = 0; u < Depth; ++u) forward_step(p, i0 + u, static_cast<double>(v[u]), ya, yb, zm2, zm1, buf, stride);
        }
        // The last partial chunk.
        for (; i0 <= n - 2; ++i0) forward_step(p, i0, load(yc + static_cast<long long>(i0 + 1) * m), ya, yb, zm2, zm1, buf, stride);
        // Back: gamma_i = z_i / D_i - l1[i+1] gamma_{i+1} - l2[i+2] gamma_{i+2}.
        double g1 = 0.0, g2 = 0.0;
#pragma unroll 4
        for (int i = n - 2; i >= 1; --i) {
            const double* c = p.rows + static_cast<long long>(i) * kRowStride;
            const double2 l2d = load2(c + 4), nx = load2(c + 6);
            double* b = buf + static_cast<long long>(i + 1) * stride;
            const double g = *b * l2d.y - nx.y * g2 - nx.x * g1;
            *b = g;
            g2 = g1;
            g1 = g;
        }
    }
    // Evaluate: out = cy0 y[k] + cy1 y[k1] + sum_t cgam[t] gamma[k-1+t].
#pragma unroll 4
    for (int qi = 0; qi < p.q; ++qi) {
        const int k = p.qidx[2 * qi], k1 = p.qidx[2 * qi + 1];
        const double* c = p.qcoef + static_cast<long long>(qi) * kQueryStride;
        const double2 cy = load2(c), c01 = load2(c + 2), c23 = load2(c + 4);
        const double ya = load(yc + static_cast<long long>(k) * m);
        const double yb = load(yc + static_cast<long long>(k1) * m);
        const double* g = buf + static_cast<long long>(k) * stride;  // knot k - 1
        const double r = cy.x * ya + cy.y * yb + c01.x * g[0] + c01.y * g[stride] + c23.x * g[2 * stride] +
                         c23.y * g[3 * stride];
        store(out + static_cast<long long>(qi) * m + j, r);
    }
}

template <class T, int Depth>
__global__ void __launch_bounds__(256) plan_shared_kernel(PlanView p, const T* __restrict__ y, T* __restrict__ out, long long m) {
    extern __shared__ double smem[];
    const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= m) return;  // no block-level synchronisation: each thread owns its column
    plan_column<T, Depth>(p, y, out, m, j, smem + threadIdx.x, blockDim.x);
}

// Persistent grid: block b reuses scratch slot b for tiles b, b + grid, ...
template <class T, int Depth>
__global__ void __launch_bounds__(256) plan_global_kernel(PlanView p, const T* __restrict__ y, T* __restrict__ out, long long m,
                                   double* scratch) {
    double* buf = scratch + static_cast<long long>(blockIdx.x) * (p.n + 3) * blockDim.x + threadIdx.x;
    const long long ntiles = (m + blockDim.x - 1) / blockDim.x;
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const long long j = t * blockDim.x + threadIdx.x;
        if (j < m) plan_column<T, Depth>(p, y, out, m, j, buf, blockDim.x);
    }
}

template <class T, int Depth>
cudaError_t launch_depth(const PlanView& p, const T* y, T* out, long long m, const LaunchConfig& cfg,
                         cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(cfg.grid)), block(static_cast<unsigned>(cfg.tile));
    if (cfg.store == GammaStore::Shared)
        plan_shared_kernel<T, Depth><<<grid, block, cfg.shared_bytes, stream>>>(p, y, out, m);
    else
        plan_global_kernel<T, Depth><<<grid, block, 0, stream>>>(p, y, out, m, cfg.scratch);
    return cudaGetLastError();
}

template <class T>
cudaError_t launch(const PlanView& p, const T* y, T* out, long long m, const LaunchConfig& cfg,
                   cudaStream_t stream) {
    if (cfg.depth == 64) return launch_depth<T, 64>(p, y, out, m, cfg, stream);
    return launch_depth<T, 16>(p, y, out, m, cfg, stream);
}

template <class T, int Depth>
cudaError_t raise_shared_limit(std::size_t bytes) {
    return cudaFuncSetAttribute(plan_shared_kernel<T, Depth>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(bytes));
}

}  // namespace

cudaError_t prepare_kernels(std::size_t bytes) {
    cudaError_t e;
    if ((e = raise_shared_limit<float, 16>(bytes)) != cudaSuccess) return e;
    if ((e = raise_shared_limit<float, 64>(bytes)) != cudaSuccess) return e;
    if ((e = raise_shared_limit<double, 16>(bytes)) != cudaSuccess) return e;
    return raise_shared_limit<double, 64>(bytes);
}

cudaError_t global_blocks_per_sm(bool f64, int depth, int tile, int* blocks) {
    if (f64)
        return depth == 64 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, plan_global_kernel<double, 64>, tile, 0)
                           : cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, plan_global_kernel<double, 16>, tile, 0);
    return depth == 64 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, plan_global_kernel<float, 64>, tile, 0)
                       : cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, plan_global_kernel<float, 16>, tile, 0);
}

cudaError_t launch_plan_f32(const PlanView& p, const float* y, float* out, long long m, const LaunchConfig& cfg,
                            cudaStream_t stream) {
    return launch<float>(p, y, out, m, cfg, stream);
}

cudaError_t launch_plan_f64(const PlanView& p, const double* y, double* out, long long m, const LaunchConfig& cfg,
                            cudaStream_t stream) {
    return launch<double>(p, y, out, m, cfg, stream);
}

}  // namespace cuda
}  // namespace letcc
