#!/usr/bin/env python3
"""Golden optimizer trajectories from PyTorch for tests/optim/test_golden_optim.cpp.

Writes tests/golden/optim_<case>.json: a few small parameter tensors, a fixed sequence of gradients made
deterministically here (and stored, so the C++ test replays exactly the same float32 values), and the
parameter values after selected steps, for torch.optim.SGD (momentum + dampening + weight decay, and
Nesterov), Adam (L2 weight decay, amsgrad), AdamW, Adagrad (L2 weight decay, initial accumulator), and
Adam under torch.amp.GradScaler with injected inf gradients (scale history and skipped steps recorded). Needs only torch; run on the GPU machine:

    python3 tools/gen_golden_optim.py [--out tests/golden]

GradScaler runs on CUDA when available (some torch versions support it only there), else on the CPU.
"""
import argparse
import json
import os

import torch

STEPS = 200
CHECKPOINTS = [1, 2, 3, 5, 10, 25, 50, 100, 150, 200]
SHAPES = [(3, 3), (3,), (4,)]


def f32_list(tensor):
    """Flat float32 values as JSON numbers that round-trip to the same float32 ('%.9g')."""
    return [float("%.9g" % x) for x in tensor.detach().to("cpu", torch.float32).reshape(-1).tolist()]


def make_problem(seed):
    """Initial parameters and STEPS gradients, float32, from a seeded generator (CPU, so any machine agrees)."""
    generator = torch.Generator().manual_seed(seed)
    initial = [torch.randn(shape, generator=generator, dtype=torch.float32) for shape in SHAPES]
    grads = []
    for step in range(STEPS):
        per_tensor = []
        for index, shape in enumerate(SHAPES):
            g = torch.randn(shape, generator=generator, dtype=torch.float32)
            if (step + index) % 17 == 5:
                g = torch.zeros(shape)  # an all-zero gradient now and then
            elif (step + index) % 23 == 7:
                g = g * 100.0  # a large one
            per_tensor.append(g)
        grads.append(per_tensor)
    return initial, grads


def run_case(name, optimizer_name, options, seed, scaler_options=None, inject_inf=()):
    initial, grads = make_problem(seed)
    device = "cuda" if scaler_options is not None and torch.cuda.is_available() else "cpu"
    params = [torch.nn.Parameter(t.clone().to(device)) for t in initial]
    if optimizer_name == "sgd":
        optimizer = torch.optim.SGD(params, lr=options["lr"], momentum=options["momentum"],
                                    dampening=options["dampening"], weight_decay=options["weight_decay"],
                                    nesterov=options["nesterov"], foreach=False)
    elif optimizer_name in ("adam", "adamw"):
        cls = torch.optim.Adam if optimizer_name == "adam" else torch.optim.AdamW
        optimizer = cls(params, lr=options["lr"], betas=tuple(options["betas"]), eps=options["eps"],
                        weight_decay=options["weight_decay"], amsgrad=options["amsgrad"], foreach=False)
    elif optimizer_name == "adagrad":
        optimizer = torch.optim.Adagrad(params, lr=options["lr"], eps=options["eps"],
                                        weight_decay=options["weight_decay"],
                                        initial_accumulator_value=options["initial_accumulator_value"], foreach=False)
    else:
        raise ValueError(optimizer_name)
    scaler = None
    if scaler_options is not None:
        scaler = torch.amp.GradScaler(device, init_scale=scaler_options["initial_scale"],
                                      growth_factor=scaler_options["growth_factor"],
                                      backoff_factor=scaler_options["backoff_factor"],
                                      growth_interval=scaler_options["growth_interval"])
    checkpoints = []
    scale_history = []
    skipped = []
    for step in range(STEPS):
        if scaler is not None:
            scaler.scale(torch.ones((), device=device))  # as scaling the loss does; creates the scale lazily
        scale = scaler.get_scale() if scaler is not None else 1.0
        for index, p in enumerate(params):
            g = grads[step][index].to(device)
            if scaler is not None:
                g = g * scale  # what backward of the scaled loss would give
                if step in inject_inf and index == 1:
                    g = g.clone()
                    g[0] = float("inf")
            p.grad = g
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
            new_scale = scaler.get_scale()
            scale_history.append(new_scale)
            if new_scale < scale:
                skipped.append(step)
        else:
            optimizer.step()
        if step + 1 in CHECKPOINTS:
            checkpoints.append([f32_list(p) for p in params])
    case = {
        "case": name,
        "optimizer": optimizer_name,
        "options": options,
        "torch_version": torch.__version__,
        "device": device,
        "params": [{"name": f"p{i}", "shape": list(s), "initial": f32_list(t)}
                   for i, (s, t) in enumerate(zip(SHAPES, initial))],
        "grads": [[f32_list(g) for g in per_tensor] for per_tensor in grads],
        "checkpoint_steps": CHECKPOINTS,
        "checkpoints": checkpoints,
    }
    if scaler is not None:
        case["scaler"] = scaler_options
        case["inject_inf"] = sorted(inject_inf)
        case["scale_history"] = scale_history
        case["skipped"] = skipped
    return case


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sgd = {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-2, "nesterov": False}
    nesterov = {"lr": 0.05, "momentum": 0.9, "dampening": 0.0, "weight_decay": 5e-4, "nesterov": True}
    adam = {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-2, "amsgrad": False}
    cases = [
        run_case("sgd_momentum", "sgd", sgd, seed=1),
        run_case("sgd_nesterov", "sgd", nesterov, seed=2),
        run_case("adam", "adam", adam, seed=3),
        run_case("adam_amsgrad", "adam", dict(adam, amsgrad=True, weight_decay=0.0), seed=4),
        run_case("adamw", "adamw", dict(adam, weight_decay=0.1), seed=5),
        run_case("adagrad", "adagrad",
                 {"lr": 0.05, "eps": 1e-10, "weight_decay": 1e-2, "initial_accumulator_value": 0.1}, seed=7),
        run_case("grad_scaler", "adam", dict(adam, weight_decay=0.0), seed=6,
                 scaler_options={"initial_scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                 "growth_interval": 10},
                 inject_inf={3, 4, 30, 31, 32, 90}),
    ]
    total = 0
    for case in cases:
        path = os.path.join(args.out, f"optim_{case['case']}.json")
        with open(path, "w") as f:
            json.dump(case, f, separators=(",", ":"))
        size = os.path.getsize(path)
        total += size
        print(f"wrote {path} ({size} bytes)")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
