#!/usr/bin/env python3
"""PyTorch's sparse embedding update beside `opsnn-bench sparse`, on the same table and the same lookups.

Measures, in one process tree: torch.optim.SparseAdam on an nn.Embedding(sparse=True) weight whose
gradient is the uncoalesced sparse tensor the embedding's backward produces (SparseAdam coalesces it,
as opsnn's step does), and torch.optim.Adam(fused=True) on the whole table with a dense gradient. The
row ids are drawn with the counter-based generator tools/bench/sparse_bench.cpp uses (splitmix64),
uniform or Zipf-like, until the requested fraction of rows is touched, so both see the same lookups.
Times are medians of single steps, each finished on the device. With --opsnn PATH it runs
`PATH sparse --json` with the same sizes and prints both with the ratios.

    python3 tools/bench_sparse_torch.py --device cuda --opsnn build-gpu/opsnn-bench
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

def uniform_draws(seed, count):
    """splitmix64 of (seed, i) for i < count as doubles in [0, 1), as uniform_draw in sparse_bench.cpp."""
    with np.errstate(over="ignore"):
        i = np.arange(1, count + 1, dtype=np.uint64)
        z = np.uint64(seed) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def draw_rows(distribution, seed, count, rows):
    u = uniform_draws(seed, count)
    if distribution == "uniform":
        return np.minimum(rows - 1, (u * rows).astype(np.int64))
    rank = np.minimum(rows - 1, np.power(float(rows), u).astype(np.int64) - 1)
    # (rank * odd) mod rows in exact integers, as the C++ does in 128 bits.
    return ((rank.astype(object) * 0x9E3779B97F4A7C15) % rows).astype(np.int64)


def draw_lookups(distribution, seed, rows, unique_rows):
    """Draws in order until unique_rows distinct rows are touched, as draw_lookups in sparse_bench.cpp."""
    count = unique_rows * 2
    while True:
        ids = draw_rows(distribution, seed, count, rows)
        _, first = np.unique(ids, return_index=True)
        if len(first) >= unique_rows:
            end = np.sort(first)[unique_rows - 1] + 1
            return ids[:end]
        count *= 4


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_ms(device, prepare, step, warmup, repeats):
    times = []
    for i in range(warmup + repeats):
        prepare()
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(args):
    device = torch.device(args.device)
    rows, width = args.rows, args.width
    results = {"sparse": []}
    table = torch.nn.Parameter(torch.full((rows, width), 0.01, device=device))
    table.grad = torch.full_like(table, 1e-3)
    dense = torch.optim.Adam([table], lr=1e-3, fused=True)
    results["dense_adam_ms"] = median_ms(device, lambda: None, dense.step, 3, args.repeats)
    del dense, table
    if device.type == "cuda":
        torch.cuda.empty_cache()
    embedding = torch.nn.Embedding(rows, width, sparse=True, device=device)
    with torch.no_grad():
        embedding.weight.fill_(0.01)
    sparse = torch.optim.SparseAdam(embedding.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(args.seed + 2)
    for distribution in args.distributions.split(","):
        for fraction in (float(x) for x in args.touched.split(",")):
            unique_rows = max(1, round(fraction * rows))
            ids = torch.from_numpy(draw_lookups(distribution, args.seed, rows, unique_rows)).to(device)
            values = torch.randn(len(ids), width, generator=generator).to(device)
            gradient = torch.sparse_coo_tensor(ids.unsqueeze(0), values, (rows, width))  # uncoalesced, as backward

            def prepare():
                embedding.weight.grad = gradient

            ms = median_ms(device, prepare, sparse.step, 3, args.repeats)
            results["sparse"].append(
                {"distribution": distribution, "touched_fraction": fraction, "touched_rows": unique_rows,
                 "lookups": len(ids), "sparse_adam_ms": ms})
    return results


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--rows", type=int, default=None, help="default: cuda 2^23, cpu 2^20")
    parser.add_argument("--width", type=int, default=None, help="default: cuda 128, cpu 32")
    parser.add_argument("--touched", default="0.0001,0.001,0.01")
    parser.add_argument("--distributions", default="uniform,zipf")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--opsnn", help="opsnn-bench to run with the same sizes")
    parser.add_argument("--json", help="write both results here")
    args = parser.parse_args(argv)
    if args.rows is None:
        args.rows = 1 << 23 if args.device == "cuda" else 1 << 20
    if args.width is None:
        args.width = 128 if args.device == "cuda" else 32
    for name in ("rows", "width", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    opsnn = None
    if args.opsnn:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "sparse.json")
            command = [args.opsnn, "sparse", "--device", args.device, "--rows", str(args.rows), "--width",
                       str(args.width), "--touched", args.touched, "--distributions", args.distributions,
                       "--repeats", str(args.repeats), "--seed", str(args.seed), "--json", path]
            subprocess.run(command, check=True)
            with open(path) as file:
                opsnn = json.load(file)
    torch_results = measure(args)
    print(f"\n{args.device}: table {args.rows} x {args.width} ({args.rows * args.width:.3g} parameters), Adam, "
          f"f32 states, median of {args.repeats} steps; PyTorch {torch.__version__}")
    print(f"torch dense Adam (fused) {torch_results['dense_adam_ms']:.3f} ms"
          + (f"; opsnn dense fused Adam {opsnn['dense_adam_ms']:.3f} ms" if opsnn else ""))
    header = f"{'ids':8} {'touched':>8} {'lookups':>9} {'torch SparseAdam ms':>20}"
    if opsnn:
        header += f" {'opsnn sparse ms':>16} {'vs opsnn dense':>15} {'vs SparseAdam':>14} {'atomic ms':>10}"
    print(header)
    for row in torch_results["sparse"]:
        line = f"{row['distribution']:8} {100 * row['touched_fraction']:7.3g}% {row['lookups']:9d} " \
               f"{row['sparse_adam_ms']:20.3f}"
        if opsnn:
            mine = {r["coalescing"]: r for r in opsnn["sparse"] if r["distribution"] == row["distribution"]
                    and r["touched_fraction"] == row["touched_fraction"]}
            sorted_ms = mine["sorted"]["sparse_adam_ms"]
            if mine["sorted"]["lookups"] != row["lookups"]:
                print(f"warning: opsnn drew {mine['sorted']['lookups']} lookups, this script {row['lookups']}")
            atomic = f"{mine['atomic']['sparse_adam_ms']:10.3f}" if "atomic" in mine else f"{'-':>10}"
            line += f" {sorted_ms:16.3f} {opsnn['dense_adam_ms'] / sorted_ms:14.1f}x " \
                    f"{row['sparse_adam_ms'] / sorted_ms:13.1f}x {atomic}"
        print(line)
    if opsnn and opsnn.get("topk"):
        print(f"\nopsnn top-k inside the Adam step over {opsnn['topk'][0]['parameters']:.3g} parameters:")
        for row in opsnn["topk"]:
            print(f"  sparsity {100 * row['sparsity']:5.1f}%: {row['topk_ms']:.3f} ms against the dense step's "
                  f"{row['dense_ms']:.3f} ms ({row['dense_ms'] / row['topk_ms']:.2f}x)")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"torch": torch_results, "opsnn": opsnn}, file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
