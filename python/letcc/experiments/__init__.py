"""Layer 5: real models on real (offline) data for the paper's experiments.

* :mod:`.data`           ``load_dataset(name, split, limit)`` -> ([0, 1] float32 (B, C, H, W), int64 labels)
* :mod:`.models`         LeNet-5, RepVGG-a0, a small ViT, vit_b_16; their input adapters and recipes
* :mod:`.training`       the seeded training loop (tqdm progress bar)
* :mod:`.weights_cache`  weights + manifest in ``$LETCC_CACHE_DIR`` (or ``~/.cache/letcc``), verified on load
* :mod:`.factory`        ``ensure_weights`` (master, trains if needed), ``load_model`` and the picklable
                         ``ModelFactory`` (workers, never train) returning softmax-output callables

Typical master code::

    from letcc.experiments import describe, load_dataset, make_factory
    factory, info = make_factory("lenet5")        # trains once (~seconds), then cached
    print(describe(info))                         # says how it differs from the paper's model
    X, y = load_dataset(info["data"], "test", limit=64)
    f = factory()                                 # the same call inside each worker
    probs = f(X)
"""
from __future__ import annotations

import importlib
from typing import Any, List

# public name -> submodule defining it, imported on first access (PEP 562), so that
# ``import letcc.experiments`` and its numpy-only parts (evaluation, coded_points) work
# without PyTorch; a name whose module needs a missing extra raises letcc._extras.MissingExtra,
# whose message names the extra (``pip install "letcc[experiments]"``).
_EXPORTS = {
    "DATASETS": "data", "DatasetUnavailable": "data", "data_root": "data", "dataset_fingerprint": "data",
    "dataset_info": "data", "is_available": "data", "load_dataset": "data",
    "LoadedModel": "factory", "ModelFactory": "factory", "describe": "factory", "ensure_weights": "factory",
    "load_model": "factory", "make_factory": "factory", "training_dataset": "factory",
    "MODELS": "models", "build_model": "models", "get_spec": "models",
    "TrainConfig": "training", "accuracy": "training", "train_model": "training",
    "CorruptWeightsError": "weights_cache", "StaleWeightsError": "weights_cache", "cache_dir": "weights_cache",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"letcc.experiments.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'letcc.experiments' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_EXPORTS))
