// One-line descriptions of what a .pt or safetensors file holds, for `moestat inspect`.
#pragma once

#include <moestat/io/pt.hpp>
#include <moestat/io/safetensors.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moestat::cli {

/// "tensor int32 [2, 3, 4] on cuda:0", "int 0", "list of 5", "dict of 3 keys", ...
std::string describe(const io::HostTensor& tensor);
std::string describe(const io::PtValue& value);

/// (path, description) for `value` and what it holds, depth first, at most `limit` lines;
/// paths read like Python: `records[0]["global_physical_count"]`.
std::vector<std::pair<std::string, std::string>> describe_tree(const io::PtValue& value,
                                                               std::size_t limit);

}  // namespace moestat::cli
