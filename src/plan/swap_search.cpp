#include "swap_search.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

namespace moestat::plan::detail {
namespace {

constexpr double kRelativeTolerance = 1e-12;

/// Bin loads [num_bins, S] of an assignment.
std::vector<double> bin_loads(const PackingProblem& p, std::span<const std::int32_t> bin_of) {
  std::vector<double> load(std::size_t(p.num_bins * p.num_scenarios), 0.0);
  for (std::int32_t i = 0; i < p.num_items; ++i) {
    double* row = load.data() + std::size_t(bin_of[std::size_t(i)] * p.num_scenarios);
    const double* w = p.weights.data() + std::size_t(i * p.num_scenarios);
    for (std::int32_t s = 0; s < p.num_scenarios; ++s) row[s] += w[s];
  }
  return load;
}

double combine(ScenarioObjective objective, double accumulated, double value) {
  return objective == ScenarioObjective::kWorstCase ? std::max(accumulated, value)
                                                    : accumulated + value;
}

}  // namespace

bool PackingScore::better_than(const PackingScore& other) const {
  const double tolerance = kRelativeTolerance * std::max(std::abs(other.objective), 1e-300);
  if (objective < other.objective - tolerance) return true;
  if (objective > other.objective + tolerance) return false;
  return squares < other.squares - kRelativeTolerance * std::abs(other.squares);
}

PackingScore score_packing(const PackingProblem& p, std::span<const std::int32_t> bin_of) {
  const std::vector<double> load = bin_loads(p, bin_of);
  PackingScore score;
  for (std::int32_t s = 0; s < p.num_scenarios; ++s) {
    double max = 0.0;
    for (std::int32_t b = 0; b < p.num_bins; ++b) {
      const double v = load[std::size_t(b * p.num_scenarios + s)];
      max = std::max(max, v);
      score.squares += v * v;
    }
    score.objective = combine(p.objective, score.objective, max);
  }
  return score;
}

std::vector<std::int32_t> greedy_packing(const PackingProblem& p) {
  const auto S = std::size_t(p.num_scenarios);
  std::vector<double> total(std::size_t(p.num_items));
  for (std::size_t i = 0; i < total.size(); ++i) {
    total[i] = std::accumulate(p.weights.begin() + std::ptrdiff_t(i * S),
                               p.weights.begin() + std::ptrdiff_t((i + 1) * S), 0.0);
  }
  std::vector<std::int32_t> order(std::size_t(p.num_items));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return total[std::size_t(a)] > total[std::size_t(b)];
  });
  std::vector<double> load(std::size_t(p.num_bins) * S, 0.0);
  std::vector<double> heaviest(S, 0.0);  // per scenario, the heaviest bin so far
  std::vector<std::int32_t> filled(std::size_t(p.num_bins), 0);
  std::vector<std::int32_t> bin_of(std::size_t(p.num_items), -1);
  for (const std::int32_t item : order) {
    const double* w = p.weights.data() + std::size_t(item) * S;
    // The bin where the item raises the objective least; among equals, the lightest.
    std::int32_t best = -1;
    double best_rise = 0.0, best_sum = 0.0;
    for (std::int32_t b = 0; b < p.num_bins; ++b) {
      if (filled[std::size_t(b)] == p.capacity()) continue;
      const double* l = load.data() + std::size_t(b) * S;
      double rise = 0.0, sum = 0.0;
      for (std::size_t s = 0; s < S; ++s) {
        rise = combine(p.objective, rise, std::max(0.0, l[s] + w[s] - heaviest[s]));
        sum += l[s];
      }
      if (best < 0 || rise < best_rise || (rise == best_rise && sum < best_sum)) {
        best = b;
        best_rise = rise;
        best_sum = sum;
      }
    }
    bin_of[std::size_t(item)] = best;
    ++filled[std::size_t(best)];
    double* l = load.data() + std::size_t(best) * S;
    for (std::size_t s = 0; s < S; ++s) {
      l[s] += w[s];
      heaviest[s] = std::max(heaviest[s], l[s]);
    }
  }
  return bin_of;
}

