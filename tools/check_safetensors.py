#!/usr/bin/env python3
"""Checks that opsnn's safetensors files load with PyTorch's loader (safetensors.torch.load_file).

Prints each tensor's name, dtype, shape, CRC-32 of its raw little-endian bytes and (for numbers) its
float64 sum, plus the header metadata. With --expect FILE.json it also compares every tensor with the
expected values and exits 1 on any difference. The expected file has the shape
  {"metadata": {"k": "v"}, "tensors": {"name": {"dtype": "F32", "shape": [2, 3], "crc32": 123}}}
which is what the opsnn test "safetensors sample for the PyTorch loader check" writes, next to its
sample file, into <build>/safetensors-sample/. Typical use on a machine with PyTorch:

  python3 tools/check_safetensors.py build/safetensors-sample/sample.safetensors \\
      --expect build/safetensors-sample/sample.expected.json
  python3 tools/check_safetensors.py runs/quickstart/checkpoints/step_00001000/model.safetensors
"""
import argparse
import json
import sys
import zlib

import torch
from safetensors import safe_open
from safetensors.torch import load_file

# safetensors dtype names of the dtypes opsnn writes.
TORCH_TO_SAFETENSORS = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.uint8: "U8",
}


def raw_crc32(tensor):
    """CRC-32 of the tensor's bytes as stored in the file (row-major, little-endian)."""
    flat = tensor.contiguous().reshape(-1)
    if flat.numel() == 0:
        return zlib.crc32(b"")
    return zlib.crc32(flat.view(torch.uint8).numpy().tobytes())


def describe(name, tensor):
    dtype = TORCH_TO_SAFETENSORS.get(tensor.dtype, str(tensor.dtype))
    total = tensor.to(torch.float64).sum().item() if tensor.numel() else 0.0
    return {"name": name, "dtype": dtype, "shape": list(tensor.shape), "crc32": raw_crc32(tensor), "sum": total}


def compare(loaded, metadata, expected):
    problems = []
    expected_tensors = expected.get("tensors", {})
    for name in expected_tensors.keys() - loaded.keys():
        problems.append(f"{name}: missing from the file")
    for name in loaded.keys() - expected_tensors.keys():
        problems.append(f"{name}: in the file but not expected")
    for name, want in expected_tensors.items():
        if name not in loaded:
            continue
        got = describe(name, loaded[name])
        for field in ("dtype", "shape", "crc32"):
            if field in want and want[field] != got[field]:
                problems.append(f"{name}: {field} is {got[field]}, expected {want[field]}")
    if "metadata" in expected and expected["metadata"] != metadata:
        problems.append(f"metadata is {metadata}, expected {expected['metadata']}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", help="a .safetensors file")
    parser.add_argument("--expect", help="JSON file of expected dtype/shape/crc32 per tensor and metadata")
    args = parser.parse_args()

    loaded = load_file(args.file)
    with safe_open(args.file, framework="pt") as handle:
        metadata = handle.metadata() or {}
    print(f"{args.file}: {len(loaded)} tensors, metadata {json.dumps(metadata, ensure_ascii=False)}")
    for name in sorted(loaded):
        info = describe(name, loaded[name])
        print(f"  {name}: {info['dtype']} {info['shape']} crc32=0x{info['crc32']:08x} sum={info['sum']!r}")

    if args.expect:
        with open(args.expect, encoding="utf-8") as handle:
            expected = json.load(handle)
        problems = compare(loaded, metadata, expected)
        for problem in problems:
            print(f"MISMATCH {problem}")
        if problems:
            return 1
        print(f"OK: all {len(expected.get('tensors', {}))} tensors and the metadata match {args.expect}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
