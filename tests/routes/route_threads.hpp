// Eight threads on one route recorder, for the CPU test (route_recorder_threads_test.cpp) and
// the GPU one (tests/gpu/route_recorder_test.cpp): a forward thread opens and ends passes and
// records one layer itself, four hook threads record every layer into whatever pass is open
// (three by record_topk, one by record_topk_layers), and a placement thread, a taker and a
// tallies reader run beside them. What must hold: a pass maps through one placement
// throughout (every token's layers agree on one), no id is >= num_experts, every routed token
// comes back once with the forward thread's layer valid, and nothing is held at the end. No
// assertion depends on timing: which pass a hook lands in does not matter, since every
// hook writes the same physical ids.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <moestat/error.hpp>
#include <moestat/routes/route_recorder.hpp>
#include <string>
#include <thread>
#include <vector>

namespace moestat::test {

inline constexpr std::int64_t kThreadLayers = 4;
inline constexpr std::int64_t kThreadExperts = 8;
inline constexpr std::int64_t kThreadTopK = 2;
// Batch rows of every hook call, all routed: long calls, so hooks run over a pass's end, and
// whichever row a hook maps when the placement changes is a token's.
inline constexpr std::int64_t kThreadRows = 512;
inline constexpr int kThreadPasses = 2000;
inline constexpr int kThreadRequests = 4;
/// Enough rows that every pass's tokens have room, however far the taker lags.
inline constexpr std::int64_t kThreadCapacity = kThreadPasses * kThreadRows;

inline ModelTopology threads_route_topology() {
  ModelTopology topology = ModelTopology::uniform(kThreadLayers, kThreadExperts, kThreadTopK);
  topology.ep_size = 2;
  return topology;
}

/// Physical id k of every row of layer `layer`.
inline std::int32_t thread_physical_id(std::int64_t layer, std::int64_t k) {
  return std::int32_t((layer * 3 + k) % kThreadExperts);
}

/// Placement v: slot p of layer l holds expert (p + v + l) % E; versions 0..E-1 all differ.
inline std::int32_t thread_logical_of(std::int64_t version, std::int64_t layer, std::int64_t slot) {
  return std::int32_t((slot + version + layer) % kThreadExperts);
}

inline Placement thread_placement(std::int64_t version) {
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < kThreadLayers; ++l)
    for (std::int64_t p = 0; p < kThreadExperts; ++p)
      map.push_back(thread_logical_of(version, l, p));
  return Placement(kThreadLayers, kThreadExperts, kThreadExperts, map, std::uint64_t(version));
}

/// [kThreadRows, K] int32 physical ids of `layer`, as the hooks record them.
inline std::vector<std::int32_t> thread_layer_ids(std::int64_t layer) {
  std::vector<std::int32_t> ids;
  for (std::int64_t row = 0; row < kThreadRows; ++row)
    for (std::int64_t k = 0; k < kThreadTopK; ++k) ids.push_back(thread_physical_id(layer, k));
  return ids;
}

/// Every valid layer of every token maps the hooks' ids through one placement; the forward
/// thread's layer (column 0) is valid everywhere. Returns the tokens checked; reports the
/// first wrong row only (a race spoils thousands).
inline std::int64_t check_thread_routes(const routes::RoutedExperts& routes) {
  routes.validate();  // ids in [0, E), none repeated in a valid row
  for (std::int64_t t = 0; t < routes.num_tokens(); ++t) {
    if (!routes.is_valid(t, 0)) {
      ADD_FAILURE() << routes.request_id << " row " << t << ": the forward thread's layer lost";
      return routes.num_tokens();
    }
    // The version column 0 was mapped with: id 0 of layer 0 is (physical + v) % E.
    const std::int64_t version =
        (routes.id(t, 0, 0) - thread_physical_id(0, 0) + kThreadExperts) % kThreadExperts;
    for (std::int64_t c = 0; c < kThreadLayers; ++c) {
      for (std::int64_t k = 0; k < kThreadTopK && routes.is_valid(t, c); ++k) {
        if (routes.id(t, c, k) != thread_logical_of(version, c, thread_physical_id(c, k))) {
          ADD_FAILURE() << routes.request_id << " row " << t << " layer " << c
                        << ": mapped through another placement than layer 0 in one pass";
          return routes.num_tokens();
        }
      }
    }
  }
  return routes.num_tokens();
}

