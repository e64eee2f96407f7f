// CUDA kernels applying a smoothing-spline plan to y (n x m, row-major):
// out (q x m) = evaluate-at-q-points( fit(y) ), one thread per column.
//
// Per column, three passes fused in one kernel (the CPU tile kernels in
// csrc/kernels.hpp do the same across a tile of columns):
//   1. forward substitution fused with z = Q^T y: thread j reads y[i*m + j]
//      (coalesced across the warp), each row once;
//   2. back substitution in place: z -> gamma;
//   3. evaluation at the q points: two y values (re-read; the column tiles in
//      flight are a few MB, so these come from L2) and four gamma values per
//      point; out written once, coalesced.
// All arithmetic is float64 whatever the storage type T: float32 data keeps
// float64 factors and accumulation, as on the CPU.
//
// Design choices, made without a GPU to measure on (bench/gpu.py checks them):
// * Where gamma lives. A column needs its whole gamma vector (8 (n + 3)
//   bytes) between the forward pass and the evaluation: the back substitution
//   runs in reverse and query points touch any row. In device memory that
//   would be ~4 float64 passes of traffic per column, several times y itself
//   (4 n bytes in float32), so it is kept on chip in shared memory: row r of a
//   block's buffer holds knot r - 1 of its `tile` columns (consecutive threads,
//   consecutive doubles: no bank conflicts, no block-level synchronisation).
//   Only when even a 32-column tile does not fit (n > ~850 on Hopper) does
//   gamma go to a global scratch, one slot per block of a persistent grid, so
//   the scratch stays small and mostly in L2.
// * Loads in flight. Shared memory caps the columns in flight per
//   multiprocessor at about 228 KiB / (8 (n + 3)) (~100 at n = 256), too few
//   threads to cover memory latency with one load each. So each thread streams
//   its column through a private ring of 2 x `depth` shared-memory slots with
//   cp.async (sm_80+): group g + 1 is in flight while group g is consumed. Plain
//   register prefetch does not work here: ptxas sinks such loads back to their
//   uses to save registers (seen in the SASS of a first version).
#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>

#include <vector>

#include "launch.hpp"

