"""Optional dependencies: which extra installs each, and the one-line message
a user gets when one is missing.

``import letcc`` needs only numpy. Everything heavier (PyTorch, torchvision,
timm, mlxtend, tqdm, matplotlib, Ray, CuPy) belongs to an extra of
``pyproject.toml``; a command or import that needs one raises
:class:`MissingExtra` (a ``ModuleNotFoundError``, so ``except ImportError``
still catches it) whose message names the extra::

    letcc.experiments.factory needs PyTorch: pip install "letcc[experiments]"

The CLI prints that one line (with the command's name) and exits with status 1.
Imports nothing from letcc.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict, Optional, Tuple

__all__ = ["EXTRAS", "MissingExtra", "missing_extra", "require", "optional_module_of"]

# top-level module -> (what users call it, the extra that installs it)
EXTRAS: Dict[str, Tuple[str, str]] = {
    "torch": ("PyTorch", "experiments"),
    "torchvision": ("torchvision", "experiments"),
    "timm": ("timm", "experiments"),
    "mlxtend": ("mlxtend", "experiments"),
    "tqdm": ("tqdm", "experiments"),
    "matplotlib": ("matplotlib", "experiments"),
    "foolbox": ("foolbox", "experiments"),
    "PIL": ("Pillow", "experiments"),
    "ray": ("Ray", "ray"),
    "cupy": ("CuPy", "cuda"),
}


class MissingExtra(ModuleNotFoundError):
    """An optional dependency is not installed; the message says which extra installs it."""


def optional_module_of(exc: BaseException) -> Optional[str]:
    """The top-level optional module an ImportError is about (a key of EXTRAS), or None."""
    if not isinstance(exc, ImportError):
        return None
    name = (getattr(exc, "name", None) or "").split(".")[0]
    return name if name in EXTRAS else None


def message(module: str, what: str) -> str:
    """'<what> needs <Name>: pip install "letcc[<extra>]"'."""
    top = module.split(".")[0]
    pretty, extra = EXTRAS.get(top, (top, "experiments"))
    return f'{what} needs {pretty}: pip install "letcc[{extra}]"'


def missing_extra(module: str, what: str) -> MissingExtra:
    """The MissingExtra to raise when ``module`` is absent and ``what`` needs it."""
    return MissingExtra(message(module, what), name=module.split(".")[0])


def require(module: str, what: str) -> ModuleType:
    """``importlib.import_module(module)``, or MissingExtra naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if optional_module_of(exc) is None:
            raise
        raise missing_extra(optional_module_of(exc) or module, what) from exc
