// The plan's column-tile walk of the hand-written kernels, one template over
// SIMD traits S (the interface: plan_walk.hpp). Included once per ISA, inside
// that ISA's namespace, by kernels_avx2.hpp and kernels_avx512.hpp, with
// LETCC_WALK_FN (always-inline, the ISA's target) and LETCC_WALK_ENTRY (the
// ISA's target, callable from code compiled for baseline x86-64) defined; see
// plan_walk.hpp for why it is included rather than instantiated.
//
// The same three passes and the same float64 arithmetic as kernels.hpp, with
// the same operations in the same order on every column whatever the vector
// width, so the AVX2 and AVX-512 kernels give bit-for-bit the same results,
// but for one thing: for float32 data the AVX-512 kernel adds each query's y
// terms in float32 (f32_eval, below: within the float32 bound, not the same
// bits):
//
// - Forward substitution fused with z = Q^T y, two knots per pass: rows i and
//   i+1 share three input rows and z_{i-1}, so each input row is widened twice
//   instead of three times and z_i feeds the next knot from a register (3-5%
//   faster than one knot per pass at n = 64, AVX2).
// - Back substitution two knots per step (gamma_{i+1} loaded once, gamma_i
//   feeding knot i - 1 from a register: 4-6% faster overall, AVX2), over whole
//   padded buffer rows: the padding columns hold zeros and are never stored
//   out.
// - Each query is evaluated as soon as the four gamma rows it reads are final,
//   so the evaluation reads gamma from L1 rather than making another pass.
// - The gamma buffer is 64-byte aligned with rows a multiple of kLanes doubles
//   apart, so every buffer access is one aligned vector (a 16-byte-aligned
//   buffer splits half of the 32-byte ones across cache lines).
// - The last, partial vector of a row runs masked (S::lanes) with the same
//   operations; masked lanes read 0, so the buffer's padding stays 0.
// - float32 rows are widened one vector at a time (vcvtps2pd); the compiler's
//   version of kernels.hpp splits that into two 128-bit halves and inserts.
// - Outputs far larger than the caches are written with non-temporal stores
//   (float32 too), as wide as the traits choose for the row's alignment.
// - The next tile's rows are prefetched one cache line every few vectors of
//   the evaluation loop, spread evenly over the back substitution and
//   evaluation instead of coming in bursts (plan_walk::set_prefetch_pace).
//
// With 32 vector registers (AVX-512, kWideRegisters) two wider loops: the
// forward substitution four knots per loop (forward_four: six rows widened for
// four knots instead of eight) and the first query of each of a back step's
// two intervals evaluated inside that step's loop (back_two_fused: gamma from
// registers, the two queries' shared input row widened once). On an Intel
// Xeon (two 512-bit FMA pipes) at n = K = 64, float32, the walk is bound by
// its port 0/5 work, where float32 widening and narrowing (vcvtps2pd,
// vcvtpd2ps: two uops each there) cost as much as the 14 FMAs a knot-vector
// needs: these loops cut that work and the loads, 0.82-0.85x the time in
// cache and at full size. Tried there and not kept (slower or no better,
// side by side): forming each interval's first query's y terms in the
// forward pass and storing them (1.3x slower: another float64 row per query
// through L2), a walk taking 16-column strips through all three passes with
// z and gamma in registers (1.1-1.2x slower), the evaluation's gamma terms
// in reverse order (to shorten its dependency on the back substitution: no
// change), tiles of 64-512 columns (224 as fast as any) and prefetching two
// tiles ahead or with other hints (no better).
//
// Why one file of ~650 lines: it is one struct template, PlanWalk, whose
// members are the walk's three passes, their two- and four-knot forms and the
// fused back-substitution/evaluation loops. They share the struct's types and
// helpers (V, Y<kE>, put, load_y) and are included as text once per ISA inside
// that ISA's namespace and target; cut into several headers, each would need
// the same include-once-per-ISA guard and the struct would be split across
// files without making any piece usable alone.
#if !defined(LETCC_WALK_FN) || !defined(LETCC_WALK_ENTRY)
#error "plan_walk_isa.hpp is included by kernels_avx2.hpp and kernels_avx512.hpp only"
#endif

template <class S>
struct PlanWalk {
    using V = typename S::V;
    using EvalWork = plan_walk::EvalWork;
    using PrefetchCursor = plan_walk::PrefetchCursor;
    static constexpr std::size_t L = S::kLanes;
    // 32 vector registers (AVX-512): room for the loops that keep 20-26
    // vectors live (forward_four, back_two_eval); with 16 they would spill.
    static constexpr bool kWideRegisters = S::kRegisters >= 32;
    static_assert(L <= kMaxLanes && (L & (L - 1)) == 0, "plan_buffer_size pads rows to kMaxLanes doubles");

    // Buffer rows of a tile are padded(tw) doubles apart.
    static std::size_t padded(std::size_t tw) { return padded_width(tw, L); }

