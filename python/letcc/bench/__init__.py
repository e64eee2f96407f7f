"""Master-side benchmarks shipped with letcc: run them on your own machine with ``letcc bench``.

    letcc bench                      every master-side benchmark (tables printed, files in ./letcc-results)
    letcc bench spline --out DIR     one of them, its table written to DIR
    letcc bench --quick              tiny sizes: a seconds-long check that they work here
    letcc bench --list               what there is, and where it lives

Each benchmark is also a module with a ``main(argv)``: ``python -m letcc.bench.spline
--help``. Benchmarks that are not shipped yet live in the source tree's ``bench/``
(``SOURCE_ONLY``); ``letcc bench`` runs them from a git checkout and says so elsewhere.

This module imports nothing heavy (``letcc bench --help`` and ``--list`` answer at once);
the benchmarks import numpy, letcc's layers and their optional comparisons (scipy, csaps,
threadpoolctl) when they run.
"""
from __future__ import annotations

from typing import Dict, NamedTuple

__all__ = ["Benchmark", "PACKAGED", "SOURCE_ONLY", "DEFAULT"]


class Benchmark(NamedTuple):
    target: str        # module (packaged) or script file name in the source tree's bench/
    summary: str


# name -> module of this package; each takes --out DIR and --quick
PACKAGED: Dict[str, Benchmark] = {
    "spline": Benchmark("letcc.bench.spline",
                        "the spline plan against scipy, csaps, numpy GEMM and the memory-copy floor"),
    "decode": Benchmark("letcc.bench.decode_overhead",
                        "the per-call cost of a decode (cached and new answering sets) against numpy's matmul"),
    "runtime": Benchmark("letcc.bench.runtime_overhead",
                         "per-round overhead and CPU of the local and Ray backends against a threads floor"),
    "serving_overhead": Benchmark("letcc.bench.serving_overhead",
                         "CodedServer's master CPU per request (full and partial rounds), phase by phase"),
}
# name -> script in the source tree's bench/ (a benchmark not installed with the package yet;
# none today: the mechanism stays for the next one)
SOURCE_ONLY: Dict[str, Benchmark] = {}
# what `letcc bench` runs when given no names (the master-side overhead benchmarks; serving is
# run by name: it starts 16 worker processes per row)
DEFAULT = ("runtime", "spline", "decode")
