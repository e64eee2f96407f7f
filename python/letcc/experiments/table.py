"""``letcc table``: the Table 1 analogue, LeTCC vs BACC over several models and (N, K, S).

Each model is prepared once; every (N, K, S) goes through the same evaluation loop as the
sweep (same inputs and straggler sets for both schemes). A model may name its evaluation
data after an ``@``: ``repvgg@foolbox-cifar10`` scores RepVGG on foolbox's 20 CIFAR-10
images instead of its own test split.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence, Tuple

from letcc.experiments.sweep import prepare_model, run_sweep, summarize

__all__ = ["DEFAULT_CONFIGS", "DEFAULT_MODELS", "parse_configs", "parse_models", "run_table", "to_markdown"]

DEFAULT_MODELS = ("lenet5", "repvgg_a0", "vit_small")
# (N, K, S): a light, a medium and a heavy straggler load (S/N = 1/8, 1/4, 1/3)
DEFAULT_CONFIGS: Tuple[Tuple[int, int, int], ...] = ((16, 8, 2), (24, 8, 6), (30, 10, 10))


def parse_configs(spec: str) -> List[Tuple[int, int, int]]:
    """'16,8,2;24,8,6' -> [(16, 8, 2), (24, 8, 6)] as (N, K, S)."""
    out = []
    for part in str(spec).split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            N, K, S = (int(v) for v in part.split(","))
        except ValueError:
            raise ValueError(f"configs must look like 'N,K,S;N,K,S', got {spec!r}") from None
        if K < 1 or N < 2 or not 0 <= S < N:
            raise ValueError(f"config (N={N}, K={K}, S={S}) needs K >= 1, N >= 2 and 0 <= S < N")
        out.append((N, K, S))
    if not out:
        raise ValueError(f"no (N, K, S) configuration in {spec!r}")
    return out


def parse_models(spec) -> List[Tuple[str, Optional[str]]]:
    """'lenet5,repvgg@foolbox-cifar10' -> [('lenet5', None), ('repvgg', 'foolbox-cifar10')]."""
    from letcc.experiments import get_spec

    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        name, _, data = item.partition("@")
        get_spec(name)  # ValueError naming the unknown model
        out.append((name, data or None))
    if not out:
        raise ValueError(f"no model in {spec!r}")
    return out


def run_table(models=DEFAULT_MODELS, configs: Sequence[Tuple[int, int, int]] = DEFAULT_CONFIGS, *,
              rounds: int = 32, draws: int = 20, lam="tuned", calib_rounds: int = 8, seed: int = 0,
              device: str = "cpu", progress: Optional[bool] = None, cache=None, train_overrides=None,
              train_threads=None, log=None) -> Dict:
    """Rows of (model, N, K, S) with both schemes' MSE and RelAcc; a JSON-ready dict with markdown."""
    t0 = time.perf_counter()
    rows: List[Dict] = []
    notes: Dict[str, str] = {}
    prepared: Dict[str, tuple] = {}
    for name, data in parse_models(models):
        if name not in prepared:
            prepared[name] = prepare_model(name, device=device, progress=progress, cache=cache,
                                           train_overrides=train_overrides, train_threads=train_threads,
                                           log=log)
        for N, K, S in configs:
            res = run_sweep(name, K=K, N=N, stragglers=[S], rounds=rounds, draws=draws, lam=lam,
                            calib_rounds=calib_rounds, seed=seed, device=device, data=data,
                            progress=progress, prepared=prepared[name], log=log)
            notes[res["model"]["name"]] = res["model"]["note"]
            r = res["results"][0]
            rows.append({"model": res["model"]["name"], "weights": res["model"]["weights"],
                         "data": res["config"]["data"], "N": N, "K": K, "S": S,
                         "rounds": res["config"]["rounds"], "draws": draws, "lam": res["config"]["lam"],
                         "lam_note": res["config"]["lam_note"],
                         "letcc": r["schemes"]["letcc"], "bacc": r["schemes"]["bacc"],
                         "improvement": r["improvement"], "letcc_lam": r["letcc_lam"]})
    per_model = {}
    for key in dict.fromkeys((r["model"], r["data"]) for r in rows):
        per_model[f"{key[0]}@{key[1]}"] = summarize([r for r in rows if (r["model"], r["data"]) == key])
    out = {"kind": "table", "config": {"configs": [list(c) for c in configs], "rounds": rounds, "draws": draws,
                                       "lam": lam, "calib_rounds": calib_rounds, "seed": seed, "device": device},
           "notes": notes, "rows": rows, "summary": per_model, "seconds": round(time.perf_counter() - t0, 2)}
    out["markdown"] = to_markdown(out)
    return out


def _fmt(v, spec: str, none: str = "n/a") -> str:
    return none if v is None else format(v, spec)


def _lam_cell(r: Dict) -> str:
    li = r["letcc_lam"]
    if li.get("lam") == "tuned":
        return f"{li['lam_enc']:.0e} / {li['lam_dec']:.0e}"
    if li.get("lam") == "auto":
        return "auto"
    return f"0 / {li['lam_dec']:.0e}"


def to_markdown(table: Dict) -> str:
    """The table as markdown: both metrics side by side, then the per-model averages and notes."""
    lines = [
        "| model | data | N | K | S | MSE LeTCC | MSE BACC | MSE reduction | RelAcc LeTCC | RelAcc BACC | "
        "RelAcc gain (pts) | lam_enc / lam_dec |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in table["rows"]:
        L, B, imp = r["letcc"], r["bacc"], r["improvement"]
        lines.append(
            f"| {r['model']} [{r['weights']}] | {r['data']} | {r['N']} | {r['K']} | {r['S']} | "
            f"{L['mse']:.3e} | {B['mse']:.3e} | {_fmt(imp['mse_reduction_pct'], '+.1f')}% | "
            f"{_fmt(L['rel_acc'], '.4f')} | {_fmt(B['rel_acc'], '.4f')} | "
            f"{_fmt(imp['rel_acc_gain_pts'], '+.2f')} | {_lam_cell(r)} |")
    lines += ["", "| model@data | mean MSE reduction | MSE wins / losses | mean RelAcc gain (pts) | "
              "RelAcc wins / ties / losses |", "|---|---:|---:|---:|---:|"]
    for key, s in table["summary"].items():
        lines.append(f"| {key} | {_fmt(s['mean_mse_reduction_pct'], '+.1f')}% | {s['mse_wins']} / "
                     f"{s['mse_losses']} | {_fmt(s['mean_rel_acc_gain_pts'], '+.2f')} | "
                     f"{s['rel_acc_wins']} / {s['rel_acc_ties']} / {s['rel_acc_losses']} |")
    lines += ["", "MSE: mean over rounds and straggler sets of (1/K) sum_k ||f(x_k) - estimate_k||^2 on softmax "
              "outputs. RelAcc: accuracy of argmax estimate / accuracy of the base model on the same images. "
              "MSE reduction = 1 - MSE_LeTCC / MSE_BACC; RelAcc gain = RelAcc_LeTCC - RelAcc_BACC."]
    for name, note in table["notes"].items():
        lines.append(f"- {note}")
    for r in table["rows"]:
        if r.get("lam_note"):
            lines.append(f"- {r['model']} (N={r['N']}, K={r['K']}, S={r['S']}): {r['lam_note']}")
    return "\n".join(lines) + "\n"
