"""LamPolicy: the decoder's smoothing chosen from what it sees, per (K, N),
calibrated or not, saved and loaded.

The formulas and their constants live in letcc.codes.lam_defaults (the one
home of the lam rules); a LamPolicy holds one rule per calibrated (K, N) and a
default rule for the rest, and answers LeTCC's protocol by asking the rule for
(K, N). The calibration itself is letcc.tune.calibrate_policy (with the grid
search letcc.tune), above the straggler models; LamPolicy.calibrate calls it.

A lam policy answers, on every decode, "which lam_dec for this answering
set?" from what the decoder knows before looking at the outputs: the nodes of
the workers that answered b_1 < ... < b_m (on [-1, 1]), the points alpha_k
where the decoder is evaluated, N and K.

Local lams (the default): one lam per alpha_k,

    h_k = length of the interval of [-1, b_1, ..., b_m, 1] that holds alpha_k
    x_k = how far alpha_k lies beyond [b_1, b_m] (0 inside)
    lam_k = c * max(h_k, a * x_k)^3

and the estimate of f(x_k) is the smoothing spline with lam_k, evaluated at
alpha_k (LeTCC applies the K rows as one dense operator, cached per set).

Global lams (local=False; the default before): one lam for the whole decode,

    g = max_i (b_{i+1} - b_i)          the largest hole stragglers left inside
    d = max(b_1 + 1, 1 - b_m)          how far the outermost answer is from the end
    lam_dec = max(psi(g), k_end * d^3)

with psi non-decreasing and k_end >= 0. In both, removing workers only widens
the intervals (and g, d, x_k), so more stragglers never give less smoothing
(monotone by construction, whatever the calibration found).

Why ^3: the Reinsch system R + lam Q^T Q balances its two parts at lam ~ h^3
for spacing h, and a smoothing spline is locally a kernel smoother of
bandwidth ~ (lam * local spacing)^(1/4): lam = c h^3 keeps the bandwidth a
fixed multiple of the spacing (letcc.codes.lam_defaults has the rate
argument). Why local: that holds only where the spacing is h. Chebyshev
worker nodes are dense near the ends and sparse in the middle, and
stragglers open holes anywhere; one lam is a compromise between them. Per
output point the best lam differs by ~3 orders of magnitude between the
middle and the outermost alphas, and the local rule gains 5-10 points of
improvement over BACC on every model and pair measured (lambda.md). Why the
end term: a missing *end* worker makes the decoder extrapolate linearly to
the outer alphas, which sit where the inputs along the encoder curve are
densest; those points want far more smoothing than an interior hole as wide.

Three ways to get a policy:

- ``LamPolicy()``, the uncalibrated default: lam_k = c0 * max(h_k, a x_k)^3
  with c0 = LOCAL_C0, a = LOCAL_END_FACTOR (``LamPolicy(local=False)``: the
  global c0 * max(g, a d)^3, GLOBAL_C0 and GLOBAL_END_FACTOR), fitted to three
  trained models (LeNet-5/MNIST, RepVGG, a small ViT) and two (K, N) pairs
  (bench/lambda_policy.py --fit-default, lambda.md); the same rule as
  LeTCC's lam_dec='auto' (letcc.codes.lam_defaults.LocalGapLam);
- ``LamPolicy.calibrate(f, X_calib, K, N, target="mse" | "relacc")``: decode
  a small calibration batch from many straggler sets (the same sets for every
  lam) and score the errors on a grid of lam. Local: each output point's
  error depends on its own lam only, so every (c, a, lam_enc) of a grid is
  scored from the per-point errors (interpolated in log lam), the best few
  are decoded exactly, the best of those wins. Global: bin the sets by g,
  pick one lam per bin, non-decreasing across bins (dynamic programming over
  the grid), for each candidate k_end (and lam_enc); keep the best. A few
  seconds, plus one pass of f over the coded calibration batch per lam_enc
  tried;
- ``LamPolicy.load(path)``: a policy saved with ``save(path)`` (JSON).

target="mse" minimises the decoded outputs' mean squared error (each straggler
count weighted equally); target="relacc" maximises their argmax accuracy
against labels (MSE breaks ties). They disagree at large S: smoothing pulls an
estimate towards its neighbours' outputs, which lowers the MSE but moves the
argmax (measured in lambda.md).

``noise="gcv"`` makes lam_dec return None, i.e. GCV on each decode's outputs
(letcc.select_lam_gcv): right when worker outputs carry noise of unknown size
(GCV estimates it), wrong for pure coding error, where it picks lam poorly
(lambda.md, "GCV"). With noise of a known size, calibrate with ``noise_sigma``.

Per decode the policy costs a dict lookup for an answering set it has seen
before, else one pass over the |F| nodes (and a bisection per alpha_k, or in
a short table): no search. Policies calibrated with custom alpha/beta assume the code uses the
same nodes (tables are keyed by (K, N) only). lam is scipy's ``make_smoothing_spline`` lam (plain sum
in the data term, no 1/n), on nodes in [-1, 1].
"""
from __future__ import annotations

