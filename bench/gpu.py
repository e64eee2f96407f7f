"""GPU benchmark of the CUDA core: one prepared command for a CUDA machine (H200).

    python3 bench/gpu.py            # from the repository root; < 5 minutes

Builds what it needs itself: when letcc with letcc._cuda is not importable, it
configures and builds the repository with CMake (LETCC_CUDA=ON) into
build/gpu-bench and stages the package there (no pip, no network). Then:

1. correctness first: tests/test_cuda.py (GPU tests included, configure-only
   build tests excluded), then every timed configuration is checked before it
   is timed: output poisoned with NaN, every element must be written, and
   sampled columns must match the CPU float64 result;
2. the plan call y (n x m) -> (q x m), q = n (K = n), float32, for n in
   {16, 64, 256} and m up to 16M columns, timed with CUDA events (warm-up,
   median of many, inputs rotated when they would fit in L2), next to
   (a) a device copy of the same bytes (the floor) and (b) torch's GEMM with
   the precomputed dense operator (default float32 precision);
3. launch-configuration variants at the largest m (gamma store, tile, depth),
   and float64;
4. LeTCC encode + decode on a (K, 3, 224, 224) float32 batch next to a
   ViT-B/16 forward (torchvision, random init, no download) on the same batch.

Writes bench/results/gpu.md (and gpu.md / gpu.json under $OUT when set).
Targets (issue 6): plan at >= 75% of the copy bandwidth at large m; >= 1.5x
faster than the GEMM at n >= 64; encode + decode < 2% of the ViT forward.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
BUILD = REPO / "build" / "gpu-bench"
T0 = time.perf_counter()
MEASURE_START = [T0]  # reset when the measurements start (after the build and the tests)


def elapsed() -> float:
    return time.perf_counter() - T0


def measuring() -> float:
    """Seconds since the measurements started (the time budgets count these)."""
    return time.perf_counter() - MEASURE_START[0]


def log(msg: str) -> None:
    print(f"[{elapsed():6.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------- build


def _run(cmd, **kw):
    log("$ " + " ".join(str(c) for c in cmd))
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        print(r.stdout[-4000:], r.stderr[-4000:], sep="\n")
        raise SystemExit(f"command failed ({r.returncode}): {cmd[0]}")
    return r


def ensure_letcc(force_build: bool) -> str:
    """Import letcc with letcc._cuda, building both into build/gpu-bench first
    when they are not importable (or when forced). Returns how it was found."""
    if not force_build:
        try:
            import letcc
            import letcc._cuda  # noqa: F401

            if getattr(letcc, "__file__", None) and hasattr(letcc, "SplineSmoother"):
                return f"installed ({Path(letcc.__file__).parent})"
            log("only part of letcc is importable; building it")
        except ImportError as exc:
            log(f"letcc with CUDA not importable ({exc}); building it")
    for name in [n for n in sys.modules if n == "letcc" or n.startswith("letcc.")]:
        del sys.modules[name]
    try:
        import pybind11
    except ImportError:
        raise SystemExit("building letcc needs pybind11 in this Python") from None
    if shutil.which("cmake") is None:
        raise SystemExit("building letcc needs cmake on PATH")
    t = time.perf_counter()
    cmake_dir = BUILD / "cmake"
    stage = BUILD / "stage"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(["cmake", "-S", REPO, "-B", cmake_dir, *gen, "-DCMAKE_BUILD_TYPE=Release", "-DLETCC_CUDA=ON",
          f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"])
    _run(["cmake", "--build", cmake_dir, "-j", str(os.cpu_count() or 4)])
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(REPO / "python" / "letcc", stage / "letcc",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    _run(["cmake", "--install", cmake_dir, "--prefix", stage])
    sys.path.insert(0, str(stage))
    os.environ["PYTHONPATH"] = str(stage) + os.pathsep + os.environ.get("PYTHONPATH", "")
    import letcc  # noqa: F401
    import letcc._cuda  # noqa: F401

    return f"built by this script in {time.perf_counter() - t:.0f} s ({stage})"


# ---------------------------------------------------------------- timing


def cuda_time_ms(fn, reps: int, warmup: int = 3):
    """(median, min, max) milliseconds of fn() between two CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times)), float(np.min(times)), float(np.max(times))


def reps_for(ms_estimate: float) -> int:
    return int(min(30, max(7, 300.0 / max(ms_estimate, 1e-3))))


# ---------------------------------------------------------------- checks


