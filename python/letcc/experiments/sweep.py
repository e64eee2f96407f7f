"""``letcc sweep``: the Figure 3 analogue, MSE and RelAcc of LeTCC and BACC against S.

:func:`prepare_model` gets a model ready in this process (training it on first use) and
:func:`evaluation_data` picks its evaluation and calibration images; :func:`run_sweep`
runs :func:`letcc.experiments.evaluation.compare` over the straggler counts and returns a
JSON-ready dict (``plot_sweep`` draws it).

Evaluation images are the first ``rounds * K`` test images of the dataset the model was
trained on (or ``data=``); calibration images for ``lam="tuned"`` are the first
``calib_rounds * K`` images of that dataset's *train* split, so lam is never chosen on the
images it is scored on. Randomly initialised models are scored on MSE only (their
accuracy means nothing, so RelAcc is reported as None).
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from letcc.experiments.evaluation import compare, parse_lam

__all__ = ["parse_stragglers", "parse_train_overrides", "train_config", "prepare_model", "evaluation_data",
           "run_sweep", "summarize", "model_record"]


def parse_stragglers(spec: str, N: Optional[int] = None) -> List[int]:
    """'0:6' -> [0..6]; '0:12:3' -> [0, 3, 6, 9, 12]; '1,4,7' -> [1, 4, 7]; '5' -> [5].

    With N given, every count must lie in [0, N - 1].
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"stragglers must look like '0:S', '0:S:step' or '1,2,5', got {spec!r}")
    s = spec.strip()
    try:
        if ":" in s:
            parts = [int(p) for p in s.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
            lo, hi = parts[0], parts[1]
            step = parts[2] if len(parts) == 3 else 1
            if step <= 0 or hi < lo:
                raise ValueError
            values = list(range(lo, hi + 1, step))
        else:
            values = [int(p) for p in s.split(",")]
    except ValueError:
        raise ValueError(f"stragglers must look like '0:S', '0:S:step' or '1,2,5' with 0 <= a <= b and "
                         f"step > 0, got {spec!r}") from None
    if any(v < 0 for v in values):
        raise ValueError(f"straggler counts must be >= 0, got {spec!r}")
    if N is not None and any(v >= N for v in values):
        raise ValueError(f"straggler counts {spec!r} must be below N = {N} (someone has to answer)")
    return sorted(set(values))


def parse_train_overrides(spec: Optional[str]) -> Dict:
    """'epochs=1,train_limit=256' -> {'epochs': 1, 'train_limit': 256} (values: Python literals)."""
    import ast
    import dataclasses

    from letcc.experiments import TrainConfig

    if spec is None or not str(spec).strip():
        return {}
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    out = {}
    for item in str(spec).split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in names:
            raise ValueError(f"training overrides must look like 'epochs=2,train_limit=512' with keys from "
                             f"{sorted(names)}, got {item.strip()!r}")
        try:
            out[key] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"training override {key}={value.strip()!r} is not a number, True/False or None") from None
    return out


def train_config(name: str, overrides: Optional[Dict]):
    """The registered recipe of ``name`` on the dataset it trains on here, with ``overrides``; None if none.

    A model trained with overrides is cached under its own code version: a later run
    without them retrains with the registered recipe.
    """
    import dataclasses

    from letcc.experiments import get_spec, training_dataset

    if not overrides:
        return None
    spec = get_spec(name)
    if not spec.trained_by_letcc:
        raise ValueError(f"model {spec.name!r} is not trained by letcc: training overrides do not apply")
    return dataclasses.replace(spec.train_recipes[training_dataset(spec.name)], **overrides)


def prepare_model(name: str, *, device: str = "cpu", progress: Optional[bool] = None, cache=None,
                  train_overrides: Optional[Dict] = None, train_threads: Optional[int] = None,
                  log: Optional[Callable[[str], None]] = None) -> Tuple[Callable, Dict]:
    """(f, info): ``f`` maps numpy (n, C, H, W) [0, 1] pixels to softmax outputs in this process.

    Trains and caches the model on first use (progress bar); ``train_overrides`` changes
    the registered recipe (e.g. ``{"epochs": 1}`` for a quick try). ``info["weights"]``
    says whether it was trained by letcc, is randomly initialised or pretrained.
    """
    from letcc.experiments import ModelFactory, ensure_weights

    info = ensure_weights(name, cache=cache, progress=progress, device=device,
                          config=train_config(name, train_overrides), num_threads=train_threads, log=log)
    factory = ModelFactory(name, device=device, cache=None if cache is None else str(cache),
                           expected_sha256=info.get("sha256"))
    return factory(), info


def model_record(info: Dict) -> Dict:
    """The provenance fields every output carries."""
    from letcc.experiments import describe

    keep = ("name", "weights", "data", "test_accuracy", "test_images", "train_images", "paper_model",
            "sha256", "code_version")
    rec = {k: info.get(k) for k in keep}
    rec["note"] = describe(info)
    return rec


