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
from letcc.experiments.data import (
    DATASETS, DatasetUnavailable, data_root, dataset_fingerprint, dataset_info, is_available,
    load_dataset,
)
from letcc.experiments.factory import (
    LoadedModel, ModelFactory, describe, ensure_weights, load_model, make_factory, training_dataset,
)
from letcc.experiments.models import MODELS, build_model, get_spec
from letcc.experiments.training import TrainConfig, accuracy, train_model
from letcc.experiments.weights_cache import CorruptWeightsError, StaleWeightsError, cache_dir

__all__ = [
    "DATASETS", "DatasetUnavailable", "data_root", "dataset_fingerprint", "dataset_info",
    "is_available", "load_dataset",
    "LoadedModel", "ModelFactory", "describe", "ensure_weights", "load_model", "make_factory",
    "training_dataset",
    "MODELS", "build_model", "get_spec",
    "TrainConfig", "accuracy", "train_model",
    "CorruptWeightsError", "StaleWeightsError", "cache_dir",
]