def sampled_error(smoother, y, out, sample: int = 2048) -> float:
    """Max relative error of sampled columns of out (first, last and random
    ones) against the CPU float64 plan applied to the same columns of y."""
    import torch

    n, m = y.shape
    rng = np.random.default_rng(m + n)
    cols = np.unique(np.concatenate([np.arange(min(sample, m)), np.arange(max(0, m - sample), m),
                                     rng.integers(0, m, sample)]))
    idx = torch.from_numpy(cols).to(y.device)
    y_host = y.index_select(1, idx).double().cpu().numpy()
    got = out.index_select(1, idx).double().cpu().numpy()
    ref = smoother(np.ascontiguousarray(y_host))
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def check_plan_output(smoother, y, out, sample: int = 2048) -> float:
    """out was poisoned with NaN before the call and y is finite: every
    element must have been written; sampled columns must match the CPU."""
    import torch

    if bool(torch.isnan(out).any()):
        raise AssertionError("NaN left in the output: some element was not written")
    err = sampled_error(smoother, y, out, sample)
    if not err < 1e-5:
        raise AssertionError(f"GPU result differs from the CPU float64 result: max relative error {err:.2e}")
    return err


def jittered_knots(rng, n: int) -> np.ndarray:
    """n increasing knots in [-1, 1]: equispaced, each moved by up to 20% of a gap."""
    base = np.linspace(-1, 1, n)
    return base if n < 2 else base + rng.uniform(-0.2, 0.2, n) * (2.0 / (n - 1))


# ---------------------------------------------------------------- sections


def run_tests() -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow",
           "tests/test_cuda.py"]
    log("running " + " ".join(cmd[2:]))
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=150)
        out, code = (r.stdout + r.stderr), r.returncode
    except subprocess.TimeoutExpired as exc:
        out, code = f"timed out after 150 s\n{exc.stdout or ''}", -1
    tail = "\n".join(out.strip().splitlines()[-15:])
    print(tail, flush=True)
    return {"returncode": code, "seconds": round(time.perf_counter() - t, 1), "tail": tail}


def plan_section(ns, ms, budget_s=90.0) -> list:
    import torch
    import letcc
    from letcc.splines.cuda_dispatch import apply_plan_gpu, device_plan

    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    rows = []
    for n in ns:
        rng = np.random.default_rng(n)
        q = n  # K = n
        s = letcc.SplineSmoother(jittered_knots(rng, n), jittered_knots(rng, q), lam=1e-3)
        A = torch.from_numpy(s.matrix()).float().cuda()
        for m in ms:
            if measuring() > budget_s:
                log(f"plan section: time budget reached, skipping n={n} m={m}")
                continue
            bytes_in = n * m * 4
            # several input buffers in turn when one would (nearly) fit in L2
            nbuf = int(min(3, max(1, np.ceil(4 * l2 / bytes_in))))
            ys = [torch.randn(n, m, device="cuda") for _ in range(nbuf)]
            out = torch.full((q, m), float("nan"), device="cuda")
            apply_plan_gpu(s, ys[0], out)
            torch.cuda.synchronize()
            err = check_plan_output(s, ys[0], out)
            cfg = device_plan(s, 0).config(m, False)
            it = [0]

            def next_y():
                it[0] += 1
                return ys[it[0] % nbuf]

            reps = reps_for((n + q) * m * 4 / 3e12 * 1e3)
            t_plan = cuda_time_ms(lambda: apply_plan_gpu(s, next_y(), out), reps)
            t_copy = cuda_time_ms(lambda: out.copy_(next_y()), reps)
            t_gemm = cuda_time_ms(lambda: torch.matmul(A, next_y(), out=out), reps)
            torch.matmul(A, ys[0], out=out)
            gemm_err = sampled_error(s, ys[0], out, sample=512)
            plan_bytes = (n + q) * m * 4
            copy_bytes = 2 * n * m * 4
            row = {
                "n": n, "q": q, "m": m, "plan_ms": t_plan[0], "plan_min_ms": t_plan[1], "plan_max_ms": t_plan[2],
                "copy_ms": t_copy[0], "gemm_ms": t_gemm[0],
                "plan_GBps": plan_bytes / t_plan[0] / 1e6, "copy_GBps": copy_bytes / t_copy[0] / 1e6,
                "plan_vs_copy_bw": (plan_bytes / t_plan[0]) / (copy_bytes / t_copy[0]),
                "gemm_over_plan": t_gemm[0] / t_plan[0], "plan_err": err, "gemm_err": gemm_err,
                "config": cfg, "input_buffers": nbuf, "reps": reps,
            }
            rows.append(row)
            log(f"n={n:4d} m={m:9d}: plan {t_plan[0]:8.3f} ms ({row['plan_GBps']:6.0f} GB/s, "
                f"{100 * row['plan_vs_copy_bw']:5.1f}% of copy)  copy {t_copy[0]:8.3f} ms  "
                f"gemm {t_gemm[0]:8.3f} ms ({row['gemm_over_plan']:4.2f}x)  err {err:.1e}  {cfg}")
            del ys, out
            torch.cuda.empty_cache()
    return rows


