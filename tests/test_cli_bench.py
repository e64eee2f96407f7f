"""The benchmarks shipped in letcc.bench, run for real on their --quick sizes (seconds)
through `letcc bench`, as from an installed package: no source tree on the path, the
tables printed and written under --out (by default ./letcc-results, never inside the
package). No timing is checked (the numbers of a quick run mean little): the tables'
shape, the written files, and what a missing optional comparison does."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import letcc
from letcc import cli

REPO_BENCH = Path(__file__).resolve().parents[1] / "bench"


def _env():
    env = dict(os.environ)
    for k in ("PYTHONPATH", "LETCC_BENCH_DIR"):
        env.pop(k, None)
    return env


def _letcc(*argv, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "letcc.cli", *map(str, argv)], capture_output=True, text=True,
                          cwd=cwd, env=_env(), timeout=timeout)


def check_spline_report(text):
    for part in ("# Spline plan benchmark", "- cpu: ", "plan kernel ", "- BLAS", "**`--quick` run**",
                 "## Plan call vs alternatives", "| 16 |   1 | float32 |", "| 16 | 100 | float64 |",
                 "## Small-call overhead", "plan(y, out=buf)",
                 "## The target case over time (n = K = 16, m = 1000, float32)", "paired over time (2 samples",
                 "## Dense operator against the banded kernels", "## Against the issue's targets"):
        assert part in text, part


def test_letcc_bench_quick_runs_the_shipped_benchmarks(capsys, monkeypatch, tmp_path):
    """`letcc bench --quick`, as where letcc is installed without a source tree: spline and decode
    and runtime run (in processes of their own)."""
    from letcc.bench import _cli

    monkeypatch.setattr(_cli, "find_bench_dir", lambda explicit=None: None)
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "mine"
    code = cli.main(["bench", "--quick", "--json", "--out", str(out_dir)])
    out, err = capsys.readouterr()
    assert code == 0, err
    res = json.loads(out)
    assert sorted((r["name"], r["kind"], r["returncode"]) for r in res["runs"]) == [
        ("decode", "packaged", 0), ("runtime", "packaged", 0), ("spline", "packaged", 0)]
    assert not res["skipped"]
    runs = {r["name"]: r for r in res["runs"]}
    spline, decode, runtime = runs["spline"], runs["decode"], runs["runtime"]
    assert runtime["files"] == [str(out_dir / "runtime_overhead.md")]
    text = Path(runtime["files"][0]).read_text()
    for part in ("# Runtime overhead per round", "- cpu: ", "**`--quick` run**", "| 16 | virtual | local |",
                 "| 16 | sleep | threads |", "bare pipes round"):
        assert part in text, part
    assert spline["files"] == [str(out_dir / f"spline-{_machine_kind()}.md")]
    assert decode["files"] == [str(out_dir / "decode_overhead.md")]
    # the table is printed, and the same one is written
    assert "| 16 |   1 | float32 |" in spline["stdout"] and f"wrote {spline['files'][0]}" in spline["stdout"]
    check_spline_report(Path(spline["files"][0]).read_text())
    text = Path(decode["files"][0]).read_text()
    assert "# Per-call decode cost" in text and "| (8, 16), 12 answers | 10 |" in text and "--quick" in text
    assert "| (8, 16), 12 answers | 10 |" in decode["stdout"]


def _machine_kind():
    from letcc.bench._report import machine_kind

    return machine_kind()


def test_default_out_is_letcc_results_in_the_current_folder(tmp_path):
    run = _letcc("bench", "decode", "--quick", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "letcc-results" / "decode_overhead.md").is_file()
    assert "| (8, 16), 12 answers | 10 |" in run.stdout
    package = Path(letcc.__file__).resolve().parent
    assert not list(package.rglob("*.md")), "a benchmark wrote inside the installed package"


def test_spline_benchmark_without_its_optional_comparisons(tmp_path):
    """csaps, scipy and threadpoolctl missing: their columns say '-' and the notes say why."""
    code = ("import sys\n"
            "for m in ('csaps', 'scipy', 'threadpoolctl'): sys.modules[m] = None\n"
            "from letcc.bench.spline import main\n"
            f"main(['--quick', '--out', {str(tmp_path)!r}, '--name', 'bare', '--no-crossover'])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=_env(),
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    text = (tmp_path / "bare.md").read_text()
    for name in ("csaps", "scipy", "threadpoolctl"):
        assert f"**Not measured**: {name} is not installed" in text and f"pip install {name}" in text
    row = next(line for line in text.splitlines() if line.startswith("| 16 | 100 | float32 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[12:14] == ["-", "-"] and cells[17:19] == ["-", "-"]   # csaps, scipy and their ratios
    assert "## Dense operator" not in text


def test_bench_help_and_list_answer_without_heavy_imports(tmp_path):
    code = ("import sys\n"
            "from letcc import cli\n"
            "try:\n    cli.main(['bench', '--help'])\nexcept SystemExit:\n    pass\n"
            "cli.main(['bench', '--list'])\n"
            "heavy = [m for m in ('scipy', 'csaps', 'threadpoolctl', 'torch', 'letcc.codes', 'letcc.experiments',\n"
            "                     'letcc.bench.spline', 'letcc.bench.decode_overhead') if m in sys.modules]\n"
            "print('HEAVY', heavy)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=_env(),
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "--quick" in run.stdout and "shipped with letcc" in run.stdout
    assert "HEAVY []" in run.stdout


@pytest.mark.skipif(not (REPO_BENCH / "_report.py").exists(), reason="needs the source checkout's bench/")
def test_source_tree_scripts_still_write_bench_results(tmp_path):
    """bench/spline.py and bench/decode_overhead.py run the shipped benchmarks into bench/results/ (here
    of a copy), and bench/_report.py is the research scripts' window on letcc.bench._report."""
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in ("spline.py", "decode_overhead.py", "_report.py"):
        shutil.copy(REPO_BENCH / name, bench / name)
    for script, args in (("spline.py", ["--ratio-samples", "0", "--no-crossover"]), ("decode_overhead.py", [])):
        run = subprocess.run([sys.executable, str(bench / script), "--quick", "--name", f"t_{script[:-3]}", *args],
                             capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        assert (bench / "results" / f"t_{script[:-3]}.md").is_file()
    sys.path.insert(0, str(bench))
    try:
        import _report
    finally:
        sys.path.pop(0)
        sys.modules.pop("_report", None)
    from letcc.bench import _report as shipped

    assert _report.best_time is shipped.best_time and _report.blas_summary is shipped.blas_summary
    assert _report.RESULTS_DIR == bench / "results"
    path = _report.write_report("t_report", "T", ["| a |"])
    assert path == bench / "results" / "t_report.md"
    assert "- source: unknown (not a git checkout)" in path.read_text()
