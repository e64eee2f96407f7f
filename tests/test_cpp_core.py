"""The C++ core's own tests (csrc/test/test_core.cpp: Reinsch fit, plans,
dense operator, trace and GCV against a dense float64 solve; the round
counter), configured, built and run with CMake in a temporary directory.
Skipped only where CMake or a C++ compiler is missing."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "csrc" / "test"


def _cmake():
    exe = shutil.which("cmake")
    if exe is None:
        try:
            import cmake  # the PyPI package scikit-build-core installs

            exe = str(Path(cmake.CMAKE_BIN_DIR) / "cmake")
        except ImportError:
            return None
    return exe


def _compiler():
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx.split()[0])
    return next((p for p in map(shutil.which, ("c++", "g++", "clang++")) if p), None)


def test_cpp_core(tmp_path):
    cmake = _cmake()
    if cmake is None:
        pytest.skip("cmake is not installed (pip install cmake, or the system package)")
    if _compiler() is None:
        pytest.skip("no C++ compiler found (c++, g++ or clang++ on PATH, or CXX)")
    if not (SOURCE / "CMakeLists.txt").exists():
        pytest.skip(f"{SOURCE} is not in this checkout (an installed package without its sources)")
    build = tmp_path / "build"

    def run(*cmd, timeout):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
        return res.stdout

    run(cmake, "-S", str(SOURCE), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", timeout=300)
    run(cmake, "--build", str(build), "-j2", timeout=600)
    exe = build / ("letcc_core_tests.exe" if os.name == "nt" else "letcc_core_tests")
    if not exe.exists():  # multi-config generators put it under the configuration
        exe = next(build.rglob(exe.name))
    out = run(str(exe), timeout=300)
    assert "checks passed" in out, out
