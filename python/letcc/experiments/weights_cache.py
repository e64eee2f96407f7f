"""Weights that letcc trained itself, cached on disk with a manifest and verified on load.

Layout under the cache directory (``$LETCC_CACHE_DIR``, else ``$XDG_CACHE_HOME/letcc``,
else ``~/.cache/letcc``)::

    weights/<model>.pt      torch state dict (saved atomically)
    weights/<model>.json    manifest: what produced the file and its sha256
    weights/<model>.lock    taken while a process trains/writes, so two masters never race

The manifest records the model name, a ``code_version`` (hash of the model definition's
source and the training configuration, computed by the caller), a ``data_fingerprint``
(hash of the training data), the letcc/torch versions, the file's sha256, and free-form
results (test accuracy, training time). A file is accepted only when the manifest exists,
the sha256 of the bytes on disk matches it, and the code version (and, when the caller
can compute it, the data fingerprint) equals the expected one. Anything else raises
:class:`StaleWeightsError` (mismatch) or :class:`CorruptWeightsError` (unreadable or
wrong bytes), and the caller retrains. The letcc version is recorded, not compared: the
code version already hashes the code the weights depend on, so a release that leaves a
model untouched keeps its cache.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

MANIFEST_FORMAT = 1
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class StaleWeightsError(RuntimeError):
    """Cached weights exist but were produced by other code or other data (or are missing)."""


class CorruptWeightsError(RuntimeError):
    """Cached weights or their manifest cannot be read or do not match their recorded sha256."""


def cache_dir(override: Optional[os.PathLike] = None) -> Path:
    """The letcc cache directory (not created here)."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get("LETCC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "letcc"


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"invalid model name for the weights cache: {name!r}")
    return name


def weights_paths(name: str, cache: Optional[os.PathLike] = None) -> Tuple[Path, Path, Path]:
    """(weights file, manifest file, lock file) for ``name`` under the cache directory."""
    d = cache_dir(cache) / "weights"
    _check_name(name)
    return d / f"{name}.pt", d / f"{name}.json", d / f"{name}.lock"


def sha256_file(path: os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    # write to a temp file in the same directory, then rename: readers never see half a file
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def save_weights(name: str, state_dict: Dict[str, Any], manifest: Dict[str, Any],
                 cache: Optional[os.PathLike] = None) -> Dict[str, Any]:
    """Write ``state_dict`` and its manifest; returns the manifest as written (with sha256).

    ``manifest`` must hold at least ``code_version`` and ``data_fingerprint``.
    """
    import torch

    for key in ("code_version", "data_fingerprint"):
        if not isinstance(manifest.get(key), str):
            raise ValueError(f"manifest needs a string {key!r}, got {manifest.get(key)!r}")
    wpath, mpath, _ = weights_paths(name, cache)
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, buf)
    data = buf.getvalue()
    from letcc._version import __version__ as letcc_version

    full = dict(manifest)
    full.update(
        format=MANIFEST_FORMAT,
        model=name,
        file=wpath.name,
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        letcc_version=letcc_version,
        torch_version=torch.__version__,
        saved_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    # weights first, manifest last: a crash in between leaves a manifest whose sha256
    # does not match the new file (or an old manifest), which load_weights rejects
    _atomic_write_bytes(wpath, data)
    _atomic_write_bytes(mpath, (json.dumps(full, indent=2, sort_keys=True) + "\n").encode())
    return full


def read_manifest(name: str, cache: Optional[os.PathLike] = None) -> Dict[str, Any]:
    """The manifest of ``name``; StaleWeightsError if absent, CorruptWeightsError if unreadable."""
    _, mpath, _ = weights_paths(name, cache)
    if not mpath.exists():
        raise StaleWeightsError(f"no cached weights for {name!r} (no manifest at {mpath})")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise CorruptWeightsError(f"manifest {mpath} is unreadable: {exc}") from exc
    if not isinstance(manifest, dict):
        raise CorruptWeightsError(f"manifest {mpath} is not a JSON object")
    return manifest


def load_weights(name: str, code_version: str, data_fingerprint: Optional[str] = None,
                 cache: Optional[os.PathLike] = None, expected_sha256: Optional[str] = None,
                 ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Load and verify ``name``'s cached weights; returns (state_dict, manifest).

    ``data_fingerprint=None`` skips the data check (worker processes, which do not load
    the training data; the master checked it in ``ensure_weights``). ``expected_sha256``
    pins the exact file the master verified.
    """
    import torch

    wpath, _, _ = weights_paths(name, cache)
    manifest = read_manifest(name, cache)
    if manifest.get("format") != MANIFEST_FORMAT:
        raise StaleWeightsError(
            f"cached {name!r} has manifest format {manifest.get('format')!r}, expected {MANIFEST_FORMAT}")
    if manifest.get("code_version") != code_version:
        raise StaleWeightsError(
            f"cached {name!r} was trained by other code: code_version "
            f"{manifest.get('code_version')!r} != {code_version!r}")
    if data_fingerprint is not None and manifest.get("data_fingerprint") != data_fingerprint:
        raise StaleWeightsError(
            f"cached {name!r} was trained on other data: data_fingerprint "
            f"{manifest.get('data_fingerprint')!r} != {data_fingerprint!r}")
    if expected_sha256 is not None and manifest.get("sha256") != expected_sha256:
        raise StaleWeightsError(
            f"cached {name!r} changed since it was verified: sha256 {manifest.get('sha256')!r} "
            f"!= pinned {expected_sha256!r}")
    try:
        data = wpath.read_bytes()
    except OSError as exc:
        raise CorruptWeightsError(f"weights file {wpath} is unreadable: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest.get("sha256"):
        raise CorruptWeightsError(
            f"weights file {wpath} has sha256 {digest}, manifest says {manifest.get('sha256')!r}")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for bad pickles
        raise CorruptWeightsError(f"weights file {wpath} cannot be loaded: {exc}") from exc
    if not isinstance(state, dict):
        raise CorruptWeightsError(f"weights file {wpath} does not hold a state dict")
    return state, manifest


@contextlib.contextmanager
def training_lock(name: str, cache: Optional[os.PathLike] = None) -> Iterator[None]:
    """Exclusive lock on ``name``'s cache entry (POSIX flock; a no-op elsewhere)."""
    _, _, lpath = weights_paths(name, cache)
    lpath.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here; concurrent trainers just both write
        yield
        return
    with open(lpath, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def hash_json(obj: Any) -> str:
    """sha256 of a canonical JSON rendering (sorted keys), for configs in code versions."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
