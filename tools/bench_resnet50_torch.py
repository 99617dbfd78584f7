#!/usr/bin/env python3
"""ResNet-50 training throughput in PyTorch, and opsnn's beside it in the same call.

torchvision's resnet50 (channels_last), synthetic 224x224 images, cross-entropy, SGD with momentum
(fused=True); precision fp32 (TF32 convolutions, PyTorch's default for cuDNN) or bf16 (autocast).
Images per second over --steps steps after --warmup, CUDA-event timed; peak memory is
torch.cuda.max_memory_allocated over the timed steps. With --opsnn PATH it then runs
`PATH resnet50` with the same batch, steps and precision and prints both with their ratio.
--compile [MODES] also runs torch.compile of the model in its default mode and in max-autotune-no-cudagraphs
(or the comma-separated MODES; a fresh model each; compile time, the first step, reported apart, not timed),
so opsnn is compared with PyTorch's best; cudnn.benchmark is on for every PyTorch run.

    python3 tools/bench_resnet50_torch.py --precision bf16 --compile --opsnn build-gpu/opsnn-bench
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torchvision


def torch_throughput(batch, steps, warmup, precision, image_size, compile_mode=None):
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    forward = torch.compile(model, mode=compile_mode) if compile_mode else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    images = torch.randn(batch, 3, image_size, image_size, device="cuda").to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(forward(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    compile_start = time.perf_counter()
    step()  # the first step compiles (torch.compile) or runs the cuDNN search (cudnn.benchmark)
    torch.cuda.synchronize()
    first_step_s = time.perf_counter() - compile_start
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        loss = step()
    stop.record()
    stop.synchronize()
    ms = start.elapsed_time(stop)
    return {"images_per_second": batch * steps / (ms * 1e-3), "ms_per_step": ms / steps,
            "peak_bytes": torch.cuda.max_memory_allocated(), "loss": loss.item(), "first_step_s": first_step_s}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="PyTorch side; fp32 uses TF32 convolutions (its default), so opsnn runs tf32 beside it")
    parser.add_argument("--opsnn-precision", help="opsnn's --precision (default: tf32 for fp32, bf16 for bf16)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--opsnn", help="path of opsnn-bench, to run it in the same call and compare")
    parser.add_argument("--compile", nargs="?", const="default,max-autotune-no-cudagraphs", default="",
                        metavar="MODES",
                        help="also torch.compile, in each comma-separated mode (default: default and "
                             "max-autotune-no-cudagraphs; max-autotune spends minutes benchmarking kernels)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_resnet50_torch: no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cudnn.benchmark = True
    ours = None
    if args.opsnn:  # opsnn first: both then run on a GPU that has done the same amount of work before
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "opsnn.json")
            command = [args.opsnn, "resnet50", "--batch", str(args.batch), "--steps", str(args.steps), "--warmup",
                       str(args.warmup), "--precision",
                       args.opsnn_precision or ("tf32" if args.precision == "fp32" else "bf16"), "--image-size", str(args.image_size),
                       "--json", path]
            print("$ " + " ".join(command), flush=True)
            subprocess.run(command, check=True)
            with open(path) as f:
                ours = json.load(f)
    runs = [("eager", None)] + [("compile " + mode, mode) for mode in args.compile.split(",") if mode]
    print(f"PyTorch {torch.__version__} torchvision {torchvision.__version__} on {torch.cuda.get_device_name()}: "
          f"resnet50 batch {args.batch} {args.precision}")
    best = None
    for label, mode in runs:
        theirs = torch_throughput(args.batch, args.steps, args.warmup, args.precision, args.image_size, mode)
        print(f"  {label:<36} {theirs['images_per_second']:7.0f} images/s, {theirs['ms_per_step']:6.1f} ms/step, "
              f"peak {theirs['peak_bytes'] / 2**30:.2f} GiB, first step (compile/search) {theirs['first_step_s']:.1f} s",
              flush=True)
        if best is None or theirs["images_per_second"] > best[1]["images_per_second"]:
            best = (label, theirs)
    if ours:
        label, theirs = best
        print(f"opsnn: {ours['images_per_second']:.0f} images/s, peak {ours['peak_bytes'] / 2**30:.2f} GiB")
        print(f"opsnn / PyTorch's fastest ({label}): throughput {ours['images_per_second'] / theirs['images_per_second']:.2f}x, "
              f"peak memory {ours['peak_bytes'] / theirs['peak_bytes']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
