"""README.md's Python examples, run as written, so README cannot drift from the code.

Every fenced ```python block is one test, in README order. Blocks share one
namespace (a later block may use an earlier one's names, as a reader would);
a block guarded by ``if __name__ == "__main__":`` is a script (its workers are
processes) and runs as one, in a fresh interpreter; a block that uses
``device="cuda"`` runs only where letcc's CUDA route works. Where a block
trains a model, LeNet-5's recipe is made tiny first (a few seconds of training
on a private cache), and nothing may reach the network: sockets other than
Unix ones are refused.
"""
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)

# for scripts that train: LeNet-5's recipes made tiny, and no network
SCRIPT_PRELUDE = """\
import dataclasses, socket
from letcc.experiments import models as _models
_spec = _models.get_spec("lenet5")
for _ds, _cfg in list(_spec.train_recipes.items()):
    _spec.train_recipes[_ds] = dataclasses.replace(_cfg, epochs=1, train_limit=256, test_limit=100)
_connect = socket.socket.connect
def _no_network(self, address, *a, **k):
    if self.family != socket.AF_UNIX:
        raise OSError(f"README examples must not use the network (tried {address!r})")
    return _connect(self, address, *a, **k)
socket.socket.connect = _no_network
"""


def _kind(block: str) -> str:
    if '__name__ == "__main__"' in block:
        return "script"
    if 'device="cuda"' in block:
        return "gpu"
    return "inline"


def test_readme_has_its_examples():
    kinds = [_kind(b) for b in BLOCKS]
    assert kinds.count("inline") >= 2 and "script" in kinds and "gpu" in kinds, kinds


@pytest.fixture(scope="module")
def namespace():
    return {"__name__": "readme"}


@pytest.fixture
def no_network(monkeypatch):
    connect = socket.socket.connect

    def refuse(self, address, *a, **k):
        if self.family != socket.AF_UNIX:
            raise OSError(f"README examples must not use the network (tried {address!r})")
        return connect(self, address, *a, **k)

    monkeypatch.setattr(socket.socket, "connect", refuse)


def _params():
    out = []
    for i, block in enumerate(BLOCKS):
        marks = [pytest.mark.gpu] if _kind(block) == "gpu" else []
        if _kind(block) == "script":
            marks.append(pytest.mark.slow)
        first = block.strip().splitlines()[0][:40]
        out.append(pytest.param(i, block, marks=marks, id=f"{i}-{_kind(block)}-{first}"))
    return out


@pytest.mark.parametrize("index, block", _params())
def test_readme_block_runs(index, block, namespace, no_network, tmp_path):
    kind = _kind(block)
    if kind == "gpu":
        import letcc

        torch = pytest.importorskip("torch")
        if not (letcc.cuda_available() and torch.cuda.is_available()):
            pytest.skip("needs a CUDA device and letcc's CUDA module")
    if kind == "script":
        for module in ("torch", "mlxtend"):     # the serving examples train LeNet-5 (the experiments extra)
            pytest.importorskip(module)
        script = tmp_path / "readme_example.py"
        script.write_text(SCRIPT_PRELUDE + "\n" + textwrap.dedent(block))
        env = dict(os.environ, LETCC_CACHE_DIR=str(tmp_path / "cache"), LETCC_DATA_DIR=str(tmp_path / "data"))
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600, env=env, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert "RoundInfo" in proc.stdout or "answered" in proc.stdout, proc.stdout[-2000:]
        return
    exec(compile(block, f"README.md python block {index}", "exec"), namespace)
