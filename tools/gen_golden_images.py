#!/usr/bin/env python3
"""Golden data for opsnn's JPEG and PNG decoders: small image files and what PIL decodes them to.

Writes tests/golden/images/: one file per case opsnn's image_folder dataset must read (RGB, palette,
grayscale, grayscale + alpha, RGBA, 16-bit grayscale, interlaced PNG; RGB, grayscale and CMYK JPEG) and
golden.json with each file's size and its pixels as PIL gives them after .convert("RGB") (what
torchvision's ImageFolder loader does). Two cases differ from a bare PIL convert on purpose, and the
expected values say so: a 16-bit PNG is reduced to 8 bits by keeping the high byte (PIL clips 16-bit
values above 255 instead), and alpha is dropped without compositing (as PIL does).

    python3 tools/gen_golden_images.py            # needs Pillow and numpy (the GPU machine has both)

The files are a few hundred bytes each; the test (tests/data/test_image_decode_golden.cpp) decodes them
with libjpeg-turbo and libpng and compares: PNG exactly, JPEG within 1 per channel (both use libjpeg-turbo's
accurate integer IDCT and fancy upsampling, so they normally agree exactly).
"""
import io
import json
import os
import sys

import numpy as np
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "images")


def smooth_rgb(width, height, seed):
    """A smooth colour field with a little noise: JPEG-friendly, with distinct pixels everywhere."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    channels = [127 + 100 * np.sin(x / (3.0 + c) + y / (4.0 + c) + c) for c in range(3)]
    pixels = np.stack(channels, axis=-1) + rng.integers(-6, 7, size=(height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = {}

    def record(name, image, expected_rgb=None, **save):
        path = os.path.join(OUT, name)
        image.save(path, **save)
        decoded = Image.open(path)
        decoded.load()
        rgb = expected_rgb if expected_rgb is not None else np.asarray(decoded.convert("RGB"))
        cases[name] = {"width": decoded.width, "height": decoded.height, "mode": decoded.mode,
                       "rgb": np.asarray(rgb, dtype=np.uint8).reshape(-1).tolist()}

    rgb = smooth_rgb(13, 9, 1)
    record("rgb.png", Image.fromarray(rgb))
    record("rgba.png", Image.fromarray(np.dstack([rgb, np.full((9, 13), 77, np.uint8)]), "RGBA"))
    record("interlaced_rgb.png", Image.fromarray(smooth_rgb(19, 17, 2)), optimize=False, interlace=1)
    gray = smooth_rgb(11, 7, 3)[:, :, 0]
    record("gray.png", Image.fromarray(gray, "L"))
    record("gray_alpha.png", Image.fromarray(np.dstack([gray, 255 - gray]), "LA"))
    palette = Image.fromarray(smooth_rgb(12, 10, 4)).quantize(colors=16)
    record("palette.png", palette)
    sixteen = (np.arange(10 * 6, dtype=np.uint16).reshape(6, 10) * 1093 + 17).astype(np.uint16)
    high_byte = (sixteen >> 8).astype(np.uint8)
    image16 = Image.frombytes("I;16", (10, 6), sixteen.astype("<u2").tobytes())
    record("gray16.png", image16, expected_rgb=np.repeat(high_byte[:, :, None], 3, axis=2))

    record("rgb.jpg", Image.fromarray(smooth_rgb(32, 24, 5)), quality=95)
    record("rgb_444.jpg", Image.fromarray(smooth_rgb(21, 15, 6)), quality=95, subsampling=0)
    record("gray.jpg", Image.fromarray(smooth_rgb(17, 11, 7)[:, :, 1], "L"), quality=95)
    cmyk = Image.fromarray(smooth_rgb(16, 16, 8)).convert("CMYK")
    record("cmyk.jpg", cmyk, quality=95)

    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump({"generator": f"Pillow {Image.__version__} ({sys.argv[0]})", "cases": cases}, f)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"wrote {len(cases)} images and golden.json to {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
