"""Progress bars on terminals only.

``progress=None`` (every experiment's default) means: a bar only when stderr,
where tqdm draws, is a terminal. Written to a file (CI, a job log, ``nohup``)
a bar would be hundreds of carriage-return redraws; there the stages log one
summary line each instead. ``True`` / ``False`` force it either way (the CLI's
``--progress`` / ``--no-progress``).
"""
from __future__ import annotations

import sys
from typing import Any, Optional

__all__ = ["progress_enabled", "progress_bar"]


def progress_enabled(progress: Optional[bool] = None, stream: Any = None) -> bool:
    """``progress`` if given, else whether ``stream`` (default: sys.stderr) is a terminal."""
    if progress is not None:
        return bool(progress)
    if "ipykernel" in sys.modules:      # a notebook: tqdm.auto draws a widget, no redraws
        return True
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _NoBar:
    """What progress_bar returns when bars are off: accepts tqdm's calls, draws nothing."""

    def __init__(self, iterable: Any = None):
        self._iterable = iterable

    def __iter__(self):
        return iter(self._iterable if self._iterable is not None else ())

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None


def progress_bar(iterable: Any = None, *, progress: Optional[bool] = None, **kwargs: Any) -> Any:
    """A tqdm bar on stderr when :func:`progress_enabled` (tqdm imported only
    then: without it a forced bar says which extra installs it), else a
    no-op with the same methods. ``leave=False`` unless given."""
    if not progress_enabled(progress):
        return _NoBar(iterable)
    from letcc._extras import require

    tqdm = require("tqdm.auto", "a progress bar").tqdm
    kwargs.setdefault("leave", False)
    kwargs.setdefault("file", sys.stderr)
    return tqdm(iterable, **kwargs)
