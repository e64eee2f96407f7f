"""The CUDA core (letcc._cuda) and the GPU route of SplineSmoother / LeTCC.

Everywhere: letcc imports without a GPU; cuda_available() answers with a
reason; the build switch LETCC_CUDA behaves (configure only); the kernels'
per-column code, compiled for the host (letcc._cuda.emulate), matches the CPU
core. With a GPU (torch CUDA tensors, and CuPy arrays when CuPy is installed):
every element against the CPU float64 result for n in 1..1024 and m up to 10^6,
float32 and float64, on non-default streams, into poisoned output buffers.
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import letcc
from letcc.splines import cuda_dispatch

REPO = Path(__file__).resolve().parents[1]
GPU = cuda_dispatch.cuda_available()
needs_gpu = pytest.mark.skipif(not GPU, reason=f"no GPU route: {cuda_dispatch.cuda_unavailable_reason()}")


def _nvcc_present() -> bool:
    return shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def _cuda_module():
    try:
        return importlib.import_module("letcc._cuda")
    except ImportError as exc:
        pytest.skip(f"letcc was built without letcc._cuda ({exc})")


def _knots(rng, n):
    """n strictly increasing knots in [-1, 1] with gaps not smaller than 0.2 / n."""
    if n == 1:
        return np.array([rng.uniform(-1, 1)])
    gaps = rng.uniform(0.2, 1.0, n - 1)
    x = np.concatenate([[0.0], np.cumsum(gaps)])
    return -1 + 2 * x / x[-1]


def _rel_err(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape
    assert np.isfinite(got).all(), "non-finite values in the result (an unwritten or wrong element)"
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-300))


# float32 data, float64 factors and accumulation: only the final rounding
# (and the rounding of y, which the reference sees too) separates the results.
TOL = {np.float64: 1e-11, np.float32: 2e-6}


# ---------------------------------------------------------------- everywhere


def test_import_and_availability_answer():
    assert isinstance(letcc.cuda_available(), bool)
    reason = cuda_dispatch.cuda_unavailable_reason()
    assert isinstance(reason, str)
    assert (reason == "") == letcc.cuda_available()


def test_module_is_built_when_a_cuda_compiler_is_present():
    if os.environ.get("LETCC_CUDA", "AUTO").upper() == "OFF":
        pytest.skip("LETCC_CUDA=OFF in the environment")
    if not _nvcc_present():
        pytest.skip("no CUDA compiler on this machine: the AUTO build leaves letcc._cuda out")
    mod = importlib.import_module("letcc._cuda")
    assert "80" in mod.compiled_archs and "90" in mod.compiled_archs
    assert mod.runtime_version() >= 12000
    info = cuda_dispatch.gpu_info()
    assert info["built"] is True


def test_reports_no_device_on_a_machine_without_gpu():
    mod = _cuda_module()
    count, error = mod.probe()
    if count > 0:
        pytest.skip(f"this machine has {count} CUDA device(s)")
    assert not letcc.cuda_available()
    reason = cuda_dispatch.cuda_unavailable_reason()
    assert "driver" in reason or "device" in reason, reason
    if mod.driver_version() == 0:
        assert error, "with no driver the runtime must report an error"


def test_missing_module_is_reported_not_raised(monkeypatch):
    monkeypatch.setitem(sys.modules, "letcc._cuda", None)  # makes `from letcc import _cuda` fail
    monkeypatch.delattr(letcc, "_cuda", raising=False)
    cuda_dispatch._status.cache_clear()
    try:
        assert cuda_dispatch.cuda_available() is False
        assert "built without its CUDA module" in cuda_dispatch.cuda_unavailable_reason()
        assert cuda_dispatch.gpu_info()["built"] is False
    finally:
        monkeypatch.undo()
        cuda_dispatch._status.cache_clear()


class _FakeDeviceArray:
    """Looks like a GPU array (has __cuda_array_interface__) but is not one."""

    shape = (4, 3)
    __cuda_array_interface__ = {"shape": (4, 3), "typestr": "<f4", "data": (0, False), "version": 3}


def test_gpu_array_without_gpu_route_raises_with_the_reason():
    if GPU:
        pytest.skip("the GPU route is available here")
    s = letcc.SplineSmoother(np.linspace(0, 1, 4), [0.5])
    with pytest.raises(RuntimeError, match="GPU route of letcc, which is unavailable"):
        s(_FakeDeviceArray())


def _configure(tmp_path, *defs, env=None):
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not on PATH")
    pybind11 = pytest.importorskip("pybind11")
    cmd = [
        "cmake", "-S", str(REPO), "-B", str(tmp_path / "build"),
        f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}", *defs,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_build_switch_off_skips_the_cuda_module(tmp_path):
    r = _configure(tmp_path, "-DLETCC_CUDA=OFF")
    assert r.returncode == 0, r.stderr
    assert "CUDA module skipped (LETCC_CUDA=OFF)" in r.stdout


@pytest.mark.slow
def test_build_switch_on_fails_loudly_without_a_compiler(tmp_path):
    r = _configure(tmp_path, "-DLETCC_CUDA=ON", "-DCMAKE_CUDA_COMPILER=/nonexistent/bin/nvcc")
    assert r.returncode != 0
    assert "LETCC_CUDA=ON but CMAKE_CUDA_COMPILER=/nonexistent/bin/nvcc does not exist" in r.stderr.replace("\n  ", " ")


@pytest.mark.slow
def test_build_switch_auto_goes_on_without_a_compiler(tmp_path):
    r = _configure(tmp_path, "-DCMAKE_CUDA_COMPILER=/nonexistent/bin/nvcc")
    assert r.returncode == 0, r.stderr
    assert "building without the CUDA module" in r.stdout


@pytest.mark.slow
def test_build_switch_rejects_unknown_values(tmp_path):
    r = _configure(tmp_path, "-DLETCC_CUDA=MAYBE")
    assert r.returncode != 0
    assert "LETCC_CUDA must be AUTO, ON or OFF" in r.stderr


# ------------------------------------- the kernel's column code, on the host


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 9, 17, 33, 64, 65, 100, 257, 1024])
def test_kernel_column_code_matches_cpu_float64(n, dtype):
    mod = _cuda_module()
    rng = np.random.default_rng(1000 + n)
    x = _knots(rng, n)
    w = rng.uniform(0.5, 2.0, n)
    at = np.concatenate([rng.uniform(-1.3, 1.3, 7), x[[0, -1]], [x[n // 2]]])
    m = 37
    y = rng.standard_normal((n, m)).astype(dtype)
    for lam in (0.0, 10.0 ** rng.uniform(-6, 0)):
        ref = letcc.SplineSmoother(x, at, lam=lam, w=w)(y.astype(np.float64))
        for tile, depth in ((32, 32), (64, 1), (256, 7), (32, 64)):
            got = mod.emulate(x, w, lam, at, y, tile=tile, depth=depth)
            assert got.dtype == dtype
            assert _rel_err(got, ref) < TOL[dtype], (lam, tile, depth)


def test_kernel_column_code_matches_scipy():
    interpolate = pytest.importorskip("scipy.interpolate")
    mod = _cuda_module()
    rng = np.random.default_rng(7)
    x = _knots(rng, 12)
    y = rng.standard_normal((12, 5))
    at = rng.uniform(-1, 1, 9)
    lam = 1e-3
    ref = np.stack([interpolate.make_smoothing_spline(x, y[:, j], lam=lam)(at) for j in range(5)], axis=1)
    got = mod.emulate(x, np.ones(12), lam, at, y)
    assert _rel_err(got, ref) < 1e-8


def test_kernel_column_code_keeps_nan_in_its_column():
    mod = _cuda_module()
    rng = np.random.default_rng(3)
    x = _knots(rng, 20)
    y = rng.standard_normal((20, 40))
    y[5, 17] = np.nan
    got = mod.emulate(x, np.ones(20), 1e-2, np.linspace(-1, 1, 11), y)
    assert np.isnan(got[:, 17]).all()
    assert np.isfinite(np.delete(got, 17, axis=1)).all()


def test_emulate_rejects_bad_arguments():
    mod = _cuda_module()
    x = np.linspace(0, 1, 5)
    with pytest.raises(TypeError, match="float32 or float64"):
        mod.emulate(x, np.ones(5), 0.0, np.array([0.5]), np.ones((5, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="one row per knot"):
        mod.emulate(x, np.ones(5), 0.0, np.array([0.5]), np.ones((4, 3)))
    with pytest.raises(ValueError, match="strictly increasing"):
        mod.emulate(x[::-1].copy(), np.ones(5), 0.0, np.array([0.5]), np.ones((5, 3)))


@pytest.mark.parametrize("f64", [False, True])
def test_launch_configuration_is_valid_for_every_size(f64):
    mod = _cuda_module()
    elem = 8 if f64 else 4
    for optin in (232448, 166912, 101376):  # per-block opt-in shared memory: H100/H200, A100, sm_86
        for n in range(1, 1025):
            for m in (1, 31, 33, 65, 70, 96, 1000, 10**6, 1 << 24):
                c = mod.choose_launch(n, m, f64, shared_optin=optin, sm_count=132, global_blocks_per_sm=3)
                depth, tile = c["depth"], c["tile"]
                assert 1 <= depth <= 64 and tile in (32, 64, 128, 256)
                assert tile == 32 or tile // 2 < m, "no wider than the data needs"
                shared = 32 * (8 * n + 2 * depth * elem) <= optin
                assert c["store"] == ("shared" if shared else "global"), (n, m, optin)
                z = 8 * n if shared else 0
                assert c["shared_bytes"] == tile * (z + 2 * depth * elem) <= optin
                tiles = -(-m // tile)
                if shared:
                    assert c["grid"] == tiles
                else:
                    assert 1 <= c["grid"] <= min(tiles, 132 * 3)
                    assert c["grid"] == 1 or c["grid"] * tile * n * 8 <= 256 << 20


def test_launch_configuration_overrides():
    mod = _cuda_module()
    c = mod.choose_launch(100, 10**6, False, store=2, tile=128, depth=8)
    assert (c["store"], c["tile"], c["depth"]) == ("global", 128, 8)
    c = mod.choose_launch(100, 10**6, True, store=1, tile=256, depth=64)
    assert c["store"] == "shared" and c["shared_bytes"] <= 232448  # tile narrowed to fit
    with pytest.raises(ValueError, match="too large for the shared-memory kernel"):
        mod.choose_launch(1024, 10**6, False, store=1)
    with pytest.raises(ValueError, match="tile must be"):
        mod.choose_launch(16, 100, False, tile=96)
    with pytest.raises(ValueError, match="depth must be"):
        mod.choose_launch(16, 100, False, depth=65)
    with pytest.raises(ValueError, match="store must be"):
        mod.choose_launch(16, 100, False, store=3)


# ---------------------------------------------------------------- on a GPU


def _backend_module(name):
    if name == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("torch sees no CUDA device")
        return torch
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no CUDA device")
    except Exception as exc:  # CuPy raises its own runtime error without a driver
        pytest.skip(f"CuPy cannot reach a device: {exc}")
    return cupy


@pytest.fixture(params=["torch", "cupy"])
def backend(request):
    return request.param, _backend_module(request.param)


def _to_device(name, lib, a):
    return lib.from_numpy(np.ascontiguousarray(a)).cuda() if name == "torch" else lib.asarray(a)


def _to_host(name, a):
    return a.cpu().numpy() if name == "torch" else a.get()


def _is_kind(name, a) -> bool:
    return type(a).__module__.startswith(name)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_matches_cpu_float64_for_n_1_to_1024(backend, dtype):
    name, lib = backend
    rng = np.random.default_rng(11)
    for n in [1, 2, 3, 4, 5, 8, 16, 31, 64, 100, 256, 257, 512, 850, 900, 1024]:
        x = _knots(rng, n)
        at = np.concatenate([rng.uniform(-1.2, 1.2, 13), x[[0, -1]]])
        lam = float(rng.choice([0.0, 1e-5, 1e-2, 1.0]))
        s = letcc.SplineSmoother(x, at, lam=lam)
        for m in (1, 33, 1000):
            y = rng.standard_normal((n, m)).astype(dtype)
            got = s(_to_device(name, lib, y))
            assert _is_kind(name, got)
            ref = s(y.astype(np.float64))
            assert _rel_err(_to_host(name, got), ref) < TOL[dtype], (n, m, lam)


@needs_gpu
@pytest.mark.parametrize("n", [16, 64, 256])
def test_gpu_large_m(backend, n):
    name, lib = backend
    rng = np.random.default_rng(n)
    m = 10**6 if n <= 64 else 200_000
    x = _knots(rng, n)
    s = letcc.SplineSmoother(x, rng.uniform(-1, 1, n), lam=1e-4)
    y = rng.standard_normal((n, m)).astype(np.float32)
    got = _to_host(name, s(_to_device(name, lib, y)))
    assert _rel_err(got, s(y.astype(np.float64))) < TOL[np.float32]


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_every_launch_configuration_agrees(dtype):
    torch = _backend_module("torch")
    rng = np.random.default_rng(5)
    for n in (3, 40, 300):
        x = _knots(rng, n)
        s = letcc.SplineSmoother(x, rng.uniform(-1.1, 1.1, 21), lam=1e-3)
        y = rng.standard_normal((n, 4099)).astype(dtype)
        ref = s(y.astype(np.float64))
        yd = torch.from_numpy(y).cuda()
        for store, tile, depth in [(1, 32, 1), (1, 64, 64), (1, 256, 8), (2, 32, 32), (2, 64, 3), (2, 256, 64)]:
            got = cuda_dispatch.apply_plan_gpu(s, yd, store=store, tile=tile, depth=depth)
            assert _rel_err(got.cpu().numpy(), ref) < TOL[dtype], (n, store, tile, depth)


@needs_gpu
def test_gpu_poisoned_output_is_fully_written(backend):
    name, lib = backend
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64):
        for n, m in ((7, 1), (64, 3001), (300, 777)):
            s = letcc.SplineSmoother(_knots(rng, n), rng.uniform(-1, 1, 9), lam=1e-3)
            y = rng.standard_normal((n, m)).astype(dtype)
            out = _to_device(name, lib, np.full((9, m), np.nan, dtype=dtype))
            res = s(_to_device(name, lib, y), out=out)
            assert res is out
            assert _rel_err(_to_host(name, out), s(y.astype(np.float64))) < TOL[dtype]


@needs_gpu
def test_gpu_runs_on_the_callers_torch_stream():
    torch = _backend_module("torch")
    rng = np.random.default_rng(4)
    n, m = 64, 1 << 18
    s = letcc.SplineSmoother(_knots(rng, n), rng.uniform(-1, 1, 50), lam=1e-3)
    host = rng.standard_normal((n, m)).astype(np.float32)
    src = torch.from_numpy(host).cuda()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = torch.full_like(src, float("nan"))
        torch.cuda._sleep(200_000_000)  # if the kernel ran on another stream, it would read the NaNs
        y.copy_(src)
        out = s(y)
        # and everything enqueued after it on this stream sees the finished result
        total = out.double().sum()
    stream.synchronize()
    ref = s(host.astype(np.float64))
    assert _rel_err(out.cpu().numpy(), ref) < TOL[np.float32]
    assert abs(total.item() - ref.sum()) <= 1e-5 * np.abs(ref).sum()


@needs_gpu
def test_gpu_runs_on_the_callers_cupy_stream():
    cupy = _backend_module("cupy")
    rng = np.random.default_rng(6)
    n, m = 32, 1 << 18
    s = letcc.SplineSmoother(_knots(rng, n), rng.uniform(-1, 1, 20), lam=1e-3)
    host = rng.standard_normal((n, m))
    with cupy.cuda.Stream(non_blocking=True) as stream:
        big = cupy.random.standard_normal((4096, 4096))
        for _ in range(4):
            big = big @ big / 64.0  # keeps the stream busy before y is written
        y = cupy.asarray(host)
        out = s(y)
    stream.synchronize()
    assert _rel_err(out.get(), s(host)) < TOL[np.float64]


@needs_gpu
def test_gpu_shapes_kinds_and_conversions(backend):
    name, lib = backend
    rng = np.random.default_rng(8)
    s = letcc.SplineSmoother(_knots(rng, 10), rng.uniform(-1, 1, 6), lam=1e-2)
    y = rng.standard_normal((10, 3, 5, 7)).astype(np.float32)
    got = s(_to_device(name, lib, y))
    assert tuple(got.shape) == (6, 3, 5, 7) and _is_kind(name, got)
    assert _rel_err(_to_host(name, got), s(y.astype(np.float64))) < TOL[np.float32]
    # a non-contiguous view
    wide = rng.standard_normal((10, 40))
    view = _to_device(name, lib, wide)[:, ::2]
    assert _rel_err(_to_host(name, s(view)), s(wide[:, ::2].copy())) < TOL[np.float64]
    # integers become float64
    ints = rng.integers(-5, 5, (10, 4)).astype(np.int32)
    got = s(_to_device(name, lib, ints))
    assert str(got.dtype).endswith("float64")
    assert _rel_err(_to_host(name, got), s(ints.astype(np.float64))) < TOL[np.float64]
    # no columns
    empty = s(_to_device(name, lib, np.zeros((10, 0), dtype=np.float32)))
    assert tuple(empty.shape) == (6, 0)


@needs_gpu
def test_gpu_nan_stays_in_its_column(backend):
    name, lib = backend
    rng = np.random.default_rng(9)
    s = letcc.SplineSmoother(_knots(rng, 30), rng.uniform(-1, 1, 8), lam=1e-3)
    y = rng.standard_normal((30, 100))
    y[3, 42] = np.nan
    got = _to_host(name, s(_to_device(name, lib, y)))
    assert np.isnan(got[:, 42]).all() and np.isfinite(np.delete(got, 42, axis=1)).all()


@needs_gpu
def test_gpu_bad_inputs_raise(backend):
    name, lib = backend
    s = letcc.SplineSmoother(np.linspace(0, 1, 5), [0.2, 0.7])
    y = _to_device(name, lib, np.ones((5, 3), dtype=np.float32))
    half = y.half() if name == "torch" else y.astype(np.float16)
    with pytest.raises(TypeError, match="float32 or float64"):
        s(half)
    with pytest.raises(ValueError, match="rows along the knot axis"):
        s(_to_device(name, lib, np.ones((4, 3), dtype=np.float32)))
    with pytest.raises(TypeError, match="dtype"):
        s(y, out=_to_device(name, lib, np.ones((2, 3), dtype=np.float64)))
    with pytest.raises(ValueError, match="shape"):
        s(y, out=_to_device(name, lib, np.ones((3, 3), dtype=np.float32)))
    with pytest.raises(TypeError, match="out must be a"):
        s(y, out=np.ones((2, 3), dtype=np.float32))


@needs_gpu
def test_gpu_plan_is_uploaded_once_per_device(backend):
    name, lib = backend
    s = letcc.SplineSmoother(np.linspace(0, 1, 6), [0.1, 0.9])
    s(_to_device(name, lib, np.ones((6, 2))))
    plans = dict(s._gpu_plan)
    s(_to_device(name, lib, np.ones((6, 5))))
    assert s._gpu_plan == plans and len(plans) == 1


@needs_gpu
def test_gpu_second_device():
    torch = _backend_module("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    rng = np.random.default_rng(10)
    s = letcc.SplineSmoother(_knots(rng, 12), rng.uniform(-1, 1, 5), lam=1e-3)
    y = rng.standard_normal((12, 300))
    got = s(torch.from_numpy(y).to("cuda:1"))
    assert got.device == torch.device("cuda:1")
    assert _rel_err(got.cpu().numpy(), s(y)) < TOL[np.float64]


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_letcc_encode_decode_match_cpu(backend, dtype):
    name, lib = backend
    rng = np.random.default_rng(12)
    K, N = 8, 20
    code = letcc.LeTCC(K, N, lam_enc=1e-4, lam_dec=1e-3)
    X = rng.standard_normal((K, 3, 4, 5)).astype(dtype)
    coded = code.encode(_to_device(name, lib, X))
    assert _is_kind(name, coded) and tuple(coded.shape) == (N, 3, 4, 5)
    ref_coded = code.encode(X.astype(np.float64))
    assert _rel_err(_to_host(name, coded), ref_coded) < TOL[dtype]
    available = rng.permutation(N)[:13]
    Y = rng.standard_normal((13, 10)).astype(dtype)
    est = code.decode(_to_device(name, lib, Y), available)
    assert _is_kind(name, est) and tuple(est.shape) == (K, 10)
    assert _rel_err(_to_host(name, est), code.decode(Y.astype(np.float64), available)) < TOL[dtype]


@needs_gpu
@pytest.mark.parametrize("nu", [1, 2])
def test_gpu_derivative_plans_match_cpu(backend, nu):
    name, lib = backend
    rng = np.random.default_rng(40 + nu)
    x = _knots(rng, 33)
    at = rng.uniform(-1.2, 1.2, 21)
    s = letcc.SplineSmoother(x, at, lam=1e-3, nu=nu)
    y = rng.standard_normal((33, 500))
    got = _to_host(name, s(_to_device(name, lib, y)))
    assert _rel_err(got, s(y)) < TOL[np.float64]


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_smoothing_spline_stays_on_device_and_matches_cpu(backend, dtype):
    name, lib = backend
    rng = np.random.default_rng(77)
    x = _knots(rng, 20)
    y = rng.standard_normal((4, 20, 6)).astype(dtype)  # knots along axis 1
    xq = rng.uniform(-1.1, 1.1, (3, 5))
    cpu = letcc.SmoothingSpline(x, y.astype(np.float64), lam=1e-3, axis=1)
    gpu = letcc.SmoothingSpline(x, _to_device(name, lib, y), lam=1e-3, axis=1)
    for nu in (0, 1, 2):
        got = gpu(xq, nu=nu)
        assert _is_kind(name, got)
        assert tuple(got.shape) == (3, 5, 4, 6)
        assert _rel_err(_to_host(name, got), cpu(xq, nu=nu)) < TOL[dtype]
    assert _rel_err(_to_host(name, gpu.fitted), cpu.fitted) < TOL[dtype]
    assert _rel_err(_to_host(name, gpu.second_derivatives), cpu.second_derivatives) < TOL[dtype]
    gcv_gpu = letcc.SmoothingSpline(x, _to_device(name, lib, y), lam=None, axis=1)
    gcv_cpu = letcc.SmoothingSpline(x, y.astype(np.float64), lam=None, axis=1)
    assert gcv_gpu.lam == pytest.approx(gcv_cpu.lam, rel=1e-3 if dtype == np.float32 else 1e-9)
