// Host side of the CUDA plan: factor and tabulate on the host (float64, the
// CPU core's headers), pack, upload once, pick a launch configuration, and
// keep the device buffer alive until every stream that used it is done.
#include "device_plan.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <cuda_runtime.h>

#include "../plan.hpp"
#include "../reinsch.hpp"

namespace letcc {
namespace cuda {
namespace {

[[noreturn]] void fail(const char* what, cudaError_t e) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

#define LETCC_CUDA_CHECK(expr)                  \
    do {                                        \
        const cudaError_t e_ = (expr);          \
        if (e_ != cudaSuccess) fail(#expr, e_); \
    } while (0)

// Makes `device` current for the scope of a call, restoring the caller's.
class DeviceGuard {
public:
    explicit DeviceGuard(int device) {
        LETCC_CUDA_CHECK(cudaGetDevice(&prev_));
        if (prev_ != device) LETCC_CUDA_CHECK(cudaSetDevice(device));
        changed_ = prev_ != device;
    }
    ~DeviceGuard() {
        if (changed_) cudaSetDevice(prev_);
    }

private:
    int prev_ = 0;
    bool changed_ = false;
};

// One private non-blocking stream per device for uploads and frees, so that
// neither waits for (nor delays) the caller's queued work. Lives as long as
// the process.
cudaStream_t side_stream(int device) {
    static std::mutex mu;
    static std::vector<cudaStream_t> streams;
    std::lock_guard<std::mutex> lock(mu);
    if (static_cast<std::size_t>(device) >= streams.size()) streams.resize(device + 1, nullptr);
    if (!streams[device]) LETCC_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
    return streams[device];
}

// Raise the kernels' dynamic shared-memory limit once per device.
void prepare_device(int device, std::size_t optin) {
    static std::mutex mu;
    static std::vector<bool> done;
    std::lock_guard<std::mutex> lock(mu);
    if (static_cast<std::size_t>(device) >= done.size()) done.resize(device + 1, false);
    if (done[device]) return;
    LETCC_CUDA_CHECK(prepare_kernels(optin));
    done[device] = true;
}

int pow2_floor(std::size_t v) {
    int p = 1;
    while (static_cast<std::size_t>(p) * 2 <= v) p *= 2;
    return p;
}

// Per-block shared memory aimed at when choosing the tile width: small blocks
// pack the multiprocessor's shared memory finely (several blocks each).
constexpr std::size_t kTargetBlockShared = 32 * 1024;
// Upper bound on the global scratch of the large-n path.
constexpr std::size_t kMaxScratchBytes = std::size_t(256) << 20;

}  // namespace

PackedPlan pack_plan(const double* x, const double* w, std::size_t n, double lam, const double* at, std::size_t q,
                     int nu) {
    if (nu < 0 || nu > 2) throw std::invalid_argument("nu must be 0, 1 or 2, got " + std::to_string(nu));
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max() / 2) ||
        q > static_cast<std::size_t>(std::numeric_limits<int>::max() / 2))
        throw std::invalid_argument("plan too large for the CUDA kernels (n or q >= 2^30)");
    const ReinschFactor f = factor_reinsch(x, w, n, lam);
    const PlanTables t = make_plan_tables(f, at, q, nu);
    // rows | sorted qcoef | qrow | by_k (see launch.hpp), in one double array
    // so that every part is aligned.
    const std::size_t rows = (n + 2) * kRowStride;
    PackedPlan pp;
    pp.n = static_cast<int>(n);
    pp.q = static_cast<int>(q);
    pp.words.assign(packed_words(pp.n, pp.q), 0.0);
    double* d = pp.words.data();
    for (std::size_t i = 0; i < n + 2; ++i) {
        double* r = d + i * kRowStride;
        r[0] = t.qa[i];
        r[1] = t.qb[i];
        r[2] = t.qc[i];
        r[3] = t.l1[i];
        r[4] = t.l2[i];
        r[5] = t.inv_d[i];
        r[6] = (i + 1 < n + 2) ? t.l1[i + 1] : 0.0;
        r[7] = (i + 2 < n + 2) ? t.l2[i + 2] : 0.0;
    }
    std::vector<int> ints(q + n + 1);
    for (std::size_t s = 0; s < q; ++s) {
        const std::size_t j = static_cast<std::size_t>(t.order[s]);  // queries sorted by interval
        double* c = d + rows + s * kQueryStride;
        c[0] = t.cy[2 * j];
        c[1] = t.cy[2 * j + 1];
        for (int k = 0; k < 4; ++k) c[2 + k] = t.cgam[4 * j + k];
        ints[s] = static_cast<int>(j);
    }
    for (std::size_t k = 0; k <= n; ++k) ints[q + k] = static_cast<int>(t.by_k[k]);
    std::memcpy(d + rows + q * kQueryStride, ints.data(), ints.size() * sizeof(int));
    return pp;
}

std::pair<int, std::string> probe_devices() {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();  // reset the runtime's last-error state
        return {0, std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)};
    }
    return {count, ""};
}

