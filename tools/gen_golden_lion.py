#!/usr/bin/env python3
"""Golden Lion trajectory for tests/optim/test_golden_optim.cpp (tests/golden/optim_lion.json).

Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), which torch.optim lacks, written
out with plain tensor ops:

    c = b1*m + (1-b1)*g;  p -= lr*(sign(c) + wd*p);  m = b2*m + (1-b2)*g

The file has the format of tools/gen_golden_optim.py's fixtures (params, stored float32 gradients,
checkpoints after the same steps), so the C++ test replays it the same way.

Two back ends, chosen by what is installed:
  * torch: the problem from gen_golden_optim.py's seeded torch generator, the update in float64 torch ops.
  * pure Python (no torch): the problem from Python's seeded random module (each value rounded to float32
    before use, as stored), the same update in Python floats (IEEE double).
Both compute in double precision, so the fixture is a reference for opsnn's float32 kernels rather than
a copy of them. The committed tests/golden/optim_lion.json was made with the pure-Python back end, on a
machine without torch; "torch_version" in the file says "none (pure Python float64)" then.

    python3 tools/gen_golden_lion.py [--out tests/golden] [--no-torch]
"""
import argparse
import json
import os
import random
import struct

STEPS = 200
CHECKPOINTS = [1, 2, 3, 5, 10, 25, 50, 100, 150, 200]
SHAPES = [(3, 3), (3,), (4,)]
OPTIONS = {"lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1}
SEED = 7


def f32(x):
    """x rounded to the nearest float32, as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def f32_json(x):
    """A float32 value as a JSON number that round-trips to the same float32 ('%.9g')."""
    return float("%.9g" % f32(x))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def python_problem(seed):
    """Initial parameters and STEPS gradients (flat float32 values), the pattern of gen_golden_optim.py."""
    rng = random.Random(seed)
    initial = [[f32(rng.gauss(0.0, 1.0)) for _ in range(numel(s))] for s in SHAPES]
    grads = []
    for step in range(STEPS):
        per_tensor = []
        for index, shape in enumerate(SHAPES):
            g = [f32(rng.gauss(0.0, 1.0)) for _ in range(numel(shape))]
            if (step + index) % 17 == 5:
                g = [0.0] * len(g)  # an all-zero gradient now and then
            elif (step + index) % 23 == 7:
                g = [f32(x * 100.0) for x in g]  # a large one
            per_tensor.append(g)
        grads.append(per_tensor)
    return initial, grads


def sign(x):
    return 1.0 if x > 0 else -1.0 if x < 0 else 0.0


def run_python(initial, grads):
    lr, (b1, b2), wd = OPTIONS["lr"], OPTIONS["betas"], OPTIONS["weight_decay"]
    params = [list(p) for p in initial]
    exp_avg = [[0.0] * len(p) for p in params]
    checkpoints = []
    for step in range(STEPS):
        for t, p in enumerate(params):
            m = exp_avg[t]
            for i in range(len(p)):
                g = grads[step][t][i]
                c = b1 * m[i] + (1 - b1) * g
                p[i] -= lr * (sign(c) + wd * p[i])
                m[i] = b2 * m[i] + (1 - b2) * g
        if step + 1 in CHECKPOINTS:
            checkpoints.append([[f32_json(x) for x in p] for p in params])
    return checkpoints


def run_torch(torch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_golden_optim",
                                                  os.path.join(os.path.dirname(__file__), "gen_golden_optim.py"))
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    initial_t, grads_t = golden.make_problem(SEED)
    lr, (b1, b2), wd = OPTIONS["lr"], OPTIONS["betas"], OPTIONS["weight_decay"]
    params = [t.clone().to(torch.float64) for t in initial_t]
    exp_avg = [torch.zeros_like(p) for p in params]
    checkpoints = []
    for step in range(STEPS):
        for t, p in enumerate(params):
            g = grads_t[step][t].to(torch.float64)
            c = b1 * exp_avg[t] + (1 - b1) * g
            p.sub_(lr * (torch.sign(c) + wd * p))
            exp_avg[t].mul_(b2).add_((1 - b2) * g)
        if step + 1 in CHECKPOINTS:
            checkpoints.append([[f32_json(x) for x in p.reshape(-1).tolist()] for p in params])
    initial = [[f32_json(x) for x in t.reshape(-1).tolist()] for t in initial_t]
    grads = [[[f32_json(x) for x in g.reshape(-1).tolist()] for g in per_tensor] for per_tensor in grads_t]
    return initial, grads, checkpoints, torch.__version__


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden"))
    parser.add_argument("--no-torch", action="store_true", help="use the pure-Python back end even with torch")
    args = parser.parse_args()
    torch = None
    if not args.no_torch:
        try:
            import torch  # noqa: F811
        except ImportError:
            torch = None
    if torch is not None:
        initial, grads, checkpoints, version = run_torch(torch)
    else:
        initial, grads = python_problem(SEED)
        checkpoints = run_python(initial, grads)
        initial = [[f32_json(x) for x in p] for p in initial]
        grads = [[[f32_json(x) for x in g] for g in per_tensor] for per_tensor in grads]
        version = "none (pure Python float64)"
    case = {
        "case": "lion",
        "optimizer": "lion",
        "options": OPTIONS,
        "torch_version": version,
        "device": "cpu",
        "params": [{"name": f"p{i}", "shape": list(s), "initial": t} for i, (s, t) in enumerate(zip(SHAPES, initial))],
        "grads": grads,
        "checkpoint_steps": CHECKPOINTS,
        "checkpoints": checkpoints,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "optim_lion.json")
    with open(path, "w") as f:
        json.dump(case, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
