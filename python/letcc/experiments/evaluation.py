"""The experiments' comparison: LeTCC against BACC (and any other named scheme) on a real model.

Every experiment (``letcc sweep``, ``letcc table``, the demo's reference numbers) goes
through :func:`compare`, which runs letcc.evaluate (the one offline evaluator) with the
paper's protocol:

* the **same inputs** for every scheme: X (n, ...) is cut into B rounds of K inputs,
  arranged like the runtime does it, ``groups[k, b] = X[b * K + k]``;
* the **same straggler sets** for every scheme: for each S, ``n_draws`` sets of N - S
  answering workers are drawn once (``FixedCount(S)``, seeded by ``(seed, S)``) and
  every scheme decodes every round from each of them;
* **metrics on softmax outputs**, both reported, each with its standard error, and
  every scheme's differences from the reference (BACC) with *paired* standard errors
  (``Comparison.vs_reference``; ``within_noise`` says when a difference is within two): ``mse`` is the paper's MSE, the mean
  over rounds and straggler sets of (1/K) sum_k ||f(x_k) - f^(x_k)||^2 (the squared
  error of the whole probability vector); ``rel_acc`` is the accuracy of argmax f^
  against the labels divided by the base model's accuracy (argmax f) on the same
  images (letcc.metrics's definition; 1 = coding lost nothing). Also ``agreement``: the
  fraction of estimates whose argmax is the base model's own prediction (defined without
  labels, and not helped by coding errors that happen to fix a wrong prediction).

The coded round is evaluated directly in this process (encode -> f on the N coded
inputs of all B rounds -> decode from each answering set), which is what
``CodedInference`` computes with the same code objects, minus the processes. f runs
once per scheme (and per distinct LeTCC encoder), not once per straggler set:
decoding is linear in the worker outputs, so all sets reuse them.

LeTCC's smoothing parameters (``lam``):

* ``"tuned"`` (the paper's protocol: "cross-validation and grid search"): for each
  (K, N, S), :func:`letcc.tune` grid-searches (lam_enc, lam_dec) for the lowest MSE on
  *calibration* images that are disjoint from the evaluation images, with their own
  straggler draws; the pair is then fixed for the evaluation;
* ``"auto"``: LeTCC's default policy (lam_dec from the gaps of each answering set);
* a number: lam_enc = 0 and that lam_dec for every decode.
"""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from letcc._checks import as_int
from letcc.codes import BACC, Code, LeTCC
from letcc.evaluate import (SchemeMetrics, coded_outputs, decode_errors, exact_outputs, fixed_count_sets,
                            group_inputs, group_labels, paired_difference, summarize, ungroup)

__all__ = [
    "SchemeMetrics", "group_inputs", "ungroup", "straggler_sets", "coded_outputs", "exact_outputs",
    "letcc_code_for", "compare", "parse_lam", "TUNE_LAM_ENC_GRID", "TUNE_LAM_DEC_GRID", "Comparison",
]

# Grids for lam="tuned". lam_enc > 0 blurs the coded inputs at the alphas; measured to
# cost MSE on image classifiers (DESIGN.md), so only a few small values are tried.
TUNE_LAM_ENC_GRID = (0.0, 1e-8, 1e-6, 1e-4)
TUNE_LAM_DEC_GRID = tuple([0.0] + [float(v) for v in np.logspace(-10, 0, 21)])

# The experiments' straggler sets: FixedCount(S), seeded by (seed, N, S).
straggler_sets = fixed_count_sets


# ---------------------------------------------------------------- LeTCC's lam

