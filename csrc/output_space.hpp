// The log output space of LeTCC's decoder (python/letcc/codes/output_space.py),
// compiled: one pass that checks that the workers' answers are probability
// rows and writes log(max(Y, floor)), and one softmax over the last axis in
// place. The decoder's Python side calls them around its linear map so that a
// decode in log space costs two compiled calls more than a linear one, not a
// chain of numpy calls (issue 22: the log space as the default, within 10% of
// the linear decode's time at 10 classes).
//
// Header-only on purpose: output_space.cpp includes it once per instruction
// set (AVX-512, AVX2+FMA, baseline x86-64) under a target attribute, and the
// loops below are written so that GCC vectorises them without -ffast-math
// (no libm calls inside the loops, fixed-width partial sums, integer bit
// tricks in 64-bit lanes only).
//
// float64 data: float64 arithmetic (fdlibm's log, a degree-13 exp), within a
// few ulps of numpy's. float32 data: float32 arithmetic in twice as many
// lanes (musl's logf, cephes' expf), within an ulp or two of the correctly
// rounded result (the softmax's argument z - max is rounded to float32 as
// numpy's float32 softmax rounds it); the check and the row sums are float64
// for both.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace letcc {
namespace outspace {

// Everything here is inlined into output_space.cpp's per-ISA entry points: a
// template instantiated once would be compiled for the baseline target only
// and called, unvectorised, from the AVX-512 and AVX2 builds.
#if defined(__GNUC__) || defined(__clang__)
#define LETCC_OS_INLINE inline __attribute__((always_inline))
#else
#define LETCC_OS_INLINE inline
#endif

LETCC_OS_INLINE std::uint64_t bits_of(double x) {
    std::uint64_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}

LETCC_OS_INLINE double from_bits(std::uint64_t u) {
    double x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// log(x) for a positive, normal, finite x: fdlibm's e_log.c (the reduction to
// 1 + f in [sqrt(2)/2, sqrt(2)) and its minimax coefficients Lg1..Lg7, error
// below 1 ulp), written branch-free: the exponent k comes from 64-bit integer
// arithmetic and is turned into a double with the 2^52 trick (packed
// int64 -> double conversion exists only on AVX-512DQ).
LETCC_OS_INLINE double log_positive(double x) {
    constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    constexpr double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
                     Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
                     Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
                     Lg7 = 1.479819860511658591e-01;
    // musl's log.c: adding 0x3ff00000 - 0x3fe6a09e to the high word moves the
    // mantissas above sqrt(2) into the next binade, so k is the exponent of
    // the reduced value and the mantissa lands in [sqrt(2)/2, sqrt(2)).
    const std::uint64_t ix = bits_of(x) + ((0x3ff00000ULL - 0x3fe6a09eULL) << 32);
    const std::uint64_t e = ix >> 52;                                           // biased k, 0..2047
    const double dk = from_bits(0x4330000000000000ULL | e) - (4503599627370496.0 + 1023.0);  // 2^52 + e - 2^52 - 1023
    const double r = from_bits((ix & 0x000fffffffffffffULL) + (0x3fe6a09eULL << 32));
    const double f = r - 1.0;
    const double hfsq = 0.5 * f * f;
    const double s = f / (2.0 + f);
    const double z = s * s;
    const double w = z * z;
    const double t1 = w * (Lg2 + w * (Lg4 + w * Lg6));
    const double t2 = z * (Lg1 + w * (Lg3 + w * (Lg5 + w * Lg7)));
    const double R = t2 + t1;
    return s * (hfsq + R) + dk * ln2_lo - hfsq + f + dk * ln2_hi;
}

// exp(x) for x <= 0 (a softmax's argument after its row maximum is taken
// off). Below -708 (exp under the smallest normal double, 2.2e-308) it
// returns 0: the softmax divides by a row sum >= 1, so what is lost is a
// probability below 2.2e-308, and nothing of a float32 result (float32's
// smallest subnormal is exp(-103.3)). Reduction x = k ln2 + r, |r| <= ln2/2,
// exp(r) by its Taylor series to degree 13 (truncation below 5e-18
// relative), 2^k built from the exponent bits.
LETCC_OS_INLINE double exp_nonpositive(double x) {
    constexpr double inv_ln2 = 1.44269504088896338700e+00;
    constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    constexpr double shifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
    constexpr double lo = -708.0;
    const double xc = x < lo ? lo : x;
    const double t = xc * inv_ln2 + shifter;
    const double kd = t - shifter;                     // round(xc / ln2), -1021..0
    const double r = (xc - kd * ln2_hi) - kd * ln2_lo;
    double p = 1.0 / 6227020800.0;                     // 1/13!
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // t's mantissa holds k (two's complement in its low bits): 2^k's bits are (k + 1023) << 52
    const std::uint64_t k = bits_of(t) - bits_of(shifter);
    const double scale = from_bits((k + 1023ULL) << 52);
    const double res = p * scale;
    return x < lo ? 0.0 : res;
}

LETCC_OS_INLINE std::uint32_t bits_of(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}

LETCC_OS_INLINE float from_bits32(std::uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// logf(x) for a positive, normal, finite float: musl's logf.c (the same
// reduction as log_positive, its degree-4 coefficients; error below 1 ulp).
LETCC_OS_INLINE float log_positive(float x) {
    constexpr float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f;
    constexpr float Lg1 = 0.66666662693f, Lg2 = 0.40000972152f, Lg3 = 0.28498786688f, Lg4 = 0.24279078841f;
    const std::uint32_t ix = bits_of(x) + (0x3f800000u - 0x3f3504f3u);
    const float dk = static_cast<float>(static_cast<std::int32_t>(ix >> 23) - 0x7f);
    const float f = from_bits32((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
    const float s = f / (2.0f + f);
    const float z = s * s;
    const float w = z * z;
    const float R = z * (Lg1 + w * Lg3) + w * (Lg2 + w * Lg4);
    const float hfsq = 0.5f * f * f;
    return s * (hfsq + R) + dk * ln2_lo - hfsq + f + dk * ln2_hi;
}

// expf(x) for x <= 0: cephes' expf.c (x = k ln2 + r with ln2 split so that
// k * C1 is exact, a degree-5 minimax polynomial; error about 1 ulp). 2^k is
// applied in two halves, so that results below the smallest normal float
// (x < -87.3) come out subnormal as numpy's do; below -104 the result is 0
// (under float32's smallest subnormal).
LETCC_OS_INLINE float exp_nonpositive(float x) {
    constexpr float log2e = 1.44269504088896341f, C1 = 0.693359375f, C2 = -2.12194440e-4f;
    constexpr float shifter = 12582912.0f;  // 1.5 * 2^23
    constexpr float lo = -104.0f;
    const float xc = x < lo ? lo : x;
    const float t = xc * log2e + shifter;
    const float kf = t - shifter;           // round(xc / ln2), -150..0
    const float r = (xc - kf * C1) - kf * C2;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const std::int32_t k = static_cast<std::int32_t>(bits_of(t) - bits_of(shifter));
    const std::int32_t k1 = k / 2, k2 = k - k1;   // each >= -75: both halves normal
    const float s1 = from_bits32(static_cast<std::uint32_t>(k1 + 127) << 23);
    const float s2 = from_bits32(static_cast<std::uint32_t>(k2 + 127) << 23);
    const float res = (p * s1) * s2;
    return x < lo ? 0.0f : res;
}

// Lanes of the partial sums and maxima below: a fixed width, so that a row's
// sum is the same on every instruction set (and vectorises as one register).
constexpr std::size_t kLanes = 8;

// Whether every entry of the (rows x m) array y is finite and >= 0 and, with
// check_sums, every row sums to 1 within tol (summed in float64). Stops at the
// first row that fails. Written as a minimum and a sum per lane (selects and
// adds, which vectorise): a NaN or an infinity makes the row's float64 sum
// NaN or infinite, a negative entry the minimum negative. (A row of finite
// entries whose sum overflows float64 fails too; with check_sums it could not
// sum to 1 anyway, and without, the caller's own path then takes it.)
template <class T>
LETCC_OS_INLINE bool probability_rows(const T* y, std::size_t rows, std::size_t m, bool check_sums, double tol) {
    const std::size_t full = m - m % kLanes;
    for (std::size_t r = 0; r < rows; ++r) {
        const T* yr = y + r * m;
        double acc[kLanes] = {}, mn[kLanes];
        for (std::size_t l = 0; l < kLanes; ++l) mn[l] = 0.0;
        for (std::size_t j = 0; j < full; j += kLanes)
            for (std::size_t l = 0; l < kLanes; ++l) {
                const double v = static_cast<double>(yr[j + l]);
                acc[l] += v;
                mn[l] = v < mn[l] ? v : mn[l];
            }
        for (std::size_t j = full; j < m; ++j) {
            const double v = static_cast<double>(yr[j]);
            acc[0] += v;
            mn[0] = v < mn[0] ? v : mn[0];
        }
        const double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        const double lo = std::min(std::min(std::min(mn[0], mn[1]), std::min(mn[2], mn[3])),
                                   std::min(std::min(mn[4], mn[5]), std::min(mn[6], mn[7])));
        if (!(lo >= 0.0) || !std::isfinite(s)) return false;
        if (check_sums && !(std::fabs(s - 1.0) <= tol)) return false;
    }
    return true;
}

// out[i] = log(max(y[i], floor)) for i < count (y already checked: finite, >= 0),
// in y's own precision.
template <class T>
LETCC_OS_INLINE void log_floor(const T* __restrict y, T* __restrict out, std::size_t count, T floor) {
    for (std::size_t i = 0; i < count; ++i) {
        const T v = y[i] > floor ? y[i] : floor;
        out[i] = log_positive(v);
    }
}

// The softmax of every row of the (rows x m) array z, in place: exp(z - max)
// over the row's sum, in z's precision (the sum in float64). buf:
// softmax_buffer_size(rows, m) doubles of scratch (each element's row maximum,
// the row maxima). The exponentials are one flat pass over all rows (each
// element minus its row's maximum, spread into buf first): with 10 classes a
// row is too short for the vector loop, the whole array is not. Rows holding
// a NaN or an infinity come out NaN (the decoder's estimates are finite: its
// inputs were checked).
LETCC_OS_INLINE std::size_t softmax_buffer_size(std::size_t rows, std::size_t m) { return rows * m + rows; }

template <class T>
LETCC_OS_INLINE void softmax_rows(T* __restrict z, std::size_t rows, std::size_t m, double* __restrict buf) {
    const std::size_t full = m - m % kLanes;
    const std::size_t count = rows * m;
    T* __restrict shift = reinterpret_cast<T*>(buf);   // count T's: no more than count doubles
    double* __restrict top = buf + count;
    for (std::size_t r = 0; r < rows; ++r) {
        const T* zr = z + r * m;
        T mx[kLanes];
        for (std::size_t l = 0; l < kLanes; ++l) mx[l] = -std::numeric_limits<T>::infinity();
        for (std::size_t j = 0; j < full; j += kLanes)
            for (std::size_t l = 0; l < kLanes; ++l) mx[l] = zr[j + l] > mx[l] ? zr[j + l] : mx[l];
        for (std::size_t j = full; j < m; ++j) mx[0] = zr[j] > mx[0] ? zr[j] : mx[0];
        T t = mx[0];
        for (std::size_t l = 1; l < kLanes; ++l) t = mx[l] > t ? mx[l] : t;
        top[r] = static_cast<double>(t);
        T* sr = shift + r * m;
        for (std::size_t j = 0; j < m; ++j) sr[j] = t;
    }
    for (std::size_t i = 0; i < count; ++i) z[i] = exp_nonpositive(static_cast<T>(z[i] - shift[i]));
    for (std::size_t r = 0; r < rows; ++r) {
        T* zr = z + r * m;
        double acc[kLanes] = {};
        for (std::size_t j = 0; j < full; j += kLanes)
            for (std::size_t l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(zr[j + l]);
        for (std::size_t j = full; j < m; ++j) acc[0] += static_cast<double>(zr[j]);
        const double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        // NaN or +-inf in the row: s or its maximum is not finite; the row becomes NaN
        const double inv = std::isfinite(top[r]) && std::isfinite(s) ? 1.0 / s
                                                                      : std::numeric_limits<double>::quiet_NaN();
        const T invT = static_cast<T>(inv);
        for (std::size_t j = 0; j < m; ++j) zr[j] = zr[j] * invT;
    }
}

}  // namespace outspace

// Below this many elements the passes run with the GIL held: at 10 classes
// they take well under a microsecond, and releasing and re-taking the GIL
// around them cost about as much (apply_log at K = 12, 27 answers, 10
// classes: 0.93-1.0 us over the plain apply with the GIL released around both
// passes, 0.73-0.76 us without). From 4096 elements (1-4 us of compute) the
// GIL is released, as the plan and dense-operator calls release it.
constexpr std::size_t kGilReleaseMinElems = std::size_t(1) << 12;

// The passes above as output_space.cpp builds them (one build per instruction
// set, the one kernel_isa() names runs). No GIL handling: callers release it.
// log_prepare_rows: the check of probability_rows, then out = log(max(y,
// floor)); false (out untouched) when the check fails.
bool log_prepare_rows(const double* y, double* out, std::size_t rows, std::size_t m, bool check_sums, double tol,
                      double floor);
bool log_prepare_rows(const float* y, float* out, std::size_t rows, std::size_t m, bool check_sums, double tol,
                      double floor);
// softmax_rows with a thread-local scratch buffer.
void softmax_last_axis_rows(double* z, std::size_t rows, std::size_t m);
void softmax_last_axis_rows(float* z, std::size_t rows, std::size_t m);

}  // namespace letcc
