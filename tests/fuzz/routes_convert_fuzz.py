#!/usr/bin/env python3
"""Fuzzes moestat.read_routes and every moestat.routing converter on what it reads, under a
memory limit: each input must read or raise moestat.Error, and each converter must return
or raise moestat.Error (a MemoryError, another exception, a signal or more than the time
limit on one input is a finding). libFuzzer cannot drive Python, so this mutates the seed
routes files itself: byte flips, and the layout's and requests' numbers set to the extremes
that broke the readers and converters before (2^31 - 1 top_k or decoder layers, positions
near 2^62, versions past 2^63).

    PYTHONPATH=build/python tests/fuzz/routes_convert_fuzz.py [--runs N] [--seed S]
        [--memory-mb M] [--timeout-s T] [--artifacts DIR] SEED_DIR...

A finding leaves its input in ARTIFACTS (default .) as routes_convert_crash_<run>.safetensors
and exits 1. scripts/fuzz.sh runs it after the libFuzzer targets.
"""
import argparse
import json
import os
import random
import resource
import signal
import struct
import sys
import tempfile
import traceback
from pathlib import Path

# One thread: OpenBLAS reserves memory per thread, which would count against the limit.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


import moestat  # noqa: E402
from moestat import routing  # noqa: E402

EXTREMES = [0, 1, -1, 2, 255, 256, 65536, 65537, (1 << 27), (1 << 31) - 1, 1 << 31,
            (1 << 62) - 1, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64]


class Timeout(Exception):
    pass


def split(data):
    """(header dict, data buffer) of a safetensors file, or None."""
    if len(data) < 8:
        return None
    size = struct.unpack("<Q", data[:8])[0]
    try:
        return json.loads(data[8:8 + size]), data[8 + size:]
    except ValueError:
        return None


def join(header, buffer):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + buffer


def mutate_metadata(header, rng):
    """One number of the layout or of a request set to an extreme, or a request repeated."""
    meta = header.get("__metadata__", {})
    key = rng.choice(["layout", "requests"])
    try:
        value = json.loads(meta[key])
    except (KeyError, ValueError):
        return
    if key == "layout" and isinstance(value, dict):
        field = rng.choice(["num_decoder_layers", "num_experts", "top_k", "layers"])
        value[field] = ([rng.choice(EXTREMES)] if field == "layers" else rng.choice(EXTREMES))
    elif key == "requests" and isinstance(value, list) and value:
        request = rng.choice(value)
        if rng.random() < 0.2:
            value.extend([dict(request, num_tokens=0)] * rng.choice([1, 20, 2000]))
        elif isinstance(request, dict):
            request[rng.choice(["first_position", "num_tokens", "placement_version"])] = (
                rng.choice(EXTREMES))
    meta[key] = json.dumps(value)


def mutate(data, rng):
    parts = split(data) if rng.random() < 0.7 else None
    if parts is not None:
        header, buffer = parts
        for _ in range(rng.randint(1, 3)):
            mutate_metadata(header, rng)
        return join(header, buffer)
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def convert(routes, rng):
    """Every converter on `routes` (and hostile arguments), as a user would call them."""
    one = routes[0]
    allow = dict(allow_invalid=True)
    layout = one.layout
    calls = [
        lambda: routing.to_sglang(one, rng.choice(routing.SGLANG_WIRE_DTYPES), **allow),
        lambda: routing.from_vllm(routing.to_vllm(one, "base64", **allow), layout,
                                  one.first_position, unrecorded="invalid"),
        lambda: routing.from_megatron(routing.to_megatron(routes, **allow), layout,
                                      [r.num_tokens for r in routes], unrecorded="invalid"),
        lambda: routing.to_verl(routes, layers=rng.choice(["moe", "all"]), **allow),
        lambda: routing.to_verl(routes, seq_len=rng.choice(EXTREMES), **allow),
        lambda: routing.to_slime(one, **allow),
        lambda: routing.padded_batch(routes, offsets=[rng.choice(EXTREMES)] * len(routes)),
        lambda: routing.pack_ids(one.ids, rng.choice(EXTREMES)),
        lambda: routing.from_sglang(routing.to_sglang(one, **allow), layout,
                                    rng.choice(EXTREMES), unrecorded="invalid"),
    ]
    for call in calls:
        try:
            call()
        except moestat.Error:
            pass


def run_one(data, path, rng):
    path.write_bytes(data)
    try:
        routes = moestat.read_routes(path)
    except moestat.Error:
        return
    convert(routes, rng)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seed_dirs", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--timeout-s", type=int, default=10)
    parser.add_argument("--artifacts", type=Path, default=Path("."))
    args = parser.parse_args()

    seeds = [p.read_bytes() for d in args.seed_dirs for p in sorted(d.iterdir()) if p.is_file()]
    if not seeds:
        sys.exit(f"routes_convert_fuzz: no seed files in {args.seed_dirs}")
    limit = args.memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    def alarm(*_):
        raise Timeout(f"more than {args.timeout_s} s on one input")

    signal.signal(signal.SIGALRM, alarm)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "input.safetensors"
        for run in range(args.runs):
            data = mutate(rng.choice(seeds), rng)
            signal.alarm(args.timeout_s)
            try:
                run_one(data, path, rng)
            except BaseException:  # MemoryError, Timeout, anything but moestat.Error
                signal.alarm(0)
                crash = args.artifacts / f"routes_convert_crash_{run}.safetensors"
                crash.write_bytes(data)
                traceback.print_exc()
                sys.exit(f"routes_convert_fuzz: run {run} failed; its input is {crash}")
            signal.alarm(0)
    print(f"routes_convert_fuzz: {args.runs} inputs, {len(seeds)} seeds, "
          f"{args.memory_mb} MiB address space, {args.timeout_s} s each: no finding")


if __name__ == "__main__":
    main()
