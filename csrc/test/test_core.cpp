// Tests of the C++ core without Python (celerite2 keeps the same kind in
// c++/test): the Reinsch factorisation and fit, the plan (banded and dense,
// float64 and float32, values and derivatives, inside and outside the knots),
// the dense operator, the smoother trace and the GCV score, each checked on
// fresh random inputs, every element, against a dense float64 solve written
// here (Green & Silverman's Q, R, W built as full matrices, Gaussian
// elimination with partial pivoting), plus the round counter's semantics and
// the task records and doorbell of the control segment (control_words.hpp).
// Built by csrc/test/CMakeLists.txt (LETCC_BUILD_TESTS at the top level) and
// run by tests/test_cpp_core.py. Seed: LETCC_TEST_SEED, else random (printed).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <poll.h>
#endif

#include "driver/linear_maps.hpp"
#include "driver/locator.hpp"
#include "driver/spline_ops.hpp"
#include "reinsch.hpp"
#include "control_words.hpp"
#include "round_counter.hpp"
#include "round_waiter.hpp"
#include "wake_timer.hpp"

using namespace letcc;

namespace {

int failures = 0;
long checks = 0;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        ++checks;                                                     \
        if (!(cond)) {                                                \
            if (++failures <= 20) {                                   \
                std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
                std::printf(__VA_ARGS__);                             \
                std::printf("\n");                                    \
            }                                                         \
        }                                                             \
    } while (0)

using Mat = std::vector<std::vector<double>>;

// Solves A X = B (A k x k, B k x c) by Gaussian elimination with partial pivoting.
Mat solve(Mat a, Mat b) {
    const std::size_t k = a.size();
    for (std::size_t c = 0; c < k; ++c) {
        std::size_t p = c;
        for (std::size_t r = c + 1; r < k; ++r)
            if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
        std::swap(a[c], a[p]);
        std::swap(b[c], b[p]);
        for (std::size_t r = c + 1; r < k; ++r) {
            const double f = a[r][c] / a[c][c];
            for (std::size_t j = c; j < k; ++j) a[r][j] -= f * a[c][j];
            for (std::size_t j = 0; j < b[r].size(); ++j) b[r][j] -= f * b[c][j];
        }
    }
    for (std::size_t c = k; c-- > 0;) {
        for (std::size_t j = 0; j < b[c].size(); ++j) {
            double s = b[c][j];
            for (std::size_t i = c + 1; i < k; ++i) s -= a[c][i] * b[i][j];
            b[c][j] = s / a[c][c];
        }
    }
    return b;
}

// The reference fit: g and gamma (n x m, row-major) of the smoothing spline,
// from the dense system (R + lam Q^T W^-1 Q) gamma = Q^T y, g = y - lam W^-1 Q gamma.
struct RefFit {
    std::vector<double> g, gam;
    double trace = 0;  // tr S, S the smoother matrix (g = S y)
};

RefFit reference_fit(const std::vector<double>& x, const std::vector<double>& w, double lam,
                     const std::vector<double>& y, std::size_t m) {
    const std::size_t n = x.size();
    RefFit r;
    r.g = y;
    r.gam.assign(n * m, 0.0);
    r.trace = static_cast<double>(n);
    if (n < 3) return r;  // a constant or the line through both points: g = y
    const std::size_t k = n - 2;
    Mat Q(n, std::vector<double>(k, 0.0)), M(k, std::vector<double>(k, 0.0));
    for (std::size_t j = 0; j < k; ++j) {  // column j is interior knot i = j + 1
        const double hl = x[j + 1] - x[j], hr = x[j + 2] - x[j + 1];
        Q[j][j] = 1 / hl;
        Q[j + 1][j] = -1 / hl - 1 / hr;
        Q[j + 2][j] = 1 / hr;
        M[j][j] += (hl + hr) / 3;
        if (j + 1 < k) M[j][j + 1] = M[j + 1][j] = hr / 6;
    }
    for (std::size_t a = 0; a < k; ++a)
        for (std::size_t b = 0; b < k; ++b)
            for (std::size_t i = 0; i < n; ++i) M[a][b] += lam * Q[i][a] * Q[i][b] / w[i];
    Mat rhs(k, std::vector<double>(m + n, 0.0));  // Q^T y | Q^T (for the trace)
    for (std::size_t a = 0; a < k; ++a) {
        for (std::size_t c = 0; c < m; ++c)
            for (std::size_t i = 0; i < n; ++i) rhs[a][c] += Q[i][a] * y[i * m + c];
        for (std::size_t i = 0; i < n; ++i) rhs[a][m + i] = Q[i][a];
    }
    const Mat sol = solve(M, rhs);
    for (std::size_t c = 0; c < m; ++c) {
        for (std::size_t a = 0; a < k; ++a) r.gam[(a + 1) * m + c] = sol[a][c];
        for (std::size_t i = 0; i < n; ++i) {
            double qg = 0;
            for (std::size_t a = 0; a < k; ++a) qg += Q[i][a] * sol[a][c];
            r.g[i * m + c] = y[i * m + c] - lam / w[i] * qg;
        }
    }
    // tr S = n - lam tr(W^-1 Q M^-1 Q^T)
    double t = 0;
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t a = 0; a < k; ++a) t += Q[i][a] * sol[a][m + i] / w[i];
    r.trace = static_cast<double>(n) - lam * t;
    return r;
}

// The nu-th derivative at t of the natural cubic spline with values g and
// second derivatives gam (column c of n x m) at the knots, as a cubic in
// (t - x_i) per interval, extended linearly outside.
double reference_eval(const std::vector<double>& x, const std::vector<double>& g, const std::vector<double>& gam,
                      std::size_t m, std::size_t c, double t, int nu) {
    const std::size_t n = x.size();
    if (n == 1) return nu == 0 ? g[c] : 0.0;
    auto coef = [&](std::size_t i, double& c0, double& c1, double& c2, double& c3) {
        const double h = x[i + 1] - x[i];
        const double gi = gam[i * m + c], gj = gam[(i + 1) * m + c];
        c0 = g[i * m + c];
        c1 = (g[(i + 1) * m + c] - c0) / h - h * (2 * gi + gj) / 6;
        c2 = gi / 2;
        c3 = (gj - gi) / (6 * h);
    };
    double c0, c1, c2, c3;
    if (t < x[0]) {
        coef(0, c0, c1, c2, c3);
        const double d = t - x[0];
        return nu == 0 ? c0 + c1 * d : (nu == 1 ? c1 : 0.0);
    }
    if (t > x[n - 1]) {
        coef(n - 2, c0, c1, c2, c3);
        const double h = x[n - 1] - x[n - 2];
        const double slope = c1 + 2 * c2 * h + 3 * c3 * h * h;
        return nu == 0 ? g[(n - 1) * m + c] + slope * (t - x[n - 1]) : (nu == 1 ? slope : 0.0);
    }
    std::size_t i = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), t) - x.begin());
    i = std::min(i == 0 ? 0 : i - 1, n - 2);
    coef(i, c0, c1, c2, c3);
    const double d = t - x[i];
    if (nu == 0) return c0 + d * (c1 + d * (c2 + d * c3));
    if (nu == 1) return c1 + d * (2 * c2 + 3 * c3 * d);
    return 2 * c2 + 6 * c3 * d;
}

