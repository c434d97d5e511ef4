// Reads `moestat simulate --json`'s document into a Simulation, checking every field the
// report draws, so a damaged or hand-edited file is refused by the name of its field rather
// than drawn wrong. The writer is tools/moestat/simulate.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/io/files.hpp>
#include <moestat/report/simulation.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace moestat::report {
namespace {

// Ordered: the scenarios of an object of documents are taken in the file's order.
using Json = nlohmann::ordered_json;

constexpr std::int64_t kMaxPasses = std::int64_t{1} << 40;
constexpr std::int64_t kMaxCount = std::numeric_limits<std::int64_t>::max();
constexpr double kUnbounded = std::numeric_limits<double>::infinity();
// A scenario's name names its timeline's file, simulation_<name>.svg, which with the
// temporary name it is written under first must fit a file name's 255 bytes: a name the
// file system refuses was found only after --html had been written.
constexpr std::size_t kMaxScenarioName = 100;

std::string describe(const Json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_null()) return "null";
  return value.dump();
}

std::string field_name(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
}

/// object[key], `where` naming the object.
const Json& member(const Json& object, const std::string& where, std::string_view key) {
  MOESTAT_CHECK(object.is_object(), "{}: expected an object, got {}",
                where.empty() ? "the document" : where, describe(object));
  const auto it = object.find(key);
  MOESTAT_CHECK(it != object.end(), "{} is missing", field_name(where, key));
  return *it;
}

std::string read_string(const Json& object, const std::string& where, std::string_view key) {
  const Json& value = member(object, where, key);
  MOESTAT_CHECK(value.is_string(), "{}: expected a string, got {}", field_name(where, key),
                describe(value));
  return value.get<std::string>();
}

std::int64_t read_integer(const Json& object, const std::string& where, std::string_view key,
                          std::int64_t min, std::int64_t max) {
  const Json& value = member(object, where, key);
  // Non-negative numbers parse as unsigned; compared with max first, they fit an int64_t.
  const bool fits =
      value.is_number_integer() &&
      (value.is_number_unsigned()
           ? value.get<std::uint64_t>() <= std::uint64_t(max) && value.get<std::int64_t>() >= min
           : value.get<std::int64_t>() >= min && value.get<std::int64_t>() <= max);
  MOESTAT_CHECK(fits, "{}: expected an integer from {} to {}, got {}", field_name(where, key), min,
                max, describe(value));
  return value.get<std::int64_t>();
}

double number_in(const Json& value, const std::string& name, double min, double max) {
  MOESTAT_CHECK(value.is_number() && value.get<double>() >= min && value.get<double>() <= max,
                "{}: expected a number from {} to {}, got {}", name, min, max, describe(value));
  return value.get<double>();
}

double read_number(const Json& object, const std::string& where, std::string_view key, double min,
                   double max) {
  return number_in(member(object, where, key), field_name(where, key), min, max);
}

const Json& read_array(const Json& object, const std::string& where, std::string_view key) {
  const Json& value = member(object, where, key);
  MOESTAT_CHECK(value.is_array(), "{}: expected an array, got {}", field_name(where, key),
                describe(value));
  return value;
}

std::vector<SimulatedPhase> read_phases(const Json& scenario, const std::string& where,
                                        std::int64_t num_passes) {
  const Json& phases = read_array(scenario, where, "phases");
  MOESTAT_CHECK(!phases.empty(), "{}.phases is empty", where);
  std::vector<SimulatedPhase> out;
  std::int64_t first_pass = 0;
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const std::string at = fmt::format("{}.phases[{}]", where, i);
    SimulatedPhase phase{.workload = read_string(phases[i], at, "workload"),
                         .first_pass = first_pass,
                         .num_passes = read_integer(phases[i], at, "num_passes", 1, kMaxPasses)};
    MOESTAT_CHECK(phase.num_passes <= num_passes - first_pass,
                  "{}: the phases up to this one last more than the scenario's {} passes", at,
                  num_passes);
    first_pass += phase.num_passes;
    out.push_back(std::move(phase));
  }
  MOESTAT_CHECK(first_pass == num_passes, "{}.phases last {} passes, but the scenario has {}",
                where, first_pass, num_passes);
  return out;
}

std::vector<plan::RebalanceEvent> read_rebalances(const Json& policy, const std::string& where,
                                                  std::int64_t num_passes) {
  const Json& rebalances = read_array(policy, where, "rebalances");
  std::vector<plan::RebalanceEvent> out;
  for (std::size_t i = 0; i < rebalances.size(); ++i) {
    const std::string at = fmt::format("{}.rebalances[{}]", where, i);
    const std::int64_t first = out.empty() ? 0 : out.back().pass + 1;
    out.push_back(
        {.pass = read_integer(rebalances[i], at, "pass", first, num_passes - 1),
         .moved_experts = read_integer(rebalances[i], at, "moved_experts", 0, kMaxCount),
         .max_moved_per_gpu = read_integer(rebalances[i], at, "max_moved_per_gpu", 0, kMaxCount),
         .seconds = read_number(rebalances[i], at, "seconds", 0.0, kUnbounded)});
  }
  return out;
}

