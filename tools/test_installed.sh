#!/usr/bin/env bash
# Run letcc's test suite against the letcc installed in the current Python environment, from
# outside the source tree: tests/ and the pytest configuration are copied to a temporary
# folder, so `import letcc` can only find the installed package (a wheel), never python/letcc.
# Tests whose optional dependencies (extras) are not installed skip; tests that need the
# source tree (bench/, csrc/) skip too.
#
#   tools/test_installed.sh [PROJECT_DIR] [pytest arguments...]
#
# cibuildwheel's test-command calls it ({project} as PROJECT_DIR); tools/check_wheel.sh too.
set -euo pipefail
project="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
shift || true
python="${PYTHON:-python}"
run_dir="$(mktemp -d "${TMPDIR:-/tmp}/letcc-installed-tests.XXXXXX")"
trap 'rm -rf "$run_dir"' EXIT
cp -r "$project/tests" "$run_dir/tests"
cp "$project/README.md" "$run_dir/"          # tests/test_readme_examples.py runs its examples
find "$run_dir/tests" -name __pycache__ -prune -exec rm -rf {} +
# the [tool.pytest.ini_options] table (strict markers, letcc's warnings as errors, markers) and
# nothing else of pyproject.toml
"$python" - "$project/pyproject.toml" "$run_dir/pyproject.toml" <<'PY'
import sys
src, dst = sys.argv[1:]
lines, keep = [], False
for line in open(src):
    if line.startswith("["):
        keep = line.strip() == "[tool.pytest.ini_options]"
    if keep:
        lines.append(line)
if not lines:
    sys.exit(f"{src}: no [tool.pytest.ini_options] table")
open(dst, "w").writelines(lines)
PY
cd "$run_dir"
"$python" - <<'PY'
import pathlib, sys
import letcc, letcc._core
here = pathlib.Path.cwd().resolve()
print(f"letcc {letcc.__version__} from {pathlib.Path(letcc.__file__).parent} (core {pathlib.Path(letcc._core.__file__).name}), "
      f"kernels {letcc.kernel_isa()}, python {sys.version.split()[0]}")
if (pathlib.Path(letcc.__file__).resolve().parents[2] / "csrc").is_dir():
    sys.exit("letcc is imported from a source checkout, not an installed package")
PY
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
# the wheels are built with LETCC_CUDA=OFF: tests/test_cuda.py then expects no CUDA module
export LETCC_CUDA="${LETCC_CUDA:-OFF}"
exec "$python" -m pytest -q -p no:cacheprovider -rs "$@"