DevicePlan::DevicePlan(const double* x, const double* w, std::size_t n, double lam, const double* at,
                       std::size_t q, int device, int nu)
    : device_(device) {
    const PackedPlan host = pack_plan(x, w, n, lam, at, q, nu);
    bytes_ = host.words.size() * sizeof(double);

    DeviceGuard guard(device_);
    LETCC_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
    int optin = 0, pools = 0;
    LETCC_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    LETCC_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_));
    shared_optin_ = static_cast<std::size_t>(optin);
    pools_ = pools != 0;
    prepare_device(device_, shared_optin_);

    const cudaStream_t side = side_stream(device_);
    if (pools_)
        LETCC_CUDA_CHECK(cudaMallocAsync(&dev_, bytes_, side));
    else
        LETCC_CUDA_CHECK(cudaMalloc(&dev_, bytes_));
    // Pageable source: the call returns once the bytes are staged, so `host`
    // may go; the event marks the copy's completion on the device.
    LETCC_CUDA_CHECK(cudaMemcpyAsync(dev_, host.words.data(), bytes_, cudaMemcpyHostToDevice, side));
    LETCC_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
    LETCC_CUDA_CHECK(cudaEventRecord(uploaded_, side));

    view_ = view_of(dev_, host.n, host.q);
}

DevicePlan::~DevicePlan() {
    // Free after every stream that used the buffer is done with it, without
    // blocking the host: the side stream waits on each stream's last launch.
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess) return;  // runtime gone (interpreter exit)
    cudaSetDevice(device_);
    const cudaStream_t side = side_stream(device_);
    for (auto& u : uses_) {
        cudaStreamWaitEvent(side, u.second, 0);
        cudaEventDestroy(u.second);
    }
    if (dev_) {
        if (pools_)
            cudaFreeAsync(dev_, side);
        else
            cudaFree(dev_);
    }
    if (uploaded_) cudaEventDestroy(uploaded_);
    cudaGetLastError();
    if (prev != device_) cudaSetDevice(prev);
}

void DevicePlan::note_use(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& u : uses_) {
        if (u.first == stream) {
            LETCC_CUDA_CHECK(cudaEventRecord(u.second, stream));
            return;
        }
    }
    cudaEvent_t ev = nullptr;
    LETCC_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    LETCC_CUDA_CHECK(cudaEventRecord(ev, stream));
    uses_.emplace_back(stream, ev);
}