import json
import math
from pathlib import Path
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from letcc._checks import as_choice, as_int, as_real
from letcc.metrics import TARGETS
from letcc.codes.lam_defaults import (GLOBAL_C0, GLOBAL_END_FACTOR, LOCAL_C0, LOCAL_END_FACTOR, GapScaledLam,
                                      GapTableLam, LocalGapLam, effective_gap, gap_and_end, local_gaps)
from letcc.splines._validation import as_lam, as_lams
from letcc._typing import ArrayLike

if TYPE_CHECKING:
    from letcc.codes import LeTCC

__all__ = ["LamPolicy", "gap_and_end", "effective_gap", "local_gaps", "DEFAULT_C0", "END_FACTOR",
           "LOCAL_C0", "LOCAL_END_FACTOR", "TARGETS", "NOISE_MODES"]

FORMAT = "letcc.LamPolicy/2"
OLD_FORMATS = ("letcc.LamPolicy/1",)  # one lam per decode only (local = False)
NOISE_MODES = ("ignore", "gcv")
# The global rule's constants under the names this module has always had.
DEFAULT_C0 = GLOBAL_C0
END_FACTOR = GLOBAL_END_FACTOR


class LamPolicy:
    """lam_dec from the answering nodes (see the module docstring) and a fixed lam_enc.

    Parameters
    ----------
    tables : dict, optional
        {(K, N): table}, calibrated for (K, N); (K, N) pairs without a table
        use the default formula. Normally made by `calibrate` or `load`. Two
        kinds:

        - local (``{"local": True, "c": c, "end_factor": a, "lam_enc": float}``):
          one lam per alpha_k, lam_k = c * max(h_k, a x_k)^3 (LocalGapLam);
        - global (``{"edges": [e_0 < ... < e_n] (log10 g bin edges),
          "lam": [l_1 <= ... <= l_n] (psi per bin), "end_k": k_end,
          "lam_enc": float}``): one lam per decode, max(psi(g), k_end d^3);
          inside bin i psi = l_i, below e_0 and above e_n psi scales like g^3
          from the nearest edge (GapTableLam).
    local : bool, default True
        The uncalibrated formula: local (LocalGapLam) or global (GapScaledLam).
    c0, end_factor : float, optional
        The uncalibrated formula's constants (default LOCAL_C0 and
        LOCAL_END_FACTOR when local, GLOBAL_C0 and GLOBAL_END_FACTOR when not).
    lam_enc : float
        Encoder lam for (K, N) pairs without a table (default 0: every encoder
        smoothing tried moved the coded inputs off the inputs and cost MSE).
    noise : 'ignore' or 'gcv'
        'gcv': lam_dec returns None, i.e. GCV per decode (noisy workers).
    target : 'mse' or 'relacc'
        What the tables were calibrated for (recorded by save()).
    report : dict
        Calibration record (scores, timings); saved with the policy.

    LeTCC calls ``lam_dec_at(beta_available, alpha, N, K)`` (a float, or a
    read-only (K,) array of lams, one per alpha_k) or, where this policy's
    rule for (K, N) is the local-gap rule, builds from ``local_gap_rule(K, N)``
    (letcc.codes.lam_defaults' protocol). Answers are remembered per
    answering set (a dict lookup on later calls), so treat a policy's tables
    as read-only once it is in use.
    """

    def __init__(self, tables: Mapping[Any, dict] | None = None, *, local: bool = True, c0: float | None = None,
                 end_factor: float | None = None, lam_enc: float = 0.0, noise: str = "ignore",
                 target: str = "mse", report: dict | None = None) -> None:
        if not isinstance(local, (bool, np.bool_)):
            raise TypeError(f"local must be True or False, got {local!r}")
        self.local = bool(local)
        self.c0 = as_real((LOCAL_C0 if self.local else GLOBAL_C0) if c0 is None else c0, "c0", 0.0)
        self.end_factor = as_real((LOCAL_END_FACTOR if self.local else GLOBAL_END_FACTOR) if end_factor is None
                                  else end_factor, "end_factor", 0.0)
        self._lam_enc = as_lam(lam_enc)
        self.noise = as_choice(noise, NOISE_MODES, "noise")
        self.target = as_choice(target, TARGETS, "target")
        self.tables: dict[tuple[int, int], dict] = {}
        for key, table in (tables or {}).items():
            self.tables[_key(key)] = _checked_table(key, table)
        self.report = dict(report or {})
        rule = LocalGapLam if self.local else GapScaledLam
        self._default_rule = rule(self.c0, self._lam_enc, self.end_factor)
        self._rules: dict = {}  # (K, N) -> (its table, the rule made from it)

    # -- the rules -----------------------------------------------------------

    def rule(self, K: int, N: int) -> Any:
        """The letcc.codes.lam_defaults rule this policy applies at (K, N):
        the calibrated table's, else the default formula's."""
        t = self.tables.get((K, N))
        if t is None:
            return self._default_rule
        made = self._rules.get((K, N))
        if made is None or made[0] is not t:
            if t["local"]:
                made = (t, LocalGapLam(t["c"], t["lam_enc"], t["end_factor"]))
            else:
                made = (t, GapTableLam(t["edges"], t["lam"], t["end_k"], t["lam_enc"]))
            self._rules[(K, N)] = made
        return made[1]

    # -- the protocol LeTCC calls --------------------------------------------

    def lam_dec_at(self, beta_available: np.ndarray, alpha: np.ndarray, N: int, K: int
                   ) -> float | np.ndarray | None:
        """lam for the decoder of the workers at nodes ``beta_available``
        (ascending float64) evaluated at ``alpha``: a float (one lam), a
        read-only (K,) array (one lam per alpha_k), or None (GCV) when
        noise='gcv'."""
        if self.noise == "gcv":
            return None
        return self.rule(K, N).lam_dec_at(beta_available, alpha, N, K)

    def lam_dec(self, beta_available: np.ndarray, N: int, K: int) -> float | np.ndarray | None:
        """lam_dec_at with alpha = Chebyshev points of the first kind (the
        codes' default alpha)."""
        if self.noise == "gcv":
            return None
        return self.rule(K, N).lam_dec(beta_available, N, K)

    def local_gap_rule(self, K: int, N: int) -> tuple[float, float] | None:
        """(c, end_factor) where the rule for (K, N) is the local-gap rule, else None."""
        return None if self.noise == "gcv" else self.rule(K, N).local_gap_rule(K, N)

    def lam_enc(self, K: int, N: int) -> float:
        return self.rule(K, N).lam_enc(K, N)

    def is_local(self, K: int, N: int) -> bool:
        """Whether (K, N) gets one lam per alpha_k (else one per decode)."""
        t = self.tables.get((K, N))
        return self.local if t is None else t["local"]

    def psi(self, g: float, K: int, N: int) -> float:
        """The lam for an interval (local) or largest gap (global) of width g
        with no end term: c0 g^3, c g^3, or the calibrated table's psi(g)."""
        return self.rule(K, N).psi(float(g))

    def end_k(self, K: int, N: int) -> float:
        """k in the end term k * d^3 (global: d the end distance; local: d the
        distance of alpha_k beyond the outermost answering node)."""
        return self.rule(K, N).end_k()

    def code(self, K: int, N: int, **kwargs: Any) -> LeTCC:
        """A LeTCC(K, N) that uses this policy for both lams."""
        from letcc.codes import LeTCC
        return LeTCC(K, N, lam_enc=self.lam_enc(K, N), lam_dec=self, **kwargs)

    # -- calibration (letcc.tune.calibrate_policy) ----------------------------

    @classmethod
    def calibrate(cls, f: Callable, X_calib: ArrayLike, K: int, N: int, **kwargs: Any) -> "LamPolicy":
        """Calibrate the lam_dec rule (and lam_enc) for (K, N) on a calibration
        batch: letcc.tune.calibrate_policy (its docstring lists the options:
        target, labels, stragglers, n_draws, seed, grids, noise_sigma, into,
        alpha, beta, local)."""
        from letcc.tune import calibrate_policy
        return calibrate_policy(cls, f, X_calib, K, N, **kwargs)

    def with_table(self, K: int, N: int, table: dict, target: str, report: dict) -> "LamPolicy":
        """A copy of this policy with (K, N)'s table (checked) and its
        calibration report added."""
        policy = type(self).from_dict(self.to_dict())
        policy.tables[(K, N)] = _checked_table((K, N), table)
        policy.target = as_choice(target, TARGETS, "target")
        policy.report[f"{K},{N}"] = report
        return policy

    # -- persistence ---------------------------------------------------------
    def to_dict(self) -> dict:
        tables = []
        for (K, N), t in sorted(self.tables.items()):
            keys = ("local", "c", "end_factor", "lam_enc") if t["local"] else ("local", "edges", "lam", "end_k", "lam_enc")
            tables.append({"K": K, "N": N, **{k: t[k] for k in keys}})
        return {
            "format": FORMAT,
            "target": self.target,
            "noise": self.noise,
            "default": {"local": self.local, "c0": self.c0, "end_factor": self.end_factor, "lam_enc": self._lam_enc},
            "tables": tables,
            "report": self.report,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "LamPolicy":
        fmt = d.get("format") if isinstance(d, dict) else type(d).__name__
        if fmt != FORMAT and fmt not in OLD_FORMATS:
            raise ValueError(f"not a saved LamPolicy: expected format {FORMAT!r}, got {fmt!r}")
        dflt = d.get("default", {})
        try:
            tables = {(t["K"], t["N"]): t for t in d.get("tables", [])}
        except (TypeError, KeyError):
            raise ValueError(f"saved LamPolicy tables must each have K and N, got {d.get('tables')!r}") from None
        local = bool(dflt.get("local", False))  # format /1 had only the global formula
        return cls(tables, local=local, c0=dflt.get("c0"), end_factor=dflt.get("end_factor"),
                   lam_enc=dflt.get("lam_enc", 0.0), noise=d.get("noise", "ignore"),
                   target=d.get("target", "mse"), report=d.get("report", {}))

    def save(self, path: str | os.PathLike) -> None:
        """Write the policy as JSON (tables, default formula, calibration report)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "LamPolicy":
        """A policy written by save()."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LamPolicy) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        cal = ", ".join(f"(K={K}, N={N})" for K, N in sorted(self.tables)) or "nothing"
        form = (f"c0 * max(h_k, {self.end_factor:g} x_k)^3 per alpha_k" if self.local
                else f"c0 * max(g, {self.end_factor:g} d)^3")
        return (f"LamPolicy(calibrated for {cal}; default lam = {form}, c0 = {self.c0:g}; "
                f"target={self.target!r}, noise={self.noise!r})")


# ---------------------------------------------------------------- tables

def _key(key) -> tuple[int, int]:
    try:
        K, N = key
    except (TypeError, ValueError):
        raise TypeError(f"table keys must be (K, N) pairs, got {key!r}") from None
    return as_int(K, "K", 1), as_int(N, "N", 1)


def _checked_table(key, table) -> dict:
    if not isinstance(table, dict):
        raise ValueError(f"table {key!r} must be a dict, got {table!r}")
    local = table.get("local", False)
    if not isinstance(local, (bool, np.bool_)):
        raise ValueError(f"table {key!r}: 'local' must be true or false, got {local!r}")
    if local:
        try:
            c, a = table["c"], table["end_factor"]
        except KeyError:
            raise ValueError(f"local table {key!r} must have 'c' and 'end_factor', got {table!r}") from None
        return {"local": True, "c": as_real(c, f"table {key!r} c", 0.0),
                "end_factor": as_real(a, f"table {key!r} end_factor", 0.0), "lam_enc": as_lam(table.get("lam_enc", 0.0))}
    try:
        edges = [float(e) for e in table["edges"]]
        lam = as_lams(table["lam"], f"table {key!r} lam")
    except (TypeError, KeyError):
        raise ValueError(f"table {key!r} must be a dict with 'edges' and 'lam' lists, got {table!r}") from None
    if len(lam) < 1 or len(edges) != len(lam) + 1:
        raise ValueError(f"table {key!r}: need n >= 1 lams and n + 1 edges, got {len(lam)} and {len(edges)}")
    if not all(math.isfinite(e) for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"table {key!r}: 'edges' must be finite and strictly increasing, got {edges}")
    if any(b < a for a, b in zip(lam, lam[1:])):
        raise ValueError(f"table {key!r}: 'lam' must be non-decreasing (larger gaps, more smoothing), got {lam}")
    return {"local": False, "edges": edges, "lam": lam, "end_k": as_real(table.get("end_k", GLOBAL_C0 * GLOBAL_END_FACTOR ** 3), "end_k", 0.0),
            "lam_enc": as_lam(table.get("lam_enc", 0.0))}
