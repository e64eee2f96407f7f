"""Ready-to-run models: train-if-needed in the master, load-only in workers.

* :func:`ensure_weights` (master process): makes sure ``name``'s cached weights exist, were
  produced by the current code and data, and are intact; trains them (progress bar) if not.
  Returns the model's provenance ``info``.
* :func:`load_model` (anywhere): builds the model and loads verified cached weights; never
  trains (raises :class:`StaleWeightsError` telling you to call ``ensure_weights`` first).
* :class:`ModelFactory`: a small picklable recipe for worker processes. Calling it returns a
  :class:`LoadedModel`, an eval-mode callable ``f(batch) -> softmax probabilities``
  (the paper's MSE is measured on softmax outputs).

``info`` keys: ``name``, ``weights`` (``"trained-by-letcc"``, ``"pretrained (user-supplied)"``
or ``"random-init"``), ``data`` (dataset it was trained on, or whose input format it takes),
``test_accuracy`` (None when not measured), ``test_images``, ``train_images``,
``train_seconds``, ``paper_model``, ``description``, ``note`` (one human sentence saying how
this differs from the paper's model), plus cache fields (``sha256``, ``code_version``,
``data_fingerprint``) for trained models.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

try:
    import torch
except ImportError as _exc:
    from letcc._extras import missing_extra

    raise missing_extra("torch", "letcc.experiments.factory") from _exc

from letcc.experiments import data as _data
from letcc.experiments import training as _training
from letcc.experiments.models import ModelSpec, get_spec, vit_b_16_user_weights, VIT_B_16_SEED
from letcc.experiments.weights_cache import (
    CorruptWeightsError, StaleWeightsError, cache_dir, hash_json, load_weights, read_manifest,
    save_weights, training_lock, weights_paths,
)

WEIGHTS_TRAINED = "trained-by-letcc"
WEIGHTS_PRETRAINED = "pretrained (user-supplied)"
WEIGHTS_RANDOM = "random-init"


# ---------------------------------------------------------------- versions and data

def _source_of(obj: Any) -> str:
    if isinstance(obj, (dict, list, tuple, str, int, float)):
        return repr(obj)
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):  # no source on disk (frozen/zipped install): fall back to the name
        return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"


def code_version(spec: ModelSpec, dataset: Optional[str], cfg: Optional[_training.TrainConfig]) -> str:
    """Hash of everything the weights depend on besides the data: model and adapter source,
    the training loop's source, the recipe, and the version of the library defining the net."""
    h = hashlib.sha256()
    for obj in spec.source_objects:
        h.update(_source_of(obj).encode())
    if cfg is not None:
        for obj in (_training.TrainConfig, _training.augment_batch, _training.train_model):
            h.update(_source_of(obj).encode())
        h.update(hash_json({"dataset": dataset, "config": cfg.to_dict()}).encode())
    if spec.library:
        import importlib

        h.update(f"{spec.library}=={importlib.import_module(spec.library).__version__}".encode())
    return h.hexdigest()


def training_dataset(name: str, *, root: Optional[os.PathLike] = None) -> str:
    """The dataset letcc trains ``name`` on here: the first of its recipes whose files are present."""
    spec = get_spec(name)
    if not spec.trained_by_letcc:
        raise ValueError(f"model {spec.name!r} is not trained by letcc")
    for ds in spec.train_recipes:
        if _data.is_available(ds, root):
            return ds
    for ds in spec.train_recipes:   # none here: is one of them only missing its reader's package?
        if ds in ("mnist", "fashion-mnist", "cifar10"):   # torchvision's: files absent (checked above)
            continue
        try:
            _data._raw_split(ds, "test", root, False)
        except _data.DatasetNeedsExtra as exc:
            raise _data.DatasetNeedsExtra(exc.missing_module, f"model {spec.name!r} (trained on {ds!r})") from exc
        except (_data.DatasetUnavailable, ValueError):
            pass
    raise _data.DatasetUnavailable(
        f"none of the training datasets of {spec.name!r} is on this machine: {list(spec.train_recipes)}")


