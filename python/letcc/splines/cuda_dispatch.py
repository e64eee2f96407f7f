"""GPU route of SplineSmoother: torch CUDA tensors and CuPy arrays go to the
CUDA core (letcc._cuda) without leaving the device.

The plan (banded factors, interval indices, cubic coefficients) is built on
the host in float64 and uploaded once per device; it is cached on the
smoother (``smoother._gpu_plan``, a dict device index -> plan), so a code's
encoder and its cached decoders upload nothing after their first call.

Arrays are passed by pointer, without copies, when they are C-contiguous
float32/float64 (others are made so with the array's own library first:
integers become float64, float16/bfloat16 are refused as on the CPU). The
kernel runs on the caller's current stream (``torch.cuda.current_stream()`` or
CuPy's current stream) and the result is allocated with the input's own
library on the input's device: torch in, torch out; CuPy in, CuPy out. Other
objects exposing ``__cuda_array_interface__`` (Numba, ...) are viewed through
CuPy when it is installed, and a CuPy array comes back. Autograd does not
flow through the call (the input is detached).

Importing this module never needs a GPU, a driver or the compiled module:
``cuda_available()`` says whether the GPU route works, and
``cuda_unavailable_reason()`` why not.
"""
from __future__ import annotations

import functools
import math
import os
from typing import Any, Optional, Tuple

from letcc.splines._arrays import is_torch_tensor
from letcc.splines._validation import check_rows

__all__ = ["cuda_available", "cuda_unavailable_reason", "apply_plan_gpu", "gpu_info"]


@functools.lru_cache(maxsize=1)
def _status() -> Tuple[Optional[Any], str]:
    """(the letcc._cuda module or None, "" or why the GPU route is unavailable)."""
    try:
        from letcc import _cuda
    except ImportError as exc:
        return None, (
            "letcc was built without its CUDA module (letcc._cuda): no CUDA compiler was found when it "
            "was installed, or it was built with LETCC_CUDA=OFF; reinstall with nvcc on PATH "
            f"(LETCC_CUDA=ON makes a missing compiler an error) [{exc}]"
        )
    count, error = _cuda.probe()
    if count > 0:
        return _cuda, ""
    if error:
        if _cuda.driver_version() == 0:
            return _cuda, f"no NVIDIA driver found on this machine ({error})"
        return _cuda, f"the CUDA runtime reports no usable device: {error}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    return _cuda, f"no CUDA device is visible{hint}"


def cuda_available() -> bool:
    """True when letcc was built with CUDA and a CUDA device is usable."""
    module, reason = _status()
    return module is not None and not reason


def cuda_unavailable_reason() -> str:
    """Why ``cuda_available()`` is False ("" when it is True)."""
    return _status()[1]


def gpu_info() -> dict:
    """Build and device facts, for reports: compiled architectures, CUDA
    runtime and driver versions (0 = none), device count, reason if unavailable."""
    module, reason = _status()
    if module is None:
        return {"built": False, "reason": reason}
    count, _ = module.probe()
    return {
        "built": True,
        "compiled_archs": module.compiled_archs,
        "runtime_version": module.runtime_version(),
        "driver_version": module.driver_version(),
        "device_count": count,
        "reason": reason,
    }


def _module():
    module, reason = _status()
    if reason:
        raise RuntimeError(f"this call needs the GPU route of letcc, which is unavailable: {reason}")
    return module


def device_plan(smoother, device: int):
    """The smoother's plan on CUDA device `device`, uploaded on first use."""
    plans = smoother._gpu_plan
    if plans is None:
        plans = smoother._gpu_plan = {}
    plan = plans.get(device)
    if plan is None:
        plan = _module().Plan(smoother.x, smoother.w, smoother.lam, smoother.at, device, smoother.nu)
        plans[device] = plan
    return plan