    // One knot of the forward substitution, z = a y[i-1] + b y[i] + c y[i+1]
    // - l2 z[i-2] - l1 z[i-1] (coefficients broadcast, l1 and l2 negated).
    LETCC_WALK_FN static V forward_knot(V a, V b, V c, V nl2, V nl1, V ym, V y0, V yp, V z2, V z1) {
        V r = S::mul(a, ym);
        r = S::fma(b, y0, r);
        r = S::fma(c, yp, r);
        r = S::fma(nl2, z2, r);
        return S::fma(nl1, z1, r);
    }

    // One knot of the back substitution, g d - u1 g[i+1] - u2 g[i+2].
    LETCC_WALK_FN static V back_knot(V d, V nu2, V nu1, V g, V g2, V g1) {
        return S::fma(nu1, g1, S::fma(nu2, g2, S::mul(d, g)));
    }

    // The float32 evaluation (kE below): for float32 data where the traits
    // have it (S::kFloat32YTerms: AVX-512) and the query's y terms are a
    // convex combination (PlanTables::convex_y), a query's gamma terms are
    // summed in float64 as always, narrowed to float32 once, and its two y
    // terms added in float32 arithmetic on the float32 rows as they are:
    //     out = fl32(cy1 yb + fl32(cy0 ya + fl32(sum_t cgam[t] h_t)))
    // (FMAs, cy rounded to float32). The rows are then never widened, their
    // two FMAs run on 8-lane float32 vectors and the result needs no
    // narrowing: three of the eleven port-0/5 uops of a query-vector on an
    // Intel Xeon, where vcvtps2pd and vcvtpd2ps take two each. Measured there
    // (n = K = 64, float32, C++ harness, side by side with the float64
    // evaluation, EvalWork::kFullF64Eval; 14 runs of bench/kernel_passes.cpp
    // on a shared 2-core VM): in cache 0.96-1.01x the time (median 0.975x),
    // full size on two threads 0.85-1.02x (median 0.91x); from Python within
    // the noise of one run. Less than the uops promise: the fused
    // loop (back_two_eval) then runs at ~60% of its port-0/5 throughput, its
    // gamma rows i - 1, i and input rows coming from L2 (the tile's 120 KB
    // gamma buffer and 57 KB of input do not stay in L1; by estimate ~27
    // bytes per cycle with the write-backs); smaller tiles (64, 96 columns)
    // were slower, as before. Why this is
    // within the float32 bound (1e-6 of max |y| for n <= 1024): the gamma sum
    // holds the terms that cancel (coefficients lam / (w h), up to ~1e5 x
    // max |y| each at n = 1024, lam = 1), and it is formed in float64, so only
    // its result is rounded, and that result is out - (cy0 ya + cy1 yb), no
    // larger than |out| + max |y|; the y terms are exact float32 values with
    // |cy0| + |cy1| <= 1. Each of the four float32 roundings (cy, the
    // narrowing, two FMAs) is then within 2^-24 (|out| + max |y|), the whole
    // within 3 x 2^-24 (|out| + max |y|) (tests/test_splines_plan_kernels.py
    // checks every element against that): measured at most 9.1e-8 of max |y|
    // at n = 16..1024, lam = 1e-8..1 (bench/results/float32_arithmetic.md;
    // the float64 evaluation, which rounds only its result: 5.0e-8), against
    // the bound 1e-6. What is not within it: the whole 6-term evaluation in
    // float32 from gamma narrowed once per knot (its gamma terms, lam / (w h)
    // times gamma, cancel in float32: 4.5e-5 of max |y| at n = 1024, lam = 1),
    // and Q^T y in float32 (its second differences round to eps32 |y| / h,
    // which lam Q M^-1 amplifies as n and lam grow: 3.3e-5; same file). First
    // derivatives (cy = -+1/h) and extrapolation (1 + 2 dx / h) cancel in
    // their y terms: float64 evaluation, the AVX2 kernel's bits.
    // The results are then not the AVX2 kernel's bit for bit for float32
    // data (float64 data: still the same bits); EvalWork::kFullF64Eval runs
    // the float64 evaluation on the same walk, for side-by-side timing.
    template <class T, EvalWork W>
    static constexpr bool f32_eval = S::kFloat32YTerms && std::is_same<T, float>::value &&
                                     W != EvalWork::kFullF64Eval && W != EvalWork::kFullUnfused;

    // An input row's vector and a query's result: float64 lanes, or with the
    // float32 evaluation (kE) the float32 lanes of the same columns.
    // (A specialisation rather than std::conditional_t: vector types as
    // template arguments lose their attributes, and GCC warns.)
    template <bool kE, class = void>
    struct YOf {
        using type = V;
    };
    template <class D>
    struct YOf<true, D> {
        using type = typename S::F;
    };
    template <bool kE>
    using Y = typename YOf<kE>::type;

    // A query's coefficients: cy0, cy1 (float32 when kE), cgam[0..3].
    template <bool kE>
    struct EvalCoeffs {
        Y<kE> y[2];
        V g[4];
    };

    template <bool kE>
    LETCC_WALK_FN static EvalCoeffs<kE> eval_coeffs(const double* c) {
        EvalCoeffs<kE> e;
        for (int t = 0; t < 2; ++t) {
            if constexpr (kE)
                e.y[t] = S::set1f(static_cast<float>(c[t]));
            else
                e.y[t] = S::set1(c[t]);
        }
        for (int t = 0; t < 4; ++t) e.g[t] = S::set1(c[2 + t]);
        return e;
    }