def _training_data_fingerprint(dataset: str, cfg: _training.TrainConfig, root) -> str:
    return hashlib.sha256(
        (_data.dataset_fingerprint(dataset, "train", cfg.train_limit, root=root) + "|"
         + _data.dataset_fingerprint(dataset, "test", cfg.test_limit, root=root)).encode()
    ).hexdigest()


# ---------------------------------------------------------------- provenance

def _info_from_manifest(spec: ModelSpec, m: Dict[str, Any]) -> Dict[str, Any]:
    acc = m.get("test_accuracy")
    return {
        "name": spec.name,
        "weights": WEIGHTS_TRAINED,
        "data": m.get("data"),
        "test_accuracy": acc,
        "test_images": m.get("test_images"),
        "train_images": m.get("train_images"),
        "train_seconds": m.get("train_seconds"),
        "train_cpu_seconds": m.get("train_cpu_seconds"),
        "epochs": m.get("epochs"),
        "paper_model": spec.paper_model,
        "description": spec.description,
        "note": (f"trained by letcc on {m.get('train_images')} {m.get('data')} images "
                 f"(test accuracy {100 * acc:.1f}% on {m.get('test_images')} held-out images), "
                 f"not the paper's {spec.paper_model}") if acc is not None else "trained by letcc",
        "sha256": m.get("sha256"),
        "code_version": m.get("code_version"),
        "data_fingerprint": m.get("data_fingerprint"),
        "letcc_version": m.get("letcc_version"),
    }


def _untrained_info(spec: ModelSpec) -> Dict[str, Any]:
    user = vit_b_16_user_weights() if spec.name == "vit_b_16" else None
    base = {"name": spec.name, "data": spec.data_format, "test_accuracy": None, "test_images": None,
            "train_images": None, "train_seconds": None, "paper_model": spec.paper_model,
            "description": spec.description}
    if user is not None:
        base.update(weights=WEIGHTS_PRETRAINED, weights_file=str(user),
                    note=f"ImageNet weights supplied by the user ({user})")
    else:
        base.update(weights=WEIGHTS_RANDOM, weights_file=None, seed=VIT_B_16_SEED,
                    note=(f"RANDOMLY INITIALISED (seed {VIT_B_16_SEED}; no ImageNet weights found, none downloaded): "
                          f"its outputs are meaningful for coding MSE only, not for accuracy"))
    return base


def describe(info: Dict[str, Any]) -> str:
    """One line for reports: model, weight provenance, accuracy."""
    return f"{info['name']} [{info['weights']}]: {info['note']}"


# ---------------------------------------------------------------- master side

