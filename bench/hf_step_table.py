"""The tables of bench/hf_step_cost.py, from the results it writes; run alone, it prints them
again from its JSON file:

    python bench/hf_step_table.py bench/results/hf_step_cost_h200.json

What a variant adds to a step is taken round by round against recording off (the variants are
timed in turns, so whatever drifts during a round falls on all of them): the table gives the
median over the rounds and, in brackets, the smallest and the largest. A range that reaches
zero or below is within the noise of the measurement, and the SGLang-style / moestat column
then says so instead of dividing by noise; otherwise it gives the ratio of the medians and the
least ratio the rounds allow (SGLang-style's smallest over moestat's largest). "off
recaptured" is the step without recording again, in graphs captured apart from those of "off":
what it "adds" is what capturing alone moves the step by, the floor under which no variant's
cost can be told. "ids kept" is moestat's memory layout without its kernels; "moestat beyond
ids kept" is moestat minus it, round by round: what moestat's own work adds.
"""
import json
import statistics
import sys

VARIANTS = ("moestat", "moestat stopped", "sglang-style", "ids kept", "off, recaptured")


def added(rounds: dict, variant: str, baseline: str = "off") -> list:
    """ms the variant added to the baseline (the step with recording off), round by round."""
    return [time - base for time, base in zip(rounds[variant], rounds[baseline])]


def within_noise(extra: list) -> bool:
    return min(extra) <= 0


def added_cell(rounds: dict, variant: str, baseline: str = "off") -> str:
    """What the variant adds to the baseline: median over the rounds, in ms and as a share of
    the step with recording off, and the rounds' range; "-" where either was not measured."""
    if variant not in rounds or baseline not in rounds:
        return "-"
    extra = added(rounds, variant, baseline)
    middle = statistics.median(extra)
    percent = 100 * middle / statistics.median(rounds["off"])
    return f"{middle:+.4f} ms ({percent:+.2f}%) [{min(extra):+.4f}, {max(extra):+.4f}]"


def ratio_cell(rounds: dict) -> str:
    moestat, sglang = added(rounds, "moestat"), added(rounds, "sglang-style")
    if within_noise(sglang):
        return "both within noise" if within_noise(moestat) else "SGLang-style within noise"
    least = f"at least {min(sglang) / max(moestat):.1f}x" if max(moestat) > 0 else ""
    if within_noise(moestat):
        # Its true cost is at most its largest round: the ratio has a floor, no value.
        return f"moestat within noise ({least})" if least else "moestat within noise"
    return f"{statistics.median(sglang) / statistics.median(moestat):.1f}x ({least})"


def step_table(rounds_by_step: dict, counts: dict) -> str:
    """rounds_by_step: {step: {variant: [ms per step, one per round]}}; counts: {step: check}."""
    lines = ["| step | off (ms) | moestat (ms) | moestat added [rounds] | moestat stopped added "
             "[rounds] | SGLang-style added [rounds] | ids kept added [rounds] | off recaptured "
             "added [rounds] | moestat beyond ids kept [rounds] | SGLang-style / moestat | "
             "counts |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for step, rounds in rounds_by_step.items():
        cells = [step, f"{statistics.median(rounds['off']):.4f}",
                 f"{statistics.median(rounds['moestat']):.4f}",
                 *(added_cell(rounds, variant) for variant in VARIANTS),
                 added_cell(rounds, "moestat", baseline="ids kept"),
                 ratio_cell(rounds),
                 counts[step]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def host_table(host_us: dict) -> str:
    """host_us: {step: {variant: {"per_layer": us, "per_pass": us}}}, medians of host time in
    the hooks on routers (per MoE layer) and on the model (per pass); "off" is the timing
    hooks alone."""
    lines = ["| eager step | off: per layer / per pass (us) | moestat: per layer / per pass (us) "
             "| SGLang-style: per layer / per pass (us) |", "|---|---:|---:|---:|"]
    for step, variants in host_us.items():
        cells = [f"{variants[name]['per_layer']:.1f} / {variants[name]['per_pass']:.1f}"
                 for name in ("off", "moestat", "sglang-style")]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    with open(sys.argv[1]) as file:
        results = json.load(file)
    print(step_table(results["rounds_ms"], results["counts"]))
    if results.get("host_us"):
        print()
        print(host_table(results["host_us"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
