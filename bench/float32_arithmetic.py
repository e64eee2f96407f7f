"""How much accuracy float32 *arithmetic* would cost a float32 plan.

letcc's banded kernel keeps float32 data in float32 but computes in float64
(csrc/kernels.hpp): Q^T y, the forward and back substitutions and the final
combination. Float32 arithmetic would run twice as many lanes per instruction
and is what it would take to bring the float32 plan call near the memory-copy
floor (bench/results/spline.md). This script measures what each stage in
float32 costs in accuracy, against the float64 result, with an independent
numpy implementation of the same algorithm (checked against letcc's float64
plan to 1e-9 first), so the choice is documented rather than assumed.

Variants (every one takes float32 y, returns float32):
  all float32        Q^T y, the substitutions and the evaluation in float32
                     (factors computed in float64, then rounded)
  QTy f32 only       Q^T y in float32, substitutions in float64, evaluation in float32
  eval f32 only      Q^T y and the substitutions in float64; fitted values and
                     gamma rounded to float32; the spline's own 4-term
                     evaluation in float32
  6-term eval f32    the kernels' form of the evaluation (y and gamma terms,
                     csrc/eval_coeffs.hpp plan_row) in float32 arithmetic, from
                     gamma computed in float64 and narrowed once per knot
  split eval (as built)  the same form with its gamma terms summed in float64
                     and narrowed once, its y terms added in float32 (the
                     AVX-512 kernel's float32 evaluation, emulated)
  letcc KERNEL       letcc's float32 plan with each plan kernel this CPU runs:
                     generic and AVX2 compute in float64 and round the result;
                     AVX-512 runs the split evaluation above

The letcc rows are a check, not only a measurement: the script exits non-zero
when any of them is above the bound.

The issue's bound: within 1e-6 of max |y| of the float64 result for n <= 1024,
lam in [1e-8, 1]. Knots: Chebyshev points of the second kind on [-1, 1]
(LeTCC's worker nodes); query points: of the first kind (its input nodes);
y: 10 * N(0, 1) rounded to float32, 200 columns.

Run:  python bench/float32_arithmetic.py     (a few seconds; numpy only)
Writes bench/results/float32_arithmetic.md.
"""
from __future__ import annotations

import numpy as np

import letcc
from _report import markdown_table, write_report

NS = (16, 64, 256, 1024)
LAMS = (1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1.0)
COLUMNS = 200


def factor(x: np.ndarray, lam: float) -> dict:
    """Reinsch factors as in csrc/reinsch.hpp (unit weights), float64."""
    n = len(x)
    h = np.diff(x)
    qa, qb, qc = np.zeros(n), np.zeros(n), np.zeros(n)
    qa[1:-1] = 1.0 / h[:-1]
    qc[1:-1] = 1.0 / h[1:]
    qb[1:-1] = -qa[1:-1] - qc[1:-1]
    b0, b1, b2 = np.zeros(n), np.zeros(n), np.zeros(n)
    for i in range(1, n - 1):
        b0[i] = qa[i] ** 2 + qb[i] ** 2 + qc[i] ** 2
        if i + 2 < n:
            b1[i] = qb[i] * qa[i + 1] + qc[i] * qb[i + 1]
        if i + 3 < n:
            b2[i] = qc[i] * qa[i + 2]
    l1, l2, inv_d, d = np.zeros(n + 2), np.zeros(n + 2), np.zeros(n + 2), np.zeros(n)
    for i in range(1, n - 1):
        m0 = (h[i - 1] + h[i]) / 3.0 + lam * b0[i]
        m1 = h[i - 1] / 6.0 + lam * b1[i - 1] if i >= 2 else 0.0
        m2 = lam * b2[i - 2] if i >= 3 else 0.0
        L2 = m2 / d[i - 2] if i >= 3 else 0.0
        L1 = (m1 - (L2 * l1[i - 1] * d[i - 2] if i >= 3 else 0.0)) / d[i - 1] if i >= 2 else 0.0
        d[i] = m0 - (L1 * L1 * d[i - 1] if i >= 2 else 0.0) - (L2 * L2 * d[i - 2] if i >= 3 else 0.0)
        l1[i], l2[i], inv_d[i] = L1, L2, 1.0 / d[i]
    return dict(qa=qa, qb=qb, qc=qc, l1=l1, l2=l2, inv_d=inv_d, h=h, lam=lam)


def solve_gamma(f: dict, y, qty, rec) -> np.ndarray:
    """gamma (n x m, zero at both end knots) with Q^T y in dtype qty and the substitutions in rec."""
    n, m = y.shape
    Y = y.astype(qty)
    z = np.zeros((n + 3, m), rec)              # row r = knot r - 1
    for i in range(1, n - 1):
        r = (qty(f["qa"][i]) * Y[i - 1] + qty(f["qb"][i]) * Y[i] + qty(f["qc"][i]) * Y[i + 1]).astype(rec)
        z[i + 1] = r - rec(f["l1"][i]) * z[i] - rec(f["l2"][i]) * z[i - 1]
    for i in range(n - 2, 0, -1):
        z[i + 1] = z[i + 1] * rec(f["inv_d"][i]) - rec(f["l1"][i + 1]) * z[i + 2] - rec(f["l2"][i + 2]) * z[i + 3]
    return z[1:n + 1]


