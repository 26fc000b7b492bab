"""``netreduce experiment``: experiments that anyone can rerun, with no download.

``netreduce experiment loss-tolerance`` trains a small network (a 64-32-10 perceptron on scikit-learn's
bundled digits) by data-parallel SGD whose gradients are all-reduced through the golden model's
bounded-loss class, with gradient packets dropped at each ``--loss`` rate in MLT's order (lowest drop level
first: front layers, small magnitudes) or uniformly, rescaling on and off, against the lossless all-reduce
(``netreduce.host.training`` has the rules, ``netreduce.host.drops`` the drops). It plots the test accuracy
against the steps (``--out``, a PNG) and prints one JSON line: for every configuration its final and
evaluated accuracies, the fraction of gradient packets dropped (overall and by drop level), the switch's
deadline completions and late contributions, the zero-filled elements and their fraction of the results,
and the mean relative error of the averaged gradient against the exact mean.
Needs the ``experiment`` extra (scikit-learn, matplotlib).
"""

import argparse
import json
import sys
import time
from pathlib import Path

from ..cli import UserError

__all__ = ["register", "run_loss_tolerance", "plot"]

DEFAULT_LOSS = (0.05, 0.1, 0.2)
QUICK = {"steps": 4, "eval_every": 2, "loss": (0.2,)}


def _probability(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not a loss rate from 0 up to 1 (excluded)")
    return value


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def register(subparsers):
    parser = subparsers.add_parser("experiment", help="rerun an experiment (needs the 'experiment' extra)",
                                   description=__doc__)
    experiments = parser.add_subparsers(title="experiments", metavar="EXPERIMENT", required=True)
    tolerance = experiments.add_parser(
        "loss-tolerance", help="data-parallel SGD through the bounded-loss class, with MLT-ordered and "
        "uniform gradient loss", description=__doc__)
    tolerance.add_argument("--steps", type=_positive, metavar="S",
                           help="SGD steps per configuration (default 200; 4 with --quick)")
    tolerance.add_argument("--workers", type=_positive, default=4, metavar="N",
                           help="data-parallel workers, at most 32 (default 4)")
    tolerance.add_argument("--seed", type=int, default=0, metavar="S",
                           help="the data split, initial parameters, batches and drops (default 0)")
    tolerance.add_argument("--loss", type=_probability, nargs="+", metavar="P",
                           help="loss rates of gradient packets beside the lossless baseline "
                                f"(default {' '.join(map(str, DEFAULT_LOSS))}; 0.2 with --quick)")
    tolerance.add_argument("--eval-every", type=_positive, metavar="K",
                           help="evaluate the test accuracy every K steps (default 10; 2 with --quick)")
    tolerance.add_argument("--out", default="docs/loss_tolerance.png", metavar="FILE.png",
                           help="the plot of test accuracy against steps (default docs/loss_tolerance.png)")
    tolerance.add_argument("--quick", action="store_true",
                           help="a tiny run (a few steps, one loss rate) that checks the mechanics")
    tolerance.set_defaults(func=run_loss_tolerance)


def _require_extra():
    try:
        import matplotlib  # noqa: F401
        import sklearn  # noqa: F401
    except ImportError as error:
        raise UserError(f"this experiment needs the 'experiment' extra (pip install -e \".[experiment]\"); "
                        f"{error.name} is missing") from None


def run_loss_tolerance(args):
    steps = args.steps or (QUICK["steps"] if args.quick else 200)
    eval_every = args.eval_every or (QUICK["eval_every"] if args.quick else 10)
    rates = args.loss or (QUICK["loss"] if args.quick else DEFAULT_LOSS)
    if args.workers > 32:
        raise UserError(f"--workers {args.workers}: the bounded-loss class takes at most 32 (a 32-bit contributor "
                        "bitmap)")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: no folder {out.parent}")
    _require_extra()
    from tqdm import tqdm

    from ..host.training import BATCH, LR, MTU, configurations, load_data, train

    try:
        data = load_data(args.workers, args.seed)
    except ValueError as error:
        raise UserError(str(error)) from None
    started = time.monotonic()
    runs = []
    plan = configurations(rates)
    with tqdm(total=len(plan) * steps, unit="step", file=sys.stderr, disable=None) as bar:
        for configuration in plan:
            bar.set_description(configuration.name)
            runs.append(train(configuration, data, steps=steps, seed=args.seed, eval_every=eval_every,
                              progress=bar.update))
    title = (f"digits, 64-32-10 MLP, {args.workers} workers x batch {BATCH}, SGD lr {LR}, seed {args.seed}: "
             "gradients all-reduced through the bounded-loss class")
    plot(runs, out, title)
    report = {
        "experiment": "loss-tolerance", "workers": args.workers, "steps": steps, "seed": args.seed,
        "eval_every": eval_every, "batch": BATCH, "lr": LR, "mtu": MTU, "loss_rates": sorted(set(rates) - {0.0}),
        "out": str(out), "wall_seconds": round(time.monotonic() - started, 1), "evaluated": runs[0].evaluated,
        "configurations": [{**r.summary(), "accuracy": [round(a, 4) for a in r.accuracy]} for r in runs],
    }
    print(json.dumps(report))
    return 0


def plot(runs, path, title):
    """Test accuracy against steps: a panel per drop policy, the lossless baseline in each, a colour per loss
    rate, solid with rescaling and dashed with zero fill (division by N)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    baseline = [r for r in runs if r.configuration.policy is None]
    lossy = [r for r in runs if r.configuration.policy is not None]
    policies = list(dict.fromkeys(r.configuration.policy for r in lossy))
    rates = sorted({r.configuration.rate for r in lossy})
    colours = plt.get_cmap("viridis")([0.1 + 0.75 * i / max(1, len(rates) - 1) for i in range(len(rates))])
    figure, axes = plt.subplots(1, max(1, len(policies)), figsize=(6 * max(1, len(policies)), 4.6), sharey=True,
                                squeeze=False)
    names = {"mlt": "MLT-ordered drops (front layers, small magnitudes first)", "uniform": "uniform random drops"}
    for axis, policy in zip(axes[0], policies or [None], strict=True):
        for r in baseline:
            axis.plot(r.evaluated, r.accuracy, color="black", linewidth=2, label="lossless")
        for r in lossy:
            if r.configuration.policy is not policy:
                continue
            rescale = r.configuration.rescale
            axis.plot(r.evaluated, r.accuracy, color=colours[rates.index(r.configuration.rate)],
                      linestyle="-" if rescale else "--",
                      label=f"p={r.configuration.rate:g}, {'rescaled' if rescale else 'zero-filled, /N'}")
        axis.set_title(names.get(policy.value, policy.value) if policy else "lossless", fontsize=10)
        axis.set_xlabel("SGD step")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel("test accuracy")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror}") from None
    finally:
        plt.close(figure)