SimulatedPolicy read_policy(const Json& value, const std::string& where,
                            const SimulatedScenario& scenario) {
  SimulatedPolicy out{.role = read_string(value, where, "role"), .replay = {}};
  plan::PolicyReplay& replay = out.replay;
  replay.policy = read_string(value, where, "policy");
  replay.num_passes = scenario.num_passes;
  replay.mean_balancedness = read_number(value, where, "mean_balancedness", 0.0, 1.0);
  replay.moved_experts = read_integer(value, where, "moved_experts", 0, kMaxCount);
  replay.imbalance_seconds = read_number(value, where, "imbalance_seconds", 0.0, kUnbounded);
  replay.move_seconds = read_number(value, where, "move_seconds", 0.0, kUnbounded);
  replay.rebalances = read_rebalances(value, where, scenario.num_passes);
  const Json& blocks = read_array(value, where, "block_balancedness");
  const std::int64_t num_blocks =
      (scenario.num_passes + scenario.block_passes - 1) / scenario.block_passes;
  MOESTAT_CHECK(std::int64_t(blocks.size()) == num_blocks,
                "{}.block_balancedness holds {} values, but {} passes in blocks of {} make {}",
                where, blocks.size(), scenario.num_passes, scenario.block_passes, num_blocks);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    replay.block_balancedness.push_back(
        number_in(blocks[i], fmt::format("{}.block_balancedness[{}]", where, i), 0.0, 1.0));
  }
  return out;
}

SimulatedScenario read_scenario(const Json& value, const std::string& where) {
  SimulatedScenario out;
  out.name = read_string(value, where, "name");
  MOESTAT_CHECK(out.name.size() <= kMaxScenarioName,
                "{}.name: {} characters (\"{}...\"), expected at most {}: it names the "
                "timeline's file",
                where, out.name.size(), out.name.substr(0, 20), kMaxScenarioName);
  MOESTAT_CHECK(!out.name.empty() && std::all_of(out.name.begin(), out.name.end(),
                                                 [](unsigned char c) {
                                                   return std::isalnum(c) || c == '-' || c == '_';
                                                 }),
                "{}.name: \"{}\" is not a scenario name (letters, digits, '-' and '_': it names "
                "the timeline's file)",
                where, out.name);
  out.description = read_string(value, where, "description");
  out.num_passes = read_integer(value, where, "num_passes", 1, kMaxPasses);
  out.block_passes = read_integer(value, where, "block_passes", 1, out.num_passes);
  out.phases = read_phases(value, where, out.num_passes);
  const Json& policies = read_array(value, where, "policies");
  MOESTAT_CHECK(!policies.empty(), "{}.policies is empty", where);
  for (std::size_t i = 0; i < policies.size(); ++i) {
    out.policies.push_back(read_policy(policies[i], fmt::format("{}.policies[{}]", where, i), out));
  }
  return out;
}

/// Appends the scenarios of one `moestat simulate --json` document; `where` names it.
void read_document(const Json& document, const std::string& where, Simulation& out) {
  const Json& scenarios = read_array(document, where, "scenarios");
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    out.scenarios.push_back(
        read_scenario(scenarios[i], fmt::format("{}[{}]", field_name(where, "scenarios"), i)));
  }
}

}  // namespace

Simulation parse_simulation(std::string_view json, std::string source) {
  Json document;
  try {
    document = Json::parse(json);
  } catch (const Json::parse_error& error) {
    MOESTAT_CHECK(false, "not valid JSON: {}", error.what());
  }
  constexpr std::string_view kExpected =
      "expected the document `moestat simulate --json` writes (an object with \"scenarios\") "
      "or an object of such documents";
  MOESTAT_CHECK(document.is_object() && !document.empty(), "not a simulation: {}, got {}",
                kExpected, document.is_object() ? "an empty object" : describe(document));
  Simulation out{.source = std::move(source), .scenarios = {}};
  if (document.contains("scenarios")) {
    read_document(document, "", out);
  } else {
    for (const auto& [key, value] : document.items()) {
      MOESTAT_CHECK(value.is_object() && value.contains("scenarios"),
                    "not a simulation: \"{}\" is {} without \"scenarios\"; {}", key,
                    describe(value), kExpected);
      read_document(value, key, out);
    }
  }
  MOESTAT_CHECK(!out.scenarios.empty(), "the simulation holds no scenario");
  for (std::size_t i = 0; i < out.scenarios.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      MOESTAT_CHECK(out.scenarios[i].name != out.scenarios[j].name,
                    "the scenario \"{}\" appears twice (its timelines would share a file)",
                    out.scenarios[i].name);
    }
  }
  return out;
}

Simulation load_simulation(const std::filesystem::path& path) {
  const std::string text = io::read_text_file(path);  // its errors name the path
  try {
    return parse_simulation(text, path.string());
  } catch (const Error& error) {
    throw error.with_context(path.string());
  }
}

}  // namespace moestat::report
