#!/usr/bin/env python3
"""moestat's .pt files against a real torch, both ways, values compared exactly.

1. torch.save of SGLang-like dicts and of every value kind -> moestat reads (through
   pt_codec_tool) -> the same values, tensor locations ("cpu", "cuda:0") included.
2. moestat writes the same values -> torch.load(path, weights_only=True) -> the same values.
3. The real SGLang statistics in ../shared/data, converted to .pt by `moestat convert`,
   load with torch.load(weights_only=True) and equal the JSON (skipped where absent).

Exits 77 (a skip for CTest) when torch cannot be imported.
"""
import argparse
import collections
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.serialization
except ImportError:
    print("torch is not importable; skipping the interop test")
    sys.exit(77)

# torch before 2.0 has no BINFLOAT in its weights-only unpickler, so it cannot load any
# file holding a Python float with weights_only=True (SGLang's own dumps included).
WEIGHTS_ONLY_FLOATS = int(torch.__version__.split(".")[0]) >= 2

_fake_cuda = False


def _tag_as_cuda(obj):
    return "cuda:0" if _fake_cuda else None


# Ahead of torch's own taggers: torch.save then records "cuda:0", as for a CUDA tensor.
torch.serialization.register_package(0, _tag_as_cuda, lambda obj, location: None)

DTYPES = {torch.int32: "int32", torch.int64: "int64", torch.float32: "float32",
          torch.float64: "float64", torch.bool: "bool"}


def encode(value, device="cpu"):
    """The tagged form pt_codec_tool reads and prints."""
    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, float):
        return ["float", struct.unpack("<Q", struct.pack("<d", value))[0]]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, list):
        return ["list", [encode(v, device) for v in value]]
    if isinstance(value, tuple):
        return ["tuple", [encode(v, device) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[encode(k), encode(v, device)] for k, v in value.items()]]
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        if value.dtype == torch.float32:
            values = [v & 0xFFFFFFFF for v in flat.view(torch.int32).tolist()]
        elif value.dtype == torch.float64:
            values = [v & 0xFFFFFFFFFFFFFFFF for v in flat.view(torch.int64).tolist()]
        else:
            values = [int(v) for v in flat.tolist()]
        return ["tensor", DTYPES[value.dtype], list(value.shape), device, values]
    raise TypeError(type(value))


def cases():
    """(name, value, has_float, device of its tensors in the file)."""
    base = torch.arange(20, dtype=torch.int64).reshape(4, 5)
    counts = torch.randint(0, 1 << 20, (3, 4, 8), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    yield "stat_dump", {"rank": 0, "logical_count": counts,
                        "average_utilization_rate_over_window": None}, False, "cpu"
    yield "stat_dump_cuda", {"rank": 3, "logical_count": counts,
                             "average_utilization_rate_over_window": 0.8125}, True, "cuda:0"
    yield "placement", {"physical_to_logical_map": torch.tensor([[0, 1, 2, 0], [2, 1, 0, 2]])}, False, "cpu"
    yield "per_pass_dump", {
        "records": [{"forward_pass_id": i, "rank": 1, "gatherer_key": "primary",
                     "global_physical_count": torch.full((2, 4), i, dtype=torch.int32)}
                    for i in range(3)],
        "last_physical_to_logical_map": torch.tensor([[0, 1, 2, 0], [2, 1, 0, 2]]),
    }, False, "cpu"
    yield "mask", torch.tensor([[True, False], [False, True]]), False, "cpu"
    yield "every_kind", {
        "ints": [0, 1, 255, 256, 65535, 65536, -1, -(2**31), 2**31 - 1, 2**31, 2**63 - 1, -(2**63)],
        "bools": (True, False), "none": None, "text": "\u00e9\u4e2d", 12: "int key",
        "nested": [[[]], {}, ()],
        "f32": torch.tensor([0.1, -0.0, float("inf")], dtype=torch.float32),
        "f64": torch.tensor([[1e-300, float("nan")]], dtype=torch.float64),
        "scalar": torch.tensor(7, dtype=torch.int32), "empty": torch.zeros(0, 3),
        "transposed": base.t(), "row": base[2], "strided": base[:, ::2],
        "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
    }, False, "cpu"
    yield "floats", {"values": [0.5, -2.25, 1e300, float("-inf")]}, True, "cpu"


def run(*command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {result.stderr}")
    return result.stdout


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--shared", required=True)
    args = parser.parse_args()
    global _fake_cuda
    print(f"torch {torch.__version__}; weights_only floats: {WEIGHTS_ONLY_FLOATS}")
    with tempfile.TemporaryDirectory() as scratch:
        for name, value, has_float, device in cases():
            expected = encode(value, device)
            # 1. torch.save -> moestat
            saved = os.path.join(scratch, name + ".torch.pt")
            _fake_cuda = device != "cpu"
            try:
                torch.save(value, saved)
            finally:
                _fake_cuda = False
            got = json.loads(run(args.tool, "to-json", saved))
            check(got == expected, f"{name}: moestat read {got}\n expected {expected}")
            # 2. moestat -> torch.load
            tagged = os.path.join(scratch, name + ".json")
            with open(tagged, "w") as f:
                json.dump(expected, f)
            written = os.path.join(scratch, name + ".moestat.pt")
            run(args.tool, "from-json", tagged, written)
            weights_only = WEIGHTS_ONLY_FLOATS or not has_float
            loaded = torch.load(written, weights_only=weights_only, map_location="cpu")
            check(encode(loaded, device) == expected, f"{name}: torch.load gave {loaded}")
            print(f"ok: {name} (torch -> moestat, moestat -> torch weights_only={weights_only})")

        # 3. the real statistics, through the CLI
        data = os.path.join(args.shared, "data", "deepseek-v3-sglang-stats")
        if not os.path.isdir(data):
            print(f"skipped: {data} is absent")
            return 0
        for entry in sorted(os.listdir(data)):
            if not entry.endswith(".json"):
                continue
            out = os.path.join(scratch, entry[:-5] + ".pt")
            run(args.cli, "convert", os.path.join(data, entry), out)
            loaded = torch.load(out, weights_only=True)
            with open(os.path.join(data, entry)) as f:
                original = json.load(f)["logical_count"]
            check(loaded["logical_count"].dtype == torch.int32, f"{entry}: dtype")
            check(loaded["logical_count"].tolist() == [[int(v) for v in row] for row in original],
                  f"{entry}: values differ")
            back = os.path.join(scratch, entry[:-5] + ".back.json")
            run(args.cli, "convert", out, back)
            with open(back) as f:
                check(json.load(f)["logical_count"] == original, f"{entry}: .pt -> .json differs")
            print(f"ok: {entry} -> .pt -> torch.load(weights_only=True) and back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
