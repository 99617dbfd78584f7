#!/usr/bin/env python3
"""PyTorch reference for configs/resnet18_{sgd,adamw}.yaml: ResNet-18 with the small-image stem on Fashion-MNIST.

The same recipe as the opsnn configs: torchvision's resnet18 with a 3x3 stride-1 stem and no max-pool,
1 input channel, batch 128, inputs normalized with mean 0.2860 / std 0.3530, no augmentation by default
(--crop-padding N, --flip as data.augment in the configs), 1 epoch of linear warmup then cosine to 0 (per
step), 5 epochs. Optimizers: sgd (Nesterov
0.9, lr 0.1, wd 5e-4) or adam (lr 1e-3). Reads the IDX files of Debian's dataset-fashion-mnist package.
The whole dataset lives on the GPU and augmentation runs there, so the time per epoch is the model's,
not a data loader's. Prints test accuracy and seconds per epoch, and a JSON line with both at the end.

    python3 tools/train_resnet18_fmnist_torch.py --optimizer sgd
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torchvision


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(root, split, device):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.tensor(images, dtype=torch.float32, device=device).unsqueeze(1) / 255.0
    return (x - 0.2860) / 0.3530, torch.tensor(labels, dtype=torch.int64, device=device)


def augment(x, padding, flip_half):
    if padding == 0 and not flip_half:
        return x
    n = x.shape[0]
    padded = torch.nn.functional.pad(x, (padding,) * 4)
    dy = torch.randint(0, 2 * padding + 1, (n,), device=x.device)
    dx = torch.randint(0, 2 * padding + 1, (n,), device=x.device)
    rows = (torch.arange(28, device=x.device)[None, :] + dy[:, None])[:, None, :, None].expand(n, 1, 28, 28 + 2 * padding)
    cropped = torch.gather(padded, 2, rows)
    cols = (torch.arange(28, device=x.device)[None, :] + dx[:, None])[:, None, None, :].expand(n, 1, 28, 28)
    cropped = torch.gather(cropped, 3, cols)
    if not flip_half:
        return cropped
    flip = torch.rand(n, device=x.device) < 0.5
    return torch.where(flip[:, None, None, None], cropped.flip(3), cropped)


def model():
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    net.maxpool = torch.nn.Identity()
    return net


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--crop-padding", type=int, default=0, help="random crop after padding (0: off)")
    parser.add_argument("--flip", action="store_true", help="random horizontal flips")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    device = "cuda"
    train_x, train_y = load(args.root, "train", device)
    test_x, test_y = load(args.root, "test", device)
    net = model().to(device)
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    else:
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    steps_per_epoch = math.ceil(train_x.shape[0] / args.batch)
    total, warmup = args.epochs * steps_per_epoch, steps_per_epoch
    schedule = lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    loss_fn = torch.nn.CrossEntropyLoss()
    epoch_seconds = []
    accuracy = 0.0
    for epoch in range(args.epochs):
        net.train()
        torch.cuda.synchronize()
        start = time.perf_counter()
        order = torch.randperm(train_x.shape[0], device=device)
        for i in range(steps_per_epoch):
            index = order[i * args.batch:(i + 1) * args.batch]
            loss = loss_fn(net(augment(train_x[index], args.crop_padding, args.flip)), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
        torch.cuda.synchronize()
        epoch_seconds.append(time.perf_counter() - start)
        net.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, test_x.shape[0], 1000):
                correct += (net(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
        accuracy = correct / test_x.shape[0]
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}, test accuracy {100 * accuracy:.2f}%, "
              f"{epoch_seconds[-1]:.2f} s", flush=True)
    print(json.dumps({"optimizer": args.optimizer, "test_accuracy": accuracy, "epoch_seconds": epoch_seconds,
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
