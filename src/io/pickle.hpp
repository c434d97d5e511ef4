// The pickle subset of torch .pt files: an unpickler and a pickler for PtValue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <moestat/io/pt.hpp>
#include <span>
#include <string>
#include <vector>

namespace moestat::io::detail {

/// A storage a pickle refers to through a persistent id: record `data/KEY` of the archive.
struct StorageRef {
  std::string key;
  DType dtype = DType::kInt64;
  Device device;
  std::int64_t numel = 0;  ///< Elements, as torch.save states them.
};

/// Returns a storage's bytes (exactly numel * dtype_size); throws moestat::Error when the
/// archive has no such record or its size differs. The bytes stay valid until unpickling
/// returns.
using StorageLoader = std::function<std::span<const std::byte>(const StorageRef&)>;

class ReadBudget;

/// Unpickles `pickle` (protocols 2-5, the opcodes torch.save emits), charging what it
/// allocates (objects, memo, stack, result) to `budget`. moestat::Error (without a file name)
/// on anything outside the subset, a malformed stream, nesting deeper than `max_depth` or an
/// exhausted budget.
PtValue unpickle(std::span<const std::byte> pickle, const StorageLoader& load_storage,
                 ReadBudget& budget, std::size_t max_depth);

/// Pickles `value` with protocol 2 as torch.save does; every tensor becomes one storage,
/// appended to `storages` in key order ("0", "1", ...).
std::string pickle(const PtValue& value, std::vector<const HostTensor*>& storages);

}  // namespace moestat::io::detail