/// Runs the eight threads on `recorder` (made with threads_route_topology(), kThreadRows rows
/// a pass, kThreadCapacity tokens). `view_of(layer)`: the layer's ids as the backend reads them.
inline void hammer_route_recorder(routes::RouteRecorder& recorder,
                                  const std::function<TensorView(std::int64_t)>& view_of) {
  recorder.set_placement(thread_placement(0));  // the trivial one is not of this family
  std::atomic<bool> done{false};
  std::atomic<std::int64_t> taken_tokens{0};
  std::atomic<std::int64_t> hook_calls{0};  // hook calls that found a pass open
  std::vector<std::string> unexpected(8);
  // Hook errors other than "no pass open" (a hook between two passes) are failures.
  const auto hook_thread = [&](int index, bool all_at_once) {
    return std::thread([&, index, all_at_once] {
      std::vector<routes::RouteRecorder::LayerTopk> layers;
      for (std::int64_t l = 0; l < kThreadLayers; ++l) layers.push_back({l, view_of(l)});
      while (!done.load()) {
        try {
          if (all_at_once) {
            recorder.record_topk_layers(layers);
          } else {
            for (const auto& layer : layers) recorder.record_topk(layer.layer, layer.topk_ids);
          }
          ++hook_calls;
        } catch (const Error& error) {
          const std::string what = error.what();
          if (what.find("outside a pass") == std::string::npos) {
            unexpected[std::size_t(index)] = what;
            return;
          }
        }
        // Lets the forward thread take the pass lock on a machine with few cores.
        std::this_thread::yield();
      }
    });
  };
  const auto take_all = [&] {
    for (int r = 0; r < kThreadRequests; ++r) {
      taken_tokens += check_thread_routes(recorder.take("request-" + std::to_string(r)));
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.push_back(hook_thread(i, false));
  threads.push_back(hook_thread(3, true));
  threads.emplace_back([&] {
    for (std::int64_t version = 1; !done.load(); ++version) {
      recorder.set_placement(thread_placement(version % kThreadExperts));
      std::this_thread::yield();
    }
  });
  threads.emplace_back([&] {
    try {
      while (!done.load()) {
        take_all();
        std::this_thread::yield();
      }
    } catch (const Error& error) {  // an id out of range fails validate()
      unexpected[5] = error.what();
    }
  });
  threads.emplace_back([&] {
    while (!done.load()) {
      const routes::RouteTallies tallies = recorder.tallies();
      if (tallies.invalid_ids != 0) unexpected[6] = "invalid ids tallied";
      (void)recorder.requests();
      std::this_thread::yield();
    }
  });
  std::int64_t routed = 0;
  try {
    std::vector<std::int64_t> next(kThreadRequests, 0);
    const TensorView first_layer = view_of(0);
    for (int pass = 0; pass < kThreadPasses; ++pass) {
      recorder.begin_pass();
      recorder.record_topk(0, first_layer);
      // Keeps the pass open until a couple more hook calls returned, so that other threads'
      // hooks run in most passes and over their ends (nothing checked depends on it).
      const std::int64_t before = hook_calls.load();
      while (hook_calls.load() < before + 2) std::this_thread::yield();
      const int a = pass % kThreadRequests;
      const int b = (pass + 1) % kThreadRequests;
      const std::vector<routes::TokenSpan> batch = {
          {"request-" + std::to_string(a), next[std::size_t(a)], kThreadRows - 1},
          {"request-" + std::to_string(b), next[std::size_t(b)], 1}};
      recorder.end_pass(batch);
      next[std::size_t(a)] += kThreadRows - 1;
      next[std::size_t(b)] += 1;
      routed += kThreadRows;
    }
  } catch (const std::exception& error) {
    unexpected[7] = error.what();
  }
  done = true;
  for (std::thread& thread : threads) thread.join();
  take_all();
  for (const std::string& what : unexpected) EXPECT_EQ(what, "");
  EXPECT_EQ(taken_tokens.load(), routed);
  const routes::RouteTallies tallies = recorder.tallies();
  EXPECT_EQ(tallies.tokens_recorded, routed);
  EXPECT_EQ(tallies.tokens_held, 0);
  EXPECT_EQ(tallies.invalid_ids, 0);
}

}  // namespace moestat::test