LaunchConfig choose_launch(int n, long long m, std::size_t elem, const Tuning& t, int sm_count,
                           std::size_t shared_optin, int global_blocks_per_sm) {
    if (t.tile != 0 && t.tile != 32 && t.tile != 64 && t.tile != 128 && t.tile != 256)
        throw std::invalid_argument("tile must be 32, 64, 128 or 256, got " + std::to_string(t.tile));
    if (t.depth < 0 || t.depth > 64) throw std::invalid_argument("depth must be in 1..64, got " + std::to_string(t.depth));
    LaunchConfig c;
    c.depth = t.depth > 0 ? t.depth : std::min(32, std::max(1, n));
    const bool shared_fits = shared_bytes_for(GammaStore::Shared, n, 32, c.depth, elem) <= shared_optin;
    c.store = (t.store == 2 || (t.store == 0 && !shared_fits)) ? GammaStore::Global : GammaStore::Shared;
    if (c.store == GammaStore::Shared && !shared_fits)
        throw std::invalid_argument("n = " + std::to_string(n) + " is too large for the shared-memory kernel on this device");
    if (t.tile > 0) {
        c.tile = t.tile;
    } else if (c.store == GammaStore::Shared) {
        const std::size_t per_col = shared_bytes_for(GammaStore::Shared, n, 1, c.depth, elem);
        c.tile = std::min(256, std::max(32, pow2_floor(kTargetBlockShared / per_col)));
    } else {
        c.tile = 64;
    }
    // No wider than the data (the smallest power of two >= m, at least 32),
    // and narrow enough for the block's shared memory.
    int cap = 32;
    while (cap < m && cap < 256) cap *= 2;
    c.tile = std::min(c.tile, cap);
    while (c.tile > 32 && shared_bytes_for(c.store, n, c.tile, c.depth, elem) > shared_optin) c.tile /= 2;
    c.shared_bytes = shared_bytes_for(c.store, n, c.tile, c.depth, elem);
    const long long ntiles = (m + c.tile - 1) / c.tile;
    if (c.store == GammaStore::Shared) {
        c.grid = std::max<long long>(ntiles, 1);
    } else {
        // Persistent grid: as many blocks as fit at once, and a bounded scratch.
        const long long slot = static_cast<long long>(c.tile) * n * 8;
        long long g = std::min<long long>(ntiles, static_cast<long long>(sm_count) * std::max(global_blocks_per_sm, 1));
        g = std::min<long long>(g, static_cast<long long>(kMaxScratchBytes) / slot);
        c.grid = std::max<long long>(g, 1);
    }
    return c;
}

LaunchConfig DevicePlan::config(long long m, bool f64, const Tuning& t) const {
    const std::size_t elem = f64 ? 8 : 4;
    LaunchConfig c = choose_launch(view_.n, m, elem, t, sm_count_, shared_optin_, 1);
    if (c.store == GammaStore::Global) {
        int per_sm = 0;
        LETCC_CUDA_CHECK(global_blocks_per_sm(f64, c.tile, c.shared_bytes, &per_sm));
        c = choose_launch(view_.n, m, elem, t, sm_count_, shared_optin_, per_sm);
    }
    return c;
}

void DevicePlan::apply(const void* y, void* out, long long m, bool f64, cudaStream_t stream, const Tuning& t) {
    if (m <= 0) return;
    DeviceGuard guard(device_);
    LaunchConfig c = config(m, f64, t);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LETCC_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    if (!upload_done_) {
        // The upload ran on the side stream: the first launches wait for it
        // (on the device when possible, on the host inside a graph capture).
        const cudaError_t q = cudaEventQuery(uploaded_);
        if (q == cudaSuccess) {
            upload_done_ = true;
        } else if (q != cudaErrorNotReady) {
            fail("cudaEventQuery(upload)", q);
        } else if (capturing) {
            LETCC_CUDA_CHECK(cudaEventSynchronize(uploaded_));
            upload_done_ = true;
        } else {
            LETCC_CUDA_CHECK(cudaStreamWaitEvent(stream, uploaded_, 0));
        }
    }
    const bool scratch = c.store == GammaStore::Global;
    if (scratch) {
        const std::size_t bytes = static_cast<std::size_t>(c.grid) * c.tile * view_.n * sizeof(double);
        if (pools_)
            LETCC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&c.scratch), bytes, stream));
        else
            LETCC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&c.scratch), bytes));
    }
    const cudaError_t e = f64 ? launch_plan_f64(view_, static_cast<const double*>(y), static_cast<double*>(out), m, c, stream)
                              : launch_plan_f32(view_, static_cast<const float*>(y), static_cast<float*>(out), m, c, stream);
    if (scratch) {
        if (pools_)
            cudaFreeAsync(c.scratch, stream);
        else
            cudaFree(c.scratch);
    }
    if (e != cudaSuccess) fail("kernel launch", e);
    if (!capturing) note_use(stream);
}

}  // namespace cuda
}  // namespace letcc
