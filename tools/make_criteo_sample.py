#!/usr/bin/env python3
"""Writes Criteo-format click logs with a planted signal, for trying the criteo dataset and the dlrm model
without Criteo's data: OUT/train.txt (or train.txt.gz with --gzip), lines of a 0/1 label, 13 integer and
26 hexadecimal features, tab-separated. The click probability of line i is
sigmoid(-1 + w1[C1] + w2[C2] + 0.8 (log(1 + I1) - 2.3)) (C1 takes 20 values, C2 200, I1 is about
exponential with mean 15; the rest is noise, some fields empty): predicting the base rate (about 31%
clicks) gives about 0.62 log-loss, the planted probabilities about 0.45, knowing I1 alone about 0.59. The
lines are those of tests/support/criteo_files.h for the same seed (a test compares them).

  python3 tools/make_criteo_sample.py --lines 200000 --out data/criteo
  opsnn-train --config configs/dlrm_criteo.yaml --set model.hash_buckets=4096
"""
import argparse
import gzip
import math
import os
import sys

MASK = (1 << 64) - 1


def mix(x):
    """splitmix64 (Steele, Lea and Flood 2014, "Fast Splittable Pseudorandom Number Generators")."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def uniform(seed, line, purpose):
    bits = mix(mix((seed * 1000003 + purpose) & MASK) ^ line)
    return (bits >> 11) * (1.0 / 9007199254740992.0)


def weight(field, value, scale):
    u = (mix((field * 7919 + value) & MASK) >> 11) / 9007199254740992.0
    return scale * (2.0 * u - 1.0)


def line(seed, index):
    """Line `index` of the log of `seed` (without its newline) and its planted click probability."""
    c1 = int(20.0 * uniform(seed, index, 1))
    c2 = int(200.0 * math.pow(uniform(seed, index, 2), 1.5))
    i1 = int(-15.0 * math.log(1.0 - uniform(seed, index, 3)))
    logit = -1.0 + weight(1, c1, 2.25) + weight(2, c2, 1.7) + 0.8 * (math.log1p(float(i1)) - 2.3)
    probability = 1.0 / (1.0 + math.exp(-logit))
    label = 1 if uniform(seed, index, 4) < probability else 0
    fields = [str(label)]
    for k in range(13):
        if k == 0:
            fields.append(str(i1))
        elif uniform(seed, index, 10 + k) >= 0.15:  # 15% empty
            fields.append(str(int(50.0 * uniform(seed, index, 30 + k)) - (3 if k == 1 else 0)))
        else:
            fields.append("")
    for k in range(26):
        if k == 0:
            value = c1
        elif k == 1:
            value = c2
        else:
            if uniform(seed, index, 60 + k) < 0.1:  # 10% empty
                fields.append("")
                continue
            value = int((5 + 37 * k) * uniform(seed, index, 90 + k))
        fields.append("%08x" % (mix((k * 100003 + value) & MASK) & 0xFFFFFFFF))
    return "\t".join(fields), probability


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder to write train.txt (or train.txt.gz) into")
    parser.add_argument("--lines", type=int, default=100000, help="lines to write (default 100000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the lines (default 0)")
    parser.add_argument("--first", type=int, default=0, help="index of the first line (default 0)")
    parser.add_argument("--gzip", action="store_true", help="write train.txt.gz instead of train.txt")
    args = parser.parse_args()
    if args.lines < 1 or args.seed < 0 or args.first < 0:
        parser.error("--lines must be at least 1, --seed and --first at least 0")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "train.txt.gz" if args.gzip else "train.txt")
    opener = gzip.open if args.gzip else open
    with opener(path, "wt", newline="\n") as out:
        for index in range(args.first, args.first + args.lines):
            out.write(line(args.seed, index)[0] + "\n")
    print("make_criteo_sample: wrote %d lines to %s" % (args.lines, path), file=sys.stderr)


if __name__ == "__main__":
    main()
