// allreduce_snapshot: check that the ranks describe one recording, then add or concatenate.
#include <algorithm>
#include <array>
#include <bit>
#include <moestat/dist/reduce.hpp>
#include <moestat/error.hpp>
#include <string_view>

namespace moestat::dist {
namespace {

/// What every rank's snapshot must agree on, as one row per rank of a gathered table. The
/// array lengths make every later sum the same length on every rank, whatever the snapshot.
constexpr std::array<std::string_view, 13> kHeaderFields{
    "record mode",           "approximate flag",     "layers (L)",
    "logical experts (E)",   "physical experts (P)", "top_k",
    "window (passes)",       "placement versions",   "logical counts",
    "physical counts",       "tokens per pass",      "decayed logical loads",
    "decayed physical loads"};

std::vector<std::int64_t> header_of(const Snapshot& s) {
  return {std::int64_t(s.mode),
          s.approximate ? 1 : 0,
          s.num_layers,
          s.num_logical_experts,
          s.num_physical_experts,
          s.top_k,
          s.window_size(),
          std::int64_t(s.placement_versions.size()),
          std::int64_t(s.logical_counts.size()),
          std::int64_t(s.physical_counts.size()),
          std::int64_t(s.pass_num_tokens.size()),
          std::int64_t(s.decayed_logical_load.size()),
          std::int64_t(s.decayed_physical_load.size())};
}

void check_same_header(const std::vector<std::int64_t>& table, int num_ranks) {
  const std::size_t width = kHeaderFields.size();
  for (int rank = 1; rank < num_ranks; ++rank) {
    for (std::size_t field = 0; field < width; ++field) {
      const std::int64_t theirs = table[std::size_t(rank) * width + field];
      const std::int64_t ours = table[field];
      MOESTAT_CHECK(theirs == ours,
                    "allreduce_snapshot: rank {} has {} {} where rank 0 has {}; every rank "
                    "must snapshot the same recording (same model, mode and window)",
                    rank, kHeaderFields[field], theirs, ours);
    }
  }
}

/// Every rank's window (pass ids, then placement versions) must be rank 0's.
void check_same_window(const Snapshot& local, Collective& group) {
  std::vector<std::int64_t> window(local.pass_ids);
  for (const std::uint64_t version : local.placement_versions) {
    window.push_back(std::bit_cast<std::int64_t>(version));
  }
  const std::vector<std::int64_t> all = group.gather(window);
  const std::size_t width = window.size();  // the same on every rank: the headers agreed
  const auto w = std::size_t(local.window_size());
  for (int rank = 1; rank < group.size(); ++rank) {
    for (std::size_t i = 0; i < width; ++i) {
      const std::int64_t theirs = all[std::size_t(rank) * width + i];
      const std::int64_t ours = all[i];
      if (theirs == ours) continue;
      const bool pass_id = i < w;
      MOESTAT_FAIL(
          "allreduce_snapshot: rank {}'s window row {} has {} {} where rank 0's has {}; "
          "snapshot every rank at the same step of the engine loop",
          rank, pass_id ? i : i - w, pass_id ? "pass id" : "placement version", theirs, ours);
    }
  }
}

template <typename T>
std::vector<std::int64_t> widened(const std::vector<T>& values) {
  std::vector<std::int64_t> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(),
                 [](T v) { return std::bit_cast<std::int64_t>(std::uint64_t(v)); });
  return out;
}

/// now + timeout, or the end of time where that does not fit (a timeout of "forever").
std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point now = Clock::now();
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return timeout >= left ? Clock::time_point::max() : now + timeout;
}

}  // namespace

Snapshot allreduce_snapshot(const Snapshot& local, Collective& group,
                            std::chrono::milliseconds timeout) {
  MOESTAT_CHECK(timeout.count() > 0, "allreduce_snapshot: the timeout must be positive, not {} ms",
                timeout.count());
  group.start_reduction(deadline_after(timeout));
  // Whatever happens, later calls on the group are not bound by this reduction's deadline.
  struct EndReduction {
    Collective& group;
    ~EndReduction() { group.end_reduction(); }
  } end{group};
  check_same_header(group.gather(header_of(local)), group.size());
  check_same_window(local, group);

  Snapshot out = local;
  group.sum(out.logical_counts);
  group.sum(out.physical_counts);
  group.sum(out.pass_num_tokens);
  group.sum(out.decayed_logical_load);
  group.sum(out.decayed_physical_load);
  std::array<std::int64_t, 3> dropped{local.dropped_ids, local.dropped_tokens,
                                      local.dropped_passes};
  group.sum(dropped);
  out.dropped_ids = dropped[0];
  out.dropped_tokens = dropped[1];
  out.dropped_passes = dropped[2];
  const std::vector<std::int64_t> passes = group.gather(std::span(&local.num_passes, 1));
  out.num_passes = *std::max_element(passes.begin(), passes.end());

  if (local.mode == RecordMode::kPerToken) {
    out.token_pass_ids = group.gather(local.token_pass_ids);
    const std::vector<std::int64_t> versions =
        group.gather(widened(local.token_placement_versions));
    out.token_placement_versions.resize(versions.size());
    std::transform(versions.begin(), versions.end(), out.token_placement_versions.begin(),
                   [](std::int64_t v) { return std::bit_cast<std::uint64_t>(v); });
    out.token_physical_ids = group.gather(local.token_physical_ids);
    out.token_logical_ids = group.gather(local.token_logical_ids);
  }
  return out;
}

}  // namespace moestat::dist
