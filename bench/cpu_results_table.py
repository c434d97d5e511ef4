#!/usr/bin/env python3
"""Markdown tables for docs/BENCHMARKS.md from a moestat_bench_cpu JSON result.

Usage: python3 bench/cpu_results_table.py bench/results/cpu_record_<date>.json

Reads the median aggregates (run the benchmark with --benchmark_repetitions=5) and puts
every recorder number next to the naive histogram of the same run, ids and machine.
"""
import json
import re
import sys

NAME = re.compile(r"BM_(\w+)<std::(int\d+)_t>/tokens:(\d+)/experts:(\d+)_median$")


def medians(path):
    with open(path) as f:
        result = json.load(f)
    rows = {}
    for bench in result["benchmarks"]:
        if bench.get("aggregate_name") != "median":
            continue
        rows[bench["name"]] = bench
    return result["context"], rows


def keyed(rows):
    out = {}
    for name, bench in rows.items():
        match = NAME.match(name)
        if match:
            kind, dtype, tokens, experts = match.groups()
            out[(kind, dtype, int(tokens), int(experts))] = bench
    return out


def main():
    context, rows = medians(sys.argv[1])
    table = keyed(rows)
    print(f"Context: {context['date']}, {context['num_cpus']} CPUs at {context['mhz_per_cpu']} MHz, "
          f"library build {context['library_build_type']}\n")
    print("| ids | tokens | P | record_topk CPU ns/call | record_topk ids/s | naive ids/s | "
          "ratio vs naive | whole pass CPU us | whole pass ids/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    order = sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][3], kv[0][2]))
    for (kind, dtype, tokens, experts), bench in order:
        if kind != "RecordTopk":
            continue
        naive = table[("NaiveHistogram", dtype, tokens, experts)]
        whole = table[("RecordPass", dtype, tokens, experts)]
        rate = bench["items_per_second"]
        print(f"| {dtype} | {tokens} | {experts} | {bench['cpu_time']:.1f} | {rate / 1e9:.2f} G "
              f"| {naive['items_per_second'] / 1e9:.2f} G "
              f"| {rate / naive['items_per_second']:.2f} | {whole['cpu_time'] / 1e3:.1f} "
              f"| {whole['items_per_second'] / 1e9:.2f} G |")
    print()
    for name, bench in sorted(rows.items()):
        if name.startswith("BM_EndPassStat"):
            print(f"- {name.removesuffix('_median')}: {bench['cpu_time'] / 1e3:.1f} us CPU per pass")


if __name__ == "__main__":
    main()
