#!/usr/bin/env python3
"""Writes the PyTorch reference fixtures that tests/ops/test_golden.cpp compares opsnn against.

Usage (needs only PyTorch):  python3 tools/gen_golden_ops.py [--out tests/golden]

Every tensor is computed in float64 on the CPU, so the files hold PyTorch's exact values; json writes
each float with the shortest repr that reads back to the same double. Files written:
  conv2d.json         forward and input/weight/bias gradients, three geometries (incl. stride 2 + padding)
  batch_norm.json     training forward with running-stat update and backward (4-D and 2-D), eval
  cross_entropy.json  mean loss and gradient wrt the logits, with and without label smoothing
Each case stores its inputs, the upstream gradient it used and the expected outputs and gradients as
{"shape": [...], "data": [...]} objects (row-major).
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F


def as_json(tensor):
    tensor = tensor.detach().cpu()
    values = tensor.reshape(-1).tolist()
    if tensor.dtype.is_floating_point:
        values = [float(v) for v in values]
    return {"shape": list(tensor.shape), "data": values}


def uniform(generator, *shape, low=-1.0, high=1.0):
    return torch.rand(*shape, generator=generator, dtype=torch.float64) * (high - low) + low


def conv2d_cases(generator):
    geometries = [
        # name, input shape, weight shape, stride, padding, bias
        ("3x3 stride 1 pad 1 with bias", (2, 3, 6, 6), (4, 3, 3, 3), (1, 1), (1, 1), True),
        ("3x3 stride 2 pad 1 with bias", (2, 3, 7, 7), (4, 3, 3, 3), (2, 2), (1, 1), True),
        ("5x3 stride (2,1) pad (2,1) no bias", (1, 2, 8, 7), (3, 2, 5, 3), (2, 1), (2, 1), False),
    ]
    cases = []
    for name, input_shape, weight_shape, stride, padding, has_bias in geometries:
        x = uniform(generator, *input_shape).requires_grad_()
        w = uniform(generator, *weight_shape, low=-0.5, high=0.5).requires_grad_()
        b = uniform(generator, weight_shape[0]).requires_grad_() if has_bias else None
        out = F.conv2d(x, w, b, stride=stride, padding=padding)
        grad_output = uniform(generator, *out.shape)
        inputs = [x, w] + ([b] if has_bias else [])
        grads = torch.autograd.grad(out, inputs, grad_output)
        case = {
            "name": name, "stride": list(stride), "padding": list(padding),
            "input": as_json(x), "weight": as_json(w), "bias": as_json(b) if has_bias else None,
            "grad_output": as_json(grad_output), "output": as_json(out),
            "grad_input": as_json(grads[0]), "grad_weight": as_json(grads[1]),
            "grad_bias": as_json(grads[2]) if has_bias else None,
        }
        cases.append(case)
    return cases


def batch_norm_cases(generator):
    settings = [
        # name, input shape, training, momentum, eps
        ("training 4-D", (4, 3, 5, 5), True, 0.1, 1e-5),
        ("training 2-D", (8, 5), True, 0.3, 1e-3),
        ("eval 4-D", (3, 4, 3, 3), False, 0.1, 1e-5),
    ]
    cases = []
    for name, shape, training, momentum, eps in settings:
        channels = shape[1]
        # An offset and scale per channel make the statistics non-trivial.
        x = (uniform(generator, *shape) * 2.0 + 0.5).requires_grad_()
        gamma = uniform(generator, channels, low=0.5, high=1.5).requires_grad_()
        beta = uniform(generator, channels).requires_grad_()
        running_mean = uniform(generator, channels, low=-0.5, high=0.5)
        running_var = uniform(generator, channels, low=0.5, high=2.0)
        running_mean_in, running_var_in = running_mean.clone(), running_var.clone()
        out = F.batch_norm(x, running_mean, running_var, gamma, beta, training=training, momentum=momentum, eps=eps)
        grad_output = uniform(generator, *out.shape)
        grad_input, grad_gamma, grad_beta = torch.autograd.grad(out, [x, gamma, beta], grad_output)
        cases.append({
            "name": name, "training": training, "momentum": momentum, "eps": eps,
            "input": as_json(x), "gamma": as_json(gamma), "beta": as_json(beta),
            "running_mean_in": as_json(running_mean_in), "running_var_in": as_json(running_var_in),
            "running_mean_out": as_json(running_mean), "running_var_out": as_json(running_var),
            "grad_output": as_json(grad_output), "output": as_json(out),
            "grad_input": as_json(grad_input), "grad_gamma": as_json(grad_gamma), "grad_beta": as_json(grad_beta),
        })
    return cases


def cross_entropy_cases(generator):
    settings = [
        # name, batch, classes, label smoothing
        ("no smoothing", 6, 5, 0.0),
        ("label smoothing 0.1", 6, 5, 0.1),
        ("label smoothing 0.25, 10 classes", 4, 10, 0.25),
    ]
    cases = []
    for name, batch, classes, smoothing in settings:
        logits = uniform(generator, batch, classes, low=-3.0, high=3.0).requires_grad_()
        target = torch.randint(0, classes, (batch,), generator=generator, dtype=torch.int64)
        loss = F.cross_entropy(logits, target, label_smoothing=smoothing)
        (grad_logits,) = torch.autograd.grad(loss, [logits])
        cases.append({
            "name": name, "label_smoothing": smoothing,
            "logits": as_json(logits), "target": as_json(target),
            "loss": float(loss.item()), "grad_logits": as_json(grad_logits),
        })
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden")
    parser.add_argument("--out", default=default_out, help="output folder (default: tests/golden)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    generator = torch.Generator().manual_seed(20240601)
    fixtures = {
        "conv2d.json": conv2d_cases(generator),
        "batch_norm.json": batch_norm_cases(generator),
        "cross_entropy.json": cross_entropy_cases(generator),
    }
    for file_name, cases in fixtures.items():
        document = {"generator": "tools/gen_golden_ops.py", "torch_version": torch.__version__, "cases": cases}
        path = os.path.join(args.out, file_name)
        with open(path, "w") as stream:
            json.dump(document, stream, separators=(",", ":"))
            stream.write("\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