def apply(f: dict, x, at, y, qty, rec, ev) -> np.ndarray:
    """The plan on y with Q^T y in dtype qty, the substitutions in rec, the
    evaluation (from g and gamma rounded to ev) in ev."""
    n, m = y.shape
    gam = solve_gamma(f, y, qty, rec)
    h, lam = f["h"], f["lam"]
    Qg = np.zeros((n, m), rec)                 # (Q gamma)_j
    for j in range(n):
        il = 1.0 / h[j - 1] if j >= 1 else 0.0
        ir = 1.0 / h[j] if j + 1 < n else 0.0
        Qg[j] = -rec(il + ir) * gam[j]
        if j >= 1:
            Qg[j] += rec(il) * gam[j - 1]
        if j + 1 < n:
            Qg[j] += rec(ir) * gam[j + 1]
    g = (y.astype(rec) - rec(lam) * Qg).astype(ev)
    gam = gam.astype(ev)
    k = np.clip(np.searchsorted(x, at) - 1, 0, n - 2)
    hk = h[k]
    t = (at - x[k]) / hk
    A, B = 1.0 - t, t
    C = -t * (1.0 - t) * (2.0 - t) * hk ** 2 / 6.0
    D = -t * (1.0 - t) * (1.0 + t) * hk ** 2 / 6.0
    return (ev(A)[:, None] * g[k] + ev(B)[:, None] * g[k + 1] + ev(C)[:, None] * gam[k]
            + ev(D)[:, None] * gam[k + 1])


def plan_rows(f: dict, x, at):
    """The kernels' fused plan rows (csrc/eval_coeffs.hpp plan_row, value queries inside the knots, unit
    weights): out = cy0 y[k] + cy1 y[k1] + sum_t cgam[t] gamma[k - 1 + t]."""
    n, h, lam = len(x), f["h"], f["lam"]
    k = np.clip(np.searchsorted(x, at, side="right") - 1, 0, n - 2)
    cy = np.zeros((len(at), 2))
    cg = np.zeros((len(at), 4))
    for j, (t, kk) in enumerate(zip(at, k)):
        hk = h[kk]
        a, b = (x[kk + 1] - t) / hk, (t - x[kk]) / hk
        cy[j] = a, b

        def add_gamma(i, c):
            if 0 < i < n - 1:
                cg[j, i - (kk - 1)] += c

        add_gamma(kk, (a ** 3 - a) * hk ** 2 / 6.0)
        add_gamma(kk + 1, (b ** 3 - b) * hk ** 2 / 6.0)
        for i, c in ((kk, a), (kk + 1, b)):     # g_i = y_i - lam (Q gamma)_i
            s = -c * lam
            ihl = 1.0 / h[i - 1] if i >= 1 else 0.0
            ihr = 1.0 / h[i] if i + 1 < n else 0.0
            if i >= 1:
                add_gamma(i - 1, s * ihl)
            add_gamma(i, -s * (ihl + ihr))
            if i + 1 < n:
                add_gamma(i + 1, s * ihr)
    return k, np.minimum(k + 1, n - 1), cy, cg


