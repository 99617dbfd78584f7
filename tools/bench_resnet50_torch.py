#!/usr/bin/env python3
"""ResNet-50 training throughput in PyTorch, and opsnn's beside it in the same call.

torchvision's resnet50 (channels_last), synthetic 224x224 images, cross-entropy, SGD with momentum
(fused=True); precision fp32 (TF32 convolutions, PyTorch's default for cuDNN, and TF32 matrix products,
which the script turns on as opsnn's tf32 has them) or bf16 (autocast).
Images per second over --steps steps after --warmup, CUDA-event timed; peak memory is
torch.cuda.max_memory_allocated over every step after the first (the first compiles or searches;
reduce-overhead records its CUDA graphs, whose private pool holds the step's memory, during the
warm-up). With --opsnn PATH it then runs `PATH resnet50` with the same batch, steps and precision and
prints both with their ratio.
--compile [MODES] also runs torch.compile of the model in its default mode and in max-autotune-no-cudagraphs
(or the comma-separated MODES; a fresh model each; compile time, the first step, reported apart, not timed),
so opsnn is compared with PyTorch's best; cudnn.benchmark is on for every PyTorch run. --compile-log FILE
sends what the first steps print (max-autotune's benchmark tables: hundreds of lines) to FILE instead;
--inductor-cache DIR keeps Inductor's caches (compiled kernels, autotuning results) in DIR, so a later
run given the same DIR compiles from them instead of benchmarking again. --opsnn-graph runs opsnn with its
whole step captured in a CUDA graph (opsnn-bench --cuda-graph); the fair baseline beside it then includes
torch.compile's own CUDA-graph mode: --compile default,reduce-overhead,max-autotune-no-cudagraphs.
--opsnn-conv-deterministic on|off|both: opsnn's convolutions restricted to deterministic algorithms (on, its
default), free to take any as cudnn.benchmark does for PyTorch (off), or one opsnn run of each.
--profile then runs one more step of each PyTorch run under torch.profiler and prints its GPU kernel time by
category (convolutions and GEMMs, Triton's fused reductions and element-wise kernels, ATen's own kernels),
with the sum of kernel time beside the step's time: where PyTorch's step spends what opsnn's ncu profile
(tools/profile_categories.py) shows for opsnn's.

    python3 tools/bench_resnet50_torch.py --precision bf16 --compile --opsnn build-gpu/opsnn-bench
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_categories import first_category  # noqa: E402  (tools/, beside this script)

# (category, substrings of a kernel's name), the first match wins; Triton kernels are named by what
# Inductor fused into them (triton_red_/triton_per_: reductions, triton_poi_: point-wise).
KERNEL_CATEGORIES = [
    ("optimizer step", ["fused_sgd", "FusedSgd", "multi_tensor"]),
    ("convolutions and GEMMs (cuDNN, cuBLAS, CUTLASS)",
     ["fprop", "dgrad", "wgrad", "conv", "xmma", "cutlass", "gemm", "nvjet", "cudnn", "sm90_", "sm80_"]),
    ("Triton reductions (batch-norm statistics and backward sums, fused)", ["triton_red", "triton_per"]),
    ("Triton element-wise (fused)", ["triton_poi"]),
    ("ATen batch norm", ["batch_norm", "batchnorm", "bn_fw", "bn_bw"]),
    ("pooling", ["pool"]),
    ("ATen element-wise, copies, reductions", ["elementwise", "vectorized", "unrolled", "reduce", "copy"]),
]


def profile_step(step):
    """GPU kernel milliseconds by category over one step, and the step's own milliseconds."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        stop.synchronize()
    milliseconds, counts = {}, {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        category = first_category(event.name, KERNEL_CATEGORIES, "other")
        milliseconds[category] = milliseconds.get(category, 0.0) + event.time_range.elapsed_us() * 1e-3
        counts[category] = counts.get(category, 0) + 1
    return milliseconds, counts, start.elapsed_time(stop)


def print_profile(label, profiled):
    milliseconds, counts, step_ms = profiled
    total = sum(milliseconds.values())
    print(f"  {label}: kernels {total:.2f} ms of a {step_ms:.2f} ms step (profiled)")
    print("  | category | kernels | ms | share |\n  |---|---|---|---|")
    for category in sorted(milliseconds, key=milliseconds.get, reverse=True):
        print(f"  | {category} | {counts[category]} | {milliseconds[category]:.2f} | "
              f"{100 * milliseconds[category] / total:.1f}% |")


@contextlib.contextmanager
def output_to(path):
    """Sends this process's stdout and stderr (file descriptors 1 and 2, so Inductor's subprocesses and C++
    logs too) to the file at path, appended, while the block runs; nothing changes for a path of None."""
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def torch_throughput(batch, steps, warmup, precision, image_size, compile_mode=None, profiled=False,
                     compile_log=None):
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
    with output_to(compile_log if compile_mode else None):
        step()  # the first step compiles (torch.compile) or runs the cuDNN search (cudnn.benchmark)
        torch.cuda.synchronize()
        first_step_s = time.perf_counter() - compile_start
        torch.cuda.reset_peak_memory_stats()
        for _ in range(warmup):  # a shape or mode first met here compiles here
            step()
        torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        loss = step()
    stop.record()
    stop.synchronize()
    ms = start.elapsed_time(stop)
    result = {"images_per_second": batch * steps / (ms * 1e-3), "ms_per_step": ms / steps,
              "peak_bytes": torch.cuda.max_memory_allocated(), "loss": loss.item(), "first_step_s": first_step_s}
    if profiled:
        result["profile"] = profile_step(step)
    return result


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="PyTorch side; fp32 uses TF32 convolutions and matrix products, so opsnn runs tf32 beside it")
    parser.add_argument("--opsnn-precision", help="opsnn's --precision (default: tf32 for fp32, bf16 for bf16)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--opsnn", help="path of opsnn-bench, to run it in the same call and compare")
    parser.add_argument("--opsnn-graph", action="store_true",
                        help="opsnn replays its whole step as a captured CUDA graph (opsnn-bench --cuda-graph); "
                             "compare it with torch.compile's CUDA-graph mode too (--compile ...,reduce-overhead)")
    parser.add_argument("--opsnn-conv-deterministic", choices=["on", "off", "both"], default="on",
                        help="opsnn's convolution algorithms: deterministic only (on, its default), any (off, as "
                             "PyTorch's cudnn.benchmark picks), or one opsnn run of each")
    parser.add_argument("--compile", nargs="?", const="default,max-autotune-no-cudagraphs", default="",
                        metavar="MODES",
                        help="also torch.compile, in each comma-separated mode (default: default and "
                             "max-autotune-no-cudagraphs; max-autotune spends minutes benchmarking kernels)")
    parser.add_argument("--no-eager", action="store_true", help="run the torch.compile modes only")
    parser.add_argument("--compile-log", metavar="FILE",
                        help="send what the compiling steps print (autotuning tables) to FILE, appended")
    parser.add_argument("--inductor-cache", metavar="DIR",
                        help="Inductor's cache folder (TORCHINDUCTOR_CACHE_DIR): reuse compiled kernels and "
                             "autotuning results a previous run left there")
    parser.add_argument("--profile", action="store_true",
                        help="after timing, one more step of each PyTorch run under torch.profiler: kernel time by category")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_resnet50_torch: no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cudnn.benchmark = True
    # TF32 in matrix products too (the fc layer, and the GEMMs Inductor generates), as in opsnn's tf32 runs;
    # PyTorch enables it by default only for convolutions.
    torch.set_float32_matmul_precision("high")
    if args.inductor_cache:  # read when Inductor first compiles, after this
        os.makedirs(args.inductor_cache, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.abspath(args.inductor_cache)
    ours = []  # (convolution setting, opsnn-bench's JSON)
    if args.opsnn:  # opsnn first: both then run on a GPU that has done the same amount of work before
        settings = ["on", "off"] if args.opsnn_conv_deterministic == "both" else [args.opsnn_conv_deterministic]
        for setting in settings:
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, "opsnn.json")
                command = [args.opsnn, "resnet50", "--batch", str(args.batch), "--steps", str(args.steps),
                           "--warmup", str(args.warmup), "--precision",
                           args.opsnn_precision or ("tf32" if args.precision == "fp32" else "bf16"),
                           "--image-size", str(args.image_size), "--conv-deterministic", setting,
                           "--json", path] + (["--cuda-graph"] if args.opsnn_graph else [])
                print("$ " + " ".join(command), flush=True)
                subprocess.run(command, check=True)
                with open(path) as f:
                    ours.append((setting, json.load(f)))
    runs = [] if args.no_eager else [("eager", None)]
    runs += [("compile " + mode, mode) for mode in args.compile.split(",") if mode]
    if not runs:
        print("bench_resnet50_torch: --no-eager needs --compile", file=sys.stderr)
        return 2
    print(f"PyTorch {torch.__version__} torchvision {torchvision.__version__} on {torch.cuda.get_device_name()}: "
          f"resnet50 batch {args.batch} {args.precision}")
    best = None
    for label, mode in runs:
        theirs = torch_throughput(args.batch, args.steps, args.warmup, args.precision, args.image_size, mode,
                                  args.profile, args.compile_log)
        print(f"  {label:<36} {theirs['images_per_second']:7.0f} images/s, {theirs['ms_per_step']:6.1f} ms/step, "
              f"peak {theirs['peak_bytes'] / 2**30:.2f} GiB, first step (compile/search) {theirs['first_step_s']:.1f} s",
              flush=True)
        if args.profile:
            print_profile(label, theirs["profile"])
        if best is None or theirs["images_per_second"] > best[1]["images_per_second"]:
            best = (label, theirs)
    label, theirs = best
    for setting, result in ours:
        algorithms = "deterministic convolutions" if setting == "on" else "any convolution algorithm"
        print(f"opsnn ({algorithms}): {result['images_per_second']:.0f} images/s, "
              f"peak {result['peak_bytes'] / 2**30:.2f} GiB")
        print(f"opsnn ({algorithms}) / PyTorch's fastest ({label}): throughput "
              f"{result['images_per_second'] / theirs['images_per_second']:.2f}x, "
              f"peak memory {result['peak_bytes'] / theirs['peak_bytes']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
