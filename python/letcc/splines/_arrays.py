"""Array kinds in and out of the spline layer.

numpy arrays pass straight through. CPU torch tensors are viewed as numpy
arrays without a copy (they share memory), and results are handed back as
torch tensors that share the result's memory. GPU arrays are routed to the
CUDA core by the callers (see letcc.splines.cuda_dispatch).
"""
from __future__ import annotations

from typing import Any, Callable, Tuple

import numpy as np


def is_torch_tensor(obj: Any) -> bool:
    mod = type(obj).__module__
    return mod.startswith("torch") and type(obj).__name__ in ("Tensor", "Parameter")


def is_gpu_array(obj: Any) -> bool:
    """A torch CUDA tensor or any object exposing __cuda_array_interface__."""
    if is_torch_tensor(obj):
        return obj.device.type == "cuda"
    return hasattr(obj, "__cuda_array_interface__")


def to_numpy(obj: Any) -> Tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """(a numpy view of obj, a function that wraps a numpy result back into obj's kind)."""
    if isinstance(obj, np.ndarray):
        return obj, _identity
    if is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise TypeError(f"this call takes CPU arrays; got a torch tensor on {obj.device}")
        import torch

        t = obj.detach()
        if t.dtype in (torch.float16, torch.bfloat16):
            raise TypeError(f"y must hold float32 or float64 numbers, got torch dtype {t.dtype}")
        return t.numpy(), _to_torch
    return np.asarray(obj), _identity


def _identity(a):
    return a


def _to_torch(a: np.ndarray):
    import torch

    return torch.from_numpy(a)
