"""Figures of the experiments, written as PNG files with matplotlib's Agg backend (no display).

* :func:`plot_sweep`        Figure 3 analogue: MSE and RelAcc of LeTCC and BACC against S
* :func:`plot_demo`         the demo's summary: MSE, RelAcc and round latency per scheme
* :func:`plot_coded_points` Figure 4 analogue: the K inputs and the N coded inputs of each code

Every figure carries the model's provenance (trained by letcc / random init / pretrained)
in its title, because none of these models is the paper's exact pretrained network.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional, Sequence

import numpy as np

__all__ = ["plot_sweep", "plot_demo", "plot_coded_points", "PNG_SIGNATURE"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Known schemes get their usual colour and label; any other name is drawn in
# the next colour of the cycle under its own name.
COLORS = {"letcc": "tab:blue", "bacc": "tab:orange", "uncoded": "tab:gray"}
LABELS = {"letcc": "LeTCC", "bacc": "BACC", "uncoded": "uncoded"}
_CYCLE = ("tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _style(names) -> dict:
    """{name: (colour, label)} for the schemes in the order given."""
    extra = iter(_CYCLE * (1 + len(names) // len(_CYCLE)))
    return {n: (COLORS.get(n) or next(extra), LABELS.get(n, n)) for n in names}


def _pyplot():
    from letcc._extras import require

    matplotlib = require("matplotlib", "letcc.experiments.plots")
    matplotlib.use("Agg", force=True)  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: os.PathLike) -> Path:
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(path, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def plot_sweep(result: Dict, path: os.PathLike) -> Path:
    """MSE (log scale, +- 1 standard error) and RelAcc of both schemes against S.

    ``result`` is what :func:`letcc.experiments.sweep.run_sweep` returns.
    """
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    rows = result["results"]
    S = np.array([r["S"] for r in rows])
    names = list(rows[0]["schemes"])
    style = _style(names)
    has_acc = all(m["rel_acc"] is not None for r in rows for m in r["schemes"].values())
    fig, axes = plt.subplots(1, 2 if has_acc else 1, figsize=(10 if has_acc else 5.5, 3.8), squeeze=False)
    ax = axes[0, 0]
    for name in names:
        mse = np.array([r["schemes"][name]["mse"] for r in rows])
        se = np.array([r["schemes"][name]["mse_se"] for r in rows])
        ax.errorbar(S, mse, yerr=se, marker="o", ms=4, capsize=2, color=style[name][0], label=style[name][1])
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("number of stragglers S")
    ax.set_ylabel("MSE of softmax outputs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if has_acc:
        ax = axes[0, 1]
        for name in names:
            ra = np.array([r["schemes"][name]["rel_acc"] for r in rows])
            ax.plot(S, ra, marker="o", ms=4, color=style[name][0], label=style[name][1])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("number of stragglers S")
        ax.set_ylabel("RelAcc (accuracy / base accuracy)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    cfg = result["config"]
    fig.suptitle(f"{result['model']['name']} [{result['model']['weights']}] on {cfg['data']}: "
                 f"K={cfg['K']}, N={cfg['N']}, lam={cfg['lam']}, {cfg['rounds']} rounds x "
                 f"{cfg['draws']} straggler sets", fontsize=9)
    return _save(fig, path)


def plot_demo(result: Dict, path: os.PathLike) -> Path:
    """Bar charts of MSE and RelAcc (with +- 1 standard error), and box plots of the virtual round latency, per scheme."""
    plt = _pyplot()
    schemes = list(result["schemes"])
    style = _style(schemes)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    names = [style[s][1] for s in schemes]
    colors = [style[s][0] for s in schemes]
    mse = [result["schemes"][s]["mse"] for s in schemes]
    def se(key):   # +- 1 standard error (results written before they were recorded: none)
        v = [result["schemes"][s].get(key) for s in schemes]
        return None if any(x is None for x in v) else v

    axes[0].bar(names, mse, color=colors, yerr=se("mse_se"), capsize=4)
    axes[0].set_ylabel("MSE of softmax outputs (+- 1 se)")
    axes[0].set_title("error (lower is better)", fontsize=9)
    ra = [result["schemes"][s]["rel_acc"] for s in schemes]
    axes[1].bar(names, ra, color=colors, yerr=se("rel_acc_se"), capsize=4)
    lo = min(ra)
    axes[1].set_ylim(max(0.0, lo - 0.05), 1.005)
    axes[1].set_ylabel("RelAcc (+- 1 se)")
    axes[1].set_title("accuracy / base accuracy (higher is better)", fontsize=9)
    lat = [np.asarray(result["schemes"][s]["latencies_s"], dtype=float) for s in schemes]
    axes[2].boxplot(lat, showfliers=True)
    axes[2].set_xticks(range(1, len(names) + 1), names)
    axes[2].set_ylabel("round latency (s, simulated delays)")
    axes[2].set_title("latency per round (lower is better)", fontsize=9)
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
    fig.subplots_adjust(wspace=0.4)
    cfg = result["config"]
    fig.suptitle(f"letcc demo: {result['model']['name']} [{result['model']['weights']}], K={cfg['K']}, "
                 f"N={cfg['N']}, S={cfg['S']}, {cfg['rounds']} rounds" + _paired_line(result), fontsize=9, y=1.04)
    return _save(fig, path)


def _paired_line(result: Dict) -> str:
    """LeTCC vs BACC with paired standard errors (smaller than the bars' own, which
    ignore that both schemes err on the same images), when the result has them."""
    v = result.get("letcc_vs_bacc")
    if not v or v.get("mse_reduction_pct") is None:
        return ""
    red = v["mse_reduction_pct"]
    line = (f"\nLeTCC vs BACC, paired: MSE {abs(red):.1f}% +- {v['mse_reduction_se']:.1f}% "
            f"{'lower' if red >= 0 else 'higher'}")
    line += " (within noise)" if v["within_noise"]["mse"] else ""
    if v.get("rel_acc_gain_pts") is not None:
        line += f", RelAcc {v['rel_acc_gain_pts']:+.2f} +- {v['rel_acc_gain_se']:.2f} pts"
        line += " (within noise)" if v["within_noise"]["rel_acc"] else ""
    return line


def _as_image(x: np.ndarray) -> np.ndarray:
    """(C, H, W) pixels -> something imshow draws, clipped to [0, 1] (coded pixels may overshoot)."""
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    return x[0] if x.shape[0] == 1 else x.transpose(1, 2, 0)


def plot_coded_points(inputs: np.ndarray, coded: Dict[str, np.ndarray], path: os.PathLike, *,
                      title: str = "", max_cols: Optional[int] = None) -> Path:
    """Row 1: the K inputs; then one row per code with its N coded inputs (pixels clipped to [0, 1])."""
    plt = _pyplot()
    K = inputs.shape[0]
    ncols = max([K] + [c.shape[0] for c in coded.values()])
    if max_cols is not None:
        ncols = min(ncols, max_cols)
    rows = [("inputs", inputs)] + [(LABELS.get(k, k), v) for k, v in coded.items()]
    fig, axes = plt.subplots(len(rows), ncols, figsize=(0.9 * ncols + 0.8, 1.05 * len(rows) + 0.4),
                             squeeze=False)
    for r, (label, imgs) in enumerate(rows):
        for c in range(ncols):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(False)
            if c < imgs.shape[0]:
                img = _as_image(imgs[c])
                ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0.0, vmax=1.0)
            if c == 0:
                ax.set_ylabel(label, fontsize=9)
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def is_png(path: os.PathLike, min_bytes: int = 1000) -> bool:
    """Whether ``path`` is a PNG file of at least ``min_bytes`` (used by the tests and the CLI)."""
    p = Path(path)
    if not p.is_file() or p.stat().st_size < min_bytes:
        return False
    with open(p, "rb") as fh:
        return fh.read(8) == PNG_SIGNATURE


def png_size(path: os.PathLike) -> Sequence[int]:
    """(width, height) from the PNG's IHDR chunk."""
    with open(path, "rb") as fh:
        head = fh.read(24)
    if head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG file")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
