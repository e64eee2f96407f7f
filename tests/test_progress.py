"""Progress bars only on terminals; one summary line per stage in logs."""
import io
import os
import subprocess
import sys

import pytest

from letcc.experiments._progress import progress_bar, progress_enabled

# the quick LeNet-5 recipe of tests/test_cli.py (~2 s of training)
QUICK_RECIPE = "epochs=2,train_limit=1024,test_limit=200"


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_default_is_on_only_for_a_terminal(monkeypatch):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert progress_enabled(None, _Tty()) is True
    assert progress_enabled(None, io.StringIO()) is False
    assert progress_enabled(True, io.StringIO()) is True       # --progress forces it
    assert progress_enabled(False, _Tty()) is False            # --no-progress too
    closed = io.StringIO()
    closed.close()
    assert progress_enabled(None, closed) is False


def test_a_disabled_bar_draws_nothing_and_passes_the_iterable_through(capsys):
    bar = progress_bar(range(3), progress=False, desc="x")
    assert list(bar) == [0, 1, 2]
    bar.update(1)
    bar.set_postfix(a=1)
    bar.close()
    assert capsys.readouterr() == ("", "")


def test_a_forced_bar_draws_on_stderr(capsys):
    pytest.importorskip("tqdm")
    for _ in progress_bar(range(3), progress=True, desc="x", mininterval=0):
        pass
    err = capsys.readouterr().err
    assert "\r" in err


def _demo(tmp_path, cache, *flags):
    """`letcc demo` (tiny) with stdout and stderr going to files, as in a job log."""
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    env = dict(os.environ, LETCC_CACHE_DIR=str(cache), LETCC_DATA_DIR=str(tmp_path / "data"))
    env.pop("LETCC_DEBUG", None)
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.run([sys.executable, "-m", "letcc.cli", "demo", "--K", "2", "--N", "5", "--S", "1",
                               "--rounds", "3", "--groups", "2", "--train-recipe", QUICK_RECIPE, "--threads", "1",
                               "--out", str(tmp_path / "res"), *flags],
                              stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, timeout=600, env=env)
    # bytes: reading text would turn every "\r" into "\n" (universal newlines)
    return proc.returncode, out.read_bytes().decode(), err.read_bytes().decode()


@pytest.mark.slow
def test_demo_into_a_log_file_has_no_redraws_but_one_line_per_stage(tmp_path):
    for module in ("torch", "mlxtend", "tqdm", "matplotlib"):      # the experiments extra
        pytest.importorskip(module)
    cache = tmp_path / "cache"                     # private: the model is trained in this run
    code, out, err = _demo(tmp_path, cache)
    assert code == 0, err
    assert "\r" not in out and "\r" not in err     # no progress-bar redraws in a log
    log = out + err
    assert "letcc: training lenet5" in log and "letcc: trained lenet5 in" in log
    for stage in ("LeTCC: 3 rounds of 4 images on 5 workers in", "BACC: 3 rounds of 4 images on 5 workers in",
                  "uncoded: 3 rounds of 4 images on 2 workers in"):
        assert sum(stage in line for line in log.splitlines()) == 1, (stage, log)

    # --progress forces the bars even into a file (same cache: no retraining)
    code, out, err = _demo(tmp_path, cache, "--progress")
    assert code == 0, err
    assert "\r" in err and "\r" not in out
    assert "letcc: trained" not in err + out


def test_sweep_logs_one_line_per_straggler_count():
    from letcc.experiments.evaluation import compare
    import numpy as np

    rng = np.random.default_rng(0)
    X = rng.random((16, 1, 2, 2)).astype(np.float32)

    def f(x):
        z = np.tanh(x.reshape(len(x), -1)) @ np.ones((4, 3))
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    lines = []
    compare(f, X, None, 4, 8, [1, 2], lam="auto", n_draws=3, progress=False, log=lines.append, desc="toy")
    assert len(lines) == 2 and lines[0].startswith("toy: S=1: 4 rounds x 3 straggler sets decoded in")
