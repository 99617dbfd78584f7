#!/usr/bin/env python3
"""Writes the small seed inputs of the libFuzzer targets into tests/fuzz/corpus/<reader>/.

Seeds are valid files of each format (and a few near-misses), so the fuzzer starts inside the readers'
real parsing rather than at their first check. The config seeds are the repository's configs; the
checkpoint seed is taken from a real run folder when one is given (--state-json), else written here.
Usage: python3 tools/make_fuzz_seeds.py [--state-json runs/x/checkpoints/step_N/state.json]
"""
import argparse
import gzip
import json
import pathlib
import struct
import sys
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # make_criteo_sample, for the criteo seeds
CORPUS = ROOT / "tests" / "fuzz" / "corpus"


def write(reader, name, data):
    folder = CORPUS / reader
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def config_seeds():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        write("config", path.stem, path.read_bytes())
    quick = (ROOT / "configs" / "quickstart.yaml").read_bytes()
    overrides = "train.max_steps=3\noptimizer.name=sgd\noptimizer.lr=0.5\ndata.batch_size=8"
    write("config", "quickstart_with_overrides", quick + b"\0" + overrides.encode())
    write("config", "optimizer_block", "optimizer:\n  name: adam\n  settings:\n    fp32_weight_decay: 0.01\n"
          "    fp16_momentum: true\n    loss_scaling:\n      initial_scale: 65536\n      growth_interval: 2000\n")


def idx_seeds():
    images = struct.pack(">IIII", 0x803, 2, 3, 3) + bytes(range(18))
    labels = struct.pack(">II", 0x801, 4) + bytes([0, 9, 3, 1])
    # First byte: bit 0 labels, bit 1 a ".gz" name (then the bytes must be gzip).
    write("idx", "images_raw", b"\x00" + images)
    write("idx", "labels_raw", b"\x01" + labels)
    write("idx", "images_gzip", b"\x02" + gzip.compress(images, mtime=0))
    write("idx", "labels_gzip", b"\x03" + gzip.compress(labels, mtime=0))
    write("idx", "images_gzip_plain_name", b"\x00" + gzip.compress(images, mtime=0))


def cifar_seeds():
    # First byte: bit 0 CIFAR-100 (else CIFAR-10), the other bits the record count the file must hold.
    def records(count, label_bytes):
        out = b""
        for r in range(count):
            labels = bytes([r % 20, (r * 7) % 100]) if label_bytes == 2 else bytes([(r * 3) % 10])
            out += labels + bytes((r * 31 + i) % 256 for i in range(3072))
        return out
    write("cifar", "cifar10_two_records", bytes([2 << 1]) + records(2, 1))
    write("cifar", "cifar100_one_record", bytes([(1 << 1) | 1]) + records(1, 2))
    write("cifar", "cifar10_none", bytes([0]))


