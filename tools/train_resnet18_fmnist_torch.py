#!/usr/bin/env python3
"""PyTorch reference for configs/resnet18_{sgd,adamw}.yaml: ResNet-18 with the small-image stem on Fashion-MNIST.

The same recipe as the opsnn configs: torchvision's resnet18 with a 3x3 stride-1 stem and no max-pool,
1 input channel, batch 128, inputs normalized with mean 0.2860 / std 0.3530, no augmentation by default
(--crop-padding N, --flip as data.augment in the configs), 1 epoch of linear warmup then cosine to 0 (per
step), 5 epochs. Optimizers (the defaults of configs/experiments/optimizers/sweep.yaml): sgd (Nesterov 0.9,
lr 0.1, wd 5e-4), adam (lr 1e-3), adamw (lr 1e-3, wd 0.05), lamb (lr 5e-3, wd 0.01; written with torch ops,
as PyTorch has none: You et al. 2020, trust ratio clamp(||p||, 1e-3, 10) / ||r||) and lion (lr 1e-4, wd 0.5;
Chen et al. 2023), --lr / --weight-decay override them. As opsnn does by default, 1-D parameters (biases,
BatchNorm) get no weight decay (--decay-1d: every parameter, PyTorch's own default). --precision bf16 runs
the forward and backward under bf16 autocast, channels-last. Reads the IDX files of Debian's
dataset-fashion-mnist package.
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


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2020) as opsnn's rule: Adam moments with bias correction, r = m_hat / (sqrt(v_hat) +
    eps) + wd * p, p -= lr * phi(||p||) / ||r|| * r with phi clamping to [lower, upper] (ratio 1 when a norm is 0)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, bounds=(1e-3, 10.0)):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bounds=bounds))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"], state["m"], state["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += 1
                m, v, t = state["m"], state["v"], state["step"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                r = (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + group["eps"])
                r.add_(p, alpha=group["weight_decay"])
                p_norm, r_norm = p.norm(), r.norm()
                lower, upper = group["bounds"]
                trust = torch.where((p_norm > 0) & (r_norm > 0), p_norm.clamp(lower, upper) / r_norm,
                                    torch.ones_like(p_norm))
                p.add_(r * trust, alpha=-group["lr"])


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023): c = b1 m + (1 - b1) g, p -= lr (sign(c) + wd p), m = b2 m + (1 - b2) g."""

    def __init__(self, params, lr, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("m", torch.zeros_like(p))
                c = m * beta1 + p.grad * (1 - beta1)
                p.mul_(1 - group["lr"] * group["weight_decay"]).add_(c.sign(), alpha=-group["lr"])
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)


DEFAULTS = {"sgd": (0.1, 5e-4), "adam": (1e-3, 0.0), "adamw": (1e-3, 0.05), "lamb": (5e-3, 0.01), "lion": (1e-4, 0.5)}


def make_optimizer(name, net, lr, weight_decay, decay_1d):
    decay = [p for p in net.parameters() if p.dim() > 1 or decay_1d]
    rest = [p for p in net.parameters() if not (p.dim() > 1 or decay_1d)]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=0.9, nesterov=True)
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr)
    if name == "lamb":
        return Lamb(groups, lr=lr)
    return Lion(groups, lr=lr)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizer", choices=sorted(DEFAULTS), default="sgd")
    parser.add_argument("--lr", type=float, help="default: the optimizer's in DEFAULTS")
    parser.add_argument("--weight-decay", type=float, help="default: the optimizer's in DEFAULTS")
    parser.add_argument("--decay-1d", action="store_true", help="weight decay on 1-D parameters too")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
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
    if args.precision == "bf16":
        net = net.to(memory_format=torch.channels_last)
    lr = args.lr if args.lr is not None else DEFAULTS[args.optimizer][0]
    weight_decay = args.weight_decay if args.weight_decay is not None else DEFAULTS[args.optimizer][1]
    optimizer = make_optimizer(args.optimizer, net, lr, weight_decay, args.decay_1d)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16")
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
            with autocast:
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
                with autocast:
                    correct += (net(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
        accuracy = correct / test_x.shape[0]
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}, test accuracy {100 * accuracy:.2f}%, "
              f"{epoch_seconds[-1]:.2f} s", flush=True)
    print(json.dumps({"optimizer": args.optimizer, "seed": args.seed, "lr": lr, "weight_decay": weight_decay,
                      "precision": args.precision, "test_accuracy": accuracy, "epoch_seconds": epoch_seconds,
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
