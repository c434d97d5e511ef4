// A naive reference of the route recorders, for the CPU and GPU tests: what each request's
// rows must hold after a run of passes, worked out from the passes' batches and ids alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <moestat/routes/route_recorder.hpp>
#include <random>
#include <string>
#include <vector>

namespace moestat::test {

/// One pass of a run: its batch and, per MoE layer (by column), ids [rows, top_k] PHYSICAL.
struct RoutePass {
  std::vector<routes::TokenSpan> batch;
  std::int64_t num_rows = 0;                   ///< Batch rows, padding included.
  std::vector<std::vector<std::int32_t>> ids;  ///< [column][row * top_k + k]
};

/// The trivial placement's physical-to-logical map ([L, P]): each slot its own expert.
inline std::vector<std::int32_t> identity_map(const ModelTopology& topology) {
  const Placement identity = Placement::trivial(topology.num_layers, topology.num_physical_experts,
                                                topology.num_logical_experts);
  return {identity.physical_to_logical().begin(), identity.physical_to_logical().end()};
}

/// Random passes over `num_requests` requests: each pass a few requests advance by a prefill
/// chunk or one decode token, rows padded past the batch, some ids -1 or >= P.
inline std::vector<RoutePass> random_route_passes(
    const ModelTopology& topology, const routes::RouteLayout& layout,
    const std::vector<std::int32_t>& physical_to_logical, int num_passes, int num_requests,
    std::uint32_t seed, bool hostile_ids) {
  std::mt19937 random(seed);
  // slots[layer][e]: the physical slots of logical expert e.
  std::vector<std::vector<std::vector<std::int32_t>>> slots_of(
      std::size_t(topology.num_layers),
      std::vector<std::vector<std::int32_t>>(std::size_t(topology.num_logical_experts)));
  for (std::int64_t l = 0; l < topology.num_layers; ++l) {
    for (std::int64_t p = 0; p < topology.num_physical_experts; ++p) {
      const auto e = physical_to_logical[std::size_t(l * topology.num_physical_experts + p)];
      slots_of[std::size_t(l)][std::size_t(e)].push_back(std::int32_t(p));
    }
  }
  std::vector<std::int64_t> next_position(std::size_t(num_requests), 0);
  std::vector<RoutePass> passes;
  for (int p = 0; p < num_passes; ++p) {
    RoutePass pass;
    for (int r = 0; r < num_requests; ++r) {
      if (random() % 3 == 0) continue;
      const std::int64_t count = next_position[std::size_t(r)] == 0 ? 1 + random() % 7 : 1;
      pass.batch.push_back({"request-" + std::to_string(r), next_position[std::size_t(r)], count});
      next_position[std::size_t(r)] += count;
      pass.num_rows += count;
    }
    pass.num_rows += random() % 3;  // padding rows
    for (std::int64_t c = 0; c < layout.num_columns(); ++c) {
      std::vector<std::int32_t> ids;
      for (std::int64_t row = 0; row < pass.num_rows; ++row) {
        // Distinct logical experts per row, as a router's top-k, each on one of its replicas.
        std::vector<std::int32_t> experts(std::size_t(topology.num_logical_experts));
        for (std::size_t i = 0; i < experts.size(); ++i) experts[i] = std::int32_t(i);
        std::shuffle(experts.begin(), experts.end(), random);
        const auto& replicas = slots_of[std::size_t(layout.layers[std::size_t(c)])];
        for (std::int64_t k = 0; k < layout.top_k; ++k) {
          const auto& choices = replicas[std::size_t(experts[std::size_t(k)])];
          ids.push_back(choices[random() % choices.size()]);
        }
        if (hostile_ids && random() % 17 == 0) {
          ids[ids.size() - 1] =
              random() % 2 == 0 ? -1 : std::int32_t(topology.num_physical_experts);
        }
      }
      pass.ids.push_back(std::move(ids));
    }
    passes.push_back(std::move(pass));
  }
  return passes;
}

/// The routes each request must have, by position: ids mapped through `physical_to_logical`
/// ([L, P]); a layer's row with any id outside [0, P) is not valid.
struct ExpectedRow {
  std::vector<std::int64_t> ids;  ///< [C * K]
  std::vector<bool> valid;        ///< [C]
};

inline std::map<std::string, std::map<std::int64_t, ExpectedRow>> expected_routes(
    const std::vector<RoutePass>& passes, const ModelTopology& topology,
    const routes::RouteLayout& layout, const std::vector<std::int32_t>& physical_to_logical) {
  std::map<std::string, std::map<std::int64_t, ExpectedRow>> out;
  for (const RoutePass& pass : passes) {
    std::int64_t row = 0;
    for (const routes::TokenSpan& span : pass.batch) {
      for (std::int64_t i = 0; i < span.num_tokens; ++i, ++row) {
        ExpectedRow expected;
        expected.ids.assign(std::size_t(layout.num_columns() * layout.top_k), 0);
        expected.valid.assign(std::size_t(layout.num_columns()), false);
        for (std::int64_t c = 0; c < layout.num_columns(); ++c) {
          bool in_range = true;
          std::vector<std::int64_t> logical;
          for (std::int64_t k = 0; k < layout.top_k; ++k) {
            const std::int32_t id = pass.ids[std::size_t(c)][std::size_t(row * layout.top_k + k)];
            in_range = in_range && id >= 0 && id < topology.num_physical_experts;
            const std::int64_t layer = layout.layers[std::size_t(c)];
            logical.push_back(
                in_range
                    ? physical_to_logical[std::size_t(layer * topology.num_physical_experts + id)]
                    : 0);
          }
          if (!in_range) continue;
          expected.valid[std::size_t(c)] = true;
          for (std::int64_t k = 0; k < layout.top_k; ++k) {
            expected.ids[std::size_t(c * layout.top_k + k)] = logical[std::size_t(k)];
          }
        }
        out[span.request_id][span.first_position + i] = std::move(expected);
      }
    }
  }
  return out;
}

/// The rows (token, MoE layer) of routed tokens, padding rows not counted, whose ids a
/// recorder must tally as invalid: an id outside [0, P).
inline std::int64_t expected_invalid_ids(const std::vector<RoutePass>& passes,
                                         const ModelTopology& topology,
                                         const routes::RouteLayout& layout) {
  std::int64_t invalid = 0;
  for (const RoutePass& pass : passes) {
    std::int64_t routed_rows = 0;
    for (const routes::TokenSpan& span : pass.batch) routed_rows += span.num_tokens;
    for (std::int64_t row = 0; row < routed_rows; ++row) {
      for (std::int64_t c = 0; c < layout.num_columns(); ++c) {
        bool in_range = true;
        for (std::int64_t k = 0; k < layout.top_k; ++k) {
          const std::int32_t id = pass.ids[std::size_t(c)][std::size_t(row * layout.top_k + k)];
          in_range = in_range && id >= 0 && id < topology.num_physical_experts;
        }
        invalid += in_range ? 0 : 1;
      }
    }
  }
  return invalid;
}

}  // namespace moestat::test
