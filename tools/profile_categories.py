#!/usr/bin/env python3
"""GPU time of one profiled training step by op category, from an Nsight Compute CSV.

Reads what `ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw` printed for
`opsnn-bench resnet50 ... --profile` (one step between cudaProfilerStart/Stop) and prints a Markdown table:
kernels, milliseconds and share per category (batch norm passes, convolutions by direction, cuBLAS GEMMs,
element-wise passes, copies, optimizer), largest first.

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \\
        build-gpu/opsnn-bench resnet50 --precision bf16 --steps 3 --warmup 3 --profile > ncu.csv
    python3 tools/profile_categories.py ncu.csv
"""
import argparse
import collections
import csv
import sys

# (category, substrings of the kernel name), the first match wins.
CATEGORIES = [
    ("optimizer step", ["optim::"]),
    ("convolution forward (cuDNN)", ["fprop"]),
    ("convolution input gradient (cuDNN)", ["dgrad"]),
    ("convolution weight gradient (cuDNN)", ["wgrad"]),
    ("GEMM (cuBLAS: 1x1 convolutions as GEMMs, fc)", ["nvjet", "gemm", "splitKreduce"]),
    ("lowering copies (im2col, subsampling)", ["im2col", "col2im", "subsample"]),
    ("stem batch norm + relu + max pool (fused)", ["normalize_relu_max", "pooled_gradient_sums", "pooled_grad_input"]),
    ("batch norm forward statistics", ["moments", "finalize_forward"]),
    ("batch norm apply (+ReLU)", ["normalize"]),
    ("batch norm backward sums", ["gradient_sums", "finalize_backward"]),
    ("batch norm input gradient (+ReLU mask)", ["grad_input"]),
    ("residual add + ReLU", ["AddReluOp"]),
    ("ReLU backward", ["ReluBackward"]),
    ("gradient accumulation (adds, partial sums)", ["AddOp", "sum_partials"]),
    ("layout copies (NCHW <-> NHWC), casts", ["strided_copy", "ConvertOp"]),
    ("pooling", ["max_forward", "max_backward", "avg_forward", "gather_backward"]),
]


def first_category(kernel, categories, default):
    """The first of `categories` ((name, substrings) pairs) with a substring in `kernel`, else `default`."""
    for name, keys in categories:
        if any(key in kernel for key in keys):
            return name
    return default


def category(kernel):
    return first_category(kernel, CATEGORIES, "other (loss, workspace set-up, small reductions)")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="ncu --csv --page raw output (lines before its header are skipped)")
    args = parser.parse_args(argv)
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, row in enumerate(rows) if row[:1] == ["ID"]), None)
    if header is None or "gpu__time_duration.sum" not in rows[header]:
        print(f"profile_categories: {args.csv} has no ncu header with gpu__time_duration.sum", file=sys.stderr)
        return 2
    names = rows[header]
    kernel, duration = names.index("Kernel Name"), names.index("gpu__time_duration.sum")
    unit = rows[header + 1][duration]
    scale = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "nsecond": 1e-6, "ms": 1.0, "msecond": 1.0}.get(unit)
    if scale is None:
        print(f"profile_categories: unknown time unit '{unit}'", file=sys.stderr)
        return 2
    milliseconds, counts = collections.Counter(), collections.Counter()
    for row in rows[header + 2:]:
        if len(row) <= duration:
            continue
        name = category(row[kernel])
        milliseconds[name] += float(row[duration].replace(",", "")) * scale
        counts[name] += 1
    total = sum(milliseconds.values())
    print("| category | kernels | ms | share |\n|---|---|---|---|")
    for name, ms in milliseconds.most_common():
        print(f"| {name} | {counts[name]} | {ms:.2f} | {100 * ms / total:.1f}% |")
    print(f"| total | {sum(counts.values())} | {total:.2f} | 100% |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
