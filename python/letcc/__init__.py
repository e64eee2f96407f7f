"""letcc: learning-theoretic coded computing for straggler-resilient inference.

Layers (imports point down this list only): splines -> codes -> stragglers
-> runtime -> experiments/cli. See DESIGN notes in the repository.
"""
from letcc._version import __version__
from letcc import _core
from letcc.splines import SmoothingSpline, SplineSmoother, select_lam_gcv


def set_num_threads(k: int) -> None:
    """Threads used by the CPU spline core (k <= 0: all cores, the default)."""
    _core.set_num_threads(int(k))


def get_num_threads() -> int:
    """Threads the CPU spline core uses."""
    return _core.get_num_threads()


def kernel_isa() -> str:
    """Instruction set the CPU kernels run with on this machine (avx512, avx2, baseline)."""
    return _core.kernel_isa()


__all__ = [
    "__version__",
    "SmoothingSpline",
    "SplineSmoother",
    "select_lam_gcv",
    "set_num_threads",
    "get_num_threads",
    "kernel_isa",
]