double max_abs(const std::vector<double>& v) {
    double s = 0;
    for (double e : v) s = std::max(s, std::abs(e));
    return s;
}

std::mt19937_64 rng;

double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); }

// n strictly increasing knots in [-1, 1], no gap below a quarter of the mean.
std::vector<double> random_knots(std::size_t n) {
    std::vector<double> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = -1 + 2 * (i + uniform(0.0, 0.75)) / static_cast<double>(n);
    return x;
}

std::vector<double> random_vector(std::size_t k, double a, double b) {
    std::vector<double> v(k);
    for (double& e : v) e = uniform(a, b);
    return v;
}

// |got - want| <= tol * scale for every element.
template <class T>
void check_close(const char* what, const T* got, const std::vector<double>& want, double tol, double scale,
                 std::size_t n, std::size_t m, double lam) {
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double err = std::abs(static_cast<double>(got[i]) - want[i]);
        CHECK(err <= tol * scale, "%s n=%zu m=%zu lam=%g: element %zu (row %zu) got %.17g want %.17g", what, n, m, lam,
              i, m ? i / m : 0, static_cast<double>(got[i]), want[i]);
    }
}

void test_spline(std::size_t n, std::size_t m, double lam) {
    const std::vector<double> x = random_knots(n);
    const std::vector<double> w = random_vector(n, 0.5, 2.0);
    const std::vector<double> y = random_vector(n * m, -1.0, 1.0);
    const RefFit ref = reference_fit(x, w, lam, y, m);
    const ReinschFactor f = factor_reinsch(x.data(), w.data(), n, lam);
    const double tol64 = 1e-9, tol32 = 2e-6;
    const double gscale = max_abs(ref.g) + 1, cscale = max_abs(ref.gam) + 1;

    // fit, float64 and float32 data
    std::vector<double> g(n * m), gam(n * m);
    driver::fit<double>(f, y.data(), g.data(), gam.data(), m, 2);
    check_close("fit g f64", g.data(), ref.g, tol64, gscale, n, m, lam);
    check_close("fit gamma f64", gam.data(), ref.gam, tol64, cscale, n, m, lam);
    std::vector<float> y32(y.begin(), y.end()), g32(n * m), gam32(n * m);
    std::vector<double> y32d(y32.begin(), y32.end());
    const RefFit ref32 = reference_fit(x, w, lam, y32d, m);
    driver::fit<float>(f, y32.data(), g32.data(), gam32.data(), m, 2);
    check_close("fit g f32", g32.data(), ref32.g, tol32, gscale, n, m, lam);
    check_close("fit gamma f32", gam32.data(), ref32.gam, tol32, cscale, n, m, lam);

    // the trace and GCV
    CHECK(std::abs(smoother_trace(f) - ref.trace) <= 1e-9 * n, "trace n=%zu lam=%g: %.17g vs %.17g", n, lam,
          smoother_trace(f), ref.trace);
    if (n >= 3) {
        double rss = 0;
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t c = 0; c < m; ++c) rss += w[i] * std::pow(y[i * m + c] - ref.g[i * m + c], 2);
        const double dn = static_cast<double>(n);
        const double score = dn * rss / ((dn - ref.trace) * (dn - ref.trace));
        const driver::GcvScore s = driver::gcv<double>(f, y.data(), m, 1);
        // rss from gamma: accurate where y - g cancels (lam -> 0), so compared
        // against the reference's rss relative to sum w y^2
        double ysq = 0;
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t c = 0; c < m; ++c) ysq += w[i] * y[i * m + c] * y[i * m + c];
        CHECK(std::abs(s.rss - rss) <= 1e-9 * (ysq + 1e-300), "gcv rss n=%zu lam=%g: %.17g vs %.17g", n, lam, s.rss,
              rss);
        CHECK(std::abs(s.trace - ref.trace) <= 1e-9 * dn, "gcv trace n=%zu lam=%g", n, lam);
        if (lam > 1e-6)
            CHECK(std::abs(s.score - score) <= 1e-7 * score, "gcv score n=%zu lam=%g: %.17g vs %.17g", n, lam,
                  s.score, score);
        const driver::GcvScore s32 = driver::gcv<float>(f, y32.data(), m, 1);
        CHECK(std::abs(s32.trace - s.trace) == 0.0, "gcv f32 trace n=%zu", n);
    }

    // plans: values and derivatives at points inside and outside the knots
    std::vector<double> at = random_vector(2 * n + 3, -1.4, 1.4);
    at[0] = x[0];
    at[1] = x[n - 1];
    const std::size_t q = at.size();
    for (int nu = 0; nu <= 2; ++nu) {
        std::vector<double> want(q * m), want32(q * m);
        for (std::size_t j = 0; j < q; ++j)
            for (std::size_t c = 0; c < m; ++c) {
                want[j * m + c] = reference_eval(x, ref.g, ref.gam, m, c, at[j], nu);
                want32[j * m + c] = reference_eval(x, ref32.g, ref32.gam, m, c, at[j], nu);
            }
        const double scale = max_abs(want) + 1;
        for (const char* method : {"banded", "dense", "auto"}) {
            const driver::SplinePlan plan(x, w, lam, at, nu, method);
            CHECK(plan.n() == static_cast<std::int64_t>(n) && plan.q() == static_cast<std::int64_t>(q), "plan shape");
            std::vector<double> out(q * m);
            plan.run<double>(y.data(), out.data(), m, 2);
            check_close(method, out.data(), want, tol64, scale, n, m, lam);
            std::vector<double> out1(q * m);
            plan.run<double>(y.data(), out1.data(), m, 1);
            CHECK(out1 == out, "plan %s: one thread and two differ (n=%zu m=%zu)", method, n, m);
            std::vector<float> o32(q * m);
            plan.run<float>(y32.data(), o32.data(), m, 2);
            check_close(method, o32.data(), want32, 1e-5, scale, n, m, lam);
            // the dense operator is the plan on the identity
            std::vector<double> a(q * n);
            plan.matrix(a.data());
            std::vector<double> ay(q * m, 0.0);
            for (std::size_t j = 0; j < q; ++j)
                for (std::size_t i = 0; i < n; ++i)
                    for (std::size_t c = 0; c < m; ++c) ay[j * m + c] += a[j * n + i] * y[i * m + c];
            check_close("matrix", ay.data(), want, tol64, scale, n, m, lam);
        }
        // evaluate from the fitted g, gamma
        std::vector<double> ev(q * m);
        driver::evaluate<double>(x, g.data(), gam.data(), m, at, nu, ev.data(), 2);
        check_close("evaluate", ev.data(), want, tol64, scale, n, m, lam);
    }
}

