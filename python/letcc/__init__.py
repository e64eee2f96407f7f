"""letcc: learning-theoretic coded computing for straggler-resilient inference.

Layers, each depending only on the ones above it (imports point down):

1. ``letcc.splines``    smoothing splines over many columns (compiled core)
2. ``letcc.codes``      LeTCC, BACC and the baselines, and the lam rules with
                        the protocol a lam policy follows
                        (``letcc.codes.lam_defaults``); ``letcc.nodes``,
                        ``letcc.metrics``
3. ``letcc.stragglers`` who is late and by how much, ``letcc.adversaries`` who
                        answers wrongly and how; above the straggler
                        models: ``letcc.evaluate`` (the one offline
                        evaluator: coded rounds decoded from many straggler
                        sets), ``letcc.policy`` (LamPolicy: lam rules per
                        (K, N), saved and loaded) and ``letcc.tune`` (the one
                        home of calibration: the grid search and
                        LamPolicy.calibrate)
4. ``letcc.runtime``    coded inference on worker processes or Ray
5. ``letcc.experiments``, ``letcc.cli``  models, data, sweeps, plots

``letcc._checks`` (integer, real-number and choice arguments) sits below
every layer and imports nothing from letcc.

Only layer 1 is imported eagerly; the rest load on first attribute access so
that ``import letcc`` stays cheap (worker processes import it too).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, List

from letcc import _core
from letcc._version import __version__
from letcc.splines import SmoothingSpline, SplineSmoother, select_lam_gcv

if TYPE_CHECKING:   # what the lazy names below are, for type checkers (py.typed)
    from letcc.codes import BACC, LeTCC, Replication, Uncoded
    from letcc.policy import LamPolicy
    from letcc.runtime import CodedInference
    from letcc.serving import CodedServer
    from letcc.splines.cuda_dispatch import cuda_available
    from letcc.tune import tune

# public name -> module that defines it (loaded on first access)
_LAZY_ATTRS = {
    "LeTCC": "letcc.codes",
    "BACC": "letcc.codes",
    "Uncoded": "letcc.codes",
    "Replication": "letcc.codes",
    "tune": "letcc.tune",
    "LamPolicy": "letcc.policy",
    "CodedInference": "letcc.runtime",
    "CodedServer": "letcc.serving",
    "cuda_available": "letcc.splines.cuda_dispatch",
}
_LAZY_MODULES = {
    "splines", "codes", "nodes", "metrics", "stragglers", "adversaries", "evaluate", "policy", "runtime",
    "experiments", "cli",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_ATTRS:
        value = getattr(importlib.import_module(_LAZY_ATTRS[name]), name)
        globals()[name] = value
        return value
    if name in _LAZY_MODULES:
        return importlib.import_module(f"letcc.{name}")
    raise AttributeError(f"module 'letcc' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRS) | _LAZY_MODULES)


def set_num_threads(k: int) -> None:
    """Threads used by the CPU spline core (k <= 0: all cores, the default)."""
    _core.set_num_threads(int(k))


def get_num_threads() -> int:
    """Threads the CPU spline core uses."""
    return _core.get_num_threads()


def kernel_isa() -> str:
    """Instruction set the compiler-vectorised CPU kernels (dense maps, spline
    fits, the generic plan kernel) run with: ``"avx512"``, ``"avx2"`` (with
    FMA) or ``"baseline"`` on x86-64, ``"native"`` elsewhere. The CPU's best
    unless :func:`set_kernel_isa` chose another."""
    return _core.kernel_isa()


def set_kernel_isa(name: str) -> None:
    """Run the compiler-vectorised CPU kernels with another of their builds:
    ``"auto"`` (the default: the CPU's best), ``"baseline"``, ``"avx2"`` or
    ``"avx512"`` (ValueError where the CPU lacks it). A forced ``"baseline"``
    also makes the ``"auto"`` plan kernel the generic one. Every build computes
    the same operators up to rounding; this exists to compare and test them."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    _core.set_kernel_isa(name)


def plan_kernel() -> str:
    """The kernel banded SplineSmoother plans run: ``"avx512"`` (hand-written
    AVX-512F/VL intrinsics, the default on CPUs that have those features),
    ``"avx2"`` (hand-written AVX2/FMA intrinsics, the default on other AVX2
    CPUs) or ``"generic-<isa>"`` (the compiler-vectorised kernel, built per
    instruction set). The default follows :func:`set_kernel_isa`: a forced
    ``"avx2"`` build runs the AVX2 kernel, ``"baseline"`` the generic one."""
    return _core.plan_kernel()


def set_plan_kernel(name: str) -> None:
    """Force the banded plan kernel: ``"auto"`` (the default), ``"generic"``,
    ``"avx2"`` (ValueError on a CPU without AVX2 and FMA) or ``"avx512"``
    (ValueError naming the first missing feature of avx512f, avx512vl, avx2,
    fma). All compute in float64 (the AVX2 and AVX-512 ones bit for bit the
    same on float64 data; on float32 data the AVX-512 one adds each value
    query's two input terms in float32, within the float32 bound of 1e-6 of
    ``max |y|`` but not the same bits); this exists to compare and test them."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    _core.set_plan_kernel(name)


def plan_kernel_runs(name: str) -> bool:
    """Whether this CPU and build run the banded plan kernel ``name`` (what
    :func:`set_plan_kernel` accepts): probed by forcing it, then back to ``"auto"``."""
    try:
        set_plan_kernel(name)
        return True
    except ValueError:
        return False
    finally:
        _core.set_plan_kernel("auto")


__all__ = [
    "__version__",
    "SmoothingSpline",
    "SplineSmoother",
    "select_lam_gcv",
    "set_num_threads",
    "get_num_threads",
    "kernel_isa",
    "set_kernel_isa",
    "plan_kernel",
    "set_plan_kernel",
    "plan_kernel_runs",
    *_LAZY_ATTRS,
]