    template <bool kE, class T>
    LETCC_WALK_FN static Y<kE> load_y(const T* p) {
        if constexpr (kE)
            return S::loadf(p);
        else
            return S::loadu(p);
    }

    template <bool kE, class T>
    LETCC_WALK_FN static Y<kE> load_y(const T* p, typename S::Mask k) {
        if constexpr (kE)
            return S::loadf(p, k);
        else
            return S::loadu(p, k);
    }

    // One query: cy0 ya + cy1 yb + sum_t cgam[t] h_t, in float64 in this
    // order, or with kE as above.
    template <bool kE>
    LETCC_WALK_FN static Y<kE> eval_vector(const EvalCoeffs<kE>& c, Y<kE> ya, Y<kE> yb, V h0, V h1, V h2, V h3) {
        if constexpr (kE) {
            V g = S::mul(c.g[0], h0);
            g = S::fma(c.g[1], h1, g);
            g = S::fma(c.g[2], h2, g);
            g = S::fma(c.g[3], h3, g);
            return S::fmaf(c.y[1], yb, S::fmaf(c.y[0], ya, S::narrow(g)));
        } else {
            V r = S::mul(c.y[0], ya);
            r = S::fma(c.y[1], yb, r);
            r = S::fma(c.g[0], h0, r);
            r = S::fma(c.g[1], h1, r);
            r = S::fma(c.g[2], h2, r);
            return S::fma(c.g[3], h3, r);
        }
    }

    // One output vector of a query: streamed (kStream, p aligned to `wide`) or
    // not; put_masked: lanes k only.
    template <bool kStream, bool kE, class T>
    LETCC_WALK_FN static void put(T* p, Y<kE> r, unsigned wide) {
        if constexpr (kE) {
            if constexpr (kStream)
                S::streamf(p, r, wide);
            else
                S::storef(p, r);
        } else {
            if constexpr (kStream)
                S::stream(p, r, wide);
            else
                S::storeu(p, r);
        }
    }

    template <bool kE, class T>
    LETCC_WALK_FN static void put_masked(T* p, Y<kE> r, typename S::Mask k) {
        if constexpr (kE)
            S::storef(p, r, k);
        else
            S::storeu(p, r, k);
    }

    // Buffer row r = knot r - 1, rows bs doubles apart.
    template <class T>
    LETCC_WALK_FN static void forward_one(const PlanTables& p, std::int64_t i, const T* __restrict__ y,
                                          std::size_t ldy, std::size_t c0, std::size_t tw, std::size_t bs,
                                          double* __restrict__ buf) {
        const KnotRows<T> k = knot_rows(i, y, ldy, c0, bs, buf);
        const T *__restrict__ ym = k.ym, *__restrict__ y0 = k.y0, *__restrict__ yp = k.yp;
        double* __restrict__ z = k.z;
        const double *__restrict__ z1 = z - bs, *__restrict__ z2 = z - 2 * bs;
        const V A = S::set1(p.qa[i]), B = S::set1(p.qb[i]), C = S::set1(p.qc[i]);
        const V L1 = S::set1(-p.l1[i]), L2 = S::set1(-p.l2[i]);
        const std::size_t tv = tw & ~(L - 1);
        for (std::size_t j = 0; j < tv; j += L)
            S::store(z + j, forward_knot(A, B, C, L2, L1, S::loadu(ym + j), S::loadu(y0 + j), S::loadu(yp + j),
                                         S::load(z2 + j), S::load(z1 + j)));
        if (tv < tw) {
            // The whole vector is stored: its padding lanes come out 0.
            const auto m = S::lanes(tw - tv);
            S::store(z + tv, forward_knot(A, B, C, L2, L1, S::loadu(ym + tv, m), S::loadu(y0 + tv, m),
                                          S::loadu(yp + tv, m), S::load(z2 + tv), S::load(z1 + tv)));
        }
    }

    template <class T>
    LETCC_WALK_FN static void forward_two(const PlanTables& p, std::int64_t i, const T* __restrict__ y,
                                          std::size_t ldy, std::size_t c0, std::size_t tw, std::size_t bs,
                                          double* __restrict__ buf) {
        const KnotRows<T> k = knot_rows(i, y, ldy, c0, bs, buf);
        const T *__restrict__ ym = k.ym, *__restrict__ y0 = k.y0, *__restrict__ yp = k.yp;
        const T* __restrict__ ypp = yp + ldy;
        double* __restrict__ z = k.z;   // knot i
        double* __restrict__ zn = z + bs;  // knot i + 1
        const double *__restrict__ z1 = z - bs, *__restrict__ z2 = z - 2 * bs;
        const V A = S::set1(p.qa[i]), B = S::set1(p.qb[i]), C = S::set1(p.qc[i]);
        const V L1 = S::set1(-p.l1[i]), L2 = S::set1(-p.l2[i]);
        const V A2 = S::set1(p.qa[i + 1]), B2 = S::set1(p.qb[i + 1]), C2 = S::set1(p.qc[i + 1]);
        const V M1 = S::set1(-p.l1[i + 1]), M2 = S::set1(-p.l2[i + 1]);
        const std::size_t tv = tw & ~(L - 1);
        for (std::size_t j = 0; j < tv; j += L) {
            const V Y0 = S::loadu(y0 + j), Yp = S::loadu(yp + j), Z1 = S::load(z1 + j);
            const V r = forward_knot(A, B, C, L2, L1, S::loadu(ym + j), Y0, Yp, S::load(z2 + j), Z1);
            S::store(z + j, r);
            S::store(zn + j, forward_knot(A2, B2, C2, M2, M1, Y0, Yp, S::loadu(ypp + j), Z1, r));
        }
        if (tv < tw) {
            forward_one(p, i, y, ldy, c0 + tv, tw - tv, bs, buf + tv);
            forward_one(p, i + 1, y, ldy, c0 + tv, tw - tv, bs, buf + tv);
        }
    }