def apply_plan_gpu(smoother, y, out=None, *, store: int = 0, tile: int = 0, depth: int = 0):
    """``smoother(y, out)`` for a GPU array y (torch CUDA tensor, CuPy array or
    any ``__cuda_array_interface__`` object). Returns an array of y's kind with
    shape (q, *y.shape[1:]); with `out` (same kind, device, dtype and shape),
    writes into it and returns it. store / tile / depth override the launch
    configuration (benchmarks and tests; 0 = automatic)."""
    _module()
    tuning = (store, tile, depth)
    if is_torch_tensor(y):
        return _apply_torch(smoother, y, out, tuning)
    if type(y).__module__.startswith("cupy"):
        return _apply_cupy(smoother, y, out, tuning)
    try:
        import cupy
    except ImportError:
        raise TypeError(
            f"GPU arrays of type {type(y).__name__} need CuPy to be viewed without a copy "
            '(pip install "letcc[cuda]"); or pass a torch CUDA tensor or a CuPy array'
        ) from None
    return _apply_cupy(smoother, cupy.asarray(y), out, tuning)


def _check_out(out, expected_shape, dtype, device_desc, out_device_desc, out_dtype) -> None:
    if tuple(out.shape) != tuple(expected_shape):
        raise ValueError(f"out has shape {tuple(out.shape)} but the result has shape {tuple(expected_shape)}")
    if out_dtype != dtype:
        raise TypeError(f"out has dtype {out_dtype} but the result has dtype {dtype}")
    if out_device_desc != device_desc:
        raise ValueError(f"out is on {out_device_desc} but y is on {device_desc}")


def _overlaps(a0: int, a_bytes: int, b0: int, b_bytes: int) -> bool:
    return a0 < b0 + b_bytes and b0 < a0 + a_bytes


def _apply_torch(smoother, y, out, tuning):
    import torch

    t = y.detach()
    if t.dtype not in (torch.float32, torch.float64):
        if t.dtype.is_floating_point or t.dtype.is_complex:
            raise TypeError(f"y must hold float32 or float64 numbers, got torch dtype {t.dtype}")
        t = t.to(torch.float64)
    check_rows(tuple(t.shape), smoother.n)
    t = t.contiguous()
    shape = (smoother.q,) + tuple(t.shape[1:])
    m = math.prod(t.shape[1:])
    direct = None
    if out is not None:
        if not is_torch_tensor(out):
            raise TypeError(f"out must be a torch tensor like y, got {type(out).__name__}")
        _check_out(out, shape, t.dtype, str(t.device), str(out.device), out.dtype)
        o = out.detach()
        usable = o.is_contiguous() and not _overlaps(
            o.data_ptr(), o.numel() * o.element_size(), t.data_ptr(), t.numel() * t.element_size()
        )
        direct = o if usable else None
    res = direct if direct is not None else torch.empty(shape, dtype=t.dtype, device=t.device)
    if m > 0:
        device = t.device.index if t.device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(t.device).cuda_stream
        plan = device_plan(smoother, device)
        plan.apply(t.data_ptr(), res.data_ptr(), m, t.dtype == torch.float64, stream, *tuning)
    if out is None:
        return res
    if direct is None:
        out.detach().copy_(res)
    return out


def _apply_cupy(smoother, y, out, tuning):
    import cupy
    import numpy as np

    with cupy.cuda.Device(y.device.id):
        a = y
        dt = np.dtype(a.dtype)
        if dt not in (np.float32, np.float64):
            if dt.kind not in "iub":
                raise TypeError(f"y must hold float32 or float64 numbers, got dtype {dt}")
            a = a.astype(np.float64)
        check_rows(a.shape, smoother.n)
        a = cupy.ascontiguousarray(a)
        shape = (smoother.q,) + tuple(a.shape[1:])
        m = math.prod(a.shape[1:])
        direct = None
        if out is not None:
            if not type(out).__module__.startswith("cupy"):
                raise TypeError(f"out must be a CuPy array like y, got {type(out).__name__}")
            _check_out(out, shape, a.dtype, f"cuda:{a.device.id}", f"cuda:{out.device.id}", out.dtype)
            usable = out.flags.c_contiguous and not _overlaps(out.data.ptr, out.nbytes, a.data.ptr, a.nbytes)
            direct = out if usable else None
        res = direct if direct is not None else cupy.empty(shape, dtype=a.dtype)
        if m > 0:
            stream = cupy.cuda.get_current_stream().ptr
            plan = device_plan(smoother, a.device.id)
            plan.apply(a.data.ptr, res.data.ptr, m, a.dtype == np.float64, stream, *tuning)
        if out is None:
            return res
        if direct is None:
            out[...] = res
        return out
