"""Shared helpers for letcc's benchmarks: timing, markdown tables, and a results
file that says where and how the numbers were taken.

One home for these helpers: the benchmarks shipped in ``letcc.bench`` import them
from here, and the research scripts of the source tree's ``bench/`` import them
through ``bench/_report.py``, which re-exports this module (writing to
``bench/results/`` by default)::

    from letcc.bench._report import best_time, markdown_table, write_report

    t = best_time(lambda: f(y))                       # seconds per call
    table = markdown_table(["n", "time (ms)"], [[16, f"{t * 1e3:.3f}"]])
    print(table)
    write_report("mybench", "My benchmark", [table], notes="what the columns mean", out_dir="results")

``write_report`` writes ``<out_dir>/<name>.md``: the title, the exact command
(interpreter, script or module, arguments, and the BLAS-related environment
variables as they were), the machine (CPU model, cores, load average, memory),
the BLAS libraries and kernels threadpoolctl reports, numpy / scipy / letcc
versions, letcc's kernel ISA and thread count, and where letcc came from (the
git commit of a source checkout, with any modified tracked files, or the
installed version), then the given sections.

Imports only the standard library at import time (``letcc bench --help`` and
``--list`` stay quick); threadpoolctl is optional.

Run benchmarks with ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`` on the
dev machine (those variables slow numpy's BLAS); the report records whether
they were set.
"""
from __future__ import annotations

import datetime
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence, Union

# where write_report puts results when not told: ./letcc-results (the letcc command line's default),
# never inside the installed package
DEFAULT_OUT_DIR = Path("letcc-results")
BLAS_ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                 "MKL_NUM_THREADS")


def best_time(fn: Callable[[], object], *, min_run: float = 0.05, repeats: int = 5,
              max_calls: int = 1_000_000) -> float:
    """Seconds per call of ``fn()``: the best of ``repeats`` runs, each calling
    fn as many times as it takes to last at least ``min_run`` seconds (after
    one untimed warm-up call). The minimum is the least noisy estimate on a
    shared machine; it excludes, by design, time lost to other processes."""
    fn()
    calls = 1
    while True:  # how many calls make one run last min_run
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_run or calls >= max_calls:
            break
        calls = min(max_calls, max(calls * 2, int(calls * min_run / max(elapsed, 1e-9) * 1.2)))
    best = elapsed / calls
    for _ in range(repeats - 1):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def best_call(fn: Callable[[], object], calls: int = 3) -> float:
    """Seconds of the fastest of ``calls`` back-to-back calls of ``fn()``, each
    timed alone, after one untimed call: a call that follows other work (a
    core left idle, caches holding something else) runs slower than the calls
    of a loop that makes them back to back, and is not timed."""
    fn()
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]],
                   align: str | None = None) -> str:
    """A GitHub markdown table; ``align`` is one character per column
    ('l' or 'r'; default: first column left, the rest right)."""
    rows = [[str(c) for c in r] for r in rows]
    headers = [str(h) for h in headers]
    if align is None:
        align = "l" + "r" * (len(headers) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells):
        out = []
        for c, w, a in zip(cells, widths, align):
            out.append(c.ljust(w) if a == "l" else c.rjust(w))
        return "| " + " | ".join(out) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else (":" + "-" * (w + 1))
                         for w, a in zip(widths, align)) + "|"
    return "\n".join([line(headers), sep] + [line(r) for r in rows])


def command_line() -> str:
    """The command as run: interpreter, script path (or ``-m module`` for a benchmark of
    this package run with ``python -m``), arguments."""
    import shlex

    argv = list(sys.argv)
    if argv and argv[0]:
        p = Path(argv[0])
        here = Path(__file__).resolve().parent
        try:
            if p.suffix == ".py" and p.resolve().parent == here:
                argv[0:1] = ["-m", f"{__package__}.{p.stem}"]
        except OSError:
            pass
    return " ".join(shlex.quote(a) for a in [sys.executable] + argv)


