// The memory a reader may take for one file, charged before each allocation whose size the
// file controls, so that no file can make a reader hold more than a small multiple of its
// own size (docs/formats.md, "Bounds on hostile files").
#pragma once

#include <cstdint>
#include <string_view>

namespace moestat::io::detail {

class ReadBudget {
 public:
  /// `expansion` times `file_bytes` plus 1 MiB: the 1 MiB lets small files hold the fixed
  /// overheads of a reader however small they are.
  ReadBudget(std::uint64_t file_bytes, std::uint64_t expansion);

  /// Takes `bytes` from the budget; moestat::Error (without a file name, the caller adds
  /// it) saying that `what` would go beyond it otherwise.
  void spend(std::uint64_t bytes, std::string_view what);
  std::uint64_t left() const noexcept { return left_; }

 private:
  std::uint64_t expansion_;
  std::uint64_t total_;
  std::uint64_t left_;
};

}  // namespace moestat::io::detail