    // Knots i .. i + 3 in one loop (kWideRegisters: twenty coefficient vectors
    // live): six input rows widened for four knots instead of eight, each
    // knot's z feeding the next two from registers. forward_two's operations
    // in its order, so the same results bit for bit.
    template <class T>
    LETCC_WALK_FN static void forward_four(const PlanTables& p, std::int64_t i, const T* __restrict__ y,
                                           std::size_t ldy, std::size_t c0, std::size_t tw, std::size_t bs,
                                           double* __restrict__ buf) {
        const KnotRows<T> k = knot_rows(i, y, ldy, c0, bs, buf);
        const T *__restrict__ ym = k.ym, *__restrict__ y0 = k.y0, *__restrict__ yp = k.yp;
        const T *__restrict__ y2 = yp + ldy, *__restrict__ y3 = y2 + ldy, *__restrict__ y4 = y3 + ldy;
        double* __restrict__ z = k.z;  // knot i; knot i + t at z + t * bs
        const double *__restrict__ z1 = z - bs, *__restrict__ z2 = z - 2 * bs;
        V A[4], B[4], C[4], N1[4], N2[4];
        for (int t = 0; t < 4; ++t) {
            A[t] = S::set1(p.qa[i + t]), B[t] = S::set1(p.qb[i + t]), C[t] = S::set1(p.qc[i + t]);
            N1[t] = S::set1(-p.l1[i + t]), N2[t] = S::set1(-p.l2[i + t]);
        }
        const std::size_t tv = tw & ~(L - 1);
        for (std::size_t j = 0; j < tv; j += L) {
            const V Y0 = S::loadu(y0 + j), Yp = S::loadu(yp + j), Z1 = S::load(z1 + j);
            const V r0 = forward_knot(A[0], B[0], C[0], N2[0], N1[0], S::loadu(ym + j), Y0, Yp, S::load(z2 + j), Z1);
            S::store(z + j, r0);
            const V Y2 = S::loadu(y2 + j);
            const V r1 = forward_knot(A[1], B[1], C[1], N2[1], N1[1], Y0, Yp, Y2, Z1, r0);
            S::store(z + bs + j, r1);
            const V Y3 = S::loadu(y3 + j);
            const V r2 = forward_knot(A[2], B[2], C[2], N2[2], N1[2], Yp, Y2, Y3, r0, r1);
            S::store(z + 2 * bs + j, r2);
            S::store(z + 3 * bs + j,
                     forward_knot(A[3], B[3], C[3], N2[3], N1[3], Y2, Y3, S::loadu(y4 + j), r1, r2));
        }
        if (tv < tw)
            for (int t = 0; t < 4; ++t) forward_one(p, i + t, y, ldy, c0 + tv, tw - tv, bs, buf + tv);
    }

    // The forward pass of one tile (buf: placed, rows bs = padded(tw) apart);
    // forward is the same, callable from baseline code (the bench harness).
    template <class T, bool kFour = kWideRegisters>
    LETCC_WALK_FN static void forward_pass(const PlanTables& p, const T* __restrict__ y, std::size_t ldy,
                                           std::size_t c0, std::size_t tw, std::size_t bs,
                                           double* __restrict__ buf) {
        const std::int64_t n = p.n;
        const std::size_t rows = gamma_rows(n);
        // Whole padded rows, padding included (see forward_one).
        for (std::size_t r = 0; r < rows; ++r)
            if (r <= 1 || r >= static_cast<std::size_t>(n)) std::fill(buf + r * bs, buf + r * bs + bs, 0.0);
        std::int64_t i = 1;
        if constexpr (kFour)
            for (; i + 4 < n; i += 4) forward_four(p, i, y, ldy, c0, tw, bs, buf);
        for (; i + 2 < n; i += 2) forward_two(p, i, y, ldy, c0, tw, bs, buf);
        for (; i + 1 < n; ++i) forward_one(p, i, y, ldy, c0, tw, bs, buf);
    }

    template <class T>
    LETCC_WALK_ENTRY static void forward(const PlanTables& p, const T* y, std::size_t ldy, std::size_t c0,
                                         std::size_t tw, std::size_t bs, double* buf) {
        forward_pass(p, y, ldy, c0, tw, bs, buf);
    }

