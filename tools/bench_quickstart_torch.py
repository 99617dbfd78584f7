#!/usr/bin/env python3
"""The quickstart on the CPU beside PyTorch: the same network, data, optimizer and batch, same cores.

configs/quickstart.yaml trains opsnn's small CNN (conv3x3 16 - ReLU - max-pool 2 - conv3x3 32 - ReLU -
max-pool 2 - linear 1568 -> 10, PyTorch's default initialisation) on Fashion-MNIST (inputs normalised
with mean 0.2860 / std 0.3530) with Adam lr 1e-3, batch 64, one epoch. This script trains the same network
in PyTorch with --threads threads (the whole dataset preloaded as one tensor, so no data loader is timed),
times the training loop only and evaluates the test split; with --opsnn it then runs
`PATH --set train.device=cpu` on the quickstart config in the same process tree and reads the time of its
training steps from metrics.jsonl (each "train" record gives the mean step time of its interval), so
evaluation and checkpointing are left out on both sides. Pin both to the same cores with taskset:

    taskset -c 0,1 python3 tools/bench_quickstart_torch.py --threads 2 --opsnn build/opsnn-train

Prints samples/s of both, the ratio and each test accuracy, and whether the bar (opsnn at least 1.2x
PyTorch's training throughput at >= 86.5% test accuracy) is met; exits 3 when it is not.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from train_resnet18_fmnist_torch import read_idx  # the same IDX reader (tools/ is on the path)


def load(root, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return (x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64))


def small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 10))


def torch_run(args):
    torch.manual_seed(0)
    x, y = load(args.root, "train")
    test_x, test_y = load(args.root, "test")
    model = small_cnn()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    order = torch.randperm(len(x))
    steps = (len(x) + args.batch - 1) // args.batch
    start = time.perf_counter()
    for step in range(steps):
        index = order[step * args.batch:(step + 1) * args.batch]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[index]), y[index])
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
                      for i in range(0, len(test_x), 1000))
    return {"samples_per_s": len(x) / seconds, "train_s": seconds, "test_acc": correct / len(test_x)}


def opsnn_run(args):
    with tempfile.TemporaryDirectory() as folder:
        command = [args.opsnn, "--set", "train.device=cpu", "--set", f"data.root={args.root}", "--out", folder]
        print("$ " + " ".join(command), flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        records = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    seconds, previous, samples = 0.0, 0, 0
    for record in records:
        if record.get("event") == "train":
            seconds += (record["step"] - previous) * record["step_ms"] * 1e-3
            previous = record["step"]
    samples = previous * args.batch
    evals = [r for r in records if r.get("event") == "eval"]
    return {"samples_per_s": samples / seconds, "train_s": seconds, "test_acc": evals[-1]["test_acc"],
            "steps_timed": previous}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--batch", type=int, default=64, help="the quickstart's batch (keep 64 to compare)")
    parser.add_argument("--opsnn", default=None, help="an opsnn-train to run beside PyTorch")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # opsnn-train's OpenMP threads
    cores = sorted(os.sched_getaffinity(0))
    theirs = torch_run(args)
    print(f"PyTorch {torch.__version__}: {theirs['samples_per_s']:.0f} samples/s ({theirs['train_s']:.2f} s of "
          f"training), test accuracy {100 * theirs['test_acc']:.2f}%; {args.threads} threads, cores {cores}")
    if not args.opsnn:
        return 0
    mine = opsnn_run(args)
    print(f"opsnn: {mine['samples_per_s']:.0f} samples/s ({mine['train_s']:.2f} s of training over "
          f"{mine['steps_timed']} steps), test accuracy {100 * mine['test_acc']:.2f}%")
    ratio = mine["samples_per_s"] / theirs["samples_per_s"]
    met = ratio >= 1.2 and mine["test_acc"] >= 0.865
    print(f"opsnn / PyTorch training throughput: {ratio:.2f}x (needs >= 1.2x at >= 86.5% test accuracy: "
          f"{'met' if met else 'NOT met'})")
    print(json.dumps({"torch": theirs, "opsnn": mine, "ratio": ratio, "threads": args.threads, "cores": cores}))
    return 0 if met else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