def safetensors_file(tensors, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    write("safetensors", "two_tensors", safetensors_file(
        [("conv.weight", "F32", [2, 2], f32), ("step", "I64", [], struct.pack("<q", 7))], {"format": "pt"}))
    write("safetensors", "mixed_dtypes", safetensors_file(
        [("a", "BF16", [3], b"\x80\x3f\x00\x40\x40\x40"), ("b", "F16", [1, 1], b"\x00\x3c"),
         ("c", "U8", [2], b"\x01\x02"), ("d", "I32", [1], struct.pack("<i", -5)), ("e", "F64", [1], struct.pack("<d", 2.5))]))
    write("safetensors", "empty", safetensors_file([]))


def png_file(width, height, color_type, bit_depth, pixel_rows, interlaced=False, palette=None, trns=None):
    """A PNG of unfiltered rows (bytes as PNG stores them); Adam7 passes for 8-bit RGB when interlaced."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    if interlaced:  # 8-bit RGB only: the seven passes' sub-images, one after another
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        raw = b""
        for x0, y0, dx, dy in passes:
            for y in range(y0, height, dy):
                row = b"".join(pixel_rows[y][3 * x:3 * x + 3] for x in range(x0, width, dx))
                raw += b"\0" + row if row else b""
    else:
        raw = b"".join(b"\0" + row for row in pixel_rows)
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 1 if interlaced else 0)
    body = chunk(b"IHDR", ihdr)
    if palette:
        body += chunk(b"PLTE", bytes(palette))
    if trns:
        body += chunk(b"tRNS", bytes(trns))
    return b"\x89PNG\r\n\x1a\n" + body + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def image_seeds():
    # PNG here; the JPEG seeds (jpeg_*) are committed files written by TurboJPEG (tests/fuzz/README.md).
    rgb = [bytes((x * 40 + y * 3) % 256 for x in range(5) for _ in range(3)) for y in range(4)]
    write("image_decode", "png_rgb", png_file(5, 4, 2, 8, rgb))
    write("image_decode", "png_rgb_interlaced", png_file(5, 4, 2, 8, rgb, interlaced=True))
    indices = [bytes([0x01, 0x23, 0x00]), bytes([0x32, 0x10, 0x30])]  # 4-bit indices, 5 a row
    write("image_decode", "png_palette_trns", png_file(5, 2, 3, 4, indices, palette=[255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9],
                                                       trns=[0, 128]))
    gray16 = [struct.pack(">3H", 0, 30000 + y, 65535) for y in range(3)]
    write("image_decode", "png_gray16", png_file(3, 3, 0, 16, gray16))
    gray_alpha = [bytes([y * 50, 255 - y * 50] * 4) for y in range(2)]
    write("image_decode", "png_gray_alpha", png_file(4, 2, 4, 8, gray_alpha))


def criteo_seeds():
    # First byte: bit 0 a train.txt.gz name (else train.txt), bit 1 bad_lines fail, bits 2-7 max_lines.
    import make_criteo_sample
    lines = "".join(make_criteo_sample.line(0, i)[0] + "\n" for i in range(3))
    empties = "\t".join(["1"] + [""] * 12 + ["-3"] + [""] * 25 + ["ABCDEF12"]) + "\r\n"  # I13 -3, C26 set
    bad = "2\t" + "\t".join(["1"] * 13 + ["a"] * 26) + "\n" + "0\t12x" + "\t" * 38 + "\n"
    write("criteo", "plain_three_lines", b"\x00" + lines.encode())
    write("criteo", "gzip_three_lines", b"\x01" + gzip.compress(lines.encode(), mtime=0))
    write("criteo", "empty_fields_crlf", b"\x00" + (empties + lines).encode())
    write("criteo", "bad_lines_skip", b"\x00" + (lines + bad + lines).encode())
    write("criteo", "fail_two_lines", bytes([(2 << 2) | 2]) + lines.encode())


def state_seed(state_json):
    if state_json:
        write("checkpoint_state", "from_run", pathlib.Path(state_json).read_bytes())
        return
    raise SystemExit("--state-json is needed for the checkpoint seed (a real run's state.json)")


def conv_seeds():
    entry = {"device": "No Such GPU", "cudnn_version": 91400, "direction": "forward", "input": [2, 8, 9, 9],
             "weight": [16, 8, 3, 3], "stride": [1, 1], "padding": [1, 1], "channels_last": False, "dtype": "f32",
             "math": 3, "policy": "measured", "deterministic_setting": True, "lowering": "cudnn", "algorithm": 1,
             "math_type": 3, "workspace_bytes": 0, "cudnn_ms": 0.25, "lowered_ms": -1, "deterministic": True,
             "cudnn_deterministic": True}
    doc = {"format": "opsnn-conv-algorithms", "format_version": 1, "entries": [entry]}
    write("conv_algorithms", "one_entry", json.dumps(doc, indent=1))
    nhwc = dict(entry, direction="backward_weight", channels_last=True, dtype="bf16", lowering="gemm", math=1)
    write("conv_algorithms", "two_entries", json.dumps(dict(doc, entries=[entry, nhwc]), indent=1))
    write("conv_algorithms", "empty", json.dumps(dict(doc, entries=[])))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-json", help="a real checkpoint's state.json to seed fuzz_checkpoint_state")
    args = parser.parse_args()
    config_seeds()
    idx_seeds()
    cifar_seeds()
    safetensors_seeds()
    conv_seeds()
    image_seeds()
    criteo_seeds()
    state_seed(args.state_json)