def environment(source_root: Optional[Path] = None) -> list[tuple[str, str]]:
    """(label, value) pairs describing the machine and the software. ``source_root``:
    the git checkout whose state is reported (default: the one letcc was installed
    from in editable mode, if any)."""
    info: list[tuple[str, str]] = []
    info.append(("date", datetime.datetime.now().astimezone().isoformat(timespec="seconds")))
    info.append(("command", f"`{command_line()}` (cwd `{os.getcwd()}`)"))
    env = ", ".join(f"{k}={os.environ[k]}" if k in os.environ else f"{k} unset" for k in BLAS_ENV_VARS)
    info.append(("BLAS environment", env))
    info.append(("source", _git_state(source_root)))
    info.append(("cpu", _cpu_model()))
    cores = os.cpu_count()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = cores
    info.append(("cores", f"{usable} usable of {cores}"))
    try:
        info.append(("load average (1, 5, 15 min) at write", ", ".join(f"{v:.2f}" for v in os.getloadavg())))
    except OSError:
        pass
    mem = _meminfo_gib()
    if mem:
        info.append(("memory", mem))
    info.append(("python", f"{platform.python_version()} ({platform.platform()})"))
    for mod in ("numpy", "scipy", "torch", "csaps"):
        if mod in sys.modules:
            info.append((mod, getattr(sys.modules[mod], "__version__", "?")))
    info.extend(_blas_info())
    if "letcc" in sys.modules:
        import letcc

        info.append(("letcc", f"{letcc.__version__}, kernels {letcc.kernel_isa()}, plan kernel "
                              f"{letcc.plan_kernel()}, {letcc.get_num_threads()} threads"))
    return info


def write_report(name: str, title: str, sections: Sequence[str], notes: str = "",
                 extra_info: Sequence[tuple[str, str]] = (), *,
                 out_dir: Union[str, "os.PathLike[str]", None] = None,
                 source_root: Optional[Path] = None) -> Path:
    """Write ``<out_dir>/<name>.md`` (title, environment, notes, sections), print
    where, and return its path. ``sections`` are markdown strings (tables,
    paragraphs); ``out_dir`` defaults to ``./letcc-results`` and is created."""
    out = Path(DEFAULT_OUT_DIR if out_dir is None else out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.md"
    env_lines = [f"- {k}: {v}" for k, v in list(environment(source_root)) + list(extra_info)]
    parts = [f"# {title}", "", *env_lines, ""]
    if notes:
        parts += [notes.strip(), ""]
    for s in sections:
        parts += [s.rstrip(), ""]
    path.write_text("\n".join(parts))
    print(f"wrote {path}")
    return path


def _source_checkout() -> Optional[Path]:
    """The git checkout letcc runs from (an editable install: ``<repo>/python/letcc``), or None."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / ".git").exists() and (root / "csrc").is_dir() else None


def _git_state(root: Optional[Path] = None) -> str:
    """HEAD commit of the source checkout and whether tracked files differ from it
    (the installed compiled core is whatever was last built from the tree); for an
    installed letcc, its version."""
    import subprocess

    if root is None:
        root = _source_checkout()
    if root is None:
        from letcc._version import __version__

        return f"installed letcc {__version__} (not a source checkout)"
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.split("\n")
        dirty = [line[3:] for line in dirty if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"
    if not head:
        return "unknown (not a git checkout)"
    return f"commit {head}" + (f", modified: {', '.join(dirty)}" if dirty else ", clean")


def machine_kind() -> str:
    """A file-name tag for this kind of machine: the widest hand-written plan
    kernel letcc runs here and the CPU model, e.g. ``avx512-amd-epyc``, so that
    results from different machines go to different files."""
    import re

    import letcc

    model = re.sub(r"\((r|tm)\)", "", _cpu_model().lower())
    model = re.sub(r"\b(processor|cpu|with .*|@.*|\d+-core)\b", " ", model)
    tag = re.sub(r"[^a-z0-9]+", "-", model).strip("-")[:40].strip("-") or "unknown-cpu"
    return f"{letcc.plan_kernel()}-{tag}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _meminfo_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        total = int(fields["MemTotal"].split()[0]) / 2**20
        avail = int(fields["MemAvailable"].split()[0]) / 2**20
        return f"{total:.1f} GiB total, {avail:.1f} GiB available"
    except (OSError, KeyError, ValueError):
        return ""


def blas_summary() -> str:
    """One line for a results header: each BLAS threadpoolctl sees, with its
    kernel and thread count."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    infos = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, {i.get('num_threads')} threads)"
             for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(infos) or "no BLAS found by threadpoolctl"


def _blas_info() -> list[tuple[str, str]]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [("BLAS", "threadpoolctl not installed")]
    out = []
    for lib in threadpool_info():
        if lib.get("user_api") != "blas":
            continue
        out.append((
            f"BLAS ({Path(lib.get('filepath', '?')).name})",
            f"{lib.get('internal_api')} {lib.get('version')}, kernel {lib.get('architecture', '?')}, "
            f"{lib.get('num_threads')} threads",
        ))
    return out or [("BLAS", "none loaded")]
