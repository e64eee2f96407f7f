// CUDA kernels applying a smoothing-spline plan to y (n x m, row-major):
// out (q x m) = evaluate-at-q-points( fit(y) ), one thread per column.
//
// Per column, two passes in one kernel (the CPU core in csrc/kernels.hpp
// does the same across a tile of columns):
//   1. forward substitution fused with z = Q^T y: thread j reads y[i*m + j]
//      (coalesced across the warp), each row once, z kept on chip;
//   2. backward substitution fused with the evaluation, rows in reverse: the
//      four gamma values a query of interval k needs (gamma_{k-1} .. gamma_{k+2})
//      are the last four the back substitution produced, so with the queries
//      grouped by interval (host side) gamma is never stored; y is read a
//      second time for the y_k terms (the tiles in flight are a few MB: L2);
//      out written once, coalesced.
// All arithmetic is float64 whatever the storage type T: float32 data keeps
// float64 factors and accumulation, as on the CPU.
//
// Design choices, made without a GPU to measure on (bench/gpu.py checks them):
// * Where z lives. A column needs its whole z vector (8 n bytes) between the
//   two passes, because the back substitution runs in reverse. In device
//   memory that would be two float64 passes of traffic per column, four times
//   y itself in float32, so it is kept on chip in shared memory: row i of a
//   block's buffer holds z_i of its `tile` columns (consecutive threads,
//   consecutive doubles: no bank conflicts, no block-level synchronisation).
//   Only when even a 32-column tile does not fit (n > ~850 on Hopper) does z
//   go to a global scratch, one slot per block of a persistent grid, so the
//   scratch stays small and mostly in L2.
// * Loads in flight. Shared memory caps the columns in flight per
//   multiprocessor at about 228 KiB / (8 n + ring) (~110 at n = 256), too few
//   threads to cover memory latency with one load each. So each thread streams
//   its column (forward, then in reverse) through a private ring of 2 x
//   `depth` shared-memory slots with cp.async (sm_80+): group g + 1 is in
//   flight while group g is consumed. Plain register prefetch does not work
//   here: ptxas sinks such loads back to their uses to save registers (seen in
//   the SASS of a first version).
// * If n = 256 misses its bandwidth target, the next step is to keep only
//   every S-th pair of z (checkpoints) and recompute each segment of z from y
//   in the backward pass: 16/S bytes of shared memory per row instead of 8.
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
__device__ __forceinline__ int load_int(const int* p) { return __ldg(p); }
__device__ __forceinline__ void store(float* p, double v) { __stcs(p, static_cast<float>(v)); }
__device__ __forceinline__ void store(double* p, double v) { __stcs(p, v); }
template <class T>
__device__ __forceinline__ void ring_copy(T* dst, const T* src) { __pipeline_memcpy_async(dst, src, sizeof(T)); }
__device__ __forceinline__ void ring_commit() { __pipeline_commit(); }
__device__ __forceinline__ void ring_wait_all_but_newest() { __pipeline_wait_prior(1); }
__device__ __forceinline__ void ring_wait_all() { __pipeline_wait_prior(0); }
#else
#define LETCC_HD inline
inline double load(const float* p) { return static_cast<double>(*p); }
inline double load(const double* p) { return *p; }
inline double2 load2(const double* p) { return make_double2(p[0], p[1]); }
inline int load_int(const int* p) { return *p; }
inline void store(float* p, double v) { *p = static_cast<float>(v); }
inline void store(double* p, double v) { *p = v; }
template <class T>
inline void ring_copy(T* dst, const T* src) { *dst = *src; }
inline void ring_commit() {}
inline void ring_wait_all_but_newest() {}
inline void ring_wait_all() {}
#endif

LETCC_HD int imin(int a, int b) { return a < b ? a : b; }

// Streams `total` rows of column yc through a per-thread ring of 2 x depth
// slots in shared memory: group g holds rows first + step * (g * depth + u),
// u < depth, in ring half g & 1. Group g + 1 is in flight while g is used.
template <class T>
struct RowStream {
    const T* yc;
    long long m;
    T* ring;
    int tile, depth, total, first, step;

    LETCC_HD int groups() const { return (total + depth - 1) / depth; }
    LETCC_HD int count(int g) const { return imin(depth, total - g * depth); }
    LETCC_HD const T* slot(int g) const { return ring + (g & 1) * depth * tile; }

    LETCC_HD void issue(int g) const {
        T* dst = ring + (g & 1) * depth * tile;
        const int c = count(g);
        for (int u = 0; u < c; ++u)
            ring_copy(dst + u * tile, yc + static_cast<long long>(first + step * (g * depth + u)) * m);
        ring_commit();
    }
    // Before using group g: issue g + 1, then wait for g. Ring half (g + 1) & 1
    // was last read while group g - 1 was used; those reads fed FMAs that
    // issued before this point (in-order issue), so overwriting it is safe.
    LETCC_HD void advance(int g) const {
        if (g + 1 < groups())
            issue(g + 1);
        else
            ring_commit();  // empty group: keeps "all but the newest" meaning group g
        ring_wait_all_but_newest();
    }
};

