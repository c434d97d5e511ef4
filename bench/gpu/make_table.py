"""Joins the GPU harness's JSON and the SGLang-style baseline's JSON (measured in the same
run) into the markdown table of docs/BENCHMARKS.md, with ratios."""
import json
import sys


def main(moestat_path, baseline_path):
    ours = json.load(open(moestat_path))
    baseline = {(r["dtype"], r["tokens"]): r for r in json.load(open(baseline_path))["rows"]}
    baseline_doc = json.load(open(baseline_path))
    trivial = baseline_doc.get("trivial_node_us")
    empty = ours["empty_node_us"]
    added_empty = ours["added_empty_node_us"]
    print(f"Device: {ours['device']}; {ours['layers']} layers, E = {ours['physical_experts']}, "
          f"top-{ours['top_k']}; empty graph node {empty:.3f} us (one more empty node after an "
          f"engine kernel adds {added_empty:.3f} us), begin_pass {ours['begin_pass_us']:.3f} us, "
          f"end_pass {ours['end_pass_us']:.3f} us; a trivial torch node (x.add_(1), FIELD.md's "
          f"\"one empty graph node\") {trivial:.3f} us (same run)\n")
    print("| dtype | tokens | moestat us/layer | x empty node | x trivial torch node | with a device valid count us "
          "| added after an engine kernel us "
          "(x an added empty node) | direct / block us (serialized launch) | flag off us "
          "| SGLang-style us/layer (masked / clamped) | speed-up vs SGLang | eager host us/call "
          "(moestat / SGLang) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in ours["rows"]:
        base = baseline[(row["dtype"], row["tokens"])]
        best = min(base["masked_scatter"]["graph_us"], base["clamped_scatter"]["graph_us"])
        print(f"| {row['dtype']} | {row['tokens']} | {row['record_us']:.3f} "
              f"| {row['record_us'] / empty:.2f} "
              f"| {row['record_us'] / trivial:.2f} "
              f"| {row['record_device_count_us']:.3f} "
              f"| {row['added_record_us']:.3f} ({row['added_record_us'] / added_empty:.2f}) "
              f"| {row['direct_atomics_us']:.2f} / {row['block_histogram_us']:.2f} "
              f"({row['direct_atomics_serialized_us']:.2f} / "
              f"{row['block_histogram_serialized_us']:.2f}) "
              f"| {row['record_off_us']:.3f} "
              f"| {base['masked_scatter']['graph_us']:.2f} / {base['clamped_scatter']['graph_us']:.2f} "
              f"| {best / row['record_us']:.1f}x "
              f"| {row['eager_host_us']:.2f} / {base['masked_scatter']['eager_host_us']:.1f} |")


    trace = ours.get("trace")
    if trace:
        extra_ms = trace["trace_stream_ms_per_pass"] - trace["stat_stream_ms_per_pass"]
        print(f"\nPer-token drain: {trace['passes']} passes of {trace['tokens_per_pass']} tokens x "
              f"{ours['layers']} layers ({trace['pass_mbytes']:.1f} MB of ids per pass). Recording "
              f"stream per pass: {trace['trace_stream_ms_per_pass']:.3f} ms per_token vs "
              f"{trace['stat_stream_ms_per_pass']:.3f} ms stat, so staging and copying to the pinned "
              f"ring cost {extra_ms:.3f} ms ({trace['pass_mbytes'] / 1e3 / (extra_ms / 1e3):.1f} GB/s); "
              f"writer thread into {trace['directory']}: {trace['writer_gb_per_s']:.2f} GB/s "
              f"appending, {trace['reserved_writer_gb_per_s']:.2f} GB/s into a reserved file "
              f"(stream {trace['reserved_trace_stream_ms_per_pass']:.3f} ms per pass); "
              f"{trace['dropped_tokens']} / {trace['reserved_dropped_tokens']} tokens dropped; "
              f"file sizes {trace['file_bytes']} / {trace['reserved_file_bytes']} bytes")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