def fma32(a, b, c):
    """float32 fused multiply-add: the product of two float32 is exact in float64, then one rounding
    (two in fact, to float64 and to float32: at most a tie's difference)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def kernel_form(f: dict, x, at, y, split: bool) -> np.ndarray:
    """The kernels' 6-term evaluation from float64 gamma, in float32 arithmetic:
    split  the gamma terms summed in float64, narrowed once, the y terms added with float32 FMAs on the
           float32 rows (the AVX-512 kernel's float32 evaluation, csrc/plan_walk_isa.hpp f32_eval);
    else   all six terms in float32 FMAs, from gamma narrowed once per knot."""
    k, k1, cy, cg = plan_rows(f, x, at)
    gam = solve_gamma(f, y, np.float64, np.float64)
    y32 = y.astype(np.float32)
    ya, yb = y32[k], y32[k1]
    rows = [gam[np.clip(k - 1 + t, 0, len(x) - 1)] for t in range(4)]  # out-of-range rows have zero coefficients
    c32 = lambda v: v.astype(np.float32)[:, None]                        # noqa: E731
    if split:
        g = sum(cg[:, t, None] * rows[t] for t in range(4)).astype(np.float32)
        return fma32(c32(cy[:, 1]), yb, fma32(c32(cy[:, 0]), ya, g))
    r = (c32(cy[:, 0]) * ya).astype(np.float32)
    r = fma32(c32(cy[:, 1]), yb, r)
    for t in range(4):
        r = fma32(c32(cg[:, t]), rows[t].astype(np.float32), r)
    return r


KERNEL_FORMS = {"6-term eval f32": False, "split eval (as built)": True}

VARIANTS = {
    "all float32": (np.float32, np.float32, np.float32),
    "QTy f32 only": (np.float32, np.float64, np.float32),
    "eval f32 only": (np.float64, np.float64, np.float32),
}


def main() -> None:
    rng = np.random.default_rng(2026)
    rows = []
    kernels = [k for k in ("generic", "avx2", "avx512") if k == "generic" or letcc.plan_kernel_runs(k)]
    worst = {name: 0.0 for name in [*VARIANTS, *KERNEL_FORMS, *(f"letcc {k}" for k in kernels)]}
    for n in NS:
        x = np.sort(np.cos(np.arange(n) * np.pi / (n - 1)))
        at = np.sort(np.cos((2 * np.arange(1, n + 1) - 1) * np.pi / (2 * n)))
        for lam in LAMS:
            f = factor(x, lam)
            y = (10.0 * rng.standard_normal((n, COLUMNS))).astype(np.float32)
            y64 = y.astype(np.float64)
            # banded: the plan kernels (method="auto" takes the dense operator at small n)
            plan = letcc.SplineSmoother(x, at, lam=lam, method="banded")
            ref = plan(y64)
            scale = np.abs(y64).max()
            mine = apply(f, x, at, y64, np.float64, np.float64, np.float64)
            assert np.abs(mine - ref).max() <= 1e-9 * scale, (n, lam)   # the emulation is the algorithm
            errs = {}
            for name, (qty, rec, ev) in VARIANTS.items():
                got = apply(f, x, at, y64, qty, rec, ev).astype(np.float32).astype(np.float64)
                errs[name] = float(np.abs(got - ref).max() / scale)
            for name, split in KERNEL_FORMS.items():
                got = kernel_form(f, x, at, y64, split).astype(np.float64)
                errs[name] = float(np.abs(got - ref).max() / scale)
            try:
                for k in kernels:
                    letcc.set_plan_kernel(k)
                    got = plan(y)
                    assert got.dtype == np.float32
                    errs[f"letcc {k}"] = float(np.abs(got.astype(np.float64) - ref).max() / scale)
            finally:
                letcc.set_plan_kernel("auto")
            for name, e in errs.items():
                worst[name] = max(worst[name], e)
            rows.append([n, f"{lam:g}"] + [f"{errs[name]:.1e}" + (" **x**" if errs[name] > 1e-6 else "")
                                          for name in worst])
            print(n, lam, {k: f"{v:.1e}" for k, v in errs.items()}, flush=True)
    table = markdown_table(["n", "lam"] + [f"{name}" for name in worst], rows)
    summary = markdown_table(["variant", "worst error (relative to max abs y)", "within 1e-6 everywhere"],
                             [[name, f"{e:.1e}", "yes" if e <= 1e-6 else "no"] for name, e in worst.items()])
    notes = (
        "Largest absolute difference between each float32 variant and the float64 plan, relative to the largest "
        "absolute y, over all n x 200 outputs per row; **x**: above the issue's 1e-6 bound. Computing Q^T y in "
        "float32 is what breaks the bound (its second differences round to eps32 |y| / h, and lam Q M^-1 "
        "amplifies that as n and lam grow). The final evaluation in float32 depends on its form: the 4-term "
        "spline form from g and gamma (eval f32 only) stays at rounding level but needs the fitted values g as "
        "an extra float64 pass (no time saved, measured with a C++ variant of the kernel); the kernels' 6-term "
        "form (y and gamma terms) in float32 from gamma narrowed once per knot breaks the bound (4.5e-5 at "
        "n = 1024, lam = 1: its gamma coefficients hold lam / h, and those terms cancel in float32); with its "
        "gamma terms summed in float64 and narrowed once, and only its two y terms (a convex combination) in "
        "float32, it stays at rounding level (split eval). That split form is what the AVX-512 kernel runs for "
        "float32 data (csrc/plan_walk_isa.hpp, f32_eval; the letcc avx512 column, which matches the emulation); "
        "Q^T y and the substitutions stay float64 in every kernel. Even where all-float32 stays under 1e-6 "
        "(n = 64, lam = 1e-3: 6e-7 here) the margin is a factor of 1.5 on random data, not a bound. The letcc "
        "columns are each plan kernel this CPU runs (method='banded'); the script fails if one is above 1e-6.")
    write_report("float32_arithmetic", "Float32 arithmetic in the banded plan: what it would cost in accuracy",
                 [summary, table], notes=notes)
    print(summary)
    over = {name: e for name, e in worst.items() if name.startswith("letcc") and e > 1e-6}
    if over:
        raise SystemExit(f"float32 plan above the 1e-6 bound: {over}")


if __name__ == "__main__":
    main()
