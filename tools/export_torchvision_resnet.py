#!/usr/bin/env python3
"""Exports torchvision's ResNet-18/34/50 as a safetensors file under PyTorch's names, for model.init_from.

opsnn's ResNets name their modules as torchvision's do (conv1, bn1, layer1.0.conv1, ..., fc), so the file
loads into opsnn's resnet18/34/50 (model.stem: imagenet, 3 input channels) as it is; the BatchNorm
counters num_batches_tracked (i64) are written too, as torchvision's state dict has them, and opsnn skips
them. Weights: torchvision's DEFAULT ones (ImageNet) when they are in the torch hub cache already (this
script never downloads), else a random initialisation from --seed; --random always takes the latter. A
random model has its BatchNorm statistics calibrated on two random batches and its BatchNorm affine
parameters drawn at random, so that a comparison of logits exercises every tensor of the file.

Unless --no-logits, it also writes OUT with .safetensors replaced by .logits.safetensors: "input" (a
fixed batch: torch.manual_seed(--input-seed); torch.randn(--batch, 3, S, S)) and "logits" (the model's
output in eval mode, f32). The opsnn test "torchvision ResNet logits ..." (tests/models/
test_torchvision_golden.cpp) compares opsnn's logits with them when OPSNN_TORCHVISION_RESNET names OUT.

  python3 tools/export_torchvision_resnet.py --arch resnet50 --random --out /tmp/resnet50.safetensors
  OPSNN_TORCHVISION_RESNET=/tmp/resnet50.safetensors build/opsnn-tests "[golden]"

The file is written with the safetensors package when it is importable, else directly (an 8-byte
little-endian header length, the JSON header with each tensor's dtype, shape and data_offsets, then the
raw little-endian bytes), which needs nothing beyond torch and torchvision.
"""
import argparse
import ctypes
import json
import os
import struct
import sys

import torch
import torchvision

ARCHS = ("resnet18", "resnet34", "resnet50")

SAFETENSORS_DTYPES = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.uint8: "U8",
}


def cached_default_weights(arch):
    """torchvision's DEFAULT weights of `arch` when the hub cache holds their file, else None."""
    try:
        weights = torchvision.models.get_model_weights(arch).DEFAULT
    except (AttributeError, ValueError):  # a torchvision without the weights API
        return None
    path = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(weights.url))
    return weights if os.path.isfile(path) else None


def randomised(model, seed):
    """`model` with random BatchNorm affine parameters and running statistics calibrated on random data."""
    generator = torch.Generator().manual_seed(seed + 1)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for norm in norms:
            norm.weight.copy_(0.5 + torch.rand(norm.weight.shape, generator=generator))
            norm.bias.copy_(0.1 * torch.randn(norm.bias.shape, generator=generator))
            norm.reset_running_stats()
            norm.momentum = None  # cumulative average over the calibration batches
        model.train()
        for _ in range(2):
            model(torch.randn(4, 3, 224, 224, generator=generator))
        for norm in norms:
            norm.momentum = 0.1
    return model


def build(arch, random_init, seed):
    weights = None if random_init else cached_default_weights(arch)
    if weights is not None:
        return torchvision.models.get_model(arch, weights=weights), f"torchvision {weights}"
    if not random_init:
        print(f"{arch}: torchvision's DEFAULT weights are not in {torch.hub.get_dir()}/checkpoints (this "
              f"script does not download); using a random initialisation from seed {seed}", file=sys.stderr)
    torch.manual_seed(seed)
    model = torchvision.models.get_model(arch, weights=None)
    return randomised(model, seed), f"random (seed {seed})"


def write_safetensors(path, tensors, metadata):
    """Writes `tensors` (name -> CPU tensor) and the string map `metadata` as a safetensors file."""
    tensors = {name: tensor.detach().cpu().contiguous() for name, tensor in tensors.items()}
    try:
        from safetensors.torch import save_file
    except ImportError:
        save_file = None
    if save_file is not None:
        save_file(tensors, path, metadata=metadata)
        return
    if sys.byteorder != "little":
        sys.exit("writing safetensors without the safetensors package needs a little-endian machine")
    header, offset = {"__metadata__": metadata}, 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the safetensors package writes it
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)))
        file.write(text)
        for tensor in tensors.values():
            if tensor.numel() > 0:
                file.write(ctypes.string_at(tensor.data_ptr(), tensor.numel() * tensor.element_size()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=ARCHS, default="resnet50")
    parser.add_argument("--out", help="the weights file (default: ARCH.safetensors)")
    parser.add_argument("--random", action="store_true", help="a random initialisation, not the DEFAULT weights")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random initialisation (default 0)")
    parser.add_argument("--no-logits", action="store_true", help="write the weights only")
    parser.add_argument("--batch", type=int, default=4, help="images in the logits batch (default 4)")
    parser.add_argument("--image-size", type=int, default=224, help="their height and width (default 224)")
    parser.add_argument("--input-seed", type=int, default=0, help="torch.manual_seed of the batch (default 0)")
    args = parser.parse_args()
    out = args.out or f"{args.arch}.safetensors"

    model, weights = build(args.arch, args.random, args.seed)
    model.eval()
    state = model.state_dict()
    metadata = {"format": "pt", "arch": args.arch, "weights": weights, "torchvision": torchvision.__version__}
    write_safetensors(out, state, metadata)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{out}: {args.arch} ({weights}), {len(state)} tensors, {parameters} parameters")

    if args.no_logits:
        return
    torch.manual_seed(args.input_seed)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size)
    with torch.no_grad():
        logits = model(x)
    logits_out = (out[: -len(".safetensors")] if out.endswith(".safetensors") else out) + ".logits.safetensors"
    write_safetensors(logits_out, {"input": x, "logits": logits.float()},
                      dict(metadata, input_seed=str(args.input_seed)))
    print(f"{logits_out}: input {list(x.shape)}, logits {list(logits.shape)}, "
          f"max |logit| {logits.abs().max().item():.4g}")


if __name__ == "__main__":
    main()
