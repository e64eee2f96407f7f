"""Per-call cost of a decode: what the master pays after the answers are in.

A production loop decodes once per round. When the answering set was seen
before, the decoder is cached and a decode is the dense apply plus the
per-call checks; when it is new (the usual case: at K = 8, N = 16, S = 4 there
are 1820 answering sets), the decoder is built first. Both are timed here for
LeTCC with its default lam policy ('auto': one lam per alpha_k), LeTCC with a
fixed lam, and BACC, next to the floor a user would otherwise write: numpy
matmul with the decoder matrix already built for that set.

"new set" calls cycle through distinct random answering sets with the plan
cache off and the lam policy's memo cleared before each call, so every call
builds its decoder. Worker outputs are float32, (answers, m) with m = 10
(one input's logits) and m = 10000 (a batch of 10 inputs x 1000 classes),
in arrival order (not sorted), as a caller collecting answers passes them
(letcc.CodedInference gathers them in ascending worker order, which saves the
reordering; with wide rows the dense decoders permute their columns instead
of copying the rows, letcc.codes._base.PERMUTE_MIN_ROW_ITEMS).

Those outputs are not probabilities, so the default (output_space='auto')
decodes them linearly. The "probabilities" columns give the same decodes of
softmax-like rows (Dirichlet(0.1) over 10 classes, or 10 inputs x 1000
classes at m = 10000), which the default decodes in log space (the compiled
check + log, the map, the softmax; letcc.codes.output_space), next to
output_space='linear' on the same rows; "ascending" lists the answers in
ascending worker order, where a log-space decode after another runs as one
compiled call.

Run with ``letcc bench decode`` (or ``python -m letcc.bench.decode_overhead``;
on the development machine with the BLAS variables unset, as for every
benchmark here: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE letcc bench
decode``). It prints the table and writes <out>/decode_overhead.md
(``--out``, default ./letcc-results; ``python bench/decode_overhead.py`` in a
source checkout writes bench/results/decode_overhead.md). ``--quick``: one
small case, a seconds-long check that the benchmark works here.
"""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

import letcc
from letcc.bench._report import DEFAULT_OUT_DIR, blas_summary, markdown_table, write_report
from letcc.bench._report import best_time as _best_time
from letcc.codes import BACC, LeTCC, LocalGapLam

CASES = [(8, 16, 12), (12, 36, 24)]      # K, N, answers
WIDTHS = [10, 10000]
SETS = 400                               # distinct answering sets the "new set" calls cycle through
QUICK = {"cases": CASES[:1], "widths": WIDTHS[:1], "sets": 40, "min_run": 0.002, "repeats": 2}


def answer_sets(N, F, count, rng):
    """`count` distinct answering sets of size F, each in a random arrival order."""
    seen, out = set(), []
    while len(out) < count:
        s = rng.choice(N, F, replace=False)
        key = tuple(sorted(s.tolist()))
        if key not in seen:
            seen.add(key)
            out.append([int(v) for v in s])
    return out


def cached_call(code, Y, avail):
    code.decode(Y, avail)
    return lambda: code.decode(Y, avail)


def new_set_call(make, Y, sets):
    """A decode per call, each on the next set, with nothing cached."""
    policy = LocalGapLam()
    code = make(policy)
    it = itertools.cycle(sets)

    def call():
        policy._memo.clear()            # the policy's own memo of lams per set
        code.decode(Y, next(it))
    return call


def build_parser(default_out: Path = DEFAULT_OUT_DIR) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="letcc bench decode", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one small case (K = 8, N = 16, 12 answers, m = 10), short timings: checks that the "
                         "benchmark works here, not how fast letcc is")
    ap.add_argument("--out", type=Path, default=default_out,
                    help=f"folder for the results file (default ./{default_out}, created)")
    ap.add_argument("--name", default="decode_overhead", help="results file <out>/<name>.md (default decode_overhead)")
    return ap


