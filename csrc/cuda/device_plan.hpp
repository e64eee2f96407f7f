// A smoothing plan resident on one GPU: built on the host in float64 with the
// same headers as the CPU core (reinsch.hpp, eval_coeffs.hpp, plan.hpp),
// packed into one buffer and uploaded once; applied to device arrays on the
// caller's stream. No Python here (bindings_cuda.cpp wraps it).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "launch.hpp"

namespace letcc {
namespace cuda {

// Overrides of the automatic launch configuration (0 = automatic), for the
// benchmark and the tests that exercise both gamma stores.
struct Tuning {
    int store = 0;  // 1 = shared memory, 2 = global scratch
    int tile = 0;   // threads (columns) per block: 32, 64, 128 or 256
    int depth = 0;  // rows per cp.async group, 1..64
};

// The plan for knots x (weights w, smoothing lam) evaluated at `at`, built in
// float64 with the CPU core's headers and packed as launch.hpp describes.
struct PackedPlan {
    std::vector<double> words;
    int n = 0, q = 0;
    PlanView view() const { return view_of(words.data(), n, q); }
};
// nu: 0 values, 1 first derivative, 2 second derivative at the query points.
PackedPlan pack_plan(const double* x, const double* w, std::size_t n, double lam, const double* at, std::size_t q,
                     int nu = 0);

// The launch configuration for n knots and m columns of `elem`-byte data on
// a device with `sm_count` multiprocessors and `shared_optin` bytes of shared
// memory per block; `global_blocks_per_sm` is the occupancy of the
// global-scratch kernel (used only when z goes to the global scratch).
LaunchConfig choose_launch(int n, long long m, std::size_t elem, const Tuning& t, int sm_count,
                           std::size_t shared_optin, int global_blocks_per_sm);

class DevicePlan {
public:
    DevicePlan(const double* x, const double* w, std::size_t n, double lam, const double* at, std::size_t q,
               int device, int nu = 0);
    ~DevicePlan();
    DevicePlan(const DevicePlan&) = delete;
    DevicePlan& operator=(const DevicePlan&) = delete;

    // out (q x m) = plan(y (n x m)); y and out C-contiguous device pointers of
    // float64 (f64) or float32 data on this plan's device; enqueued on stream.
    void apply(const void* y, void* out, long long m, bool f64, cudaStream_t stream, const Tuning& t);

    // The launch configuration apply would use (scratch left null).
    LaunchConfig config(long long m, bool f64, const Tuning& t) const;

    int n() const { return view_.n; }
    int q() const { return view_.q; }
    int device() const { return device_; }
    std::size_t device_bytes() const { return bytes_; }

private:
    void note_use(cudaStream_t stream);

    int device_ = 0;
    int sm_count_ = 1;
    std::size_t shared_optin_ = 48 * 1024;
    bool pools_ = true;  // stream-ordered allocator available
    std::size_t bytes_ = 0;
    void* dev_ = nullptr;
    PlanView view_;
    cudaEvent_t uploaded_ = nullptr;
    std::atomic<bool> upload_done_{false};
    std::mutex mu_;
    std::vector<std::pair<cudaStream_t, cudaEvent_t>> uses_;  // last launch per stream, for the free
};

// (device count, "" or the runtime's error name and message).
std::pair<int, std::string> probe_devices();

}  // namespace cuda
}  // namespace letcc