void test_dense_map(std::size_t q, std::size_t n, std::size_t m) {
    const std::vector<double> a = random_vector(q * n, -1, 1), y = random_vector(n * m, -1, 1);
    std::vector<double> want(q * m, 0.0);
    for (std::size_t j = 0; j < q; ++j)
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t c = 0; c < m; ++c) want[j * m + c] += a[j * n + i] * y[i * m + c];
    const driver::DenseMap op(a, static_cast<std::int64_t>(q), static_cast<std::int64_t>(n));
    std::vector<double> out(q * m);
    op.run<double>(y.data(), out.data(), m, 2);
    check_close("dense f64", out.data(), want, 1e-13 * n, 1.0, n, m, 0);
    std::vector<float> y32(y.begin(), y.end()), o32(q * m);
    op.run<float>(y32.data(), o32.data(), m, 2);
    check_close("dense f32", o32.data(), want, 1e-6 * n, 1.0, n, m, 0);
}

// A detection-like spline for the locator tests: random knots, unit
// weights, a small lam, the banded plan at its knots and its hat matrix.
struct LocatorSpline {
    std::vector<double> x;
    double lam;
    driver::SplinePlan plan;
    std::vector<double> H;
    explicit LocatorSpline(std::size_t n)
        : x(random_knots(n)), lam(0.01 * uniform(0.5, 2.0)),
          plan(x, std::vector<double>(n, 1.0), lam, x, 0, "banded"), H(n * n) {
        plan.matrix(H.data());
    }
};