def evaluation_data(info: Dict, *, rounds: int, K: int, data: Optional[str] = None,
                    calib_rounds: int = 0):
    """(X, labels or None, X_calib or None, dataset name, calib dataset name or None).

    ``labels`` is None for randomly initialised models (MSE only).
    """
    from letcc.experiments import load_dataset
    from letcc.experiments.factory import WEIGHTS_RANDOM

    dataset = data or info["data"]
    X, y = load_dataset(dataset, "test", limit=rounds * K)
    if X.shape[0] < K:
        raise ValueError(f"dataset {dataset!r} has {X.shape[0]} test images, fewer than K = {K}")
    labels = None if info["weights"] == WEIGHTS_RANDOM else y
    calib, calib_name = None, None
    if calib_rounds > 0:
        # the train split of the evaluation data if it has one, else of the training data
        for cand in (dataset, info.get("data")):
            if cand is None or cand.startswith("foolbox-"):
                continue
            if info["weights"] == WEIGHTS_RANDOM and cand != dataset:
                continue
            try:
                calib, _ = load_dataset(cand, "train", limit=calib_rounds * K)
                calib_name = cand
                break
            except (ValueError, FileNotFoundError):
                continue
    return X, labels, calib, dataset, calib_name


def summarize(rows: Sequence[Dict]) -> Dict:
    """Average MSE reduction (%) and RelAcc gain (points) of LeTCC over BACC, and win counts."""
    red = [r["improvement"]["mse_reduction_pct"] for r in rows if r["improvement"]["mse_reduction_pct"] is not None]
    gain = [r["improvement"]["rel_acc_gain_pts"] for r in rows if r["improvement"]["rel_acc_gain_pts"] is not None]
    out = {
        "points": len(rows),
        "mean_mse_reduction_pct": float(np.mean(red)) if red else None,
        "mse_wins": int(sum(v > 0 for v in red)),
        "mse_losses": int(sum(v < 0 for v in red)),
        "mean_rel_acc_gain_pts": float(np.mean(gain)) if gain else None,
        "rel_acc_wins": int(sum(v > 0 for v in gain)),
        "rel_acc_ties": int(sum(v == 0 for v in gain)),
        "rel_acc_losses": int(sum(v < 0 for v in gain)),
    }
    return out


def run_sweep(model: str, *, K: int = 8, N: int = 24, stragglers: Sequence[int] = range(0, 13, 2),
              rounds: int = 32, draws: int = 20, lam="tuned", calib_rounds: int = 8, seed: int = 0,
              device: str = "cpu", data: Optional[str] = None, progress: Optional[bool] = None, cache=None,
              prepared: Optional[Tuple[Callable, Dict]] = None, train_overrides: Optional[Dict] = None,
              train_threads: Optional[int] = None, log: Optional[Callable[[str], None]] = None) -> Dict:
    """LeTCC vs BACC on ``model`` for every S in ``stragglers``; a JSON-ready dict.

    ``prepared``: an (f, info) from :func:`prepare_model` to reuse (the table does).
    ``progress``: bars (None: only on a terminal); ``log``: one line per stage.
    """
    lam = parse_lam(lam)
    t0 = time.perf_counter()
    if prepared is None:
        prepared = prepare_model(model, device=device, progress=progress, cache=cache,
                                 train_overrides=train_overrides, train_threads=train_threads, log=log)
    f, info = prepared
    X, labels, calib, dataset, calib_name = evaluation_data(
        info, rounds=rounds, K=K, data=data, calib_rounds=calib_rounds if lam == "tuned" else 0)
    lam_used, lam_note = lam, None
    if lam == "tuned" and calib is None:
        lam_used = "auto"
        lam_note = (f"no calibration images disjoint from {dataset!r} for this model: "
                    f"LeTCC uses its default lam policy ('auto') instead of tuned lam")
    elif lam == "tuned" and calib_name != dataset:
        lam_note = (f"lam tuned on {calib_name!r} train images: the evaluation data {dataset!r} has no train "
                    f"split, so the tuned lam comes from another image distribution")
    results = compare(f, X, labels, K, N, list(stragglers), lam=lam_used, calib=calib, n_draws=draws,
                      seed=seed, progress=progress, desc=f"{info['name']} K={K} N={N}", log=log)
    rows = [r.to_dict() for r in results]
    return {
        "kind": "sweep",
        "model": model_record(info),
        "config": {"K": K, "N": N, "stragglers": [int(s) for s in stragglers],
                   "rounds": int(X.shape[0] // K), "draws": draws, "lam": lam_used, "lam_requested": lam,
                   "lam_note": lam_note, "calib_data": calib_name,
                   "calib_rounds": calib_rounds if calib is not None else 0, "seed": seed,
                   "device": device, "data": dataset, "metric_mse": "mean over rounds and straggler sets of "
                   "(1/K) sum_k ||softmax f(x_k) - estimate_k||^2",
                   "metric_rel_acc": "accuracy(argmax estimate) / accuracy(argmax f) on the same images"},
        "results": rows,
        "summary": summarize(rows),
        "seconds": round(time.perf_counter() - t0, 2),
    }
