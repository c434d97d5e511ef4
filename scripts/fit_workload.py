#!/usr/bin/env python3
"""Fits the built-in workload presets' popularity model to real routing statistics.

Reads ../shared/data (or --data DIR): DeepSeek-V3 SGLang logical_count files ([61][256],
prefill and decode benchmark workloads) and Mixtral-8x7B fiddler expert_popularity files
([32][8], MMLU subjects). Prints the real figures, the fitted parameters as they appear in
src/workload/presets.cpp, and the model's figures next to the real ones (docs/workload.md).

The model (mirrored from src/workload/popularity.cpp): for MoE layer l at depth fraction f,
  log weight[e] = sigma_l * (sqrt(g) * z[E + group(e)] + sqrt(1 - g) * z[e]) + boost * hot_l[e]
  sigma_l = interp(sigma_knots, f) * exp(sigma_jitter * N(0, 1))
  z = sqrt(rho_p) * shared + sqrt(1 - rho_p) * phase_part   (phase = prefill or decode)
where `shared` and each phase part are standard normal vectors that drift: anchors every
drift_passes passes form an AR(1) chain with coefficient rho_d. The hot experts (num_hot
per layer, fixed) model the few experts real layers load far above a log-normal tail.

Statistics are compared as a real measurement would see them: expected loads plus the
counting noise of the file's token count (negligible for DeepSeek-V3's millions of tokens,
not for Mixtral's few thousand). The effect of drawing top-k distinct experts per token
(and DeepSeek's group limit) on the realised loads is calibrated with one token-level
simulation and folded back into the targets.

Pure Python (no numpy) so it runs anywhere: python3 scripts/fit_workload.py
"""

import argparse
import bisect
import glob
import itertools
import json
import math
import os
import random
import statistics

# ---- statistics, as the C++ test computes them ----


def gini(values):
    xs = sorted(values)
    n, total = len(xs), sum(xs)
    return sum((2 * (i + 1) - n - 1) * v for i, v in enumerate(xs)) / (n * total)


def max_over_mean(values):
    return max(values) / (sum(values) / len(values))


def pearson(a, b):
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    sa = math.sqrt(sum((x - ma) ** 2 for x in a))
    sb = math.sqrt(sum((y - mb) ** 2 for y in b))
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (sa * sb)


def group_cv(values, num_groups):
    size = len(values) // num_groups
    sums = [sum(values[g * size:(g + 1) * size]) for g in range(num_groups)]
    return statistics.pstdev(sums) / statistics.fmean(sums)


def sd_log(values):
    mean = statistics.fmean(values)
    return statistics.pstdev([math.log(max(v, 0.5) / mean) for v in values])


def mean_pair_correlation(files_a, files_b):
    """Mean over file pairs (a != b) of the mean over layers of the load correlation."""
    pairs = [(a, b) for a in files_a for b in files_b if a is not b]
    if files_a is files_b:
        pairs = list(itertools.combinations(files_a, 2))
    return statistics.fmean(
        statistics.fmean(pearson(x, y) for x, y in zip(a, b)) for a, b in pairs)


# ---- real data ----


class Dataset:
    """Per-file [layers][experts] loads of the MoE layers, with phase and token count."""

    def __init__(self, name, num_experts, top_k, num_groups):
        self.name, self.num_experts, self.top_k, self.num_groups = (name, num_experts, top_k,
                                                                     num_groups)
        self.files = []  # (label, phase, tokens, rows)

    def add(self, label, phase, rows):
        tokens = statistics.fmean(sum(r) for r in rows) / self.top_k
        self.files.append((label, phase, tokens, rows))

    def rows(self, phase=None):
        return [f[3] for f in self.files if phase is None or f[1] == phase]

    def figures(self):
        every = [r for f in self.rows() for r in f]
        out = {
            "gini": statistics.fmean(gini(r) for r in every),
            "gini_min": min(gini(r) for r in every),
            "gini_max": max(gini(r) for r in every),
            "max_mean": statistics.fmean(max_over_mean(r) for r in every),
            "max_mean_min": min(max_over_mean(r) for r in every),
            "max_mean_max": max(max_over_mean(r) for r in every),
        }
        if self.num_groups > 1:
            out["group_cv"] = statistics.fmean(group_cv(r, self.num_groups) for r in every)
        prefill, decode = self.rows("prefill"), self.rows("decode")
        if prefill and decode:
            out["phase_corr"] = mean_pair_correlation(prefill, decode)
            # Drift: two workloads of the same phase (other lengths) as two moments of one run.
            out["drift_corr"] = statistics.fmean(
                [mean_pair_correlation(prefill, prefill),
                 mean_pair_correlation(decode, decode)])
        else:
            out["drift_corr"] = mean_pair_correlation(self.rows(), self.rows())
        return out

    def depth_profile(self):
        """Mean over files of each MoE layer's standard deviation of log load."""
        files = self.rows()
        return [statistics.fmean(sd_log(f[l]) for f in files) for l in range(len(files[0]))]


