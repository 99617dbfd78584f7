#!/usr/bin/env python3
"""Plots the metrics.jsonl of one or several opsnn-train run folders, or of an opsnn-experiment, into one PNG.

Panels: training loss, test accuracy, learning rate, loss scale and gradient norm against the optimizer
step (plus test loss with the Bayes-optimal line for CTR runs and the achieved density for top-k runs,
when a run logged them). Each run gets one colour: by default all runs share each panel (overlaid, for
comparison); --layout columns gives every run its own column of panels, side by side.

    python3 tools/plot_metrics.py runs/quickstart runs/small_cnn_topk --out compare.png

An experiment folder (opsnn-experiment's DIR/<variant>/seed<k>/ run folders; given as the only folder or
as --experiment DIR) gets one mean curve per variant over its seeds, with a band from the seeds' minimum
to maximum (--band std: mean +- one standard deviation), labelled by variant name:

    python3 tools/plot_metrics.py --experiment runs/cpu_quick --x epoch --out curves.png

--x step|epoch|time sets the horizontal axis: the optimizer step, the epoch (fractional: step / the run's
steps_per_epoch from its summary; whole epochs for runs without one) or the training time in seconds
(the train records' step_ms summed over their steps; evaluations and checkpoints not counted).

Needs matplotlib (pip install matplotlib). Reads the metrics.jsonl of a run folder (README.md): one JSON object per
line with event ("train" | "eval" | "warn" | "skip" | "summary"), step, epoch; train lines carry loss,
lr, grad_norm, loss_scale, samples_per_s, step_ms, data_wait_ms; eval lines test_loss, test_acc.
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import sys


def read_run(folder):
    """The records of folder/metrics.jsonl by event; a run resumed several times keeps the latest value
    of each step (a resumed run appends to the file)."""
    path = os.path.join(folder, "metrics.jsonl")
    if not os.path.isfile(path):
        raise SystemExit(f"plot_metrics: {path}: no such file (is {folder} an opsnn-train run folder?)")
    by_event = {}
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SystemExit(f"plot_metrics: {path}:{number}: not JSON ({error.msg})")
            if not isinstance(record, dict) or "event" not in record or "step" not in record:
                raise SystemExit(f"plot_metrics: {path}:{number}: a record needs 'event' and 'step'")
            by_event.setdefault(record["event"], {})[record["step"]] = record
    return {event: [records[step] for step in sorted(records)] for event, records in by_event.items()}


def series(records, field):
    """(steps, values) of the records that carry a finite number in `field`."""
    steps, values = [], []
    for record in records:
        value = record.get(field)
        if isinstance(value, (int, float)) and math.isfinite(value):
            steps.append(record["step"])
            values.append(value)
    return steps, values


def steps_per_epoch(data):
    """The steps_per_epoch of the run's (last) summary record, or None."""
    for record in reversed(data.get("summary", [])):
        value = record.get("steps_per_epoch")
        if isinstance(value, (int, float)) and value > 0:
            return value
    return None


def x_transform(data, x):
    """A function from a record to its horizontal position: the step, epoch or training seconds."""
    if x == "step":
        return lambda record: record["step"]
    if x == "epoch":
        per_epoch = steps_per_epoch(data)
        if per_epoch:
            return lambda record: record["step"] / per_epoch
        return lambda record: record.get("epoch", 0)
    # time: cumulative seconds at each train record's step; other records take the time of their step
    # from the last train record at or before it (plus that interval's step time per step beyond it).
    marks = []  # (step, seconds at that step, seconds per step)
    seconds, previous = 0.0, 0
    for record in data.get("train", []):
        step_ms = record.get("step_ms")
        if not isinstance(step_ms, (int, float)) or not math.isfinite(step_ms):
            continue
        seconds += step_ms / 1000.0 * (record["step"] - previous)
        previous = record["step"]
        marks.append((record["step"], seconds, step_ms / 1000.0))

    def at(record):
        step = record["step"]
        best = None
        for mark in marks:
            if mark[0] <= step:
                best = mark
        if best is None:
            return marks[0][2] * step if marks else 0.0
        return best[1] + best[2] * (step - best[0])
    return at


X_LABELS = {"step": "step", "epoch": "epoch", "time": "training time (s)"}


def run_label(folder, runs):
    name = os.path.basename(os.path.normpath(folder))
    same_name = [other for other in runs if os.path.basename(os.path.normpath(other)) == name]
    return folder if len(same_name) > 1 else name


PANELS = [
    # (title, event, field, y scale)
    ("training loss", "train", "loss", "linear"),
    ("test accuracy", "eval", "test_acc", "linear"),
    ("learning rate", "train", "lr", "linear"),
    ("loss scale", "train", "loss_scale", "log"),
    ("gradient norm", "train", "grad_norm", "log"),
]
OPTIONAL_PANELS = [
    ("test loss", "eval", "test_loss", "linear"),
    ("top-k density", "train", "density", "log"),
]