def main(argv=None, *, default_out: Path = DEFAULT_OUT_DIR) -> Path:
    """Run the benchmark, print its table, write ``<out>/<name>.md`` and return its path."""
    args = build_parser(default_out).parse_args(argv)
    cases, widths, n_sets = CASES, WIDTHS, SETS
    timing = {}
    if args.quick:
        cases, widths, n_sets = QUICK["cases"], QUICK["widths"], QUICK["sets"]
        timing = {"min_run": QUICK["min_run"], "repeats": QUICK["repeats"]}

    def best_time(fn):
        return _best_time(fn, **timing)

    rng = np.random.default_rng(0)
    print(f"BLAS: {blas_summary()}; letcc kernels: {letcc.kernel_isa()}, {letcc.get_num_threads()} threads")
    rows = []
    for (K, N, F), m in itertools.product(cases, widths):
        Y = rng.standard_normal((F, m)).astype(np.float32)
        sets = answer_sets(N, F, n_sets, rng)
        avail = sets[0]
        classes = min(m, 1000)
        P = rng.dirichlet(np.full(classes, 0.1), size=(F, m // classes)).astype(np.float32)
        makers = {
            "default": lambda pol: LeTCC(K, N, lam_dec=pol, plan_cache_size=0),
            "fixed": lambda pol: LeTCC(K, N, lam_dec=1e-4, plan_cache_size=0),
            "bacc": lambda pol: BACC(K, N, plan_cache_size=0),
        }
        t = {}
        t["default cached"] = best_time(cached_call(LeTCC(K, N), Y, avail))
        t["fixed cached"] = best_time(cached_call(LeTCC(K, N, lam_dec=1e-4), Y, avail))
        t["bacc cached"] = best_time(cached_call(BACC(K, N), Y, avail))
        t["probs default"] = best_time(cached_call(LeTCC(K, N), P, avail))
        t["probs linear"] = best_time(cached_call(LeTCC(K, N, output_space="linear"), P, avail))
        t["probs default asc"] = best_time(cached_call(LeTCC(K, N), P[np.argsort(avail)], sorted(avail)))
        t["probs linear asc"] = best_time(cached_call(LeTCC(K, N, output_space="linear"), P[np.argsort(avail)],
                                                      sorted(avail)))
        for name, make in makers.items():
            t[f"{name} new"] = best_time(new_set_call(make, Y, sets))
        # the floor: the decoder matrix of this set already built, columns in arrival order
        M = LeTCC(K, N).decoder_plan(avail).matrix()
        order = np.argsort(avail)
        M_arrival = np.empty_like(M)
        M_arrival[:, order] = M
        M32 = M_arrival.astype(np.float32)
        t["numpy"] = best_time(lambda: M32 @ Y)
        us = {k: v * 1e6 for k, v in t.items()}
        rows.append([f"({K}, {N}), {F} answers", m,
                     f"{us['default cached']:.1f}", f"{us['default new']:.1f}",
                     f"{us['fixed cached']:.1f}", f"{us['fixed new']:.1f}",
                     f"{us['bacc cached']:.1f}", f"{us['bacc new']:.1f}",
                     f"{us['numpy']:.1f}",
                     f"{us['default cached'] / us['numpy']:.1f}x",
                     f"{us['probs default']:.1f} / {us['probs linear']:.1f}",
                     f"{us['probs default asc']:.1f} / {us['probs linear asc']:.1f}"])
        print(rows[-1])
    table = markdown_table(
        ["(K, N), answers", "m", "LeTCC default, cached (us)", "LeTCC default, new set (us)",
         "LeTCC lam=1e-4, cached (us)", "LeTCC lam=1e-4, new set (us)", "BACC cached (us)", "BACC new set (us)",
         "numpy M @ Y, M prebuilt (us)", "LeTCC cached / numpy",
         "probabilities, cached: default (log space) / linear (us)", "the same, answers ascending (us)"],
        rows)
    print(table)
    notes = __doc__.split("\n\n", 1)[1].rsplit("\n\nRun with", 1)[0]
    if args.quick:
        notes = ("**`--quick` run**: one small case with short timings, a check that the benchmark works on this "
                 "machine; its numbers are noisier than a full run's.\n\n" + notes)
    return write_report(args.name, "Per-call decode cost", [table], notes=notes, out_dir=args.out)


if __name__ == "__main__":
    main()