    // Gamma at knot i from knots i+1, i+2.
    LETCC_WALK_FN static void back_one(const PlanTables& p, std::int64_t i, std::size_t bs, double* __restrict__ buf) {
        double* __restrict__ g = buf + static_cast<std::size_t>(i + 1) * bs;
        const double* __restrict__ g1 = g + bs;
        const double* __restrict__ g2 = g + 2 * bs;
        const V D = S::set1(p.inv_d[i]), U1 = S::set1(-p.l1[i + 1]), U2 = S::set1(-p.l2[i + 2]);
        for (std::size_t j = 0; j < bs; j += L)
            S::store(g + j, back_knot(D, U2, U1, S::load(g + j), S::load(g2 + j), S::load(g1 + j)));
    }

    // Knots i and i - 1.
    LETCC_WALK_FN static void back_two(const PlanTables& p, std::int64_t i, std::size_t bs, double* __restrict__ buf) {
        double* __restrict__ g = buf + static_cast<std::size_t>(i + 1) * bs;  // knot i
        double* __restrict__ gm = g - bs;                                     // knot i - 1
        const double* __restrict__ g1 = g + bs;
        const double* __restrict__ g2 = g + 2 * bs;
        const V D = S::set1(p.inv_d[i]), U1 = S::set1(-p.l1[i + 1]), U2 = S::set1(-p.l2[i + 2]);
        const V Dm = S::set1(p.inv_d[i - 1]), V1 = S::set1(-p.l1[i]), V2 = S::set1(-p.l2[i + 1]);
        for (std::size_t j = 0; j < bs; j += L) {
            const V G1 = S::load(g1 + j);
            const V r = back_knot(D, U2, U1, S::load(g + j), S::load(g2 + j), G1);
            S::store(g + j, r);
            S::store(gm + j, back_knot(Dm, V2, V1, S::load(gm + j), G1, r));
        }
    }

    // back_two (knots i and i - 1) with, in the same loop, one query of
    // interval i + 1 (kQ1; it reads gamma at knots i .. i + 3) and one of
    // interval i (kQ0; knots i - 1 .. i + 2), a and b. Their gamma rows come
    // from the registers the back substitution has just computed or loaded
    // (only knot i + 3 is loaded again), so each query-vector loads its two
    // input rows instead of six rows (and with both queries, row i + 1 is
    // theirs in common, three rows widened for two queries), and the
    // two loops share their overhead:
    // the unfused evaluation was load-bound (Intel Xeon, AVX-512, in cache:
    // its loads and store alone took 1.8x its arithmetic alone). The same
    // operations in the same order as back_two and eval_row, so the same
    // results bit for bit. About 26 vector registers live (six back
    // coefficients, twelve query coefficients, the gamma rows): AVX-512 only
    // (kWideRegisters). tv: the rows' full vectors; tw: the tile's columns (the
    // queries' masked tail); bs: the padded row (the back substitution runs
    // over all of it, its padding lanes holding zeros).
    template <bool kQ1, bool kQ0, bool kE, bool kDown, bool kStream, class T>
    LETCC_WALK_FN static void back_two_eval(const PlanTables& p, std::int64_t i, std::size_t bs, std::size_t tv,
                                            std::size_t tw, double* __restrict__ buf, const QueryRows<T>& a,
                                            const QueryRows<T>& b, unsigned wa, unsigned wb, PrefetchCursor& pc) {
        double* __restrict__ g = buf + static_cast<std::size_t>(i + 1) * bs;  // knot i
        double* __restrict__ gm = g - bs;                                     // knot i - 1
        const double* __restrict__ g1 = g + bs;
        const double* __restrict__ g2 = g + 2 * bs;
        const double* __restrict__ g3 = g + 3 * bs;
        const V D = S::set1(p.inv_d[i]), U1 = S::set1(-p.l1[i + 1]), U2 = S::set1(-p.l2[i + 2]);
        const V Dm = S::set1(p.inv_d[i - 1]), V1 = S::set1(-p.l1[i]), V2 = S::set1(-p.l2[i + 1]);
        const T *__restrict__ ya1 = a.ya, *__restrict__ yb1 = a.yb;
        const T *__restrict__ ya0 = b.ya, *__restrict__ yb0 = b.yb;
        T *__restrict__ o1 = a.o, *__restrict__ o0 = b.o;
        const EvalCoeffs<kE> ca = eval_coeffs<kE>(a.c), cb = eval_coeffs<kE>(b.c);
        for (std::size_t t = 0; t < tv; t += L) {
            if ((t & pc.eval_mask) == 0) pc.step(1);
            const std::size_t j = kDown ? tv - L - t : t;
            const V G1 = S::load(g1 + j), G2 = S::load(g2 + j);
            const V r = back_knot(D, U2, U1, S::load(g + j), G2, G1);
            S::store(g + j, r);
            const V rm = back_knot(Dm, V2, V1, S::load(gm + j), G1, r);
            S::store(gm + j, rm);
            if constexpr (kQ1 && kQ0) {
                // Input row i + 1 is both queries' (back_two_fused): loaded (widened) once.
                const Y<kE> Y1 = load_y<kE>(ya1 + j);
                put<kStream, kE>(o1 + j, eval_vector<kE>(ca, Y1, load_y<kE>(yb1 + j), r, G1, G2, S::load(g3 + j)),
                                 wa);
                put<kStream, kE>(o0 + j, eval_vector<kE>(cb, load_y<kE>(ya0 + j), Y1, rm, r, G1, G2), wb);
            } else if constexpr (kQ1) {
                put<kStream, kE>(o1 + j,
                                 eval_vector<kE>(ca, load_y<kE>(ya1 + j), load_y<kE>(yb1 + j), r, G1, G2,
                                                 S::load(g3 + j)),
                                 wa);
            } else if constexpr (kQ0) {
                put<kStream, kE>(o0 + j, eval_vector<kE>(cb, load_y<kE>(ya0 + j), load_y<kE>(yb0 + j), rm, r, G1, G2),
                                 wb);
            }
        }
        if (tv < bs) {
            const V G1 = S::load(g1 + tv), G2 = S::load(g2 + tv);
            const V r = back_knot(D, U2, U1, S::load(g + tv), G2, G1);
            S::store(g + tv, r);
            const V rm = back_knot(Dm, V2, V1, S::load(gm + tv), G1, r);
            S::store(gm + tv, rm);
            const auto k = S::lanes(tw - tv);
            if constexpr (kQ1)
                put_masked<kE>(o1 + tv,
                               eval_vector<kE>(ca, load_y<kE>(ya1 + tv, k), load_y<kE>(yb1 + tv, k), r, G1, G2,
                                               S::load(g3 + tv)),
                               k);
            if constexpr (kQ0)
                put_masked<kE>(o0 + tv,
                               eval_vector<kE>(cb, load_y<kE>(ya0 + tv, k), load_y<kE>(yb0 + tv, k), rm, r, G1, G2), k);
        }
    }

