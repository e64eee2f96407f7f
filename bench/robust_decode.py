"""Decode time of one round with the robust decoder against the plain one (issue 28: <= 3x at m >= 1000).

LeTCC(8, 24) and LeTCC(8, 24, adversaries=2), N = 24, S = 2 (one fixed answering set of 22
workers, in ascending order), m outputs per answer as m / 10 vectors of 10 classes:

* probabilities, clean          softmax rows of a smooth map of the coded inputs (both decode in
                                log space; the robust one runs the clean-round test, erases nothing)
* probabilities, 2 sign-flipped two answers negated (letcc.adversaries.SignFlip): they fail the
                                probability check and are erased without the locator
* logits, clean                 the same map's logits (not probabilities: linear space; plain is one
                                banded pass)
* logits, 2 erased              two answers shifted by +10 (letcc.adversaries.ConstantShift; the
                                logits' spread is ~0.6): the clean-round test fires, the locator
                                erases one, rescores, erases the other (a negated logit answer is
                                not flagged on these smooth logits: it stays within their range)
* logits, 2 adjacent erased     the same shift on two answers side by side (the 10th and 11th
                                answering workers): the pair stage erases both in its first pass

'no pair stage' is the same robust decoder with the pair stage off (its single thresholds, the
locator pass without the adjacent residuals' dot products: the decoder before the pair stage).

Each (case, m) times the decoders interleaved (plain, robust, plain on the honest answers, plain,
...) after warm-up calls that build the plans and the calibration, and reports the median of each
(many calls: the machine is shared and noisy) and the ratios: to the plain decode of the same
answers, and to the plain decode of the same round without the adversaries (where the wrong answers
change what the plain decoder does: sign-flipped probabilities are not probabilities, so plain
decodes them linearly, a cheaper decode than the log space the robust one keeps). letcc runs one thread (as bench/adversarial.py's
decode-time table), numpy's BLAS as it is.

Reading. A clean round costs one compiled scoring pass over the answers (letcc._core.locator_scores:
the detection spline's banded residuals and the neighbour distances, O(n m)) next to the plain decode;
from 16 MiB of answers (m = 10^5 here, float64; letcc.codes.letcc_code.PASS_DECODE_MIN_BYTES) that pass
also makes the decode, on the column tiles it has in cache, so a clean round reads the answers once
(bit for bit the plain decode; below that size both are bound by their arithmetic and fusing them
saved nothing, and where the round has an erasure the decode made in the pass is wasted).
Each later step rescores the answers kept without a scoring pass: one pass of cross products
against the erased answers' residual rows (letcc._core.locator_rescore; about 0.4-0.5x a plain
decode for one erased answer at m >= 10^4), and the steps themselves (tests, erasures, the pair
choice, the swap step) run in one compiled call (letcc._core.spline_locate). The rows kept are
then decoded in place (no copy) by the plain decoder of their answering set. So a round with 2
erasures one at a time makes a scoring pass, a rescoring pass and a decode; 2 erased as a pair,
a scoring pass, one rescoring pass for the candidate pairs the pair choice weighs (none where the
pairs one apart are not erasable) and a decode. 'probabilities, 2 sign-flipped' never reaches the locator (the
probability check erases both): its cost is the check's answer-by-answer logs and the log-space
decode, unchanged by the locator; its 'plain, same' decode is a linear one (sign-flipped rows
are not probabilities), so compare it with the plain decode of the honest answers. The machine is
shared (2 cores): quote the ratios, not the microseconds.

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/robust_decode.py
Writes bench/results/robust_decode.md (``--out DIR`` elsewhere; ``--quick``: small m only, a check
that it runs). ``--compare OLD.md [--compare-label TEXT]``: also a table of this run's ratios next to
those of an earlier run's results file (e.g. another commit's code, run just before on the same machine).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import letcc
from _report import markdown_table, write_report
from letcc.adversaries import ConstantShift, SignFlip
from letcc.codes import LeTCC

K, N, S, E = 8, 24, 2, 2
WIDTHS = (10, 1000, 10000, 100000)
CASES = ("probabilities, clean", "probabilities, 2 sign-flipped", "logits, clean", "logits, 2 erased",
         "logits, 2 adjacent erased")


def rounds(m: int, rng: np.random.Generator, F: np.ndarray) -> dict:
    """case -> (answers, honest answers), each (N - S, m / 10, 10), of the workers F."""
    code = LeTCC(K, N)
    U = np.asarray(code.encoder(rng.standard_normal((K, m // 10, 3))))
    logits = np.einsum("cd,nbd->nbc", rng.standard_normal((10, 3)), np.sin(U))
    P = np.exp(logits - logits.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    P = np.ascontiguousarray(P[F])
    L = np.ascontiguousarray(logits[F])
    flip = SignFlip(E)
    return {"probabilities, clean": (P, P),
            "probabilities, 2 sign-flipped": (flip.corrupt(P, F, np.random.default_rng(1))[0], P),
            "logits, clean": (L, L),
            "logits, 2 erased": (ConstantShift(E, shift=10.0).corrupt(L, F, np.random.default_rng(1))[0], L),
            "logits, 2 adjacent erased": (ConstantShift(workers=F[9:11].tolist(), shift=10.0).corrupt(
                L, F, np.random.default_rng(1))[0], L)}


def median_times(fns, budget_s: float, min_calls: int = 21, max_calls: int = 2001):
    """Median seconds per call of each fn, called in turn (interleaved) until
    `budget_s` is spent (at least min_calls, at most max_calls calls each)."""
    for f in fns:           # warm-up
        f()
    times = [[] for _ in fns]
    t_end = time.perf_counter() + budget_s
    while len(times[0]) < max_calls and (len(times[0]) < min_calls or time.perf_counter() < t_end):
        for f, t in zip(fns, times):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times], len(times[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    ap.add_argument("--budget", type=float, default=4.0, help="seconds of interleaved calls per (case, m)")
    ap.add_argument("--threads", type=int, default=1, help="letcc's threads")
    ap.add_argument("--quick", action="store_true", help="m = 10 and 1000, 0.3 s each; results not written")
    ap.add_argument("--out", type=Path, default=None, help="folder for robust_decode.md (default bench/results)")
    ap.add_argument("--compare", type=Path, default=None, help="an earlier run's robust_decode.md")
    ap.add_argument("--compare-label", default="an earlier run", help="what the earlier run was")
    args = ap.parse_args()
    widths, budget = ((10, 1000), 0.3) if args.quick else (args.widths, args.budget)
    letcc.set_num_threads(args.threads)
    F = np.sort(np.random.default_rng(0).choice(N, N - S, replace=False))
    rows = []
    for m in widths:
        data = rounds(m, np.random.default_rng(m), F)
        for case in CASES:
            Y, honest = data[case]
            plain, rob, plain_h = LeTCC(K, N), LeTCC(K, N, adversaries=E), LeTCC(K, N)
            singles = LeTCC(K, N, adversaries=E)
            singles._clean_test.pairs = False       # no pair stage (the bench's own arm; not an option)
            flagged = rob.decode(Y, F, return_flagged=True)[1]
            flagged1 = singles.decode(Y, F, return_flagged=True)[1]
            fns = [lambda: plain.decode(Y, F), lambda: rob.decode(Y, F), lambda: singles.decode(Y, F)]
            if honest is not Y:
                fns.append(lambda: plain_h.decode(honest, F))
            times, calls = median_times(fns, budget)
            tp, tr, t1 = times[:3]
            th = times[3] if honest is not Y else tp
            rows.append([m, case, f"{tp * 1e6:.1f}", f"{th * 1e6:.1f}" if honest is not Y else "(same)",
                         f"{tr * 1e6:.1f}", f"{tr / tp:.2f}x", f"{tr / th:.2f}x", flagged.size, calls,
                         f"{t1 * 1e6:.1f}", f"{t1 / tp:.2f}x", flagged1.size])
            print(" | ".join(map(str, rows[-1])), flush=True)
    table = markdown_table(["m (outputs)", "answers", "plain LeTCC (us)", "plain LeTCC, honest answers (us)",
                            "LeTCC(adversaries=2) (us)", "robust / plain, same", "robust / plain, honest",
                            "flagged", "calls each", "no pair stage (us)", "no pair stage / plain, same",
                            "flagged, no pair stage"], rows)
    print(table)
    if args.quick:
        return
    sections = [f"## One round, N = 24, S = 2, letcc threads = {args.threads}: medians of interleaved calls\n\n"
                + table]
    if args.compare is not None:
        sections.append(compared(args.compare, args.compare_label, rows))
        print(sections[-1])
    write_report("robust_decode", "Decode time of the robust decoder: LeTCC(8, 24, adversaries=2) vs LeTCC(8, 24)",
                 sections, notes=__doc__.split("\n\n", 1)[1].rsplit("\n\nRun:", 1)[0], out_dir=args.out)


def compared(path: Path, label: str, rows) -> str:
    """This run's ratios next to those of the results file `path` (same table)."""
    text = path.read_text()
    old = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 9 and cells[0].isdigit():
            old[(int(cells[0]), cells[1])] = (cells[4], cells[5], cells[6])
    out = []
    for r in rows:
        o = old.get((r[0], r[1]))
        if o is not None:
            out.append([r[0], r[1], o[0], r[4], o[1], r[5], o[2], r[6]])
    head = [line for line in text.splitlines() if line.startswith(("- date:", "- source:", "- load average"))]
    return (f"## Before and now\n\nBefore: {label}; that run's results file ({path.name}):\n\n"
            + "\n".join(head) + "\n\n"
            + markdown_table(["m (outputs)", "answers", "robust (us), before", "robust (us), now",
                              "/ plain same, before", "/ plain same, now", "/ plain honest, before",
                              "/ plain honest, now"], out))


if __name__ == "__main__":
    main()