def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def ensure_weights(name: str, *, cache: Optional[os.PathLike] = None, root: Optional[os.PathLike] = None,
                   progress: Optional[bool] = None, retrain: bool = False, device: str = "cpu",
                   config: Optional[_training.TrainConfig] = None,
                   num_threads: Optional[int] = None,
                   log: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Make sure ``name``'s weights are cached, current and intact (training them if not); return info.

    Call this in the master before starting workers. ``cache``: cache directory (default
    ``$LETCC_CACHE_DIR`` / ``~/.cache/letcc``); ``root``: data root; ``retrain=True`` forces
    training; ``config`` replaces the registered recipe (quick runs, tests) - it is part of
    the code version, so a later call with the registered recipe retrains; ``num_threads``:
    torch threads while training (None: torch's current setting). Stale or corrupt
    caches are retrained, and ``info["retrained_because"]`` says why (None: cache was good).
    ``progress``: a bar while training (None: only on a terminal); training is announced
    and summarised in one line each through ``log`` (default: stderr) either way.
    """
    spec = get_spec(name)
    if not spec.trained_by_letcc:
        return _untrained_info(spec)
    if config is not None and not isinstance(config, _training.TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    cache = cache_dir(cache)
    dataset = training_dataset(spec.name, root=root)
    cfg = config if config is not None else spec.train_recipes[dataset]
    version = code_version(spec, dataset, cfg)
    fingerprint = _training_data_fingerprint(dataset, cfg, root)
    with training_lock(spec.name, cache):
        reason = "retrain requested" if retrain else None
        if not retrain:
            try:
                _, manifest = load_weights(spec.name, version, fingerprint, cache=cache)
                info = _info_from_manifest(spec, manifest)
                info["retrained_because"] = None
                return info
            except (StaleWeightsError, CorruptWeightsError) as exc:
                reason = str(exc)
        say = log if log is not None else _stderr
        say(f"letcc: training {spec.name} on {dataset} ({reason}); the weights will be cached "
            f"in {weights_paths(spec.name, cache)[0]}")
        x, y = _data.load_dataset(dataset, "train", cfg.train_limit, root=root)
        xt, yt = _data.load_dataset(dataset, "test", cfg.test_limit, root=root)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            model = spec.build(_data.dataset_info(dataset))
        result = _training.train_model(model, x, y, cfg, progress=progress,
                                       desc=f"training {spec.name} on {dataset}", device=device,
                                       num_threads=num_threads)
        model = model.cpu()
        if spec.deploy is not None:
            model = spec.deploy(model)
        acc = _training.accuracy(model, xt, yt)
        say(f"letcc: trained {spec.name} in {result.seconds:.1f} s ({cfg.epochs} epochs, {result.steps} steps "
            f"on {result.train_images} images, final loss {result.final_loss:.3f}), test accuracy "
            f"{100 * acc:.1f}% on {xt.shape[0]} images")
        manifest = save_weights(spec.name, model.state_dict(), {
            "code_version": version, "data_fingerprint": fingerprint, "data": dataset,
            "train_images": int(x.shape[0]), "test_images": int(xt.shape[0]),
            "test_accuracy": acc, "train_seconds": round(result.seconds, 2),
            "train_cpu_seconds": round(result.cpu_seconds, 2),
            "final_train_loss": result.final_loss, "epochs": cfg.epochs,
            "train_config": cfg.to_dict(), "device": device, "torch_threads": num_threads or torch.get_num_threads(),
        }, cache=cache)
    info = _info_from_manifest(spec, manifest)
    info["retrained_because"] = reason
    return info


# ---------------------------------------------------------------- anywhere (never trains)

def load_model(name: str, *, device: str = "cpu", cache: Optional[os.PathLike] = None,
               expected_sha256: Optional[str] = None) -> Tuple[torch.nn.Module, Dict[str, Any]]:
    """(eval-mode model on ``device``, info) from verified cached weights; never trains.

    Checks the cache file's sha256 and that the current code would produce the same code
    version (the data fingerprint was checked by ``ensure_weights`` in the master).
    """
    spec = get_spec(name)
    if not spec.trained_by_letcc:
        info = _untrained_info(spec)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(VIT_B_16_SEED)  # every process draws the same random model
            model = spec.build(_data.dataset_info(spec.data_format))
        if info["weights"] == WEIGHTS_PRETRAINED:
            state = torch.load(info["weights_file"], map_location="cpu", weights_only=True)
            model.net.load_state_dict(state)
        return model.to(device).eval(), info
    cache = cache_dir(cache)
    hint = f"call letcc.experiments.ensure_weights({spec.name!r}) in the master process first"
    try:
        manifest = read_manifest(spec.name, cache)
        dataset = manifest.get("data")
        if dataset not in spec.train_recipes:
            raise StaleWeightsError(f"cached {spec.name!r} was trained on {dataset!r}, "
                                    f"which is not one of its recipes {list(spec.train_recipes)}")
        # the recipe comes from the manifest (ensure_weights may have used an override); the
        # check here is that today's code, run with that recipe, has the recorded version
        try:
            cfg = _training.TrainConfig(**manifest.get("train_config", {}))
        except (TypeError, ValueError) as exc:
            raise StaleWeightsError(f"cached {spec.name!r} has an unusable train_config: {exc}") from exc
        version = code_version(spec, dataset, cfg)
        state, manifest = load_weights(spec.name, version, None, cache=cache, expected_sha256=expected_sha256)
    except (StaleWeightsError, CorruptWeightsError) as exc:
        raise type(exc)(f"{exc}; {hint}") from exc
    model = spec.build(_data.dataset_info(dataset))
    if spec.deploy is not None:
        model = spec.deploy(model)
    model.load_state_dict(state)
    return model.to(device).eval(), _info_from_manifest(spec, manifest)


class LoadedModel:
    """``f(batch) -> outputs``: eval mode, no grad, softmax over classes unless disabled.

    ``batch`` is a (B, C, H, W) torch tensor or numpy array of [0, 1] pixels (any float
    dtype, any device); the result has the same kind, float dtype and device as the input.
    """

    def __init__(self, model: torch.nn.Module, info: Dict[str, Any], device: str, softmax: bool,
                 max_batch: int):
        self.model, self.info, self.device = model, info, torch.device(device)
        self.softmax, self.max_batch = softmax, max_batch

    def __call__(self, batch):
        is_numpy = not isinstance(batch, torch.Tensor)
        if is_numpy:
            import numpy as np

            arr = np.asarray(batch)
            if not np.issubdtype(arr.dtype, np.floating):
                raise TypeError(f"batch must hold floats, got dtype {arr.dtype}")
            x = torch.from_numpy(np.ascontiguousarray(arr))
        else:
            if not batch.is_floating_point():
                raise TypeError(f"batch must hold floats, got dtype {batch.dtype}")
            x = batch
        if x.dim() != 4:
            raise ValueError(f"batch must be (B, C, H, W), got shape {tuple(x.shape)}")
        out_dtype, out_device = x.dtype, x.device
        with torch.inference_mode():
            outs = []
            for i in range(0, x.shape[0], self.max_batch):
                logits = self.model(x[i:i + self.max_batch].to(self.device, torch.float32))
                outs.append(torch.softmax(logits, dim=-1) if self.softmax else logits)
            y = torch.cat(outs).to(out_device, out_dtype)
        return y.numpy() if is_numpy else y

    def __repr__(self) -> str:
        return f"LoadedModel({self.info['name']!r}, weights={self.info['weights']!r}, device={str(self.device)!r})"


@dataclass(frozen=True)
class ModelFactory:
    """Picklable recipe: ``ModelFactory("lenet5")()`` -> :class:`LoadedModel` (loads, never trains).

    ``cache`` is resolved when the factory is made, so workers read the same cache as the
    master whatever their environment. ``expected_sha256`` pins the exact weights file the
    master verified (``ensure_weights(name)["sha256"]``; :func:`make_factory` does this).
    ``num_threads`` sets torch's intra-op threads in the worker (None: leave torch's default,
    which is every core - too many when N workers share a machine).
    """
    name: str
    device: str = "cpu"
    softmax: bool = True
    cache: Optional[str] = None
    expected_sha256: Optional[str] = None
    num_threads: Optional[int] = None
    max_batch: int = 256

    def __post_init__(self):
        object.__setattr__(self, "name", get_spec(self.name).name)
        object.__setattr__(self, "cache", str(cache_dir(self.cache)))
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads <= 0):
            raise ValueError(f"num_threads must be a positive int or None, got {self.num_threads!r}")
        if not isinstance(self.max_batch, int) or self.max_batch <= 0:
            raise ValueError(f"max_batch must be a positive int, got {self.max_batch!r}")

    def __call__(self) -> LoadedModel:
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        model, info = load_model(self.name, device=self.device, cache=self.cache,
                                 expected_sha256=self.expected_sha256)
        return LoadedModel(model, info, self.device, self.softmax, self.max_batch)


def make_factory(name: str, *, device: str = "cpu", softmax: bool = True, cache: Optional[os.PathLike] = None,
                 root: Optional[os.PathLike] = None, progress: Optional[bool] = None,
                 num_threads: Optional[int] = None) -> Tuple[ModelFactory, Dict[str, Any]]:
    """Master-side convenience: ``ensure_weights`` then a factory pinned to those exact weights.

    ``num_threads`` is for the workers (the factory); training uses torch's current setting.
    """
    info = ensure_weights(name, cache=cache, root=root, progress=progress)
    factory = ModelFactory(name, device=device, softmax=softmax, cache=None if cache is None else str(cache),
                           expected_sha256=info.get("sha256"), num_threads=num_threads)
    return factory, info