def load_deepseek(directory):
    data = Dataset("deepseek-v3", 256, 8, 8)
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            counts = json.load(f)["logical_count"]
        label = os.path.basename(path)[:-len(".json")]
        data.add(label, label.split("_")[0], [row for row in counts[3:]])  # rows 0-2 dense
    return data


def load_mixtral(directory):
    data = Dataset("mixtral-8x7b", 8, 2, 1)
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            counts = json.load(f)["expert_popularity"]
        label = os.path.basename(path).split("expert_popularity_")[-1][:-len(".json")]
        # NOTE: fiddler's rows sum to about 3x its total_input_tokens (it counts more than
        # the prompt); only the shape of each row is used, and the token count that drives
        # counting noise is taken from the rows themselves.
        data.add(label, "mixed", counts)
    return data


# ---- the model ----


class Params:
    def __init__(self, **kw):
        self.sigma_knots = kw["sigma_knots"]
        self.sigma_jitter = kw["sigma_jitter"]
        self.group_share = kw["group_share"]
        self.num_hot = kw["num_hot"]
        self.hot_boost = kw["hot_boost"]
        self.phase_corr = kw["phase_corr"]
        self.drift_corr = kw["drift_corr"]

    def replace(self, **kw):
        out = Params(**vars(self))
        for key, value in kw.items():
            setattr(out, key, value)
        return out


def interp(knots, fraction):
    if len(knots) == 1:
        return knots[0]
    x = fraction * (len(knots) - 1)
    i = min(int(x), len(knots) - 2)
    return knots[i] + (knots[i + 1] - knots[i]) * (x - i)