// One column j. z: this thread's element of row 0 of its z buffer (rows
// `stride` doubles apart, shared or global memory; row i holds z_i for the
// interior knots i = 1..n-2). ring: this thread's element of slot 0 of its
// staging ring in shared memory (slots `tile` apart).
template <class T>
LETCC_HD void plan_column(const PlanView& p, const T* __restrict__ y, T* __restrict__ out, long long m, long long j,
                          double* z, int stride, T* ring, int tile, int depth) {
    const int n = p.n;
    const T* __restrict__ yc = y + j;
    if (n >= 3) {
        // Forward substitution fused with Q^T y:
        // z_i = qa y_{i-1} + qb y_i + qc y_{i+1} - l2 z_{i-2} - l1 z_{i-1}, i = 1..n-2,
        // streaming y_2 .. y_{n-1} (y_0, y_1 are loaded directly).
        const RowStream<T> fw{yc, m, ring, tile, depth, n - 2, 2, 1};
        fw.issue(0);
        double ya = load(yc), yb = load(yc + m);
        double zm2 = 0.0, zm1 = 0.0;
        for (int g = 0; g < fw.groups(); ++g) {
            fw.advance(g);
            const T* slot = fw.slot(g);
            const int first = 1 + g * depth, count = fw.count(g);
#pragma unroll 4
            for (int u = 0; u < count; ++u) {
                const int i = first + u;
                const double* c = p.rows + static_cast<long long>(i) * kRowStride;
                const double2 ab = load2(c), cl = load2(c + 2), l2d = load2(c + 4);
                const double yn = static_cast<double>(slot[u * tile]);
                // zm1 enters last: one dependent FMA per row on the critical path.
                const double zi = ab.x * ya + ab.y * yb + cl.x * yn - l2d.x * zm2 - cl.y * zm1;
                z[static_cast<long long>(i) * stride] = zi;
                zm2 = zm1;
                zm1 = zi;
                ya = yb;
                yb = yn;
            }
        }
        ring_wait_all();
    }
    // Backward substitution fused with the evaluation, streaming y_{n-1} .. y_0.
    // At knot k (descending) the window holds w0..w3 = gamma_{k-1} .. gamma_{k+2},
    // which is exactly what the queries of interval k need:
    //   gamma_i = z_i / D_i - l1[i+1] gamma_{i+1} - l2[i+2] gamma_{i+2}  (i = k - 1, interior)
    //   out = cy0 y_k + cy1 y_{k+1} + sum_t cgam[t] gamma_{k-1+t}
    // so gamma is never stored and each query costs one output write.
    const RowStream<T> bw{yc, m, ring, tile, depth, n, n - 1, -1};
    bw.issue(0);
    double w1 = 0.0, w2 = 0.0, w3 = 0.0, yb = 0.0;
    int hi = load_int(p.by_k + n);       // end of the current interval's queries
    int lo = load_int(p.by_k + n - 1);   // and its start (loaded a row ahead)
    for (int g = 0; g < bw.groups(); ++g) {
        bw.advance(g);
        const T* slot = bw.slot(g);
        const int count = bw.count(g);
#pragma unroll 2
        for (int u = 0; u < count; ++u) {
            const int k = n - 1 - (g * depth + u);
            const int i = k - 1;
            const int lo_next = k >= 1 ? load_int(p.by_k + k - 1) : 0;
            double w0 = 0.0;
            if (i >= 1) {
                const double* c = p.rows + static_cast<long long>(i) * kRowStride;
                const double2 dd = load2(c + 4), nx = load2(c + 6);  // (l2, inv_d), (l1[i+1], l2[i+2])
                w0 = z[static_cast<long long>(i) * stride] * dd.y - nx.y * w2 - nx.x * w1;
            }
            const double ya = static_cast<double>(slot[u * tile]);
            for (int t = lo; t < hi; ++t) {
                const double* c = p.qcoef + static_cast<long long>(t) * kQueryStride;
                const double2 cy = load2(c), c01 = load2(c + 2), c23 = load2(c + 4);
                // a tree, not a chain: three FMA latencies deep
                const double r = (cy.x * ya + cy.y * yb) + (c01.x * w0 + c01.y * w1) + (c23.x * w2 + c23.y * w3);
                store(out + static_cast<long long>(load_int(p.qrow + t)) * m + j, r);
            }
            hi = lo;
            lo = lo_next;
            w3 = w2;
            w2 = w1;
            w1 = w0;
            yb = ya;
        }
    }
    ring_wait_all();
}

// Dynamic shared memory: z (tile x n doubles), then the staging ring (tile x
// 2 depth elements of T).
template <class T>
__global__ void __launch_bounds__(256, 3) plan_shared_kernel(PlanView p, const T* __restrict__ y, T* __restrict__ out,
                                                          long long m, int depth) {
    extern __shared__ double smem[];
    const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= m) return;  // no block-level synchronisation: each thread owns its column
    const int tile = blockDim.x;
    T* ring = reinterpret_cast<T*>(smem + static_cast<long long>(p.n) * tile) + threadIdx.x;
    plan_column<T>(p, y, out, m, j, smem + threadIdx.x, tile, ring, tile, depth);
}

// Persistent grid with z in global scratch: block b reuses slot b for
// tiles b, b + grid, ... Dynamic shared memory holds only the staging ring.
template <class T>
__global__ void __launch_bounds__(256, 3) plan_global_kernel(PlanView p, const T* __restrict__ y, T* __restrict__ out,
                                                          long long m, int depth, double* scratch) {
    extern __shared__ double smem[];
    const int tile = blockDim.x;
    double* buf = scratch + static_cast<long long>(blockIdx.x) * p.n * tile + threadIdx.x;
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
    std::vector<double> zbuf(static_cast<std::size_t>(tile) * p.n);
    std::vector<T> ring(static_cast<std::size_t>(tile) * 2 * depth);
    for (long long b = 0; b * tile < m; ++b)
        for (int t = 0; t < tile && b * tile + t < m; ++t)
            plan_column<T>(p, y, out, m, b * tile + t, zbuf.data() + t, tile, ring.data() + t, tile, depth);
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
