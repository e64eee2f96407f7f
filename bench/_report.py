"""The research scripts' import of letcc's benchmark helpers (``from _report import ...``).

The helpers have one home, ``letcc.bench._report`` (shipped with the package, used by
``letcc bench``); this module re-exports them for the scripts in this folder, with one
difference: ``write_report`` writes ``bench/results/<name>.md`` (next to this file) unless
told another folder, and reports the git state of this checkout.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from letcc.bench import _report as _impl
from letcc.bench._report import *  # noqa: F401,F403
from letcc.bench._report import (  # noqa: F401  (the names the scripts use, explicitly)
    BLAS_ENV_VARS, best_call, best_time, blas_summary, command_line, machine_kind, markdown_table,
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def environment(source_root: Optional[Path] = None):
    return _impl.environment(RESULTS_DIR.parent.parent if source_root is None else source_root)


def write_report(name: str, title: str, sections: Sequence[str], notes: str = "",
                 extra_info: Sequence[tuple] = (), *, out_dir=None, source_root: Optional[Path] = None) -> Path:
    """letcc.bench._report.write_report, into bench/results/ by default."""
    return _impl.write_report(name, title, sections, notes, extra_info,
                              out_dir=RESULTS_DIR if out_dir is None else out_dir,
                              source_root=RESULTS_DIR.parent.parent if source_root is None else source_root)