namespace letcc {
namespace cuda {
namespace {

// The column body below is compiled for the host too (emulate_plan_*): the
// memory intrinsics get plain host equivalents there, so the exact kernel
// code can be checked against the CPU core on machines without a GPU.
#if defined(__CUDA_ARCH__)
#define LETCC_HD __device__ __forceinline__
__device__ __forceinline__ double load(const float* p) { return static_cast<double>(__ldg(p)); }
__device__ __forceinline__ double load(const double* p) { return __ldg(p); }
__device__ __forceinline__ double2 load2(const double* p) { return __ldg(reinterpret_cast<const double2*>(p)); }
__device__ __forceinline__ void store(float* p, double v) { __stcs(p, static_cast<float>(v)); }
__device__ __forceinline__ void store(double* p, double v) { __stcs(p, v); }
template <class T>
__device__ __forceinline__ void ring_copy(T* dst, const T* src) { __pipeline_memcpy_async(dst, src, sizeof(T)); }
__device__ __forceinline__ void ring_commit() { __pipeline_commit(); }
__device__ __forceinline__ void ring_wait_all_but_newest() { __pipeline_wait_prior(1); }
#else
#define LETCC_HD inline
inline double load(const float* p) { return static_cast<double>(*p); }
inline double load(const double* p) { return *p; }
inline double2 load2(const double* p) { return make_double2(p[0], p[1]); }
inline void store(float* p, double v) { *p = static_cast<float>(v); }
inline void store(double* p, double v) { *p = v; }
template <class T>
inline void ring_copy(T* dst, const T* src) { *dst = *src; }
inline void ring_commit() {}
inline void ring_wait_all_but_newest() {}
#endif

LETCC_HD int imin(int a, int b) { return a < b ? a : b; }

// Forward rows consumed per group: rows 2 + first .. of y (row i + 1 feeds
// forward step i). Issues one cp.async per row into ring half (group & 1).
template <class T>
LETCC_HD void issue_group(const T* yc, long long m, T* ring, int tile, int depth, int total,
                                            int group) {
    const int first = group * depth;
    const int count = imin(depth, total - first);
    T* slot = ring + (group & 1) * depth * tile;
    for (int u = 0; u < count; ++u) ring_copy(slot + u * tile, yc + static_cast<long long>(2 + first + u) * m);
    ring_commit();
}

// One column j. buf: this thread's element of row 0 of its gamma buffer (rows
// `stride` doubles apart, shared or global memory). ring: this thread's
// element of slot 0 of its staging ring in shared memory (slots `tile` apart).
template <class T>
LETCC_HD void plan_column(const PlanView& p, const T* __restrict__ y, T* __restrict__ out,
                                            long long m, long long j, double* buf, int stride, T* ring, int tile,
                                            int depth) {
    const int n = p.n;
    // Rows for knots -1, 0, n-1, n, n+1 are zero so that no pass branches on
    // the ends (gamma is 0 at both end knots: natural spline).
    buf[0] = 0.0;
    buf[stride] = 0.0;
    for (int r = (n > 2 ? n : 2); r <= n + 2; ++r) buf[static_cast<long long>(r) * stride] = 0.0;

    const T* __restrict__ yc = y + j;
    if (n >= 3) {
        // Forward: z_i = qa y_{i-1} + qb y_i + qc y_{i+1} - l2 z_{i-2} - l1 z_{i-1}, i = 1..n-2.
        const int total = n - 2;
        const int groups = (total + depth - 1) / depth;
        issue_group(yc, m, ring, tile, depth, total, 0);
        double ya = load(yc), yb = load(yc + m);
        double zm2 = 0.0, zm1 = 0.0;
        for (int g = 0; g < groups; ++g) {
            // Ring half (g + 1) & 1 was last read in iteration g - 1; those
            // reads fed FMAs that issued before this point (in-order issue).
            if (g + 1 < groups)
                issue_group(yc, m, ring, tile, depth, total, g + 1);
            else
                ring_commit();  // empty group: keeps "all but the newest" meaning group g
            ring_wait_all_but_newest();
            const T* slot = ring + (g & 1) * depth * tile;
            const int first = g * depth;
            const int count = imin(depth, total - first);
            for (int u = 0; u < count; ++u) {
                const int i = 1 + first + u;
                const double* c = p.rows + static_cast<long long>(i) * kRowStride;
                const double2 ab = load2(c), cl = load2(c + 2), l2d = load2(c + 4);
                const double yn = static_cast<double>(slot[u * tile]);
                // zm1 enters last: one dependent FMA per row on the critical path.
                const double z = ab.x * ya + ab.y * yb + cl.x * yn - l2d.x * zm2 - cl.y * zm1;
                buf[static_cast<long long>(i + 1) * stride] = z;
                zm2 = zm1;
                zm1 = z;
                ya = yb;
                yb = yn;
            }
        }
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

// Dynamic shared memory: gamma (tile x (n + 3) doubles), then the staging
// ring (tile x 2 depth elements of T).
template <class T>
__global__ void __launch_bounds__(256, 1) plan_shared_kernel(PlanView p, const T* __restrict__ y, T* __restrict__ out,
                                                          long long m, int depth) {
    extern __shared__ double smem[];
    const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= m) return;  // no block-level synchronisation: each thread owns its column
    const int tile = blockDim.x;
    T* ring = reinterpret_cast<T*>(smem + static_cast<long long>(p.n + 3) * tile) + threadIdx.x;
    plan_column<T>(p, y, out, m, j, smem + threadIdx.x, tile, ring, tile, depth);
}

// Persistent grid with gamma in global scratch: block b reuses slot b for
// tiles b, b + grid, ... Dynamic shared memory holds only the staging ring.
template <class T>
__global__ void __launch_bounds__(256, 1) plan_global_kernel(PlanView p, const T* __restrict__ y, T* __restrict__ out,
                                                          long long m, int depth, double* scratch) {
    extern __shared__ double smem[];
    const int tile = blockDim.x;
    double* buf = scratch + static_cast<long long>(blockIdx.x) * (p.n + 3) * tile + threadIdx.x;
    T* ring = reinterpret_cast<T*>(smem) + threadIdx.x;
    const long long ntiles = (m + tile - 1) / tile;
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const long long j = t * tile + threadIdx.x;
        if (j < m) plan_column<T>(p, y, out, m, j, buf, tile, ring, tile, depth);
    }
}

template <class T>
cudaError_t launch(const PlanView& p, const T* y, T* out, long long m, const LaunchConfig& cfg,
                   cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(cfg.grid)), block(static_cast<unsigned>(cfg.tile));
    if (cfg.store == GammaStore::Shared)
        plan_shared_kernel<T><<<grid, block, cfg.shared_bytes, stream>>>(p, y, out, m, cfg.depth);
    else
        plan_global_kernel<T><<<grid, block, cfg.shared_bytes, stream>>>(p, y, out, m, cfg.depth, cfg.scratch);
    return cudaGetLastError();
}

// The kernels' work on the host, block by block and thread by thread, with
// the same buffer layouts (shared-memory store).
template <class T>
void emulate(const PlanView& p, const T* y, T* out, long long m, int tile, int depth) {
    std::vector<double> gamma(static_cast<std::size_t>(tile) * (p.n + 3));
    std::vector<T> ring(static_cast<std::size_t>(tile) * 2 * depth);
    for (long long b = 0; b * tile < m; ++b)
        for (int t = 0; t < tile && b * tile + t < m; ++t)
            plan_column<T>(p, y, out, m, b * tile + t, gamma.data() + t, tile, ring.data() + t, tile, depth);
}

}  // namespace

void emulate_plan_f32(const PlanView& p, const float* y, float* out, long long m, int tile, int depth) {
    emulate<float>(p, y, out, m, tile, depth);
}

void emulate_plan_f64(const PlanView& p, const double* y, double* out, long long m, int tile, int depth) {
    emulate<double>(p, y, out, m, tile, depth);
}

cudaError_t prepare_kernels(std::size_t bytes) {
    const int b = static_cast<int>(bytes);
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e;
    if ((e = cudaFuncSetAttribute(plan_shared_kernel<float>, a, b)) != cudaSuccess) return e;
    if ((e = cudaFuncSetAttribute(plan_shared_kernel<double>, a, b)) != cudaSuccess) return e;
    if ((e = cudaFuncSetAttribute(plan_global_kernel<float>, a, b)) != cudaSuccess) return e;
    return cudaFuncSetAttribute(plan_global_kernel<double>, a, b);
}

cudaError_t global_blocks_per_sm(bool f64, int tile, std::size_t shared_bytes, int* blocks) {
    if (f64) return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, plan_global_kernel<double>, tile, shared_bytes);
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, plan_global_kernel<float>, tile, shared_bytes);
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
