#!/usr/bin/env python3
"""Plots the metrics.jsonl of one or several opsnn-train run folders into one PNG.

Panels: training loss, test accuracy, learning rate, loss scale and gradient norm against the optimizer
step (plus test loss with the Bayes-optimal line for CTR runs and the achieved density for top-k runs,
when a run logged them). Each run gets one colour: by default all runs share each panel (overlaid, for
comparison); --layout columns gives every run its own column of panels, side by side.

    python3 tools/plot_metrics.py runs/quickstart runs/small_cnn_topk --out compare.png

Needs matplotlib (pip install matplotlib). Reads the metrics.jsonl of a run folder (README.md): one JSON object per
line with event ("train" | "eval" | "warn" | "skip" | "summary"), step, epoch; train lines carry loss,
lr, grad_norm, loss_scale, samples_per_s, step_ms, data_wait_ms; eval lines test_loss, test_acc.
"""
import argparse
import json
import math
import os
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


def draw_panel(axis, panel, data, colour, label):
    title, event, field, scale = panel
    steps, values = series(data.get(event, []), field)
    if not steps:
        return
    marker = "o" if event == "eval" else None
    if field == "test_acc":
        values = [100.0 * v for v in values]
        best = max(values)
        label = f"{label} (final {values[-1]:.2f}%, best {best:.2f}%)"
    axis.plot(steps, values, color=colour, marker=marker, markersize=3, linewidth=1.2, label=label)
    if field == "test_loss":
        bayes = [r["bayes_loss"] for r in data.get("eval", []) if isinstance(r.get("bayes_loss"), (int, float))]
        if bayes:
            axis.axhline(bayes[-1], color=colour, linestyle="--", linewidth=0.8, label=f"{label}: Bayes-optimal")
    if field == "loss_scale":
        skipped = [r["step"] for r in data.get("skip", [])]
        if skipped:
            scale_at = dict(zip(steps, values))
            axis.plot(skipped, [scale_at.get(s, values[0]) for s in skipped], "x", color=colour,
                      label=f"{label}: skipped steps")
    if scale == "log" and min(values) > 0:
        axis.set_yscale("log")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (each holding metrics.jsonl)")
    parser.add_argument("--out", default="metrics.png", help="the PNG to write (default: metrics.png)")
    parser.add_argument("--layout", choices=["overlay", "columns"], default="overlay",
                        help="overlay: all runs in each panel; columns: one column of panels per run")
    parser.add_argument("--title", default=None, help="figure title (default: the run names)")
    args = parser.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot_metrics: needs matplotlib (pip install matplotlib)")

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
            draw_panel(axis, panel, data, colours[r % len(colours)], labels[r])
            axis.set_title(panel[0] if args.layout == "overlay" else f"{labels[r]}: {panel[0]}", fontsize=10)
            axis.set_xlabel("step", fontsize=8)
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