void improve_by_swaps(const PackingProblem& p, std::span<std::int32_t> bin_of,
                      std::int64_t max_moves) {
  const std::int32_t S = p.num_scenarios;
  const std::int32_t B = p.num_bins;
  const std::int32_t cap = p.capacity();
  if (B < 2) return;
  std::vector<double> load = bin_loads(p, bin_of);
  std::vector<std::int32_t> members(std::size_t(p.num_items));  // [B, cap]
  {
    std::vector<std::int32_t> filled(std::size_t(B), 0);
    for (std::int32_t i = 0; i < p.num_items; ++i) {
      const std::int32_t b = bin_of[std::size_t(i)];
      members[std::size_t(b * cap + filled[std::size_t(b)]++)] = i;
    }
  }
  const auto L = [&](std::int32_t b, std::int32_t s) -> double& {
    return load[std::size_t(b * S + s)];
  };
  const auto W = [&](std::int32_t i, std::int32_t s) { return p.weights[std::size_t(i * S + s)]; };
  // Per scenario, the three heaviest bins: the heaviest bin other than two given ones.
  std::vector<std::array<std::int32_t, 3>> top(static_cast<std::size_t>(S));
  std::vector<std::int32_t> critical;
  critical.reserve(std::size_t(S));
  // Scenarios by their heaviest bin, heaviest first: the order critical bins are tried in.
  std::vector<std::int32_t> order(static_cast<std::size_t>(S));
  std::vector<std::int32_t> critical_scenario;
  critical_scenario.reserve(std::size_t(S));
  std::vector<std::int32_t> partners(static_cast<std::size_t>(B));
  std::vector<std::int32_t> pair_order(static_cast<std::size_t>(S));
  std::vector<double> rest(static_cast<std::size_t>(S)), rest_bound(std::size_t(S) + 1);

  for (std::int64_t move = 0; move < max_moves; ++move) {
    double objective = 0.0;
    for (std::int32_t s = 0; s < S; ++s) {
      std::array<std::int32_t, 3>& t = top[std::size_t(s)];
      t = {-1, -1, -1};
      for (std::int32_t b = 0; b < B; ++b) {
        const double v = L(b, s);
        if (t[0] < 0 || v > L(t[0], s)) {
          t = {b, t[0], t[1]};
        } else if (t[1] < 0 || v > L(t[1], s)) {
          t = {t[0], b, t[1]};
        } else if (t[2] < 0 || v > L(t[2], s)) {
          t[2] = b;
        }
      }
      objective = combine(p.objective, objective, L(t[0], s));
    }
    // Only a bin that sets the objective can lower it: for the worst case the heaviest bin
    // of the heaviest scenario(s), for the expected value the heaviest bin of every scenario.
    critical.clear();
    critical_scenario.clear();
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::int32_t u, std::int32_t v) {
      return L(top[std::size_t(u)][0], u) > L(top[std::size_t(v)][0], v);
    });
    for (const std::int32_t s : order) {
      const std::int32_t b = top[std::size_t(s)][0];
      const bool sets_it = p.objective == ScenarioObjective::kExpected ||
                           L(b, s) >= objective * (1.0 - kRelativeTolerance);
      if (sets_it && std::find(critical.begin(), critical.end(), b) == critical.end()) {
        critical.push_back(b);
        critical_scenario.push_back(s);
      }
    }
    // For each critical bin (heaviest scenario first) and each partner bin (lightest first),
    // the best swap between the two; the first pair of bins that admits an improving swap
    // makes the move. Among swaps that reach the same objective, the one that lowers the
    // sum of squared loads most: it leaves the most room for the next move.
    double best_objective = objective * (1.0 - kRelativeTolerance);
    double best_squares = 0.0;
    std::int32_t best_a = -1, best_b = -1;
    for (std::size_t c = 0; c < critical.size() && best_a < 0; ++c) {
      const std::int32_t x = critical[c];
      const std::int32_t sx = critical_scenario[c];
      // Partners lightest first in the scenario where x is heaviest.
      std::iota(partners.begin(), partners.end(), 0);
      std::sort(partners.begin(), partners.end(),
                [&](std::int32_t u, std::int32_t v) { return L(u, sx) < L(v, sx); });
      for (std::int32_t scanned = 0; scanned < B && best_a < 0; ++scanned) {
        const std::int32_t y = partners[std::size_t(scanned)];
        if (y == x) continue;
        // Scenarios where x is heaviest first (only they can drop); for each, the heaviest
        // bin other than x and y; and a bound: the objective over the scenarios not yet
        // looked at is at least the combination of those, so most swaps stop early.
        std::int32_t n = 0;
        for (std::int32_t s = 0; s < S; ++s) {
          if (top[std::size_t(s)][0] == x) pair_order[std::size_t(n++)] = s;
        }
        for (std::int32_t s = 0; s < S; ++s) {
          if (top[std::size_t(s)][0] != x) pair_order[std::size_t(n++)] = s;
        }
        rest_bound[std::size_t(S)] = 0.0;
        for (std::int32_t k = S - 1; k >= 0; --k) {
          const std::array<std::int32_t, 3>& t = top[std::size_t(pair_order[std::size_t(k)])];
          const std::int32_t other = t[0] != x && t[0] != y   ? t[0]
                                     : t[1] != x && t[1] != y ? t[1]
                                                              : t[2];
          rest[std::size_t(k)] = other >= 0 ? L(other, pair_order[std::size_t(k)]) : 0.0;
          rest_bound[std::size_t(k)] =
              combine(p.objective, rest_bound[std::size_t(k + 1)], rest[std::size_t(k)]);
        }
        for (std::int32_t ia = 0; ia < cap; ++ia) {
          const std::int32_t a = members[std::size_t(x * cap + ia)];
          for (std::int32_t ib = 0; ib < cap; ++ib) {
            const std::int32_t b = members[std::size_t(y * cap + ib)];
            double candidate = 0.0, squares = 0.0;
            const double limit = best_objective * (1.0 + kRelativeTolerance);
            std::int32_t k = 0;
            for (; k < S; ++k) {
              const std::int32_t s = pair_order[std::size_t(k)];
              const double d = W(a, s) - W(b, s);
              const double lx = L(x, s) - d, ly = L(y, s) + d;
              candidate = combine(p.objective, candidate, std::max({rest[std::size_t(k)], lx, ly}));
              if (combine(p.objective, candidate, rest_bound[std::size_t(k + 1)]) > limit) break;
              squares += lx * lx + ly * ly - L(x, s) * L(x, s) - L(y, s) * L(y, s);
            }
            if (k < S) continue;
            const bool lower = candidate < best_objective * (1.0 - kRelativeTolerance);
            if (!lower && (best_a < 0 || squares >= best_squares)) continue;
            best_objective = std::min(best_objective, candidate);
            best_squares = squares;
            best_a = x * cap + ia;
            best_b = y * cap + ib;
          }
        }
      }
    }
    if (best_a < 0) return;  // a local optimum
    const std::int32_t a = members[std::size_t(best_a)], b = members[std::size_t(best_b)];
    const std::int32_t x = bin_of[std::size_t(a)], y = bin_of[std::size_t(b)];
    for (std::int32_t s = 0; s < S; ++s) {
      const double d = W(a, s) - W(b, s);
      L(x, s) -= d;
      L(y, s) += d;
    }
    std::swap(members[std::size_t(best_a)], members[std::size_t(best_b)]);
    bin_of[std::size_t(a)] = y;
    bin_of[std::size_t(b)] = x;
  }
}

}  // namespace moestat::plan::detail