def panels_for(runs_data):
    panels = list(PANELS)
    for panel in OPTIONAL_PANELS:
        title, event, field, _ = panel
        wanted = field == "density" or any("bayes_loss" in r for d in runs_data for r in d.get("eval", []))
        if wanted and any(series(d.get(event, []), field)[0] for d in runs_data):
            panels.append(panel)
    return panels


def draw_panel(axis, panel, data, colour, label, x="step"):
    title, event, field, scale = panel
    steps, values = series(data.get(event, []), field)
    if not steps:
        return
    position = x_transform(data, x)
    by_step = {record["step"]: record for record in data.get(event, [])}
    xs = [position(by_step[step]) for step in steps]
    marker = "o" if event == "eval" else None
    if field == "test_acc":
        values = [100.0 * v for v in values]
        best = max(values)
        label = f"{label} (final {values[-1]:.2f}%, best {best:.2f}%)"
    axis.plot(xs, values, color=colour, marker=marker, markersize=3, linewidth=1.2, label=label)
    if field == "test_loss":
        bayes = [r["bayes_loss"] for r in data.get("eval", []) if isinstance(r.get("bayes_loss"), (int, float))]
        if bayes:
            axis.axhline(bayes[-1], color=colour, linestyle="--", linewidth=0.8, label=f"{label}: Bayes-optimal")
    if field == "loss_scale":
        skipped = [r["step"] for r in data.get("skip", [])]
        if skipped:
            scale_at = dict(zip(steps, values))
            skipped_xs = [position(record) for record in data.get("skip", [])]
            axis.plot(skipped_xs, [scale_at.get(s, values[0]) for s in skipped], "x", color=colour,
                      label=f"{label}: skipped steps")
    if scale == "log" and min(values) > 0:
        axis.set_yscale("log")


def experiment_runs(folder):
    """{variant: [run folders]} of an experiment folder (DIR/<variant>/seed<k>/metrics.jsonl), seeds in
    numeric order, variants in results.csv's order when the folder has one (the sweep's), else by name."""
    variants = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name)
        if not os.path.isdir(path):
            continue
        seeds = [seed for seed in os.listdir(path) if re.fullmatch(r"seed[0-9]+", seed)
                 and os.path.isfile(os.path.join(path, seed, "metrics.jsonl"))]
        if seeds:
            variants[name] = [os.path.join(path, seed) for seed in sorted(seeds, key=lambda seed: int(seed[4:]))]
    order = []
    results = os.path.join(folder, "results.csv")
    if os.path.isfile(results):
        with open(results, encoding="utf-8", newline="") as file:
            order = [row["variant"] for row in csv.DictReader(file) if row.get("variant") in variants]
    return {name: variants[name] for name in order + [v for v in variants if v not in order]}


def is_experiment(folder):
    return not os.path.isfile(os.path.join(folder, "metrics.jsonl")) and bool(experiment_runs(folder))


def mean_curve(runs_data, event, field, x, band):
    """(xs, means, lows, highs, n) over the runs at the steps all of them logged (all steps any logged
    when they share none); None when no run logged the field."""
    per_run = []
    for data in runs_data:
        steps, values = series(data.get(event, []), field)
        if not steps:
            continue
        position = x_transform(data, x)
        by_step = {record["step"]: record for record in data.get(event, [])}
        per_run.append({step: (position(by_step[step]), value) for step, value in zip(steps, values)})
    if not per_run:
        return None
    common = set.intersection(*[set(run) for run in per_run]) or set().union(*per_run)
    xs, means, lows, highs = [], [], [], []
    for step in sorted(common):
        points = [run[step] for run in per_run if step in run]
        ys = [point[1] for point in points]
        mean = sum(ys) / len(ys)
        if band == "std":
            spread = statistics.stdev(ys) if len(ys) > 1 else 0.0
            low, high = mean - spread, mean + spread
        else:
            low, high = min(ys), max(ys)
        xs.append(sum(point[0] for point in points) / len(points))
        means.append(mean)
        lows.append(low)
        highs.append(high)
    return xs, means, lows, highs, len(per_run)


EXPERIMENT_PANELS = [
    ("training loss", "train", "loss", "linear"),
    ("test accuracy (%)", "eval", "test_acc", "linear"),
    ("test loss", "eval", "test_loss", "linear"),
    ("learning rate", "train", "lr", "linear"),
]


