"""The runtime overhead benchmark, moved into the package: ``letcc.bench.runtime_overhead``
(``letcc bench runtime`` runs it from any install, its table written to ``--out``).

This script runs the same benchmark from a source checkout with its results file
going to bench/results/ (as before the move), e.g.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/runtime_overhead.py --runs 3
"""
from pathlib import Path

from letcc.bench.runtime_overhead import main

if __name__ == "__main__":
    main(default_out=Path(__file__).resolve().parent / "results")
