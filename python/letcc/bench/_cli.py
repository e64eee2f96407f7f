"""``letcc bench``: the command's options and its handler (``letcc.cli`` delegates here).

The packaged benchmarks (``letcc.bench.PACKAGED``) run from any install as
``python -m letcc.bench.<module> --out DIR [--quick]`` with this interpreter, in a
process of their own (thread pools, BLAS state and memory of one benchmark do not
leak into the next). Benchmarks not shipped yet (``SOURCE_ONLY``) and the research
scripts run from the source tree's ``bench/`` when there is one, as before.

Nothing heavy is imported here: the benchmarks import numpy and the rest when they run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

from letcc._cli_error import CLIError
from letcc.bench import DEFAULT, PACKAGED, SOURCE_ONLY

# module stem -> name (``letcc bench decode_overhead`` is ``letcc bench decode``)
_ALIASES = {**{b.target.rsplit(".", 1)[1]: n for n, b in PACKAGED.items()},
            **{b.target[:-3]: n for n, b in SOURCE_ONLY.items()}}


def _cli_error(message: str) -> Exception:
    return CLIError(message)


def find_bench_dir(explicit: Optional[os.PathLike] = None) -> Optional[Path]:
    """The source tree's ``bench/`` folder (benchmarks not shipped yet, research scripts):
    ``--bench-dir``, ``$LETCC_BENCH_DIR``, or found next to a source checkout (an editable
    install, where ``letcc/__init__.py`` is ``<repo>/python/letcc``) or in the current
    folder. None when none was named and none is found (letcc installed from a wheel);
    a named folder that does not exist is an error."""
    named = explicit if explicit is not None else os.environ.get("LETCC_BENCH_DIR") or None
    if named is not None:
        p = Path(named)
        if not p.is_dir():
            how = "--bench-dir" if explicit is not None else "LETCC_BENCH_DIR"
            raise _cli_error(f"{how} {p}: no such folder (the source tree's bench/ of a git checkout of letcc)")
        return p.resolve()
    import letcc

    for c in (Path(letcc.__file__).resolve().parents[2] / "bench", Path.cwd() / "bench"):
        if (c / "_report.py").is_file():      # letcc's bench/, not any folder called bench
            return c.resolve()
    return None


def _research(bench: Optional[Path]) -> List[str]:
    """Scripts in bench/ that are neither shipped benchmarks (nor their shims) nor SOURCE_ONLY."""
    if bench is None:
        return []
    known = set(_ALIASES)
    return sorted(p.stem for p in bench.glob("*.py") if not p.name.startswith("_") and p.stem not in known)


def add_arguments(p: argparse.ArgumentParser) -> None:
    names = ", ".join(f"{n} ({b.summary})" for n, b in {**SOURCE_ONLY, **PACKAGED}.items())
    p.add_argument("names", nargs="*",
                   help=f"benchmarks to run (default: {' '.join(DEFAULT)}): {names}; from a source checkout, "
                        "any script name in bench/ works too")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes: each benchmark runs in seconds, to check that it works on this machine "
                        "(its numbers say little); benchmarks without a quick size are skipped")
    p.add_argument("--list", action="store_true", help="list the benchmarks, where each lives, and exit")
    p.add_argument("--bench-dir", type=Path, default=None,
                   help="the source tree's bench/ folder, for benchmarks not shipped with the package "
                        "(default: $LETCC_BENCH_DIR, or found next to a source checkout)")
    p.add_argument("--bench-args", nargs=argparse.REMAINDER, default=[],
                   help="everything after this is passed to each benchmark")


def _listing(bench: Optional[Path], out_dir: Path) -> tuple:
    data = {
        "out": str(out_dir),
        "bench_dir": None if bench is None else str(bench),
        "default": list(DEFAULT),
        "packaged": {n: {"module": b.target, "summary": b.summary} for n, b in PACKAGED.items()},
        "source_only": {n: {"script": b.target, "summary": b.summary,
                            "path": None if bench is None or not (bench / b.target).is_file()
                            else str(bench / b.target)} for n, b in SOURCE_ONLY.items()},
        "research": _research(bench),
    }
    w = max(len(n) for n in [*PACKAGED, *SOURCE_ONLY])
    lines = [f"shipped with letcc (run from any install; tables written to --out, here {out_dir}):"]
    lines += [f"  {n:<{w}}  {b.summary} ({b.target})" for n, b in PACKAGED.items()]
    where = f"found: {bench}" if bench is not None else "not found here: letcc is not run from a git checkout"
    lines.append(f"in the source tree only (bench/ of a git checkout; {where}):")
    for n, b in SOURCE_ONLY.items():
        lines.append(f"  {n:<{w}}  {b.summary} (bench/{b.target}"
                     + ("" if data["source_only"][n]["path"] else ", missing") + ")")
    if data["research"]:
        lines.append(f"research scripts in {bench}: {', '.join(data['research'])}")
    lines.append(f"default: {' '.join(DEFAULT)}")
    return data, "\n".join(lines)


def _snapshot(folder: Path) -> dict:
    """{file: mtime_ns} of the results files in folder (to tell which ones a run wrote)."""
    return {p: p.stat().st_mtime_ns for p in folder.glob("*.md")} if folder.is_dir() else {}


def run(args, out) -> int:
    """The handler: ``out`` is letcc.cli's _Output (log / result)."""
    bench = find_bench_dir(args.bench_dir)
    out_dir = Path(args.out).expanduser().resolve()
    if args.list:
        data, human = _listing(bench, out_dir)
        out.result(data, human)
        return 0
    explicit = bool(args.names)
    jobs, skipped = [], []
    for raw in (args.names or list(DEFAULT)):
        name = raw[:-3] if raw.endswith(".py") else raw
        name = _ALIASES.get(name, name)
        if name in PACKAGED:
            cmd = [sys.executable, "-m", PACKAGED[name].target, "--out", str(out_dir)]
            jobs.append({"name": name, "kind": "packaged", "command": cmd + (["--quick"] if args.quick else []),
                         "cwd": None})
            continue
        where = None if bench is None else bench / (SOURCE_ONLY[name].target if name in SOURCE_ONLY
                                                     else f"{name}.py")
        if where is None or not where.is_file():
            if name in SOURCE_ONLY:
                reason = (f"{name} is in the source tree only (bench/{SOURCE_ONLY[name].target}), not shipped "
                          f"with the package yet, and no bench/ folder was found: run it from a git checkout "
                          f"of letcc, or pass --bench-dir")
                if explicit:
                    raise _cli_error(reason)
                skipped.append({"name": name, "reason": reason})
                continue
            known = [*PACKAGED, *SOURCE_ONLY, *_research(bench)]
            raise _cli_error(f"benchmark {raw!r}: no such benchmark"
                             + (f" ({where} does not exist)" if where is not None else "")
                             + f"; available: {', '.join(known)} (letcc bench --list)")
        if args.quick:
            reason = f"{name} (bench/{where.name}) has no --quick size yet"
            if explicit:
                raise _cli_error(reason + ": run it without --quick")
            skipped.append({"name": name, "reason": reason})
            continue
        jobs.append({"name": name, "kind": "source", "command": [sys.executable, str(where)], "cwd": bench.parent})
    for s in skipped:
        out.log(f"== {s['name']}: skipped: {s['reason']}")
    runs = []
    status = 0
    for job in jobs:
        cmd = job["command"] + list(args.bench_args)
        note = "" if job["kind"] == "packaged" else \
            f"  (from the source tree: writes its table to {job['cwd'] / 'bench' / 'results'}, not --out)"
        out.log(f"== {job['name']}: {' '.join(cmd)}{note}")
        before = _snapshot(out_dir)
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=job["cwd"], stdout=subprocess.PIPE if args.json else None, text=True)
        run = {"name": job["name"], "kind": job["kind"], "command": cmd, "returncode": proc.returncode,
               "seconds": round(time.time() - t0, 2)}
        if job["kind"] == "packaged":
            after = _snapshot(out_dir)
            run["files"] = sorted(str(p) for p, t in after.items() if before.get(p) != t)
        if args.json:
            run["stdout"] = proc.stdout
        runs.append(run)
        if proc.returncode != 0:
            print(f"letcc bench: benchmark {job['name']!r} failed with exit status {proc.returncode}",
                  file=sys.stderr)
            status = 1
    out.result({"out": str(out_dir), "bench_dir": None if bench is None else str(bench), "runs": runs,
                "skipped": skipped})
    return status
