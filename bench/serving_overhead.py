"""The serving master-overhead benchmark, shipped in the package: ``letcc.bench.serving_overhead``
(``letcc bench serving`` runs it from any install, its table written to ``--out``).

This script runs the same benchmark from a source checkout with its results file
going to bench/results/, e.g.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/serving_overhead.py
"""
from pathlib import Path

from letcc.bench.serving_overhead import main

if __name__ == "__main__":
    main(default_out=Path(__file__).resolve().parent / "results")