    // back_two_eval's loop specialised on direction and store kind.
    template <bool kQ1, bool kQ0, bool kE, class T>
    LETCC_WALK_FN static void back_two_eval_as(bool down, bool nt, const PlanTables& p, std::int64_t i, std::size_t bs,
                                               std::size_t tv, std::size_t tw, double* buf, const QueryRows<T>& a,
                                               const QueryRows<T>& b, unsigned wa, unsigned wb, PrefetchCursor& pc) {
        if (nt) {
            if (down) back_two_eval<kQ1, kQ0, kE, true, true>(p, i, bs, tv, tw, buf, a, b, wa, wb, pc);
            else back_two_eval<kQ1, kQ0, kE, false, true>(p, i, bs, tv, tw, buf, a, b, wa, wb, pc);
        } else {
            if (down) back_two_eval<kQ1, kQ0, kE, true, false>(p, i, bs, tv, tw, buf, a, b, wa, wb, pc);
            else back_two_eval<kQ1, kQ0, kE, false, false>(p, i, bs, tv, tw, buf, a, b, wa, wb, pc);
        }
    }

    // One step of the fused walk: knots i and i - 1 of the back substitution
    // with the first query of intervals i + 1 and i inside its loop
    // (back_two_eval), then those intervals' other queries on their own
    // (eval_query; their gamma rows are still in L1). The store and direction
    // rules are eval_query's, applied to the fused queries together: stream
    // only if both rows may, walk down if either needs it (the order never
    // changes a column's arithmetic). A step without queries still runs the
    // fused loop, which paces the next tile's prefetches. W: kFull or
    // kFullF64Eval; with the float32 evaluation (f32_eval) the loop runs it,
    // and a first query without convex y terms is left to eval_query
    // (float64 evaluation), so every query is evaluated one way whatever
    // loop it runs in.
    template <EvalWork W, class T>
    LETCC_WALK_FN static void back_two_fused(const PlanTables& p, std::int64_t i, const T* y, std::size_t ldy,
                                             T* out, std::size_t ldo, std::size_t c0, std::size_t tw, std::size_t bs,
                                             double* buf, bool stream, PrefetchCursor& pc) {
        const std::int64_t s1 = p.by_k[i + 1], e1 = p.by_k[i + 2];  // interval i + 1
        const std::int64_t s0 = p.by_k[i], e0 = p.by_k[i + 1];      // interval i
        constexpr bool kE = f32_eval<T, W>;
        const bool h1 = s1 < e1 && (!kE || p.convex_y[p.order[s1]]);
        const bool h0 = s0 < e0 && (!kE || p.convex_y[p.order[s0]]);
        const std::size_t tv = tw & ~(L - 1);
        QueryRows<T> a{}, b{};
        unsigned wa = 64, wb = 64;
        bool down = false;
        if (h1) {
            a = query_rows(p, p.order[s1], y, ldy, out, ldo, c0, bs, buf);
            wa = plan_walk::stream_width(a.o);
            down = down || plan_walk::store_runs_ahead_of(a.o, a.ya) || plan_walk::store_runs_ahead_of(a.o, a.yb);
        }
        if (h0) {
            b = query_rows(p, p.order[s0], y, ldy, out, ldo, c0, bs, buf);
            wb = plan_walk::stream_width(b.o);
            down = down || plan_walk::store_runs_ahead_of(b.o, b.ya) || plan_walk::store_runs_ahead_of(b.o, b.yb);
        }
        // Interval i + 1's first input row and interval i's second are both
        // row i + 1 (k1 = min(k + 1, n - 1) = i + 1, as i <= n - 2): the
        // fused loop widens it once.
        const bool nt = stream && wa >= 16 && wb >= 16 && tw * sizeof(T) >= plan_walk::kMinStreamRowBytes;
        if (h1 && h0) back_two_eval_as<true, true, kE>(down, nt, p, i, bs, tv, tw, buf, a, b, wa, wb, pc);
        else if (h1) back_two_eval_as<true, false, kE>(down, nt, p, i, bs, tv, tw, buf, a, b, wa, wb, pc);
        else if (h0) back_two_eval_as<false, true, kE>(down, nt, p, i, bs, tv, tw, buf, a, b, wa, wb, pc);
        else back_two_eval<false, false, kE, false, false>(p, i, bs, tv, tw, buf, a, b, wa, wb, pc);
        for (std::int64_t t = s1 + (h1 ? 1 : 0); t < e1; ++t)
            eval_query<W>(p, p.order[t], y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
        for (std::int64_t t = s0 + (h0 ? 1 : 0); t < e0; ++t)
            eval_query<W>(p, p.order[t], y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
    }

    // One query's row, the loop specialised on its direction and on how it
    // stores: the choice is made once per row. tv: the row's full vectors.
    template <EvalWork W, bool kE, bool kDown, bool kStream, class T>
    LETCC_WALK_FN static void eval_row(const QueryRows<T>& q, std::size_t bs, std::size_t tv, unsigned wide,
                                       PrefetchCursor& pc) {
        const T* __restrict__ ya = q.ya;
        const T* __restrict__ yb = q.yb;
        const double* __restrict__ g0 = q.g0;
        const double* __restrict__ g1 = g0 + bs;
        const double* __restrict__ g2 = g0 + 2 * bs;
        const double* __restrict__ g3 = g0 + 3 * bs;
        T* __restrict__ o = q.o;
        const EvalCoeffs<kE> c = eval_coeffs<kE>(q.c);
        // EvalWork's operands
        V h0 = S::set1(1.0), h1 = h0, h2 = h0, h3 = h0;
        Y<kE> a;
        if constexpr (kE)
            a = S::set1f(1.0f);
        else
            a = h0;
        Y<kE> b = a;
        for (std::size_t t = 0; t < tv; t += L) {
            if ((t & pc.eval_mask) == 0) pc.step(1);
            const std::size_t j = kDown ? tv - L - t : t;
            if constexpr (plan_walk::evaluates_all(W)) {
                const Y<kE> r = eval_vector<kE>(c, load_y<kE>(ya + j), load_y<kE>(yb + j), S::load(g0 + j),
                                                S::load(g1 + j), S::load(g2 + j), S::load(g3 + j));
                put<kStream, kE>(o + j, r, wide);
            } else if constexpr (W == EvalWork::kLoadsStore) {
                a = load_y<kE>(ya + j), b = load_y<kE>(yb + j);
                h0 = S::load(g0 + j), h1 = S::load(g1 + j), h2 = S::load(g2 + j), h3 = S::load(g3 + j);
                asm volatile("" ::"v"(a), "v"(b), "v"(h0), "v"(h1), "v"(h2), "v"(h3));
                put<false, kE>(o + j, a, 0);
            } else if constexpr (W == EvalWork::kArithmetic || W == EvalWork::kArithmeticStore) {
                asm volatile("" : "+v"(a), "+v"(b), "+v"(h0), "+v"(h1), "+v"(h2), "+v"(h3));
                const Y<kE> r = eval_vector<kE>(c, a, b, h0, h1, h2, h3);
                if constexpr (W == EvalWork::kArithmeticStore)
                    put<false, kE>(o + j, r, 0);
                else
                    asm volatile("" ::"v"(r));
            }
        }
    }

    // One query on its own, in the float32 evaluation where f32_eval and its
    // y terms allow (convex_y), else in float64.
    template <EvalWork W, class T>
    LETCC_WALK_FN static void eval_query(const PlanTables& p, std::int64_t qi, const T* y, std::size_t ldy, T* out,
                                         std::size_t ldo, std::size_t c0, std::size_t tw, std::size_t bs,
                                         const double* buf, bool stream, PrefetchCursor& pc) {
        if constexpr (W != EvalWork::kNone) {
            if constexpr (f32_eval<T, W>) {
                if (p.convex_y[qi]) {
                    eval_query_as<W, true>(p, qi, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
                    return;
                }
            }
            eval_query_as<W, false>(p, qi, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
        }
    }

    template <EvalWork W, bool kE, class T>
    LETCC_WALK_FN static void eval_query_as(const PlanTables& p, std::int64_t qi, const T* y, std::size_t ldy, T* out,
                                            std::size_t ldo, std::size_t c0, std::size_t tw, std::size_t bs,
                                            const double* buf, bool stream, PrefetchCursor& pc) {
        const QueryRows<T> q = query_rows(p, qi, y, ldy, out, ldo, c0, bs, buf);
        const std::size_t tv = tw & ~(L - 1);
        // Streaming needs 16-byte-aligned rows; the same columns take the
        // vector path either way, so the result never depends on the output's
        // alignment.
        const unsigned wide = plan_walk::stream_width(q.o);
        const bool nt = stream && wide >= 16 && tw * sizeof(T) >= plan_walk::kMinStreamRowBytes;
        // Walk the row downwards when the output runs just ahead of an input
        // row modulo 4 KiB (store_runs_ahead_of): later loads are then below
        // the stores. The order does not change any column's arithmetic.
        const bool down = plan_walk::store_runs_ahead_of(q.o, q.ya) || plan_walk::store_runs_ahead_of(q.o, q.yb);
        if (nt) {
            if (down) eval_row<W, kE, true, true>(q, bs, tv, wide, pc);
            else eval_row<W, kE, false, true>(q, bs, tv, wide, pc);
        } else {
            if (down) eval_row<W, kE, true, false>(q, bs, tv, wide, pc);
            else eval_row<W, kE, false, false>(q, bs, tv, wide, pc);
        }
        if (plan_walk::evaluates_all(W) && tv < tw) {
            const auto k = S::lanes(tw - tv);
            const EvalCoeffs<kE> c = eval_coeffs<kE>(q.c);
            const double* g = q.g0 + tv;
            put_masked<kE>(q.o + tv,
                           eval_vector<kE>(c, load_y<kE>(q.ya + tv, k), load_y<kE>(q.yb + tv, k), S::load(g),
                                           S::load(g + bs), S::load(g + 2 * bs), S::load(g + 3 * bs)),
                           k);
        }
    }

    template <EvalWork W, class T>
    LETCC_WALK_FN static void eval_interval(const PlanTables& p, std::int64_t kk, const T* y, std::size_t ldy,
                                            T* out, std::size_t ldo, std::size_t c0, std::size_t tw, std::size_t bs,
                                            const double* buf, bool stream, PrefetchCursor& pc) {
        for (std::int64_t t = p.by_k[kk]; t < p.by_k[kk + 1]; ++t)
            eval_query<W>(p, p.order[t], y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
    }

    // The whole plan on one column tile (see kernels::plan_tile). buf: 64-byte
    // aligned, plan_buffer_size(n, tw) doubles. W: what the evaluation does
    // (anything but kFull for bench/kernel_passes.cpp only).
    template <class T, EvalWork W = EvalWork::kFull>
    LETCC_WALK_ENTRY static void plan_tile(const PlanTables& p, const T* __restrict__ y, std::size_t ldy,
                                           T* __restrict__ out, std::size_t ldo, std::size_t c0, std::size_t tw,
                                           double* __restrict__ buf, bool stream, std::size_t prefetch_cols) {
        const std::int64_t n = p.n;
        const std::size_t bs = padded(tw);
        // The evaluation inside the back substitution where the traits have
        // the registers for it (back_two_fused).
        constexpr bool kFused = kWideRegisters && (W == EvalWork::kFull || W == EvalWork::kFullF64Eval);
        PrefetchCursor pc;
        if (prefetch_cols && c0 + prefetch_cols + tw <= ldy && n > 2) {
            pc.base = reinterpret_cast<const char*>(y + c0 + prefetch_cols);
            pc.stride = ldy * sizeof(T);
            pc.row_bytes = tw * sizeof(T);
            pc.rows = n;
            // The fused walk's loops that pace the prefetches are its back
            // substitution steps, one per two knots (back_two_fused).
            plan_walk::set_prefetch_pace(pc, kFused ? (n - 2) / 2 : p.q, tw / L, L,
                                         static_cast<std::size_t>(n) * ((pc.row_bytes + 63) / 64),
                                         static_cast<std::size_t>(n - 2));
        }
        forward_pass<T, kWideRegisters && W != EvalWork::kFullUnfused>(p, y, ldy, c0, tw, bs, buf);
        // Interval k needs knots k-1 .. k+2.
        std::int64_t i = n - 2;
        if constexpr (kFused) {
            for (; i >= 2; i -= 2) {
                pc.step(2 * pc.back_lines);
                back_two_fused<W>(p, i, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
            }
        } else {
            for (; i >= 2; i -= 2) {
                pc.step(2 * pc.back_lines);
                back_two(p, i, bs, buf);
                eval_interval<W>(p, i + 1, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
                eval_interval<W>(p, i, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
            }
        }
        for (; i >= 1; --i) {
            pc.step(pc.back_lines);
            back_one(p, i, bs, buf);
            eval_interval<W>(p, i + 1, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
        }
        const std::int64_t last = (n >= 3) ? std::min<std::int64_t>(1, n - 1) : n - 1;
        for (std::int64_t kk = last; kk >= 0; --kk)
            eval_interval<W>(p, kk, y, ldy, out, ldo, c0, tw, bs, buf, stream, pc);
        // Non-temporal stores are weakly ordered: fence them before the thread
        // pool tells the caller this tile is done.
        if (stream) _mm_sfence();
    }
};