def model_layers(params, num_layers, num_experts, num_groups, seed):
    """[layer] -> dict of expected popularity: prefill/decode now, prefill/decode one drift
    period later."""
    rng = random.Random(seed)
    width = num_experts + num_groups
    rho_p, rho_d = params.phase_corr, params.drift_corr
    out = []
    for layer in range(num_layers):
        fraction = layer / max(num_layers - 1, 1)
        sigma = interp(params.sigma_knots, fraction) * math.exp(params.sigma_jitter *
                                                               rng.gauss(0, 1))
        hot = set(rng.sample(range(num_experts), params.num_hot))
        gauss = lambda: [rng.gauss(0, 1) for _ in range(width)]
        chains = {}
        for part in ("shared", "prefill", "decode"):
            a0 = gauss()
            noise = gauss()
            a1 = [rho_d * x + math.sqrt(1 - rho_d ** 2) * n for x, n in zip(a0, noise)]
            chains[part] = (a0, a1)
        rows = {}
        for phase in ("prefill", "decode"):
            for when in (0, 1):
                z = [math.sqrt(rho_p) * s + math.sqrt(1 - rho_p) * p
                     for s, p in zip(chains["shared"][when], chains[phase][when])]
                g = params.group_share if num_groups > 1 else 0.0
                size = num_experts // num_groups
                logw = [sigma * (math.sqrt(g) * z[num_experts + e // size] +
                                 math.sqrt(1 - g) * z[e]) + (params.hot_boost if e in hot else 0)
                        for e in range(num_experts)]
                top = max(logw)
                w = [math.exp(x - top) for x in logw]
                total = sum(w)
                rows[(phase, when)] = [x / total for x in w]
        out.append(rows)
    return out


def measured(probabilities, tokens, top_k, rng):
    """Counts a file of `tokens` tokens would show: expected loads plus counting noise (a
    token includes an expert with probability top_k * p: binomial, not Poisson, noise)."""
    n = tokens * top_k
    return [max(n * p + math.sqrt(n * p * max(1 - top_k * p, 0.0)) * rng.gauss(0, 1), 0.0)
            for p in probabilities]


def model_figures(params, data, seeds=range(2), calibration=None):
    """The dataset's figures for the model, each file measured with its own token count.
    Shape figures: every file's phase now. Phase correlation: each real (prefill, decode)
    file pair, both now. Drift: each real same-phase file pair, now against one drift period
    later (the data has no time axis; two workloads of a phase stand for two moments)."""
    acc = {}
    num_layers = len(data.rows()[0])
    key = lambda phase: phase if phase in ("prefill", "decode") else "prefill"
    for seed in seeds:
        rng = random.Random(1000 + seed)
        layers = model_layers(params, num_layers, data.num_experts, data.num_groups, seed)
        look = lambda phase, when, tokens: [measured(l[(key(phase), when)], tokens, data.top_k,
                                                     rng) for l in layers]
        fake = Dataset(data.name, data.num_experts, data.top_k, data.num_groups)
        for label, phase, tokens, _ in data.files:
            fake.files.append((label, phase, tokens, look(phase, 0, tokens)))
        figures = fake.figures()
        layer_corr = lambda a, b: statistics.fmean(pearson(x, y) for x, y in zip(a, b))
        prefill = [f for f in data.files if f[1] == "prefill"]
        decode = [f for f in data.files if f[1] == "decode"]
        if prefill and decode:
            figures["phase_corr"] = statistics.fmean(
                layer_corr(look("prefill", 0, a[2]), look("decode", 0, b[2]))
                for a in prefill for b in decode)
        groups = [g for g in (prefill, decode) if g] or [data.files]
        figures["drift_corr"] = statistics.fmean(
            statistics.fmean(layer_corr(look(a[1], 0, a[2]), look(a[1], 1, b[2]))
                             for a, b in itertools.combinations(g, 2)) for g in groups)
        for k, v in figures.items():
            acc.setdefault(k, []).append(v)
    out = {k: statistics.fmean(v) for k, v in acc.items()}
    for k, factor in (calibration or {}).items():
        out[k] *= factor
    return out


# ---- token-level calibration ----


def realised_loads(probabilities, tokens, top_k, num_groups, group_limit, rng):
    """What the C++ generator does per token: top_k distinct draws, a group limit."""
    e = len(probabilities)
    size = e // num_groups
    cumulative = list(itertools.accumulate(probabilities))
    load = [0] * e
    for _ in range(tokens):
        chosen, groups = set(), set()
        while len(chosen) < top_k:
            x = min(bisect.bisect(cumulative, rng.random() * cumulative[-1]), e - 1)
            if x in chosen:
                continue
            if group_limit and len(groups) == group_limit and x // size not in groups:
                continue
            chosen.add(x)
            groups.add(x // size)
        for x in chosen:
            load[x] += 1
    return load


def calibration(params, data, group_limit, tokens=6000):
    """Ratios realised / expected of the shape figures, from one token-level simulation."""
    rng = random.Random(7)
    num_layers = len(data.rows()[0])
    layers = model_layers(params, num_layers, data.num_experts, data.num_groups, 99)
    expected, realised = [], []
    for layer in layers:
        p = layer[("prefill", 0)]
        expected.append([x * tokens * data.top_k for x in p])
        realised.append(realised_loads(p, tokens, data.top_k, data.num_groups, group_limit, rng))
    # Counting noise of `tokens` tokens is in `realised` only; add it to `expected` too.
    noisy = [measured([x / (tokens * data.top_k) for x in row], tokens, data.top_k, rng)
             for row in expected]
    out = {}
    for key, fn in (("gini", gini), ("max_mean", max_over_mean)):
        out[key] = (statistics.fmean(fn(r) for r in realised) /
                    statistics.fmean(fn(r) for r in noisy))
    if data.num_groups > 1:
        out["group_cv"] = (statistics.fmean(group_cv(r, data.num_groups) for r in realised) /
                           statistics.fmean(group_cv(r, data.num_groups) for r in noisy))
    return out


# ---- fitting ----


def bisect_param(params, name, key, target, low, high, data, cal, iterations=10):
    """Sets params.name in [low, high] so the model's figure `key` meets `target`
    (monotone increasing in the parameter)."""
    for _ in range(iterations):
        mid = (low + high) / 2
        value = model_figures(params.replace(**{name: mid}), data, calibration=cal)[key]
        low, high = (mid, high) if value < target else (low, mid)
    return params.replace(**{name: (low + high) / 2})


def fit(data, num_knots, num_hot, group_limit, fit_phase=True, base=None):
    real = data.figures()
    profile = data.depth_profile()
    # Knots: the real depth profile of the spread of log loads, averaged around each knot.
    knots = []
    for k in range(num_knots):
        centre = k / (num_knots - 1) * (len(profile) - 1)
        width = (len(profile) - 1) / (num_knots - 1)
        weights = [max(0.0, 1 - abs(i - centre) / width) for i in range(len(profile))]
        knots.append(sum(w * v for w, v in zip(weights, profile)) / sum(weights))
    smooth = [interp(knots, i / (len(profile) - 1)) for i in range(len(profile))]
    jitter = statistics.pstdev([math.log(v / s) for v, s in zip(profile, smooth)])
    params = Params(sigma_knots=knots, sigma_jitter=jitter,
                    group_share=0.2 if data.num_groups > 1 else 0.0, num_hot=num_hot,
                    hot_boost=1.0 if num_hot else 0.0,
                    phase_corr=base.phase_corr if base else 0.8, drift_corr=0.9)
    cal = {}
    for _ in range(2):  # fit, calibrate the token-level effects, fit again
        for _ in range(2):  # coordinate rounds: the figures depend on each other a little
            scale = 1.0
            low, high = 0.3, 2.0
            for _ in range(10):
                scale = (low + high) / 2
                value = model_figures(params.replace(
                    sigma_knots=[k * scale for k in knots]), data, calibration=cal)["gini"]
                low, high = (scale, high) if value < real["gini"] else (low, scale)
            params = params.replace(sigma_knots=[k * (low + high) / 2 for k in knots])
            if num_hot:
                params = bisect_param(params, "hot_boost", "max_mean", real["max_mean"], 0.0,
                                      3.0, data, cal)
            if data.num_groups > 1:
                params = bisect_param(params, "group_share", "group_cv", real["group_cv"], 0.0,
                                      0.9, data, cal)
            if fit_phase:
                params = bisect_param(params, "phase_corr", "phase_corr", real["phase_corr"],
                                      0.0, 1.0, data, cal)
            params = bisect_param(params, "drift_corr", "drift_corr", real["drift_corr"], 0.0,
                                  1.0, data, cal)
        cal = calibration(params, data, group_limit)
    return params, real, model_figures(params, data, calibration=cal), cal


def print_fit(name, params, real, model, cal):
    print(f"## {name}")
    print("figure                 real      model")
    for key in real:
        if key in model:
            print(f"{key:20s} {real[key]:8.3f}   {model[key]:8.3f}")
    print("token-level calibration:", {k: round(v, 3) for k, v in cal.items()})
    print("fitted parameters (src/workload/presets.cpp):")
    print("  sigma_knots  = {" + ", ".join(f"{k:.3f}" for k in params.sigma_knots) + "}")
    print(f"  sigma_jitter = {params.sigma_jitter:.3f}")
    print(f"  group_share  = {params.group_share:.3f}")
    print(f"  num_hot      = {params.num_hot}")
    print(f"  hot_boost    = {params.hot_boost:.3f}")
    print(f"  phase_corr   = {params.phase_corr:.3f}")
    print(f"  drift_corr   = {params.drift_corr:.3f}")
    print()


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(root, "..", "shared", "data"))
    args = parser.parse_args()

    deepseek = load_deepseek(os.path.join(args.data, "deepseek-v3-sglang-stats"))
    for label, phase, tokens, _ in deepseek.files:
        print(f"deepseek-v3 {label}: {phase}, {tokens:.0f} tokens")
    params, real, model, cal = fit(deepseek, num_knots=6, num_hot=8, group_limit=4)
    print_fit("deepseek-v3", params, real, model, cal)

    mixtral = load_mixtral(os.path.join(args.data, "mixtral-8x7b-fiddler"))
    for label, phase, tokens, _ in mixtral.files:
        print(f"mixtral-8x7b {label}: {tokens:.0f} tokens")
    # No prefill/decode split in the fiddler data: the phase correlation is DeepSeek-V3's.
    m_params, m_real, m_model, m_cal = fit(mixtral, num_knots=4, num_hot=0, group_limit=0,
                                           fit_phase=False, base=params)
    print_fit("mixtral-8x7b", m_params, m_real, m_model, m_cal)


if __name__ == "__main__":
    main()
