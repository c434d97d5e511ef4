// Regimes of a count window: a median of chunk-to-chunk distances sets the noise, a streaming
// pass with one chunk of look-ahead cuts the segments, at the finest scale of chunks that
// sees a change, and summed mixes name the regimes.
#include <algorithm>
#include <cmath>
#include <moestat/error.hpp>
#include <moestat/plan/regimes.hpp>
#include <optional>

namespace moestat::plan {
namespace {

void add_into(ExpertLoads& sum, const ExpertLoads& loads) {
  if (sum.values.empty()) {
    sum = loads;
    return;
  }
  for (std::size_t i = 0; i < sum.values.size(); ++i) sum.values[i] += loads.values[i];
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const auto middle = values.begin() + std::ptrdiff_t(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

/// Consecutive loaded passes summed: what the cut compares.
struct Chunk {
  std::vector<std::int64_t> passes;
  ExpertLoads loads;
};

/// The loaded passes in chunks of `size`, aligned to the newest pass (the oldest chunk may be
/// short), oldest first.
std::vector<Chunk> chunks_of(const CountWindow& window, const std::vector<std::int64_t>& loaded,
                             std::size_t size) {
  std::vector<Chunk> out;
  for (std::size_t end = loaded.size(); end > 0; end -= std::min(end, size)) {
    const auto first = loaded.begin() + std::ptrdiff_t(end - std::min(end, size));
    const auto last = loaded.begin() + std::ptrdiff_t(end);
    // The passes between loaded ones are empty: the range's sum is the chunk's.
    out.push_back({.passes = {first, last}, .loads = loads_of(window, *first, *(last - 1) + 1)});
  }
  std::reverse(out.begin(), out.end());
  return out;
}

/// Segments of `chunks` (their passes and summed loads), cut where a chunk and the next are
/// both farther than `threshold` from the running segment's mix. A chunk far from its segment
/// whose successor is not is noise: it stays in the segment, out of its mix, which it would
/// pull away from the chunks that follow; the newest chunk alone cannot start a segment.
std::vector<Chunk> cut(std::vector<Chunk> chunks, double threshold) {
  std::vector<Chunk> segments(1);
  std::optional<Chunk> held;
  const auto add = [](Chunk& segment, Chunk& chunk, bool to_mix) {
    segment.passes.insert(segment.passes.end(), chunk.passes.begin(), chunk.passes.end());
    if (to_mix) add_into(segment.loads, chunk.loads);
  };
  for (Chunk& chunk : chunks) {
    Chunk& open = segments.back();
    const bool far =
        !open.loads.values.empty() && mix_distance(open.loads, chunk.loads) > threshold;
    if (held && far) {
      segments.emplace_back();
      add(segments.back(), *held, true);
      add(segments.back(), chunk, true);
      held.reset();
    } else if (held) {
      add(open, *held, false);
      add(open, chunk, true);
      held.reset();
    } else if (far) {
      held = std::move(chunk);
    } else {
      add(open, chunk, true);
    }
  }
  if (held) add(segments.back(), *held, false);
  return segments;
}

/// The median distance between consecutive chunks: the noise of one chunk (a few regime
/// changes among them do not move a median).
double chunk_noise(const std::vector<Chunk>& chunks) {
  std::vector<double> steps;
  for (std::size_t i = 1; i < chunks.size(); ++i) {
    steps.push_back(mix_distance(chunks[i - 1].loads, chunks[i].loads));
  }
  return median(std::move(steps));
}

/// Chunks needed for a noise estimate and a look-ahead to mean anything.
constexpr std::size_t kMinChunks = 6;

}  // namespace

bool Regimes::current_recurs() const { return cycle_start() + 1 < segments.size(); }

std::size_t Regimes::cycle_start() const {
  if (segments.empty()) return 0;
  const std::int64_t now = segments.back().regime;
  for (std::size_t k = 0; k < segments.size(); ++k) {
    if (segments[k].regime == now) return k;
  }
  return segments.size() - 1;
}

double mix_distance(const ExpertLoads& a, const ExpertLoads& b) {
  MOESTAT_CHECK(a.num_layers == b.num_layers && a.num_experts == b.num_experts,
                "mixes of different shapes: [{}, {}] and [{}, {}]", a.num_layers, a.num_experts,
                b.num_layers, b.num_experts);
  double sum = 0.0;
  std::int64_t layers = 0;
  for (std::int64_t layer = 0; layer < a.num_layers; ++layer) {
    const double total_a = a.layer_total(layer), total_b = b.layer_total(layer);
    if (total_a <= 0.0 || total_b <= 0.0) continue;
    const auto row_a = a.row(layer), row_b = b.row(layer);
    double moved = 0.0;
    for (std::size_t e = 0; e < row_a.size(); ++e) {
      moved += std::abs(row_a[e] / total_a - row_b[e] / total_b);
    }
    sum += 0.5 * moved;
    ++layers;
  }
  return layers == 0 ? 0.0 : sum / double(layers);
}

Regimes find_regimes(const CountWindow& window, const RegimeOptions& options) {
  window.validate("the window");
  MOESTAT_CHECK(std::isfinite(options.noise_multiple) && options.noise_multiple > 0.0,
                "regimes: the noise multiple must be positive, got {}", options.noise_multiple);
  MOESTAT_CHECK(options.min_distance >= 0.0 && options.min_distance <= 1.0,
                "regimes: the minimum distance must be in [0, 1], got {}", options.min_distance);
  const std::vector<std::int64_t> loaded = loaded_passes(window);
  Regimes out;
  if (loaded.empty()) return out;

  // Pass by pass first; where noise hides a change, in chunks of 2, 4, 8, ... passes, whose
  // noise is smaller while the change stays as large. The finest scale that sees a change
  // cuts the window.
  std::vector<Chunk> segments;
  for (std::size_t size = 1; segments.size() < 2; size *= 2) {
    std::vector<Chunk> chunks = chunks_of(window, loaded, size);
    const double threshold =
        std::max(options.noise_multiple * chunk_noise(chunks), options.min_distance);
    std::vector<Chunk> found = cut(std::move(chunks), threshold);
    if (found.size() >= 2 || segments.empty()) {
      segments = std::move(found);
      out.threshold = threshold;
    }
    if (loaded.size() < 2 * size * kMinChunks) break;
  }

  // Name: the earliest segment whose mix is within the threshold names the regime.
  std::int64_t next_regime = 0;
  for (std::size_t k = 0; k < segments.size(); ++k) {
    RegimeSegment segment{
        .first = k == 0 ? 0 : segments[k].passes.front(),
        .end = k + 1 == segments.size() ? window.window_size : segments[k + 1].passes.front(),
        .passes = segments[k].passes,
        .regime = -1};
    std::sort(segment.passes.begin(), segment.passes.end());
    for (std::size_t j = 0; j < k; ++j) {
      if (mix_distance(segments[j].loads, segments[k].loads) <= out.threshold) {
        segment.regime = out.segments[j].regime;
        break;
      }
    }
    if (segment.regime < 0) segment.regime = next_regime++;
    out.segments.push_back(std::move(segment));
  }
  return out;
}

}  // namespace moestat::plan
