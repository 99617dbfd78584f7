#!/usr/bin/env python3
"""Input-pipeline throughput: torchvision's ImageFolder + DataLoader beside `opsnn-bench data`, same images.

Decode + augment + collate of training batches (RandomResizedCrop to 224, horizontal flip, to float,
per-channel normalisation) from a folder of JPEGs, in images/s after warm-up, for each worker count:
torchvision with num_workers processes (prefetch_factor 2), opsnn with that many decode threads (2 batches
in flight per thread). Both read the same files, make the same batch size, skip 2 x workers warm-up batches
(the pipeline filling) and time the next max(8, 4 x workers); neither pins memory or touches a GPU.

    python3 tools/bench_data_torch.py --make-images /tmp/jpegs --count 8000      # ImageNet-sized JPEGs
    python3 tools/bench_data_torch.py --root /tmp/jpegs --workers 1,4,16 --opsnn build-gpu/opsnn-bench

--make-images writes COUNT JPEGs of --size (default 500x375, about ImageNet's mean) in 10 classes under
ROOT/train/<class>/ (and a small ROOT/val/), smooth random colour fields plus noise, JPEG quality 90.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def write_image(job):
    import numpy as np
    from PIL import Image

    path, width, height, seed = job
    rng = np.random.default_rng(seed)
    # A low-resolution random field upsampled (smooth, like photographs) plus fine noise.
    coarse = rng.integers(0, 256, size=(height // 25 + 1, width // 25 + 1, 3), dtype=np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.BILINEAR)
    pixels = np.asarray(image, dtype=np.int16) + rng.integers(-12, 13, size=(height, width, 3))
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=90)


def make_images(root, count, size, classes, seed):
    import multiprocessing

    width, height = size
    jobs = []
    for split, n in (("train", count), ("val", max(classes, count // 50))):
        for c in range(classes):
            os.makedirs(os.path.join(root, split, f"class{c:02d}"), exist_ok=True)
        for i in range(n):
            path = os.path.join(root, split, f"class{i % classes:02d}", f"img{i:06d}.JPEG")
            jobs.append((path, width, height, seed * 1000003 + len(jobs)))
    with multiprocessing.Pool() as pool:
        pool.map(write_image, jobs, chunksize=64)
    print(f"wrote {count} training and {max(classes, count // 50)} validation JPEGs of {width}x{height} to {root}")


def torchvision_images_per_second(root, workers, batch, batches, warmup, seed):
    import torch
    from torchvision import datasets, transforms

    torch.manual_seed(seed)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ])
    dataset = datasets.ImageFolder(os.path.join(root, "train"), transform=transform)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                                         drop_last=True, persistent_workers=workers > 0, prefetch_factor=2)
    needed = warmup + batches
    if needed > len(loader):
        raise SystemExit(f"{root}: {len(loader)} batches of {batch} per epoch, need {needed}; make more images")
    iterator = iter(loader)
    for _ in range(warmup):  # includes starting the worker processes
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        images, labels = next(iterator)
        assert images.shape == (batch, 3, 224, 224)
    return batch * batches / (time.perf_counter() - start)


def opsnn_images_per_second(binary, root, workers, batch, batches, warmup, seed):
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "data.json")
        command = [binary, "data", "--root", root, "--workers", str(workers), "--batch", str(batch), "--batches",
                   str(batches), "--warmup", str(warmup), "--seed", str(seed), "--json", out]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        with open(out) as f:
            return json.load(f)["images_per_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--make-images", metavar="ROOT", help="write a folder of JPEGs and exit")
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--size", default="500x375")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--root", help="an ImageFolder root (ROOT/train/<class>/...)")
    parser.add_argument("--workers", default="1,4,16")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--opsnn", metavar="PATH", help="opsnn-bench to run beside torchvision")
    args = parser.parse_args()
    if args.make_images:
        width, height = (int(v) for v in args.size.split("x"))
        make_images(args.make_images, args.count, (width, height), args.classes, args.seed)
        return
    if not args.root:
        parser.error("--root or --make-images is required")
    import torch
    import torchvision

    print(f"PyTorch {torch.__version__}, torchvision {torchvision.__version__}, {os.cpu_count()} CPUs visible, "
          f"batch {args.batch}; per worker count W: 2W warm-up batches, then max(8, 4W) timed")
    print(f"{'workers':>7} {'torchvision img/s':>18} {'opsnn img/s':>12} {'opsnn / torchvision':>20}")
    rows = []
    for workers in (int(w) for w in args.workers.split(",")):
        warmup, batches = 2 * workers, max(8, 4 * workers)
        torch_rate = torchvision_images_per_second(args.root, workers, args.batch, batches, warmup, args.seed)
        opsnn_rate = (opsnn_images_per_second(args.opsnn, args.root, workers, args.batch, batches, warmup, args.seed)
                      if args.opsnn else float("nan"))
        rows.append((workers, torch_rate, opsnn_rate))
        print(f"{workers:>7} {torch_rate:>18.0f} {opsnn_rate:>12.0f} {opsnn_rate / torch_rate:>19.2f}x", flush=True)
    if args.opsnn:
        worst = min(o / t for _, t, o in rows)
        print(f"\nacceptance (image data issue): opsnn >= 1.5x torchvision at every worker count: "
              f"{worst:.2f} {'met' if worst >= 1.5 else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
