"""Turns the fused-counting harness's JSON (moestat_bench_gpu_fused) into the markdown table
of docs/BENCHMARKS.md; every ratio is against figures of the same run."""
import json
import sys


def main(path):
    run = json.load(open(path))
    print(f"Device: {run['device']}; {run['layers']} router kernels per graph, "
          f"E = {run['experts']}, top-{run['top_k']}\n")
    print("| tokens | router alone us/layer | added by fused counting us (x an added empty node) "
          "| added by the record_topk hook us (x) | added by an empty node us |")
    print("|---|---|---|---|---|")
    for row in run["rows"]:
        empty = row["empty_node_added_us"]
        print(f"| {row['tokens']} | {row['router_us']:.2f} "
              f"| {row['fused_added_us']:.3f} ({row['fused_added_us'] / empty:.2f}) "
              f"| {row['hook_added_us']:.3f} ({row['hook_added_us'] / empty:.2f}) | {empty:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