def parse_lam(value) -> Union[str, float]:
    """'tuned' | 'auto' | a number >= 0 (lam_dec, with lam_enc = 0)."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("tuned", "auto"):
            return v
        try:
            value = float(v)
        except ValueError:
            raise ValueError(f"lam must be 'tuned', 'auto' or a number >= 0, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value >= 0) or math.isinf(value):
        raise ValueError(f"lam must be 'tuned', 'auto' or a finite number >= 0, got {value!r}")
    return float(value)


def letcc_code_for(lam, K: int, N: int, S: int, *, f: Optional[Callable] = None, calib=None,
                   n_draws: int = 20, seed: int = 0) -> tuple:
    """(LeTCC code, description dict) for lam 'tuned' / 'auto' / number at (K, N, S).

    'tuned' needs ``f`` and calibration images ``calib`` (n >= K, disjoint from the
    evaluation images); the straggler draws of the grid search are its own.
    """
    lam = parse_lam(lam)
    if lam == "auto":
        from letcc.codes import lam_defaults

        code = LeTCC(K, N)
        # output_space='auto': a classifier's softmax outputs are decoded in log space with LOG_POLICY
        return code, {"lam": "auto", "lam_enc": code.lam_enc,
                      "lam_dec": f"auto: {lam_defaults.DEFAULT_POLICY!r} (log space: {lam_defaults.LOG_POLICY!r})"}
    if lam == "tuned":
        if f is None or calib is None:
            raise ValueError("lam='tuned' needs the model f and calibration images")
        from letcc.tune import tune

        calib = np.asarray(calib.detach().cpu().numpy() if hasattr(calib, "detach") else calib,
                           dtype=np.float32)
        res = tune(f, calib, K, N, stragglers=int(S), lam_enc_grid=TUNE_LAM_ENC_GRID,
                   lam_dec_grid=TUNE_LAM_DEC_GRID, n_draws=n_draws, seed=int(seed) * 7919 + 104729 + int(S))
        code = LeTCC(K, N, lam_enc=res.lam_enc, lam_dec=res.lam_dec)
        return code, {"lam": "tuned", "lam_enc": res.lam_enc, "lam_dec": res.lam_dec,
                      "calib_mse": res.mse, "calib_default_mse": res.default_mse,
                      "calib_rounds": res.n_rounds, "calib_draws": res.n_draws}
    code = LeTCC(K, N, lam_enc=0.0, lam_dec=lam)
    return code, {"lam": "fixed", "lam_enc": 0.0, "lam_dec": lam}


# ---------------------------------------------------------------- the comparison

@dataclass
class Comparison:
    """Results at one (K, N, S): metrics per scheme, every scheme's paired
    differences from the reference scheme (``vs_reference``), and
    ``improvement``: the primary scheme's (LeTCC's) difference from it."""
    K: int
    N: int
    S: int
    schemes: Dict[str, SchemeMetrics]
    letcc_lam: dict
    improvement: dict = field(default_factory=dict)
    seconds: float = 0.0
    vs_reference: Dict[str, dict] = field(default_factory=dict)
    reference: Optional[str] = None

    def to_dict(self) -> dict:
        return {"K": self.K, "N": self.N, "S": self.S,
                "schemes": {k: v.to_dict() for k, v in self.schemes.items()},
                "letcc_lam": self.letcc_lam, "improvement": self.improvement,
                "reference": self.reference, "vs_reference": self.vs_reference,
                "seconds": round(self.seconds, 3)}


def compare(f: Callable, X, labels, K: int, N: int, S_values: Sequence[int], *, lam="tuned",
            calib=None, n_draws: int = 20, seed: int = 0, progress: Optional[bool] = None,
            desc: str = "evaluating", chunk: int = 256, worst_case: bool = False,
            schemes: Optional[Mapping[str, object]] = None, reference: str = "bacc",
            primary: str = "letcc", log: Optional[Callable[[str], None]] = None) -> List[Comparison]:
    """LeTCC vs BACC (and any other schemes) on model ``f`` (numpy (n, C, H, W) float32 -> (n, classes) softmax).

    ``X`` (n, ...) evaluation images (n // K rounds), ``labels`` (n,) or None (MSE only).
    For every S in ``S_values`` every scheme decodes every round from the same ``n_draws``
    straggler sets. See the module docstring for ``lam``.

    ``schemes``: the schemes besides LeTCC (named ``primary``, made from ``lam``), as
    {name: letcc code (a letcc.codes.Code)} or {name: callable(S) -> code} for a code
    that depends on S; default
    {"bacc": BACC(K, N)}. ``reference``: the name every scheme is compared with
    (paired), ``primary``: whose comparison is ``Comparison.improvement``.
    ``progress``: a bar (None: only when stderr is a terminal); ``log``, if given,
    gets one summary line per S.
    """
    K, N = as_int(K, "K", 1), as_int(N, "N", 1)
    if N < 2:
        raise ValueError(f"N must be at least 2 workers, got {N}")
    S_values = [int(s) for s in S_values]
    for s in S_values:
        if not 0 <= s < N:
            raise ValueError(f"straggler count S = {s} must be in [0, N - 1] = [0, {N - 1}]")
    lam = parse_lam(lam)
    others = {"bacc": BACC(K, N)} if schemes is None else dict(schemes)
    if primary in others:
        raise ValueError(f"scheme name {primary!r} is LeTCC's (made from lam); name the others differently")
    if reference != primary and reference not in others:
        raise ValueError(f"reference {reference!r} is not one of the schemes {[primary, *others]}")
    # float32 images, as the runtime encodes them
    groups = group_inputs(np.asarray(X.detach().cpu().numpy() if hasattr(X, "detach") else X, dtype=np.float32), K)
    B = groups.shape[1]
    lab = None if labels is None else group_labels(labels, K, B)
    from letcc.experiments._progress import progress_bar

    bar = progress_bar(total=2 + len(S_values), desc=desc, unit="step", progress=progress)
    try:
        exact = exact_outputs(f, groups, chunk)
        outputs: Dict[int, np.ndarray] = {}   # id(encoder-defining object) -> worker outputs

        def outputs_of(code, key):
            if key not in outputs:
                outputs[key] = coded_outputs(code, f, groups, chunk)
            return outputs[key]

        fixed = {name: c for name, c in others.items() if isinstance(c, Code)}
        for name, c in fixed.items():
            outputs_of(c, ("fixed", name))
        bar.update(2)
        results = []
        for S in S_values:
            t0 = time.perf_counter()
            sets = straggler_sets(N, S, n_draws, seed, worst_case=worst_case)
            code, lam_info = letcc_code_for(lam, K, N, S, f=f, calib=calib, n_draws=n_draws, seed=seed)
            run = {primary: (code, outputs_of(code, ("letcc", code.lam_enc)))}
            for name, c in others.items():
                if name in fixed:
                    run[name] = (c, outputs[("fixed", name)])
                else:
                    c = c(S)
                    run[name] = (c, coded_outputs(c, f, groups, chunk))
            errs = {name: decode_errors(c, out, exact, sets, lab) for name, (c, out) in run.items()}
            metrics = {name: summarize(name, e, exact, lab) for name, e in errs.items()}
            metrics[primary].lam_enc, metrics[primary].lam_dec = lam_info["lam_enc"], lam_info["lam_dec"]
            vs = {name: paired_difference(e, errs[reference], exact, lab)
                  for name, e in errs.items() if name != reference}
            results.append(Comparison(K, N, S, metrics, lam_info, vs.get(primary, {}),
                                      time.perf_counter() - t0, vs, reference))
            bar.update(1)
            bar.set_postfix(S=S)
            if log is not None:
                red = results[-1].improvement.get("mse_reduction_pct")
                log(f"{desc}: S={S}: {B} rounds x {len(sets)} straggler sets decoded in "
                    f"{results[-1].seconds:.2f} s" + ("" if red is None or primary == reference else
                                                      f", {primary} MSE {red:+.1f}% lower than {reference}"))
    finally:
        bar.close()
    return results