// The spline locator's pass (driver/locator.hpp): rss, d1, d2 and the scores
// against residuals formed with the dense hat matrix (the banded plan on the
// identity, checked against the dense solve in test_spline), rows taken out
// of order, float32 and float64, one and two threads bit for bit.
void test_locator(std::size_t n, std::size_t m) {
    const LocatorSpline sp(n);
    const driver::SplinePlan& plan = sp.plan;
    const std::vector<double>& H = sp.H;
    // the answers in the rows of a larger array, knot i in row perm[i] + 1
    std::vector<std::size_t> perm(n);
    for (std::size_t i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    const std::vector<double> big = random_vector((n + 2) * m, -1.0, 1.0);
    std::vector<const double*> rows(n);
    for (std::size_t i = 0; i < n; ++i) rows[i] = big.data() + (perm[i] + 1) * m;
    std::vector<double> rss(n, 0.0), d1(n, 0.0), d2(n, 0.0), omd(n);
    for (std::size_t i = 0; i < n; ++i) {
        omd[i] = 1.0 - H[i * n + i];
        for (std::size_t c = 0; c < m; ++c) {
            double hy = 0.0;
            for (std::size_t k = 0; k < n; ++k) hy += H[i * n + k] * rows[k][c];
            rss[i] += (rows[i][c] - hy) * (rows[i][c] - hy);
            if (i + 1 < n) d1[i] += std::pow(rows[i][c] - rows[i + 1][c], 2);
            if (i + 2 < n) d2[i] += std::pow(rows[i][c] - rows[i + 2][c], 2);
        }
    }
    std::vector<double> sums(locator_sums_size(static_cast<std::int64_t>(n))), sums1(sums.size());
    driver::locator_sums<double>(plan.factor(), plan.tables(), rows.data(), m, 2, sums.data());
    driver::locator_sums<double>(plan.factor(), plan.tables(), rows.data(), m, 1, sums1.data());
    CHECK(sums == sums1, "locator n=%zu m=%zu: one thread and two differ", n, m);
    const double rscale = max_abs(rss) + 1e-300;
    for (std::size_t i = 0; i < n; ++i) {
        CHECK(std::abs(sums[i] - rss[i]) <= 1e-9 * rscale, "locator rss n=%zu m=%zu i=%zu: %.17g vs %.17g", n, m, i,
              sums[i], rss[i]);
        if (i + 1 < n)
            CHECK(std::abs(sums[n + i] - d1[i]) <= 1e-12 * (d1[i] + 1), "locator d1 n=%zu m=%zu i=%zu", n, m, i);
        if (i + 2 < n)
            CHECK(std::abs(sums[2 * n + i] - d2[i]) <= 1e-12 * (d2[i] + 1), "locator d2 n=%zu m=%zu i=%zu", n, m, i);
    }
    // the scores: loo and the neighbour score from the sums (locator.hpp's
    // formula); n <= 2 has 1 - H_ii = 0 (the spline passes through every answer)
    std::vector<double> s(n), loo(n);
    driver::locator_scores<double>(plan.factor(), plan.tables(), rows.data(), m, omd.data(), 2, s.data(), loo.data());
    for (std::size_t i = 0; i < n && n >= 3; ++i) {
        const double want_loo = sums[i] / (omd[i] * omd[i]);
        double nn = INFINITY, side = INFINITY;
        for (std::size_t k = (i >= 2 ? i - 2 : 0); k <= std::min(n - 1, i + 2); ++k) {
            if (k == i) continue;
            const std::size_t a = std::min(i, k), b = std::max(i, k);
            nn = std::min(nn, b - a == 1 ? d1[a] : d2[a]);
        }
        if (i >= 2) side = std::min(side, std::max(d1[i - 1], d2[i - 2]));
        if (i + 2 < n) side = std::min(side, std::max(d1[i], d2[i]));
        const double agree = std::max(nn, std::isinf(side) ? 0.0 : 0.25 * side);
        CHECK(loo[i] == want_loo, "locator loo n=%zu i=%zu", n, i);
        CHECK(std::abs(s[i] - std::min(want_loo, agree)) <= 1e-12 * (std::min(want_loo, agree) + 1e-300),
              "locator s n=%zu m=%zu i=%zu: %.17g vs %.17g", n, m, i, s[i], std::min(want_loo, agree));
    }
    // float32 rows: the float64 pass on their (exact) float64 values
    std::vector<float> big32(big.begin(), big.end());
    std::vector<double> big64(big32.begin(), big32.end());
    std::vector<const float*> rows32(n);
    std::vector<const double*> rows64(n);
    for (std::size_t i = 0; i < n; ++i) {
        rows32[i] = big32.data() + (perm[i] + 1) * m;
        rows64[i] = big64.data() + (perm[i] + 1) * m;
    }
    std::vector<double> s32(sums.size()), s64(sums.size());
    driver::locator_sums<float>(plan.factor(), plan.tables(), rows32.data(), m, 2, s32.data());
    driver::locator_sums<double>(plan.factor(), plan.tables(), rows64.data(), m, 2, s64.data());
    // (the tiles are sized by element size, so the sums' order may differ)
    for (std::size_t i = 0; i < s32.size(); ++i)
        CHECK(std::abs(s32[i] - s64[i]) <= 1e-12 * std::abs(s64[i]), "locator n=%zu m=%zu: float32 rows differ from "
              "their float64 values: %.17g vs %.17g", n, m, s32[i], s64[i]);

    // with pairs: the same rss, d1, d2 bit for bit, and rr[i] = r_i . r_{i+1}
    // against the dense residuals; one and two threads alike
    std::vector<double> rr_ref(n, 0.0);
    for (std::size_t i = 0; i + 1 < n; ++i)
        for (std::size_t c = 0; c < m; ++c) {
            double hy0 = 0.0, hy1 = 0.0;
            for (std::size_t k = 0; k < n; ++k) {
                hy0 += H[i * n + k] * rows[k][c];
                hy1 += H[(i + 1) * n + k] * rows[k][c];
            }
            rr_ref[i] += (rows[i][c] - hy0) * (rows[i + 1][c] - hy1);
        }
    std::vector<double> ps(locator_sums_size(static_cast<std::int64_t>(n), true)), ps1(ps.size());
    driver::locator_sums<double>(plan.factor(), plan.tables(), rows.data(), m, 2, ps.data(), true);
    driver::locator_sums<double>(plan.factor(), plan.tables(), rows.data(), m, 1, ps1.data(), true);
    CHECK(ps == ps1, "locator pairs n=%zu m=%zu: one thread and two differ", n, m);
    CHECK(std::equal(sums.begin(), sums.end(), ps.begin()), "locator pairs n=%zu m=%zu: rss, d1, d2 differ", n, m);
    for (std::size_t i = 0; i + 1 < n && n >= 3; ++i)
        CHECK(std::abs(ps[3 * n + i] - rr_ref[i]) <= 1e-9 * rscale, "locator rr n=%zu m=%zu i=%zu: %.17g vs %.17g",
              n, m, i, ps[3 * n + i], rr_ref[i]);
}

// The rescoring after erasures (driver::locator_rescore, locator_rescore.hpp)
// against a scoring pass over the rows kept with the spline of the same lam
// fitted to their knots alone; with pairs; one and two threads bit for bit; a
// non-finite erased row declined.
void test_locator_rescore(std::size_t n, std::size_t m) {
    const LocatorSpline sp(n);
    const std::vector<double>& x = sp.x;
    const double lam = sp.lam;
    const driver::SplinePlan& plan = sp.plan;
    const std::vector<double>& H = sp.H;
    std::vector<double> Y = random_vector(n * m, -1.0, 1.0);
    for (std::size_t i = 0; i < n; ++i)            // a smooth signal, two rows wrong
        for (std::size_t c = 0; c < m; ++c) Y[i * m + c] = 0.05 * Y[i * m + c] + std::sin(x[i] + 0.1 * c);
    for (std::size_t c = 0; c < m; ++c) Y[2 * m + c] += 3.0, Y[(n / 2) * m + c] -= 2.0;
    std::vector<const double*> rows(n);
    for (std::size_t i = 0; i < n; ++i) rows[i] = Y.data() + i * m;
    std::vector<double> omd(n);
    for (std::size_t i = 0; i < n; ++i) omd[i] = 1.0 - H[i * n + i];
    for (bool pairs : {false, true}) {
        std::vector<double> first(locator_sums_size(static_cast<std::int64_t>(n), pairs));
        driver::locator_sums<double>(plan.factor(), plan.tables(), rows.data(), m, 2, first.data(), pairs);
        const std::vector<std::vector<std::size_t>> sets = {{2}, {2, n / 2}, {n / 2, n / 2 + 1}, {0, n - 1, 4}};
        for (const auto& erased : sets) {
            const std::size_t nk = n - erased.size();
            if (nk < (pairs ? 5u : 3u)) continue;
            std::vector<double> s(nk), loo(nk), p(nk), s1(nk), loo1(nk), p1(nk);
            const bool ok = driver::locator_rescore<double>(H.data(), first.data(), rows.data(), n, m, erased, pairs,
                                                            2, s.data(), loo.data(), p.data());
            CHECK(ok, "rescore n=%zu m=%zu: declined", n, m);
            if (!ok) continue;
            driver::locator_rescore<double>(H.data(), first.data(), rows.data(), n, m, erased, pairs, 1, s1.data(),
                                            loo1.data(), p1.data());
            CHECK(s == s1 && loo == loo1 && p == p1, "rescore n=%zu m=%zu: one thread and two differ", n, m);
            // the reference: a pass over the rows kept, their own plan at the same lam
            std::vector<double> xk;
            std::vector<const double*> rk;
            for (std::size_t i = 0; i < n; ++i)
                if (std::find(erased.begin(), erased.end(), i) == erased.end()) {
                    xk.push_back(x[i]);
                    rk.push_back(rows[i]);
                }
            const driver::SplinePlan pk(xk, std::vector<double>(nk, 1.0), lam, xk, 0, "banded");
            std::vector<double> Hk(nk * nk), ok_omd(nk), up(nk), lo(nk), pinv(4 * nk);
            pk.matrix(Hk.data());
            for (std::size_t i = 0; i < nk; ++i) ok_omd[i] = 1.0 - Hk[i * nk + i];
            for (std::size_t i = 0; i + 1 < nk; ++i) up[i] = Hk[i * nk + i + 1], lo[i] = Hk[(i + 1) * nk + i];
            pair_inverses(nk, ok_omd.data(), up.data(), lo.data(), pinv.data());
            std::vector<double> s2(nk), loo2(nk), p2(nk);
            driver::locator_scores<double>(pk.factor(), pk.tables(), rk.data(), m, ok_omd.data(), 1, s2.data(),
                                           loo2.data(), pairs ? pinv.data() : nullptr, p2.data());
            const double ls = max_abs(loo2) + 1e-300, ss = max_abs(s2) + 1e-300, ps = max_abs(p2) + 1e-300;
            for (std::size_t i = 0; i < nk; ++i) {
                CHECK(std::abs(loo[i] - loo2[i]) <= 1e-6 * ls, "rescore loo n=%zu m=%zu i=%zu: %.17g vs %.17g", n, m,
                      i, loo[i], loo2[i]);
                CHECK(std::abs(s[i] - s2[i]) <= 1e-6 * ss, "rescore s n=%zu m=%zu i=%zu: %.17g vs %.17g", n, m, i,
                      s[i], s2[i]);
                if (pairs && i + 1 < nk)
                    CHECK(std::abs(p[i] - p2[i]) <= 1e-6 * ps, "rescore pair n=%zu m=%zu i=%zu: %.17g vs %.17g", n,
                          m, i, p[i], p2[i]);
            }
        }
    }
    // several sets in one pass (driver::locator_rescore_sets): each as its own
    // call within rounding (the union groups the residual rows differently)
    for (bool pairs : {false, true}) {
        std::vector<double> first(locator_sums_size(static_cast<std::int64_t>(n), pairs));
        driver::locator_sums<double>(plan.factor(), plan.tables(), rows.data(), m, 1, first.data(), pairs);
        std::vector<std::vector<std::size_t>> sets = {{2, n / 2}, {n / 2, n / 2 + 1}, {2, n / 2 + 1}, {1}};
        if (n >= 12) sets.push_back({0, 3, 5, 7, 9, n - 1});
        const auto got = driver::locator_rescore_sets<double>(H.data(), first.data(), rows.data(), n, m, sets, pairs,
                                                              2);
        CHECK(got.size() == sets.size(), "rescore sets n=%zu m=%zu: %zu results", n, m, got.size());
        for (std::size_t c = 0; c < sets.size() && c < got.size(); ++c) {
            const std::size_t nk = n - sets[c].size();
            std::vector<double> s(nk), loo(nk), p(nk);
            const bool ok = driver::locator_rescore<double>(H.data(), first.data(), rows.data(), n, m, sets[c], pairs,
                                                            1, s.data(), loo.data(), p.data());
            CHECK(got[c].ok == ok, "rescore sets n=%zu m=%zu set %zu: ok %d vs %d", n, m, c, int(got[c].ok), int(ok));
            if (!ok || !got[c].ok) continue;
            // 1e-10, not bit for bit: the rescoring subtracts the erased rows'
            // share from the first pass's sums, which the wrong rows dominate,
            // so each score's rounding is relative to sums larger than it
            // (against the dense pass of the rows kept both are 3-6e-12 off
            // for the answer between two erased ones at n = 8). Measured over
            // 1,000 seeds: at most 4.3e-12 of the largest score (s, loo) and
            // 3.6e-12 (pair scores), about 1 in 70,000 above 1e-12
            const double ls = max_abs(loo) + 1e-300, ss = max_abs(s) + 1e-300, ps = max_abs(p) + 1e-300;
            for (std::size_t i = 0; i < nk; ++i) {
                CHECK(std::abs(got[c].loo[i] - loo[i]) <= 1e-10 * ls,
                      "rescore sets loo n=%zu m=%zu set %zu i=%zu: %.17g vs %.17g", n, m, c, i, got[c].loo[i], loo[i]);
                CHECK(std::abs(got[c].s[i] - s[i]) <= 1e-10 * ss,
                      "rescore sets s n=%zu m=%zu set %zu i=%zu: %.17g vs %.17g", n, m, c, i, got[c].s[i], s[i]);
                if (pairs && i + 1 < nk)
                    CHECK(std::abs(got[c].pair[i] - p[i]) <= 1e-10 * ps,
                          "rescore sets pair n=%zu m=%zu set %zu i=%zu: %.17g vs %.17g", n, m, c, i, got[c].pair[i],
                          p[i]);
            }
        }
    }
    // a row holding NaN in a batch
    {
        std::vector<double> Yn = Y;
        for (std::size_t i = 0; i < n; ++i) rows[i] = Yn.data() + i * m;
        Yn[5 * m] = NAN;
        std::vector<double> first(locator_sums_size(static_cast<std::int64_t>(n)));
        driver::locator_sums<double>(plan.factor(), plan.tables(), rows.data(), m, 1, first.data());
        const auto got = driver::locator_rescore_sets<double>(H.data(), first.data(), rows.data(), n, m,
                                                              {{2}, {5}, {2, 5}}, false, 1);
        // every set's products take row 5 (kept or erased): each declines, as
        // one call per set does (the locate then scores the answers kept with
        // a pass of their own)
        CHECK(!got[0].ok && !got[1].ok && !got[2].ok, "rescore sets n=%zu m=%zu: a NaN row was taken", n, m);
        for (std::size_t i = 0; i < n; ++i) rows[i] = Y.data() + i * m;
    }
    // an erased row holding NaN: declined, the outputs untouched
    Y[2 * m] = NAN;
    std::vector<double> first(locator_sums_size(static_cast<std::int64_t>(n)));
    driver::locator_sums<double>(plan.factor(), plan.tables(), rows.data(), m, 1, first.data());
    std::vector<double> s(n - 1, -1.0), loo(n - 1, -1.0);
    const bool ok = driver::locator_rescore<double>(H.data(), first.data(), rows.data(), n, m, {2}, false, 1,
                                                    s.data(), loo.data(), nullptr);
    CHECK(!ok && s[0] == -1.0, "rescore n=%zu m=%zu: a NaN erased row was taken", n, m);
}

// The locator pass's decode (driver::PassDecode): the scores as without it,
// and the dense map of the rows it scores (taken out of order) equal to
// DenseMap::run<T> on those rows copied in knot order, bit for bit, and to
// the float64 product within rounding; float32 and float64, 1 and 2 threads.
template <class T>
void test_locator_decode(std::size_t n, std::size_t m) {
    const LocatorSpline sp(n);
    const std::size_t q = 8;
    const driver::DenseMap op(random_vector(q * n, -1.0, 1.0), static_cast<std::int64_t>(q),
                              static_cast<std::int64_t>(n));
    std::vector<std::size_t> perm(n);
    for (std::size_t i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    const std::vector<double> big64 = random_vector((n + 1) * m, -1.0, 1.0);
    const std::vector<T> big(big64.begin(), big64.end());
    std::vector<const T*> rows(n);
    std::vector<T> packed(n * m);
    for (std::size_t i = 0; i < n; ++i) {
        rows[i] = big.data() + (perm[i] + 1) * m;
        std::copy(rows[i], rows[i] + m, packed.begin() + static_cast<std::ptrdiff_t>(i * m));
    }
    std::vector<T> want(q * m);
    op.run<T>(packed.data(), want.data(), m, 1);
    std::vector<double> omd(n);
    for (std::size_t i = 0; i < n; ++i) omd[i] = 1.0 - sp.H[i * n + i];
    std::vector<double> s0(n), loo0(n);
    driver::locator_scores<T>(sp.plan.factor(), sp.plan.tables(), rows.data(), m, omd.data(), 1, s0.data(),
                              loo0.data());
    for (int threads : {1, 2}) {
        std::vector<T> out(q * m, T(-7));
        std::vector<double> s(n), loo(n);
        const driver::PassDecode<T> dec{op.coeffs_for<T>(), static_cast<std::int64_t>(q), out.data()};
        driver::locator_scores<T>(sp.plan.factor(), sp.plan.tables(), rows.data(), m, omd.data(), threads, s.data(),
                                  loo.data(), nullptr, nullptr, nullptr, dec);
        // bit for bit (n = 2: the spline interpolates, loo is 0 / 0, NaN in both)
        CHECK(std::memcmp(s.data(), s0.data(), n * sizeof(double)) == 0 &&
                  std::memcmp(loo.data(), loo0.data(), n * sizeof(double)) == 0,
              "pass decode n=%zu m=%zu threads=%d: the scores moved", n, m, threads);
        CHECK(out == want, "pass decode n=%zu m=%zu threads=%d: not DenseMap::run's numbers", n, m, threads);
    }
    std::vector<double> ref(q * m, 0.0);
    for (std::size_t j = 0; j < q; ++j)
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t c = 0; c < m; ++c) ref[j * m + c] += op.matrix()[j * n + i] * double(packed[i * m + c]);
    std::vector<double> got(want.begin(), want.end());
    check_close(sizeof(T) == 8 ? "pass decode f64" : "pass decode f32", got.data(), ref,
                sizeof(T) == 8 ? 1e-13 * n : 1e-6 * n, 1.0, n, m, 0);
}

void test_round_counter() {
    std::int64_t word = 0;
    word = round_counter_start(41);
    CHECK(round_counter_count(&word, 41) == 0, "fresh round counts 0");
    for (int k = 1; k <= 5; ++k) CHECK(round_counter_add(&word, 41) == k, "add %d", k);
    CHECK(round_counter_add(&word, 40) == -1, "an older round is not counted");
    CHECK(round_counter_count(&word, 40) == 0 && round_counter_count(&word, 41) == 5, "counts");
    word = round_counter_start(42);
    const int threads = 4, per = 20000;
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([&] {
            for (int k = 0; k < per; ++k) round_counter_add(&word, 42);
        });
    for (auto& t : ts) t.join();
    CHECK(round_counter_count(&word, 42) == threads * per, "concurrent adds: %lld", (long long)round_counter_count(&word, 42));
}

// Task records under a concurrent writer: every record a reader accepts is
// one the writer wrote whole (its fields all derived from its round).
void test_task_records() {
    std::int64_t rec[kRecordWords];
    TaskRecord t0;
    write_record(rec, t0);
    TaskRecord got;
    CHECK(read_record(rec, &got) == 0, "a record never posted reads as none");
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        for (std::int64_t r = 0; r < 200000; ++r) {
            TaskRecord t;
            t.round = r;
            t.b = 3 * r + 1;
            t.sleep_s = 0.5 * double(r);
            t.chunk_rows = r + 7;
            t.slot = r % 5;
            write_record(rec, t);
        }
        stop = true;
    });
    long accepted = 0, torn = 0;
    std::int64_t last = -1;
    while (!stop) {
        const int rc = read_record(rec, &got);
        if (rc < 0) continue;
        if (rc == 0) continue;
        ++accepted;
        if (got.b != 3 * got.round + 1 || got.sleep_s != 0.5 * double(got.round) || got.chunk_rows != got.round + 7 ||
            got.slot != got.round % 5 || got.round < last)
            ++torn;
        last = got.round;
    }
    writer.join();
    CHECK(torn == 0, "%ld torn or out-of-order records among %ld accepted", torn, accepted);
    CHECK(read_record(rec, &got) == 1 && got.round == 199999, "the last record reads whole");
}

