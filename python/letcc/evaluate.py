"""The offline evaluator: coded rounds decoded from many straggler sets, no processes.

Every offline measurement goes through this module (letcc.tune, the policy
calibration, ``letcc sweep`` / ``letcc table`` / the demo's reference numbers
through letcc.experiments.evaluation.compare, and the benchmarks), so every
scheme is measured the same way and a new decoder is evaluated as it runs::

    X (n, ...) --group_inputs--> groups (K, B, ...)     groups[k, b] = X[b * K + k]
    exact_outputs(f, groups)          -> exact   (K, B, m) float64
    coded_outputs(code, f, groups)    -> outputs (N, B, m) float64 (every worker answers)
    for each answering set F (draw_sets / fixed_count_sets / sets_by_count):
        est = code.decode(outputs[F] (+ noise), F)      (K, B, m): all B rounds in one call
    decode_errors -> SetErrors: per (set, round) squared error (1/K) sum_k ||est - exact||^2,
                     argmaxes equal to the labels / to argmax exact
    evaluate(schemes, ...) -> per S, per named scheme: SchemeMetrics (mean, standard
                     errors), and paired differences against a reference scheme

This is the runtime's layout (a round's K inputs along the first axis): f runs
once per scheme (per distinct encoder), not once per straggler set, since
decoding is linear in the worker outputs. Decoding goes through
``code.decode``; ``lam_grid_errors`` is the one batched equivalent (many lams
of LeTCC's spline decoder at once, for calibration), tested equal to
``LeTCC(lam_dec=lam).decode``.

Common random numbers: every scheme sees the same rounds and the same sets,
and the noise added to the outputs of set j comes from the generator seeded
with (noise_seed, j), so schemes with the same N see the same noise too.
With ``adversaries=`` (a letcc.adversaries model), the outputs of set j are
corrupted round by round, round b's adversaries and wrong values drawn from
the generator seeded with (adversary_seed, j, 1) in round order, before the
noise: schemes with the same N and output width see the same adversaries
and the same wrong values. A code with ``adversaries`` > 0 is asked for the
workers it flagged, scored against the true adversaries (precision, recall).
Standard errors of a difference between two schemes are paired: the standard
error of the per-(set, round) differences, which is much smaller than either
scheme's own when both err on the same rounds.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from letcc._checks import as_int, as_real
from letcc.adversaries import AdversaryModel, as_adversary_model
from letcc.codes._arrays import is_torch_tensor
from letcc.stragglers import FixedCount, StragglerModel

__all__ = [
    "host64", "group_inputs", "ungroup", "group_labels", "exact_outputs", "coded_outputs",
    "draw_sets", "fixed_count_sets", "sets_by_count", "corrupt_rounds", "SetErrors", "decode_errors", "lam_grid_errors",
    "SchemeMetrics", "summarize", "paired_difference", "evaluate",
]


# ---------------------------------------------------------------- arranging rounds

def host64(a) -> np.ndarray:
    """A numpy, torch or CuPy array as a float64 numpy array on the host."""
    if is_torch_tensor(a):
        a = a.detach().cpu().numpy()
    elif type(a).__module__.startswith("cupy"):
        a = a.get()
    return np.asarray(a, dtype=np.float64)


def _host(a) -> np.ndarray:
    if is_torch_tensor(a):
        return a.detach().cpu().numpy()
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)


def group_inputs(X, K: int) -> np.ndarray:
    """X (n, ...) -> (K, B, ...) rounds of K consecutive inputs (the runtime's
    layout; a remainder of n mod K inputs is dropped). float32 and float64
    stay as they are, anything else becomes float64."""
    X = _host(X)
    K = as_int(K, "K", 1)
    if X.ndim < 1 or X.shape[0] < K:
        raise ValueError(f"need at least K = {K} inputs, got {0 if X.ndim < 1 else X.shape[0]}")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    B = X.shape[0] // K
    return np.ascontiguousarray(X[: B * K].reshape((B, K) + X.shape[1:]).swapaxes(0, 1))


def ungroup(G: np.ndarray) -> np.ndarray:
    """(K, B, ...) -> (B * K, ...), the inverse of :func:`group_inputs`."""
    return np.ascontiguousarray(G.swapaxes(0, 1)).reshape((G.shape[0] * G.shape[1],) + G.shape[2:])


def group_labels(labels, K: int, B: int) -> np.ndarray:
    """Integer class labels (n,) -> (K, B) like group_inputs (n >= B * K)."""
    lab = _host(labels)
    if lab.ndim != 1 or lab.dtype.kind not in "iu":
        raise TypeError(f"labels must be a 1-D array of integer classes, got dtype {lab.dtype} shape {lab.shape}")
    if lab.shape[0] < B * K:
        raise ValueError(f"labels has {lab.shape[0]} entries, fewer than the {B * K} samples of {B} rounds of {K}")
    return np.ascontiguousarray(lab[: B * K].astype(np.int64).reshape(B, K).T)


def _apply(f: Callable, rows: np.ndarray, chunk: int) -> np.ndarray:
    """f over rows (n, ...) in chunks of `chunk` rows -> float64 (n, m)."""
    outs = [host64(f(np.ascontiguousarray(rows[i:i + chunk]))) for i in range(0, rows.shape[0], chunk)]
    return np.concatenate(outs).reshape(rows.shape[0], -1)


def exact_outputs(f: Callable, groups: np.ndarray, chunk: int = 256) -> np.ndarray:
    """f on the uncoded inputs: (K, B, m) float64 (f batched: (n, ...) -> (n, ...))."""
    K, B = groups.shape[:2]
    return _apply(f, groups.reshape((K * B,) + groups.shape[2:]), chunk).reshape(K, B, -1)


def coded_outputs(code, f: Callable, groups: np.ndarray, chunk: int = 256) -> np.ndarray:
    """What every worker returns, f(code.encode(groups)), as (N, B, m) float64.
    The coded inputs have the groups' dtype (float32 images: as the runtime
    makes them)."""
    coded = np.asarray(code.encode(groups))
    N, B = coded.shape[:2]
    return _apply(f, coded.reshape((N * B,) + coded.shape[2:]), chunk).reshape(N, B, -1)


# ---------------------------------------------------------------- straggler sets

def draw_sets(model: StragglerModel, N: int, n_draws: int, rng: np.random.Generator, *,
              redraw_empty: bool = False) -> List[np.ndarray]:
    """``n_draws`` sorted int64 arrays of the workers whose answers count, one
    ``model.sample(N, rng)`` each. A draw in which nobody answers has no
    estimate: it is dropped, or with ``redraw_empty`` drawn again (ValueError
    when almost every draw is empty)."""
    if not isinstance(model, StragglerModel):
        raise TypeError(f"stragglers must be a letcc.stragglers model, got {model!r}")
    sets: List[np.ndarray] = []
    tries = 0
    while len(sets) < n_draws and (redraw_empty or tries < n_draws):
        tries += 1
        if tries > 100 * n_draws:
            raise ValueError(f"{model!r} leaves no worker answering in almost every round for N = {N}")
        avail = np.asarray(model.sample(N, rng).available, dtype=np.int64)
        if avail.size:
            sets.append(avail)
    return sets


def fixed_count_sets(N: int, S: int, n_draws: int, seed, worst_case: bool = False) -> List[np.ndarray]:
    """``n_draws`` sets of N - S answering workers (FixedCount(S)), seeded by
    ``(seed, N, S)`` so that every scheme and every command asking for the same
    (seed, N, S) gets the same sets. S = 0, or ``worst_case`` (the one
    deterministic set that leaves the largest gap): one set."""
    N = as_int(N, "N", 1)
    n_draws = as_int(n_draws, "n_draws", 1)
    S = as_int(S, "S", 0, N - 1)
    rng = np.random.default_rng([int(seed), N, S])
    return draw_sets(FixedCount(S, worst_case=worst_case), N, 1 if S == 0 or worst_case else n_draws, rng)


def sets_by_count(stragglers, N: int, n_draws: int, rng: np.random.Generator) -> Dict[int, List[np.ndarray]]:
    """{S: [sorted answering-index arrays]}: ``n_draws`` draws of each of
    ``stragglers`` (None: every count 0 .. N // 2; an int S_max: 0 .. S_max; a
    sequence of counts and letcc.stragglers models), grouped by how many
    workers did not answer. Draws in which nobody answers are dropped."""
    if stragglers is None:
        stragglers = N // 2
    if isinstance(stragglers, StragglerModel):
        stragglers = [stragglers]
    elif not isinstance(stragglers, (str, bytes, Sequence)):
        stragglers = list(range(as_int(stragglers, "stragglers", 0, N - 1) + 1))
    if isinstance(stragglers, (str, bytes)) or len(stragglers) == 0:
        raise TypeError(f"stragglers must be None, a count, or a non-empty sequence of counts and "
                        f"letcc.stragglers models, got {stragglers!r}")
    out: Dict[int, List[np.ndarray]] = {}
    for item in stragglers:
        if not isinstance(item, StragglerModel):
            item = FixedCount(as_int(item, "straggler count", 0, N - 1))
        for avail in draw_sets(item, N, n_draws, rng):
            out.setdefault(N - int(avail.size), []).append(avail)
    if not out:
        raise ValueError(f"{stragglers!r} left nobody answering in every draw")
    return out


# ---------------------------------------------------------------- decoding

def _noisy(YF: np.ndarray, noise_sigma: float, noise_seed: int, set_id: int) -> np.ndarray:
    if noise_sigma <= 0:
        return YF
    return YF + noise_sigma * np.random.default_rng([noise_seed, set_id]).standard_normal(YF.shape)


def corrupt_rounds(YF: np.ndarray, avail: np.ndarray, adversaries: AdversaryModel, seed: int, set_id: int):
    """(YF', adversarial): YF (n, B, m), the outputs of the workers `avail`
    in B rounds, with every round's adversaries replaced (round b:
    ``adversaries.corrupt`` with the (seed, set_id, 1) generator, rounds in
    order); adversarial (B, n) bool, True where row i of round b was replaced."""
    rng = np.random.default_rng([int(seed), int(set_id), 1])
    out = np.array(YF, dtype=np.float64, copy=True)
    mask = np.zeros((YF.shape[1], YF.shape[0]), dtype=bool)
    for b in range(YF.shape[1]):
        out[:, b], adv = adversaries.corrupt(YF[:, b], avail, rng)
        mask[b] = np.isin(avail, adv)
    return out, mask


@dataclass
class SetErrors:
    """One scheme decoded from n sets, B rounds each. ``mse`` (n, B): the
    per-round (1/K) sum_k ||f^(x_k) - f(x_k)||^2; ``correct`` (n, B): how many
    of the round's K argmaxes equal the labels (None without labels);
    ``agree`` (n, B): how many equal the base model's own argmax. With
    adversaries: ``adversarial`` (n, B) wrong answers in the round,
    ``flagged`` / ``flagged_true`` (n, B) workers the code flagged / of them
    truly adversarial (None for a code that does not flag)."""
    mse: np.ndarray
    correct: Optional[np.ndarray]
    agree: np.ndarray
    K: int
    adversarial: Optional[np.ndarray] = None
    flagged: Optional[np.ndarray] = None
    flagged_true: Optional[np.ndarray] = None


def decode_errors(code, outputs: np.ndarray, exact: np.ndarray, sets: Sequence, labels=None,
                  noise_sigma: float = 0.0, noise_seed: int = 0, adversaries: Optional[AdversaryModel] = None,
                  adversary_seed: int = 0) -> SetErrors:
    """Decode every round from every set through ``code.decode``.

    outputs (N, B, m) from coded_outputs with the same code's encoder, exact
    (K, B, m), labels (K, B) or None, sets: index arrays (or objects with an
    ``.available`` attribute, such as a StragglerDraw). See the module
    docstring for the noise. A code whose decode is a linear map fixed by
    the set (``code.linear_in_outputs``, letcc.codes.Code) decodes all B
    rounds of a set in one call; any other (GCV, outlier tests) round by
    round, as the runtime decodes them. ``adversaries``: see the module
    docstring (corrupt_rounds); a code with ``adversaries`` > 0 is decoded
    with ``return_flagged=True`` and its flags counted.
    """
    adversaries = as_adversary_model(adversaries)
    K, B = exact.shape[:2]
    base_pred = exact.argmax(-1)
    n = len(sets)
    mse = np.empty((n, B))
    agree = np.empty((n, B), dtype=np.int64)
    correct = None if labels is None else np.empty((n, B), dtype=np.int64)
    flags = bool(code.adversaries)
    n_adv = np.zeros((n, B), dtype=np.int64) if adversaries is not None else None
    n_flag = np.zeros((n, B), dtype=np.int64) if flags else None
    n_true = np.zeros((n, B), dtype=np.int64) if flags else None
    for j, avail in enumerate(sets):
        avail = np.asarray(getattr(avail, "available", avail), dtype=np.int64)
        YF = outputs[avail]
        mask = None
        if adversaries is not None:
            YF, mask = corrupt_rounds(YF, avail, adversaries, adversary_seed, j)
            n_adv[j] = mask.sum(axis=1)
        YF = _noisy(YF, noise_sigma, noise_seed, j)
        if code.linear_in_outputs and not flags:
            est = np.asarray(code.decode(YF, avail), dtype=np.float64).reshape(exact.shape)
        else:
            rows = []
            for b in range(B):
                if flags:
                    e, fl = code.decode(YF[:, b], avail, return_flagged=True)
                    n_flag[j, b] = fl.size
                    if mask is not None:
                        n_true[j, b] = np.count_nonzero(np.isin(fl, avail[mask[b]]))
                else:
                    e = code.decode(YF[:, b], avail)
                rows.append(np.asarray(e, dtype=np.float64).reshape(K, -1))
            est = np.stack(rows, axis=1)
        d = est - exact
        mse[j] = np.einsum("kbm,kbm->b", d, d) / K
        pred = est.argmax(-1)
        agree[j] = np.count_nonzero(pred == base_pred, axis=0)
        if labels is not None:
            correct[j] = np.count_nonzero(pred == labels, axis=0)
    return SetErrors(mse, correct, agree, K, n_adv, n_flag, n_true)


def lam_grid_errors(beta: np.ndarray, alpha: np.ndarray, outputs: np.ndarray, exact: np.ndarray,
                    sets: Sequence[np.ndarray], lams, labels=None, noise_sigma: float = 0.0,
                    noise_seed: int = 0, operator: Callable[[np.ndarray, float], np.ndarray] | None = None,
                    set_ids: Sequence[int] | None = None, per_row: bool = False) -> dict:
    """The errors of LeTCC's spline decoder for many lams per set at once: the
    batched equivalent of ``LeTCC(K, N, lam_dec=lam, alpha=alpha,
    beta=beta).decode`` for every lam (tested equal to it), for calibration.

    outputs (N, B, m), exact (K, B, m), labels (K, B) or None; sets: sorted
    answering-index arrays; ``lams(nodes)`` -> the lam values to score for a
    set with these (ascending) nodes (or a sequence holding each set's lam
    values); a value may be a float or a (K,) array (one lam per alpha_k, as
    LeTCC applies it). All rounds are decoded at once with one (K, |F|)
    operator per set and lam; ``operator(nodes, lam)`` replaces it with any
    other (K, |F|) matrix (e.g. BACC's). Noise as decode_errors, seeded by
    (noise_seed, set_ids[j]) (default set_ids: 0, 1, ...), so a set decoded
    again in another call sees the same noise.

    Returns {"mse": (n_sets, L), "acc": (n_sets, L) or None}: the mean over
    rounds and the K inputs of the squared norm of the error, and the fraction
    of decoded argmaxes equal to labels. per_row=True keeps the K inputs
    apart: (n_sets, L, K) each (means over rounds only).
    """
    from letcc.codes.letcc_code import spline_decoder_matrix

    K, B = exact.shape[:2]
    mse_rows, acc_rows = [], []
    for j, F in enumerate(sets):
        nodes = beta[F]
        YF = _noisy(outputs[F], noise_sigma, noise_seed, j if set_ids is None else int(set_ids[j]))
        lam_values = lams(nodes) if callable(lams) else lams[j]
        A = np.stack([operator(nodes, lam) if operator is not None
                      else spline_decoder_matrix(nodes, alpha, lam) for lam in lam_values])
        est = np.einsum("lkf,fbm->lkbm", A, YF, optimize=True)  # every lam, every round
        d = est - exact
        if per_row:
            mse_rows.append(np.einsum("lkbm,lkbm->lk", d, d) / B)
        else:
            d = d.reshape(A.shape[0], -1)
            mse_rows.append(np.einsum("lx,lx->l", d, d) / (B * K))
        if labels is not None:
            acc_rows.append(np.mean(est.argmax(-1) == labels, axis=2 if per_row else (1, 2)))
    return {"mse": np.array(mse_rows), "acc": np.array(acc_rows) if labels is not None else None}


# ---------------------------------------------------------------- summaries

@dataclass
class SchemeMetrics:
    """One scheme at one (K, N, S). ``mse`` on the model's outputs; ``rel_acc`` =
    accuracy / base accuracy; standard errors over the rounds x sets."""
    scheme: str
    mse: float                      # mean over rounds and straggler sets
    mse_se: float                   # standard error of that mean (over rounds x sets)
    accuracy: Optional[float]       # accuracy of argmax f^ (None without labels)
    base_accuracy: Optional[float]  # accuracy of argmax f on the same inputs
    rel_acc: Optional[float]        # accuracy / base_accuracy (None when undefined)
    rounds: int                     # B
    draws: int                      # straggler sets
    agreement: Optional[float] = None  # fraction of estimates whose argmax is the base model's argmax
    lam_enc: Optional[float] = None
    lam_dec: Optional[Union[float, str]] = None
    rel_acc_se: Optional[float] = None  # standard error of rel_acc (over rounds x sets)
    flag_precision: Optional[float] = None  # flagged workers that were adversarial / flagged (codes that flag)
    flag_recall: Optional[float] = None     # adversaries flagged / adversaries (with an adversary model)

    def to_dict(self) -> dict:
        return asdict(self)


def _se(x: np.ndarray) -> float:
    x = x.ravel()
    return float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else 0.0


def summarize(name: str, errors: SetErrors, exact: np.ndarray, labels=None) -> SchemeMetrics:
    """Means and standard errors of one scheme's SetErrors."""
    n, B = errors.mse.shape
    K = errors.K
    acc = base = rel = rel_se = None
    if labels is not None and errors.correct is not None:
        acc = float(errors.correct.sum()) / (n * K * B)
        base = float(np.mean(exact.argmax(-1) == labels))
        if base > 0:
            rel = acc / base
            rel_se = _se(errors.correct / (K * base))
    precision = recall = None
    if errors.flagged is not None:
        flagged, hits = int(errors.flagged.sum()), int(errors.flagged_true.sum())
        precision = hits / flagged if flagged else None
        if errors.adversarial is not None and errors.adversarial.sum() > 0:
            recall = hits / int(errors.adversarial.sum())
    return SchemeMetrics(name, float(errors.mse.mean()), _se(errors.mse), acc, base, rel, B, n,
                         agreement=float(errors.agree.sum()) / (n * K * B), rel_acc_se=rel_se,
                         flag_precision=precision, flag_recall=recall)


def paired_difference(scheme: SetErrors, reference: SetErrors, exact: np.ndarray, labels=None) -> dict:
    """``scheme`` against ``reference`` on the same rounds and sets:
    ``mse_reduction_pct`` (100 (1 - mse / reference mse), positive = scheme
    better) and ``rel_acc_gain_pts`` (RelAcc difference in percentage points),
    each with its paired standard error (``_se``) and whether the difference
    is within two standard errors of zero (``within_noise``)."""
    out = {"mse_reduction_pct": None, "mse_reduction_se": None,
           "rel_acc_gain_pts": None, "rel_acc_gain_se": None, "within_noise": {"mse": None, "rel_acc": None}}
    ref_mse = float(reference.mse.mean())
    if ref_mse > 0:
        d = scheme.mse - reference.mse
        out["mse_reduction_pct"] = -100.0 * float(d.mean()) / ref_mse
        out["mse_reduction_se"] = 100.0 * _se(d) / ref_mse
        out["within_noise"]["mse"] = abs(out["mse_reduction_pct"]) <= 2 * out["mse_reduction_se"]
    if labels is not None and scheme.correct is not None and reference.correct is not None:
        base = float(np.mean(exact.argmax(-1) == labels))
        if base > 0:
            d = (scheme.correct - reference.correct) / (scheme.K * base)
            out["rel_acc_gain_pts"] = 100.0 * float(d.mean())
            out["rel_acc_gain_se"] = 100.0 * _se(d)
            out["within_noise"]["rel_acc"] = abs(out["rel_acc_gain_pts"]) <= 2 * out["rel_acc_gain_se"]
    return out


def evaluate(schemes, outputs, exact: np.ndarray, sets, labels=None, *, reference: Optional[str] = None,
             noise_sigma: float = 0.0, noise_seed: int = 0, adversaries=None, adversary_seed: int = 0) -> dict:
    """Every named scheme decoded from the same sets: MSE / RelAcc per S.

    schemes: a code, or a mapping {name: code}; outputs: (N, B, m) worker
    outputs, or a mapping with one per name (a scheme's own encoder's:
    coded_outputs); exact (K, B, m); sets: a mapping {S: [answering sets]}
    (fixed_count_sets, sets_by_count), or a plain sequence of sets (grouped
    here by ``S = N - |F|``); labels (K, B) or None. ``adversaries``: a
    letcc.adversaries model corrupting every scheme's outputs with the same
    draws (decode_errors), or a mapping {name: model or None} (None: that
    scheme decodes honest outputs, e.g. an adversary-free reference).

    Returns {S: {"schemes": {name: SchemeMetrics}, "errors": {name: SetErrors},
    "vs_reference": {name: paired_difference(name, reference)}}} (the last
    only with ``reference``, one of the names).
    """
    if not isinstance(schemes, Mapping):
        schemes = {"scheme": schemes}
    if not isinstance(outputs, Mapping):
        outputs = {name: outputs for name in schemes}
    missing = [name for name in schemes if name not in outputs]
    if missing:
        raise ValueError(f"no worker outputs for scheme(s) {missing}")
    if reference is not None and reference not in schemes:
        raise ValueError(f"reference {reference!r} is not one of the schemes {list(schemes)}")
    noise_sigma = as_real(noise_sigma, "noise_sigma", 0.0)
    if not isinstance(sets, Mapping):
        grouped: Dict[int, list] = {}
        for F in sets:
            F = np.asarray(getattr(F, "available", F), dtype=np.int64)
            grouped.setdefault(next(iter(schemes.values())).N - int(F.size), []).append(F)
        sets = grouped
    if not isinstance(adversaries, Mapping):
        adversaries = {name: adversaries for name in schemes}
    adversaries = {name: as_adversary_model(adversaries.get(name)) for name in schemes}
    result = {}
    for S in sorted(sets):
        errs = {name: decode_errors(code, outputs[name], exact, sets[S], labels, noise_sigma, noise_seed,
                                    adversaries[name], adversary_seed)
                for name, code in schemes.items()}
        entry = {"schemes": {name: summarize(name, e, exact, labels) for name, e in errs.items()},
                 "errors": errs}
        if reference is not None:
            entry["vs_reference"] = {name: paired_difference(e, errs[reference], exact, labels)
                                     for name, e in errs.items() if name != reference}
        result[S] = entry
    return result
