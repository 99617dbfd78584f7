#!/usr/bin/env python3
"""The fused-versus-unfused optimizer step record from `opsnn-bench optim --device cuda --json FILE`.

Writes results.csv (one row per problem size and rule: unfused ms, fused ms, fused in a CUDA graph ms,
speed-up), results.md (the same as a table, with the device and the command) and curves.png (speed-up
per size) into the output folder. The unfused step is opsnn-bench's chain of one kernel per stage with
temporaries between them (the "traditional" pipeline); the fused ones are the optimizer's own step.

  python3 tools/fused_step_record.py configs/experiments/fused_step/opsnn_bench_optim_cuda.json \
      configs/experiments/fused_step --date 2026-12-02
"""
import argparse
import csv
import json
import os
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_file")
    parser.add_argument("out_dir")
    parser.add_argument("--date", required=True, help="the day of the benchmark run (YYYY-MM-DD)")
    args = parser.parse_args()
    try:
        with open(args.json_file) as handle:
            data = json.load(handle)
        rows = data["rows"]
        device = data.get("device", "unknown device")
    except (OSError, ValueError, KeyError, TypeError) as error:
        sys.exit(f"fused_step_record: {args.json_file}: not opsnn-bench optim JSON ({error})")
    times = {}
    for row in rows:
        times[(row["problem"], row["variant"])] = float(row["ms"])
    problems = []
    for row in rows:
        if row["problem"] not in problems:
            problems.append(row["problem"])
    table = []
    for problem in problems:
        for rule in ("adam", "adamw"):
            unfused = times.get((problem, "unfused " + rule))
            fused = times.get((problem, rule))
            if unfused is None or fused is None:
                continue
            graph = times.get((problem, rule + " graph"))
            table.append({"problem": problem, "rule": rule, "unfused_ms": unfused, "fused_ms": fused,
                          "fused_graph_ms": graph, "speedup": unfused / fused,
                          "speedup_graph": unfused / graph if graph else None})
    if not table:
        sys.exit(f"fused_step_record: {args.json_file}: no (unfused, fused) pairs for adam or adamw")
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "results.csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["variant", "parameters", "unfused_ms", "fused_ms", "fused_graph_ms", "speedup",
                         "speedup_graph"])
        for entry in table:
            writer.writerow([entry["rule"], entry["problem"], f"{entry['unfused_ms']:.4f}", f"{entry['fused_ms']:.4f}",
                             "" if entry["fused_graph_ms"] is None else f"{entry['fused_graph_ms']:.4f}",
                             f"{entry['speedup']:.2f}",
                             "" if entry["speedup_graph"] is None else f"{entry['speedup_graph']:.2f}"])
    with open(os.path.join(args.out_dir, "results.md"), "w") as handle:
        handle.write("# Experiment fused_step\n\n")
        handle.write(f"Machine: {device}; date: {args.date}; command: `opsnn-bench optim --device cuda --sizes "
                     f"{','.join(problems)} --json {os.path.basename(args.json_file)}`, then "
                     "`python3 tools/fused_step_record.py` on that file.\n\n")
        handle.write("Median step time of 20 after warm-up (CUDA events), fp32 parameters, gradients and states. "
                     "Unfused: one kernel per stage of the update with temporaries between them; fused: the "
                     "optimizer's one-pass device step; graph: the same captured in a CUDA graph.\n\n")
        handle.write("| rule | parameters | unfused ms | fused ms | fused (graph) ms | speed-up | speed-up (graph) |\n")
        handle.write("|---|---|---|---|---|---|---|\n")
        for entry in table:
            graph = "-" if entry["fused_graph_ms"] is None else f"{entry['fused_graph_ms']:.3f}"
            speedup_graph = "-" if entry["speedup_graph"] is None else f"{entry['speedup_graph']:.2f}x"
            handle.write(f"| {entry['rule']} | {entry['problem']} | {entry['unfused_ms']:.3f} | {entry['fused_ms']:.3f} "
                         f"| {graph} | {entry['speedup']:.2f}x | {speedup_graph} |\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("fused_step_record: matplotlib missing (python3-matplotlib): no curves.png", file=sys.stderr)
        return
    figure, axis = plt.subplots(figsize=(7, 4))
    width = 0.38
    for offset, rule in ((-width / 2, "adam"), (width / 2, "adamw")):
        entries = [e for e in table if e["rule"] == rule]
        positions = [problems.index(e["problem"]) + offset for e in entries]
        axis.bar(positions, [e["speedup"] for e in entries], width, label=rule)
    axis.set_xticks(range(len(problems)))
    axis.set_xticklabels(problems)
    axis.set_xlabel("parameters")
    axis.set_ylabel("unfused time / fused time")
    axis.set_title(f"fused vs unfused optimizer step, {device}, {args.date}")
    axis.axhline(1.0, color="gray", linewidth=0.8)
    axis.legend()
    figure.tight_layout()
    figure.savefig(os.path.join(args.out_dir, "curves.png"), dpi=100)
    print(f"fused_step_record: wrote {args.out_dir}/results.md, results.csv, curves.png")


if __name__ == "__main__":
    main()