def plot_experiment(args, plt):
    folder = args.experiment
    variants = experiment_runs(folder)
    if not variants:
        raise SystemExit(f"plot_metrics: {folder}: no run folders (expected {folder}/<variant>/seed<k>/metrics.jsonl)")
    data = {variant: [read_run(run) for run in runs] for variant, runs in variants.items()}
    panels = list(EXPERIMENT_PANELS)
    scales = [v for runs in data.values() for run in runs for v in series(run.get("train", []), "loss_scale")[1]]
    if any(v != 1.0 for v in scales):
        panels.append(("loss scale", "train", "loss_scale", "log"))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    rows = (len(panels) + 1) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(12.0, 3.4 * rows), squeeze=False)
    for p, (title, event, field, scale) in enumerate(panels):
        axis = axes[p // 2][p % 2]
        for v, (variant, runs) in enumerate(data.items()):
            curve = mean_curve(runs, event, field, args.x, args.band)
            if curve is None:
                continue
            xs, means, lows, highs, n = curve
            factor = 100.0 if field == "test_acc" else 1.0
            means, lows, highs = ([factor * value for value in values] for values in (means, lows, highs))
            label = f"{variant} (n={n})"
            if field == "test_acc":
                label = f"{variant} (n={n}, final {means[-1]:.2f}%)"
            colour = colours[v % len(colours)]
            axis.plot(xs, means, color=colour, marker="o" if event == "eval" else None, markersize=3, linewidth=1.2,
                      label=label)
            if n > 1:
                axis.fill_between(xs, lows, highs, color=colour, alpha=0.2, linewidth=0)
            if scale == "log" and min(lows) > 0:
                axis.set_yscale("log")
        axis.set_title(title, fontsize=10)
        axis.set_xlabel(X_LABELS[args.x], fontsize=8)
        axis.grid(True, alpha=0.3)
        axis.tick_params(labelsize=8)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
    if len(panels) % 2:
        axes[-1][-1].axis("off")
    band = "min-max" if args.band == "minmax" else "mean +- 1 std"
    name = os.path.basename(os.path.normpath(folder))
    figure.suptitle(args.title or f"{name}: mean over seeds (band: {band})", fontsize=11)
    figure.tight_layout()  # which makes room for the (multi-line) suptitle itself
    figure.savefig(args.out, dpi=100)
    runs = sum(len(r) for r in data.values())
    print(f"plot_metrics: wrote {args.out} ({len(data)} variant(s), {runs} run(s), band {band})")
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="run folders (each holding metrics.jsonl), or one experiment folder")
    parser.add_argument("--experiment", metavar="DIR", default=None,
                        help="an opsnn-experiment folder: one mean curve per variant over its seeds")
    parser.add_argument("--band", choices=["minmax", "std"], default="minmax",
                        help="experiments: the band around each mean, min-max over seeds or +-1 std")
    parser.add_argument("--x", choices=["step", "epoch", "time"], default="step",
                        help="horizontal axis: optimizer step, epoch or training time in seconds")
    parser.add_argument("--out", default="metrics.png", help="the PNG to write (default: metrics.png)")
    parser.add_argument("--layout", choices=["overlay", "columns"], default="overlay",
                        help="overlay: all runs in each panel; columns: one column of panels per run")
    parser.add_argument("--title", default=None, help="figure title (default: the run names)")
    args = parser.parse_args(argv)
    if args.experiment and args.runs:
        parser.error("give --experiment DIR or run folders, not both")
    if not args.experiment and len(args.runs) == 1 and is_experiment(args.runs[0]):
        args.experiment = args.runs[0]
    if not args.experiment and not args.runs:
        parser.error("give run folders or --experiment DIR")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot_metrics: needs matplotlib (apt install python3-matplotlib, or pip install matplotlib)")
    if args.experiment:
        return plot_experiment(args, plt)

    runs_data = [read_run(folder) for folder in args.runs]
    labels = [run_label(folder, args.runs) for folder in args.runs]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    panels = panels_for(runs_data)

    columns = len(args.runs) if args.layout == "columns" else 1
    if args.layout == "overlay":
        grid_columns = 2
        grid_rows = (len(panels) + 1) // 2
    else:
        grid_columns, grid_rows = columns, len(panels)
    figure, axes = plt.subplots(grid_rows, grid_columns, figsize=(6.0 * grid_columns, 3.0 * grid_rows), squeeze=False)

    for p, panel in enumerate(panels):
        for r, data in enumerate(runs_data):
            if args.layout == "overlay":
                axis = axes[p // 2][p % 2]
            else:
                axis = axes[p][r]
            draw_panel(axis, panel, data, colours[r % len(colours)], labels[r], args.x)
            axis.set_title(panel[0] if args.layout == "overlay" else f"{labels[r]}: {panel[0]}", fontsize=10)
            axis.set_xlabel(X_LABELS[args.x], fontsize=8)
            axis.grid(True, alpha=0.3)
            axis.tick_params(labelsize=8)
        target_axes = [axes[p // 2][p % 2]] if args.layout == "overlay" else list(axes[p])
        for axis in target_axes:
            if axis.get_legend_handles_labels()[0]:
                axis.legend(fontsize=7)
    if args.layout == "overlay" and len(panels) % 2:
        axes[-1][-1].axis("off")

    figure.suptitle(args.title or " vs ".join(labels), fontsize=12)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (3.0 * grid_rows)))  # leave room for the title
    figure.savefig(args.out, dpi=100)
    print(f"plot_metrics: wrote {args.out} ({len(args.runs)} run(s), {len(panels)} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