VARIANTS = [
    {}, {"depth": 8}, {"depth": 16}, {"depth": 64}, {"tile": 64}, {"tile": 128}, {"store": 2},
    {"store": 2, "tile": 128, "depth": 16},
]


def variant_section(ns, m, dtype_name="float32", budget_s=130.0) -> list:
    import torch
    import letcc
    from letcc.splines.cuda_dispatch import apply_plan_gpu, device_plan

    dtype = getattr(torch, dtype_name)
    esize = 4 if dtype_name == "float32" else 8
    rows = []
    for n in ns:
        if measuring() > budget_s:
            log(f"variants: time budget reached, skipping n={n}")
            continue
        rng = np.random.default_rng(n + 1)
        s = letcc.SplineSmoother(jittered_knots(rng, n), jittered_knots(rng, n), lam=1e-3)
        y = torch.randn(n, m, device="cuda", dtype=dtype)
        out = torch.empty(n, m, device="cuda", dtype=dtype)
        t_copy = cuda_time_ms(lambda: out.copy_(y), 10)
        for v in VARIANTS if dtype_name == "float32" else [{}]:
            try:
                cfg = device_plan(s, 0).config(m, dtype_name == "float64", **v)
            except ValueError as exc:
                log(f"n={n} {v}: {exc}")
                continue
            out.fill_(float("nan"))
            apply_plan_gpu(s, y, out, **v)
            torch.cuda.synchronize()
            err = check_plan_output(s, y, out, sample=512)
            t = cuda_time_ms(lambda: apply_plan_gpu(s, y, out, **v), 10)
            bw = 2 * n * m * esize / t[0] / 1e6
            rows.append({"n": n, "m": m, "dtype": dtype_name, "variant": v, "config": cfg, "plan_ms": t[0],
                         "GBps": bw, "copy_ms": t_copy[0], "vs_copy": t_copy[0] / t[0], "err": err})
            log(f"{dtype_name} n={n:4d} m={m}: {str(v):40s} {t[0]:8.3f} ms {bw:6.0f} GB/s "
                f"({100 * t_copy[0] / t[0]:5.1f}% of copy) err {err:.1e} {cfg}")
        del y, out
        torch.cuda.empty_cache()
    return rows


def letcc_vs_vit_section(pairs, budget_s=170.0) -> list:
    import torch
    import torchvision
    import letcc

    model = torchvision.models.vit_b_16(weights=None).cuda().eval()
    rows = []
    for K, N in pairs:
        if measuring() > budget_s:
            log(f"ViT section: time budget reached, skipping K={K}")
            continue
        rng = np.random.default_rng(K)
        code = letcc.LeTCC(K, N)
        X = torch.randn(K, 3, 224, 224, device="cuda")
        S = N // 4
        avail = np.sort(rng.permutation(N)[: N - S])
        Y = torch.randn(len(avail), 1000, device="cuda")
        # correctness against the CPU float64 path
        enc_err = float((code.encode(X).double().cpu() - torch.from_numpy(
            code.encode(X.double().cpu().numpy()))).abs().max() / X.abs().max().item())
        dec_ref = code.decode(Y.double().cpu().numpy(), avail)
        dec_err = float(np.abs(code.decode(Y, avail).double().cpu().numpy() - dec_ref).max() / np.abs(dec_ref).max())
        with torch.inference_mode():
            t_fwd = cuda_time_ms(lambda: model(X), 10)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                t_fwd_bf16 = cuda_time_ms(lambda: model(X), 10)
        t_enc = cuda_time_ms(lambda: code.encode(X), 30)
        t_dec = cuda_time_ms(lambda: code.decode(Y, avail), 30)
        t_both = cuda_time_ms(lambda: (code.encode(X), code.decode(Y, avail)), 30)
        # decoding for an answering set never seen before: plan built and uploaded in the call
        uncached = letcc.LeTCC(K, N, plan_cache_size=0)  # every decode builds and uploads its plan
        t_fresh = cuda_time_ms(lambda: uncached.decode(Y, avail), 20, warmup=2)
        wall = []
        for _ in range(20):
            torch.cuda.synchronize()
            t = time.perf_counter()
            code.encode(X)
            code.decode(Y, avail)
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - t) * 1e3)
        row = {"K": K, "N": N, "S": S, "vit_fwd_ms": t_fwd[0], "vit_fwd_bf16_ms": t_fwd_bf16[0],
               "encode_ms": t_enc[0], "decode_ms": t_dec[0], "encode_decode_ms": t_both[0],
               "encode_decode_wall_ms": float(np.median(wall)), "decode_uncached_ms": t_fresh[0],
               "ratio_f32": t_both[0] / t_fwd[0], "ratio_bf16": t_both[0] / t_fwd_bf16[0],
               "enc_err": enc_err, "dec_err": dec_err}
        rows.append(row)
        log(f"K={K} N={N}: ViT {t_fwd[0]:.2f} ms (bf16 {t_fwd_bf16[0]:.2f}), encode {t_enc[0]:.3f}, decode "
            f"{t_dec[0]:.3f} (uncached {t_fresh[0]:.3f}), enc+dec {t_both[0]:.3f} ms = "
            f"{100 * row['ratio_f32']:.2f}% of the f32 forward; errors {enc_err:.1e} {dec_err:.1e}")
    return rows


