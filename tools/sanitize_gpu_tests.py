#!/usr/bin/env python3
"""Runs the GPU test cases under compute-sanitizer, one process per test case, several at a time.

Under memcheck or racecheck a test case runs 10-100x slower than alone, and the [cuda] suite as one
process does not finish in a device call; one process per case, in parallel on the one GPU, does. Each
case gets its own log under --logs; the summary lists every case with its outcome (clean, sanitizer
errors, test failure, timeout) and the exit code is 0 only when every case ran clean.

    python3 tools/sanitize_gpu_tests.py --tests build-gpu/tests/opsnn-tests --tool memcheck --jobs 12
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import time


def catch_spec(name):
    """A Catch2 test spec matching exactly the test case `name` (commas, brackets and backslashes escaped)."""
    return re.sub(r"([\\,\[\]*])", r"\\\1", name)


def list_cases(tests, selection):
    # Catch2 2 exits with the number of listed cases, so the exit code says nothing here; Catch2 3 has no
    # --list-test-names-only and lists names alone with --list-tests --verbosity quiet.
    for flags in (["--list-test-names-only"], ["--list-tests", "--verbosity", "quiet"]):
        listing = subprocess.run([tests, selection, *flags], capture_output=True, text=True)
        if "Unrecognised token" not in listing.stdout + listing.stderr:
            return [line.strip() for line in listing.stdout.splitlines() if line.strip()]
    return []


def run_case(index, name, args):
    log_path = os.path.join(args.logs, f"{index:03d}.log")
    command = ["compute-sanitizer", "--tool", args.tool, "--error-exitcode", "97", "--print-limit", "50",
               args.tests, catch_spec(name)]
    if args.tool == "racecheck":
        command[3:3] = ["--racecheck-report", "hazard"]
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            code = None
    seconds = time.monotonic() - start
    with open(log_path) as log:
        text = log.read()
    if code is None:
        outcome = "timeout"
    elif code == 97 or re.search(r"(ERROR|RACECHECK) SUMMARY: [1-9]", text):
        outcome = "SANITIZER ERRORS"
    elif "No tests ran" in text:
        outcome = "no test matched"
    elif code != 0:
        outcome = f"test failed (exit {code})"
    else:
        outcome = "clean"
    return index, name, outcome, seconds, log_path


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, help="path of the opsnn-tests binary")
    parser.add_argument("--tool", choices=["memcheck", "racecheck", "initcheck", "synccheck"], default="memcheck")
    parser.add_argument("--select", default="[cuda]", help="Catch2 test spec of the cases to run (default [cuda])")
    parser.add_argument("--jobs", type=int, default=8, help="sanitizer processes at a time")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per test case")
    parser.add_argument("--logs", default="sanitizer-logs", help="folder for one log per case")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0:
        parser.error("--jobs must be at least 1 and --timeout positive")
    if not os.access(args.tests, os.X_OK):
        print(f"sanitize_gpu_tests: {args.tests} is not an executable test binary", file=sys.stderr)
        return 2
    cases = list_cases(args.tests, args.select)
    if not cases:
        print(f"sanitize_gpu_tests: no test case matches {args.select}", file=sys.stderr)
        return 2
    os.makedirs(args.logs, exist_ok=True)
    print(f"{len(cases)} test cases under {args.tool}, {args.jobs} at a time, {args.timeout:.0f} s each at most",
          flush=True)
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_case, i, name, args) for i, name in enumerate(cases)]
        for future in concurrent.futures.as_completed(futures):
            index, name, outcome, seconds, log_path = future.result()
            results.append((index, name, outcome, seconds, log_path))
            print(f"  {outcome:<24} {seconds:7.1f} s  {name}", flush=True)
    clean = sum(1 for result in results if result[2] == "clean")
    print(f"\n{clean} of {len(results)} test cases clean under {args.tool}")
    for index, name, outcome, seconds, log_path in sorted(results):
        if outcome != "clean":
            print(f"  {outcome}: {name} ({log_path})")
    return 0 if clean == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
