"""letcc.bench.serving_overhead: the phase timer's exclusive accounting (a
scripted clock), and one --quick run end to end (the tables written; no torch)."""
from __future__ import annotations

import re
import subprocess
import sys
import threading

import pytest

from letcc.bench import serving_overhead as so


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_phase_timer_charges_each_phase_its_own_time_only(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(so.time, "thread_time", clock)

    class Work:
        def outer(self):
            clock.t += 5.0
            self.inner()
            clock.t += 2.0
            return "outer"

        def inner(self):
            clock.t += 3.0
            self.leaf()
            return "inner"

        def leaf(self):
            clock.t += 0.5

    w = Work()
    timer = so.PhaseTimer()
    timer.ident = threading.get_ident()
    timer.wrap(w, "outer", "a")
    timer.wrap(w, "inner", "b")
    timer.wrap(Work, "leaf", "a")            # a class attribute: bound as a method
    assert w.outer() == "outer" and w.inner() == "inner"
    assert timer.cpu == {"a": 7.0 + 0.5 + 0.5, "b": 3.0 + 3.0} and timer.calls == {"a": 3, "b": 2}
    other = []                               # another thread's calls pass through, uncounted
    t = threading.Thread(target=lambda: other.append(w.outer()))
    t.start()
    t.join()
    assert other == ["outer"] and timer.calls == {"a": 3, "b": 2}
    timer.undo()
    assert "outer" not in w.__dict__ and "inner" not in w.__dict__
    assert Work.__dict__["leaf"].__name__ == "leaf"


def test_unknown_scheme_or_load_is_named():
    with pytest.raises(ValueError, match="unknown scheme 'bacc'"):
        so.schemes(["letcc", "bacc"])
    with pytest.raises(ValueError, match="unknown load 'full'"):
        so.main(["--loads", "full", "--quick"])


def test_quick_run_writes_the_tables_without_torch(tmp_path):
    code = ("import sys; from letcc.bench.serving_overhead import main; "
            f"main(['--quick', '--schemes', 'letcc,hedged', '--loads', 'full-B1,partial-1', '--out', {str(tmp_path)!r}]); "
            "assert 'torch' not in sys.modules, 'the shipped bench imported torch'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    text = (tmp_path / "serving_overhead.md").read_text()
    for part in ("# Serving: master CPU per request", "- cpu: ", "**`--quick` run**", "## Master CPU",
                 "## Dispatcher breakdown", "batching/padding", "loops/round"):
        assert part in text, part
    for scheme in ("letcc", "hedged"):
        for load in ("full-B1", "partial-1"):     # a row in each table
            assert len(re.findall(rf"^\| {scheme} +\| {load} +\|", text, re.M)) == 2, (scheme, load)
    assert "master CPU" in res.stdout and "loop iterations per round" in res.stdout
