"""The `devices` argument: which device each worker's model runs on."""
from __future__ import annotations

import re
import sys

__all__ = ["resolve_devices"]

_DEVICE = re.compile(r"^(cpu|cuda|mps|xpu)(:\d+)?$")


def _cuda_count() -> int:
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F401  (only to count devices; workers import it anyway)
        except ImportError:
            return 0
        torch = sys.modules["torch"]
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_devices(devices, n_workers: int) -> list[str]:
    """None -> "cpu" for every worker; "cuda" -> round-robin over the visible GPUs;
    any other device string -> that device for every worker; a list -> one entry
    per worker (length N), each entry a device string."""
    if devices is None:
        return ["cpu"] * n_workers
    if isinstance(devices, str):
        if devices == "cuda":
            count = _cuda_count()
            if count == 0:
                raise ValueError("devices='cuda' but no CUDA device is visible")
            return [f"cuda:{i % count}" for i in range(n_workers)]
        devices = [devices] * n_workers
    try:
        devices = list(devices)
    except TypeError:
        raise TypeError(f"devices must be None, a device string or a list of them, got {devices!r}") from None
    if len(devices) != n_workers:
        raise ValueError(f"devices lists {len(devices)} devices but the code has N = {n_workers} workers")
    for d in devices:
        if not isinstance(d, str) or not _DEVICE.match(d):
            raise ValueError(f"devices entry {d!r} is not a device string like 'cpu' or 'cuda:0'")
    return devices