// The poster and a worker port over one control array: subsets, the oldest
// ring slot first, replaced records skipped, mail, stop, a sleeping worker
// woken by a post from another thread, timeouts.
void test_poster_and_port() {
    const std::int64_t n = 40, ring = 3;     // > 32 workers: bits shared by two ranks
    std::vector<std::int64_t> ctl(std::size_t(ControlWords::size(n, ring)), 0);
    ControlWords w{ctl.data(), n, ring};
    for (std::int64_t k = 0; k < ring; ++k)
        for (std::int64_t j = 0; j < n; ++j) *w.record(k, j) = kNoTask;
    TaskPoster poster(w);
    WorkerPort port5(w, 5, -1), port37(w, 37, -1);     // 37 = 5 + 32: the same doorbell bit
    TaskRecord t;
    std::int64_t k = -1;
    CHECK(port5.next(0.0, 0.0, &t, &k) == Next::kTimeout, "nothing posted: timeout");
    const std::int64_t to5[] = {5, 9};
    std::vector<double> sleeps(std::size_t(n), 0.0);
    sleeps[5] = 0.25;
    poster.post(2, 10, to5, 2, 4, sleeps.data(), 3, nullptr);
    poster.post(0, 11, to5, 1, 2, nullptr, 0, nullptr);
    CHECK(*w.wanted(2, 5) == 10 && *w.wanted(2, 9) == 10 && *w.wanted(0, 5) == 11, "wanted words written");
    CHECK(port37.next(0.0, 0.0, &t, &k) == Next::kTimeout, "worker 37 shares a bit but has no task");
    CHECK(port5.next(0.0, 0.0, &t, &k) == Next::kTask && t.round == 10 && k == 2 && t.b == 4 && t.sleep_s == 0.25 &&
              t.chunk_rows == 3 && t.slot == kOwnSlot,
          "the oldest round first: got round %lld in ring %lld", (long long)t.round, (long long)k);
    CHECK(port5.next(0.0, 0.0, &t, &k) == Next::kTask && t.round == 11 && k == 0 && t.sleep_s == 0.0, "then 11");
    CHECK(port5.next(0.0, 0.0, &t, &k) == Next::kTimeout, "each task once");
    // a record replaced before its worker took it is never run
    const std::int64_t to37[] = {37};
    std::vector<std::int64_t> slots(std::size_t(n), -1);
    slots[37] = 12;
    poster.post(1, 12, to37, 1, 1, nullptr, 0, slots.data());
    poster.post(1, 15, to37, 1, 1, nullptr, 0, slots.data());
    CHECK(port37.next(0.0, 0.0, &t, &k) == Next::kTask && t.round == 15 && t.slot == 12, "the newer record");
    CHECK(port37.next(0.0, 0.0, &t, &k) == Next::kTimeout, "round 12 was replaced");
    // a port started after posts (a replacement worker) does not take them
    WorkerPort late5(w, 5, -1);
    CHECK(late5.next(0.0, 0.0, &t, &k) == Next::kTimeout, "a new worker starts after the posted records");
    // mail, then stop
    poster.mail(5);
    CHECK(port5.next(0.0, 0.0, &t, &k) == Next::kMail, "mail");
    CHECK(port5.next(0.0, 0.0, &t, &k) == Next::kTimeout, "mail once");
    // a sleeping worker is woken by a post from another thread
    Next what = Next::kTimeout;
    std::thread sleeper([&] { what = port5.next(-1.0, 0.0, &t, &k); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    poster.post(0, 20, to5, 1, 1, nullptr, 0, nullptr);
    sleeper.join();
    CHECK(what == Next::kTask && t.round == 20, "woken for round 20");
    // spinning finds a post too
    std::thread spinner([&] { what = port37.next(5.0, 5.0, &t, &k); });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    poster.post(2, 21, to37, 1, 1, nullptr, 0, nullptr);
    spinner.join();
    CHECK(what == Next::kTask && t.round == 21, "a spinning worker takes round 21");
    // nap: rung (true) or timed out (false)
    CHECK(!port5.nap(0.001), "nap times out");
    std::thread napper([&] { what = port5.nap(5.0) ? Next::kTask : Next::kTimeout; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    poster.mail(5);
    napper.join();
    CHECK(what == Next::kTask, "nap rung by mail");
    *w.mail(5) = kStop;
    poster.ring_all();
    CHECK(port5.next(-1.0, 0.0, &t, &k) == Next::kStop, "stop");
    // done(): counted while the counter holds the round
    __atomic_store_n(w.counter(), round_counter_start(20), __ATOMIC_SEQ_CST);
    CHECK(port37.done(20) && round_counter_count(w.counter(), 20) == 1 && *w.done_round(37) == 20, "done counted");
    CHECK(!port37.done(19), "a done for another round is not counted");
}

// The wake timer (wake_timer.hpp): readable only after its time, once; set
// again replaces the time; disarm drops an expiry not yet read.
void test_wake_timer() {
#if defined(__linux__)
    auto readable = [](const WakeTimer& t) {
        pollfd p{t.fd(), POLLIN, 0};
        return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
    };
    auto wait_readable = [](const WakeTimer& t, int ms) {
        pollfd p{t.fd(), POLLIN, 0};
        return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
    };
    WakeTimer t;
    CHECK(t.fd() >= 0 && !readable(t), "a new timer is not readable");
    const double t0 = monotonic_seconds();
    t.set(0.02);
    CHECK(!readable(t), "not readable before its time");
    CHECK(wait_readable(t, 2000), "readable after its time");
    CHECK(monotonic_seconds() - t0 >= 0.02, "not early: %g s", monotonic_seconds() - t0);
    CHECK(t.clear() && !readable(t), "clear reads the expiry");
    CHECK(!t.clear(), "nothing more to read");
    t.set(-1.0);
    CHECK(wait_readable(t, 2000), "a time in the past fires at once");
    t.clear();
    t.set(10.0);
    t.set(0.001);
    CHECK(wait_readable(t, 2000), "a second set replaces the first");
    t.clear();
    t.set(0.001);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(readable(t), "fired");
    t.disarm();
    CHECK(!readable(t), "disarm drops an unread expiry");
    t.set(0.001);
    t.disarm();
    CHECK(!wait_readable(t, 20), "a disarmed timer never fires");
    t.set(1e300);
    CHECK(!readable(t), "a far time is clamped, not an overflow");
    bool threw = false;
    try {
        t.set(std::nan(""));
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    CHECK(threw, "NaN is refused");
    t.close();
    CHECK(t.fd() == -1 && !t.clear(), "closed");
#endif
}

// The compiled waiting rule (round_waiter.hpp) against the rule written out
// by brute force (every prefix of the confirmed answers in virtual order,
// count before complete, then the deadline, then nothing pending), on random
// rounds of a plain-count code (LeTCC: any `need` answers decode, all N
// complete) and a coverage code (Replication-like: input i % K covered).
void test_round_waiter() {
    const double inf = std::numeric_limits<double>::infinity();
    for (int trial = 0; trial < 400; ++trial) {
        const int N = 2 + static_cast<int>(rng() % 9), K = 1 + static_cast<int>(rng() % N);
        const bool coverage = trial % 2 == 1;
        std::vector<int> all(N, 0), each(N), cover(N);
        for (int j = 0; j < N; ++j) each[j] = j, cover[j] = j % K;
        CoverageRule decodable = coverage ? CoverageRule(cover, std::vector<int>(K, 1)) : CoverageRule(all, {K});
        CoverageRule complete = coverage ? decodable : CoverageRule(each, std::vector<int>(N, 1));
        std::vector<double> delays(N), hang(N, inf);
        std::vector<char> never(N), has(N);
        for (int j = 0; j < N; ++j) {
            delays[j] = (trial % 3 && uniform(0, 1) < 0.5) ? uniform(0.0, 0.02) : 0.0;
            never[j] = uniform(0, 1) < 0.15;
            if (uniform(0, 1) < 0.7) hang[j] = uniform(0.0, 0.08), has[j] = 1;
        }
        const long count = uniform(0, 1) < 0.25 ? -1 : 1 + static_cast<long>(rng() % N);
        const double deadline = uniform(0, 1) < 0.5 ? inf : uniform(0.005, 0.05);
        std::vector<int> sent(each);
        CountedWaiter w(N, sent, delays, never, count, deadline, hang, has, decodable, complete, -1, !coverage);
        std::vector<char> pending(N);
        std::vector<double> arrived(N, std::nan(""));
        for (int j = 0; j < N; ++j) pending[j] = !never[j];
        auto holds = [&](const CoverageRule& r, const std::vector<int>& js) {
            return r.first_prefix(js.data(), js.size()) >= 0;
        };
        std::vector<int> order(each);
        std::shuffle(order.begin(), order.end(), rng);
        double elapsed = 0.0;
        for (int j : order) {
            elapsed += uniform(0.0, 0.008);
            if (uniform(0, 1) < 0.2) {
                w.fail(j);
                pending[j] = 0;
            } else {
                const bool counts = w.result(j, elapsed);
                CHECK(counts == (pending[j] != 0), "waiter trial %d: result(%d) counts %d", trial, j, int(counts));
                if (pending[j]) arrived[j] = elapsed + delays[j], pending[j] = 0;
            }
            for (double e : {elapsed, elapsed + uniform(0.0, 0.02)}) {
                double dmin = inf;
                for (int k = 0; k < N; ++k)
                    if (pending[k]) dmin = std::min(dmin, delays[k]);
                const double limit = std::min(e + dmin, deadline);
                std::vector<std::pair<double, int>> conf;
                for (int k = 0; k < N; ++k)
                    if (!std::isnan(arrived[k]) && arrived[k] <= limit) conf.emplace_back(arrived[k], k);
                std::sort(conf.begin(), conf.end());
                std::vector<int> js;
                for (auto& c : conf) js.push_back(c.second);
                bool want = false;
                WaitRule rule = WaitRule::all;
                std::size_t p = 0;
                const bool may = true;   // the reference asks complete of every prefix
                for (p = 1; p <= js.size() && may; ++p) {
                    std::vector<int> pre(js.begin(), js.begin() + p);
                    if (count >= 0 && static_cast<long>(p) >= count && holds(decodable, pre)) {
                        want = true, rule = WaitRule::count;
                        break;
                    }
                    if (holds(complete, pre)) {
                        want = true, rule = WaitRule::complete;
                        break;
                    }
                }
                bool any_pending = false;
                for (int k = 0; k < N; ++k) any_pending = any_pending || pending[k];
                if (!want && e + dmin > deadline) want = true, rule = WaitRule::deadline, p = js.size();
                if (!want && !any_pending) want = true, rule = WaitRule::all, p = js.size();
                WaitDecision d;
                const bool got = w.decide(e, d);
                CHECK(got == want, "waiter trial %d: decided %d, want %d", trial, int(got), int(want));
                if (got && want) {
                    CHECK(d.rule == rule && d.answered == std::vector<int>(js.begin(), js.begin() + p),
                          "waiter trial %d: rule %d with %zu answers, want %d with %zu", trial, int(d.rule),
                          d.answered.size(), int(rule), p);
                }
                std::vector<int> hung_want;
                for (int k = 0; k < N; ++k)
                    if (pending[k] && hang[k] <= e) hung_want.push_back(k);
                CHECK(w.hung(e) == hung_want, "waiter trial %d: hung workers differ", trial);
            }
        }
    }
}

void test_errors() {
    bool threw = false;
    try {
        factor_reinsch(nullptr, nullptr, 0, 0.0);
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    CHECK(threw, "n = 0 is refused");
    const std::vector<double> x = {3.0, 2.0, 1.0}, w = {1.0, 1.0, 1.0};
    threw = false;
    try {
        factor_reinsch(x.data(), w.data(), 3, 0.0);
    } catch (const std::invalid_argument& e) {
        threw = std::string(e.what()).find("not positive definite") != std::string::npos;
    }
    CHECK(threw, "decreasing knots fail the pivot check");
}

}  // namespace

int main() {
    const char* env = std::getenv("LETCC_TEST_SEED");
    const std::uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("letcc core tests, seed %llu (LETCC_TEST_SEED to repeat), kernel isa %s, plan kernel %s\n",
                static_cast<unsigned long long>(seed), kernel_isa(), plan_kernel().c_str());
    rng.seed(seed);
    const std::vector<std::string> kernels = {"auto", "generic"};
    for (const std::string& k : kernels) {
        set_plan_kernel(k);
        for (std::size_t n : {1, 2, 3, 4, 7, 12, 25, 40})
            for (std::size_t m : {1, 5, 37, 300})
                for (double lam : {0.0, 1e-5, 1e-2, 1.0}) test_spline(n, m, lam * uniform(0.5, 2.0));
    }
    set_plan_kernel("auto");
    for (std::size_t q : {1, 3, 16, 33})
        for (std::size_t n : {1, 4, 12, 40})
            for (std::size_t m : {1, 9, 600}) test_dense_map(q, n, m);
    // the locator kernel in every build this CPU runs (dispatch.cpp: per kernel_isa)
    for (const char* isa : {"baseline", "avx2", "avx512", "auto"}) {
        try {
            set_kernel_isa(isa);
        } catch (const std::invalid_argument&) {
            continue;
        }
        for (std::size_t n : {1, 2, 3, 4, 9, 22, 64})
            for (std::size_t m : {1, 7, 1000, 4099}) test_locator(n, m);
        for (std::size_t n : {8, 22, 40})
            for (std::size_t m : {1, 13, 1000}) test_locator_rescore(n, m);
        for (std::size_t n : {2, 5, 22})
            for (std::size_t m : {1, 7, 17, 300, 70001}) {
                test_locator_decode<double>(n, m);
                test_locator_decode<float>(n, m);
            }
    }
    set_kernel_isa("auto");
    test_round_counter();
    test_task_records();
    test_poster_and_port();
    test_wake_timer();
    test_round_waiter();
    test_errors();
    if (failures) {
        std::printf("%d of %ld checks failed (seed %llu)\n", failures, checks, static_cast<unsigned long long>(seed));
        return 1;
    }
    std::printf("all %ld checks passed\n", checks);
    return 0;
}