# ---------------------------------------------------------------- report


def environment(how_found: str) -> dict:
    import torch
    from letcc.splines.cuda_dispatch import gpu_info

    p = torch.cuda.get_device_properties(0)
    smi = ""
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu",
                            "--format=csv,noheader"], capture_output=True, text=True)
        smi = r.stdout.strip()
    return {"gpu": p.name, "sms": p.multi_processor_count, "memory_GiB": round(p.total_memory / 2**30, 1),
            "l2_MiB": round(getattr(p, "L2_cache_size", 0) / 2**20, 1), "torch": torch.__version__,
            "python": platform.python_version(), "letcc": how_found, "cuda_module": gpu_info(),
            "nvidia_smi": smi}


def write_report(data: dict) -> str:
    env = data["environment"]
    lines = ["# GPU benchmark of the CUDA core (bench/gpu.py)", "",
             f"Device: {env['gpu']} ({env['sms']} SMs, {env['memory_GiB']} GiB, L2 {env['l2_MiB']} MiB); "
             f"torch {env['torch']}, Python {env['python']}; nvidia-smi: {env['nvidia_smi']}",
             f"letcc: {env['letcc']}; module: {env['cuda_module']}", ""]
    t = data.get("tests")
    if t:
        lines += ["## Correctness: tests/test_cuda.py (GPU tests, not the configure-only ones)", "",
                  f"exit code {t['returncode']} in {t['seconds']} s:", "", "```", t["tail"], "```", ""]
    if data.get("plan"):
        lines += ["## Plan call, float32, q = n (K = n), times are CUDA-event medians", "",
                  "Bandwidth counts y read once and out written once ((n + q) m 4 bytes); the copy moves "
                  "y (n m 4 bytes read, as many written). GEMM: torch.matmul with the dense (q, n) operator, "
                  "default float32 precision. err: max relative error of sampled columns vs CPU float64 "
                  "(every element of the plan output checked written).", "",
                  "| n | m | plan ms | GB/s | % of copy BW | copy ms | GEMM ms | GEMM / plan | plan err | GEMM err | launch |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in data["plan"]:
            c = r["config"]
            lines.append(f"| {r['n']} | {r['m']:,} | {r['plan_ms']:.3f} | {r['plan_GBps']:.0f} | "
                         f"{100 * r['plan_vs_copy_bw']:.1f} | {r['copy_ms']:.3f} | {r['gemm_ms']:.3f} | "
                         f"{r['gemm_over_plan']:.2f} | {r['plan_err']:.1e} | {r['gemm_err']:.1e} | "
                         f"{c['store']} tile {c['tile']} depth {c['depth']} grid {c['grid']} "
                         f"smem {c['shared_bytes']} |")
        lines.append("")
    if data.get("variants"):
        lines += ["## Launch-configuration variants (largest m)", "",
                  "| dtype | n | m | override | launch | ms | GB/s | % of copy | err |",
                  "|---|---:|---:|---|---|---:|---:|---:|---:|"]
        for r in data["variants"]:
            c = r["config"]
            lines.append(f"| {r['dtype']} | {r['n']} | {r['m']:,} | {r['variant'] or 'auto'} | {c['store']} tile "
                         f"{c['tile']} depth {c['depth']} grid {c['grid']} | {r['plan_ms']:.3f} | {r['GBps']:.0f} | "
                         f"{100 * r['vs_copy']:.1f} | {r['err']:.1e} |")
        lines.append("")
    if data.get("vit"):
        lines += ["## LeTCC encode + decode vs a ViT-B/16 forward on the same (K, 3, 224, 224) batch", "",
                  "Default LeTCC(K, N) (lam 'auto'), S = N/4 stragglers, decoder outputs (N - S, 1000) float32. "
                  "Times are CUDA-event medians including the Python calls; 'uncached' builds and uploads the "
                  "decoder plan in every call.", "",
                  "| K | N | ViT f32 ms | ViT bf16 ms | encode ms | decode ms | decode uncached ms | enc+dec ms | "
                  "enc+dec wall ms | % of f32 fwd | % of bf16 fwd | errors vs CPU f64 |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in data["vit"]:
            lines.append(f"| {r['K']} | {r['N']} | {r['vit_fwd_ms']:.2f} | {r['vit_fwd_bf16_ms']:.2f} | "
                         f"{r['encode_ms']:.3f} | {r['decode_ms']:.3f} | {r['decode_uncached_ms']:.3f} | "
                         f"{r['encode_decode_ms']:.3f} | {r['encode_decode_wall_ms']:.3f} | "
                         f"{100 * r['ratio_f32']:.2f} | {100 * r['ratio_bf16']:.2f} | "
                         f"{r['enc_err']:.1e}, {r['dec_err']:.1e} |")
        lines.append("")
    lines += ["## Targets", ""] + [f"- {v}" for v in verdicts(data)] + [
        "", f"Total run time {elapsed():.0f} s.", ""]
    return "\n".join(lines)


def verdicts(data: dict) -> list:
    out = []
    plan = data.get("plan") or []
    if plan:
        big = max(r["m"] for r in plan)
        for r in [r for r in plan if r["m"] == big]:
            bw = r["plan_vs_copy_bw"]
            out.append(f"n={r['n']}, m={big:,}: {100 * bw:.0f}% of the copy bandwidth (target >= 75%): "
                       f"{'met' if bw >= 0.75 else 'MISSED'}")
        for r in [r for r in plan if r["n"] >= 64 and r["m"] == big]:
            g = r["gemm_over_plan"]
            out.append(f"n={r['n']}, m={big:,}: {g:.2f}x faster than the GEMM (target >= 1.5x): "
                       f"{'met' if g >= 1.5 else 'MISSED'}")
    for r in data.get("vit") or []:
        out.append(f"K={r['K']}, N={r['N']}: encode + decode = {100 * r['ratio_f32']:.2f}% of the float32 ViT "
                   f"forward (target < 2%): {'met' if r['ratio_f32'] < 0.02 else 'MISSED'}; "
                   f"{100 * r['ratio_bf16']:.2f}% of the bf16 forward")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-tests", action="store_true", help="do not run tests/test_cuda.py first")
    ap.add_argument("--force-build", action="store_true", help="build into build/gpu-bench even if letcc imports")
    ap.add_argument("--quick", action="store_true", help="small sizes only (smoke run)")
    args = ap.parse_args()

    how = ensure_letcc(args.force_build)
    log(f"letcc: {how}")
    import letcc

    if not letcc.cuda_available():
        from letcc.splines.cuda_dispatch import cuda_unavailable_reason

        print(f"no GPU route, nothing to measure: {cuda_unavailable_reason()}")
        return 2

    data = {"environment": environment(how)}
    log(f"environment: {data['environment']}")
    if not args.skip_tests:
        data["tests"] = run_tests()
    MEASURE_START[0] = time.perf_counter()
    ns = [16, 64, 256]
    ms = [1 << 16, 1 << 18] if args.quick else [1 << 20, 1 << 22, 1 << 24]
    data["plan"] = plan_section(ns, ms)
    data["variants"] = variant_section([64, 256], ms[-1])
    data["variants"] += variant_section(ns, ms[-1] // 4, dtype_name="float64", budget_s=150.0)
    data["vit"] = letcc_vs_vit_section([(8, 16), (16, 32)] if not args.quick else [(4, 8)])
    report = write_report(data)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gpu.md").write_text(report)
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "gpu.md").write_text(report)
        (Path(out_dir) / "gpu.json").write_text(json.dumps(data, indent=1, default=str))
    print()
    print(report)
    return 0 if (data.get("tests") or {}).get("returncode", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
