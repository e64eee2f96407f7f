"""The small micro-benchmark scripts of bench/ end to end on a small size:
each runs, prints, and writes its table (into tmp_path, so the repository's
results are not overwritten) with the machine it ran on."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"

NUMBER = r"-?[\d.]+"
SCRIPTS = [
    # script, arguments, a row the table must hold
    ("round_waiter.py", ["--sizes", "4"], rf"\|\s*4\s*\|\s*2\s*\|\s*{NUMBER}\s*\|\s*{NUMBER}\s*\|\s*{NUMBER}x\s*\|"),
    ("new_set_decode.py", ["--sizes", "4"],
     rf"\|\s*\(4, 8\), 6 answers\s*\|\s*{NUMBER}\s*\|\s*{NUMBER}\s*\|\s*{NUMBER}\s*\|"),
    ("idle_gap.py", ["--turns", "1", "--runs", "20", "--requests", "10"],
     rf"\|\s*2\s*\|\s*{NUMBER}\s*\|\s*{NUMBER}x\s*\|\s*{NUMBER}\s*\|\s*{NUMBER}\s*\|\s*{NUMBER}\s*\|"),
]


@pytest.mark.parametrize("script, args, row", SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_bench_script_writes_its_table(tmp_path, script, args, row):
    if not (BENCH / script).exists():
        pytest.skip("needs the source checkout's bench/")
    res = subprocess.run([sys.executable, str(BENCH / script), *args, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / script.replace(".py", ".md")).read_text()
    assert re.search(row, text), text
    assert "- cpu: " in text
