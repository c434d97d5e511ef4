// The one place a record mode picks its storage policy: a new mode adds its case here and
// its policy beside the others.
#include <moestat/error.hpp>

#include "collected_storage.hpp"
#include "decayed_storage.hpp"
#include "storage_policy.hpp"
#include "trace_storage.hpp"
#include "window_storage.hpp"

namespace moestat::record::cuda {
namespace {

template <typename Policy>
std::unique_ptr<StoragePolicy> make(const StorageSetup& setup) {
  return std::make_unique<Policy>(setup);
}

}  // namespace

StorageFactory choose_storage(const RecorderOptions& options, const CudaOptions& cuda_options) {
  switch (options.mode) {
    case RecordMode::kStat:
    case RecordMode::kStatApprox:
      if (options.window_size >= 0) return &make<WindowStorage>;
      // An unbounded window keeps every pass, as per_pass mode does.
      [[fallthrough]];
    case RecordMode::kPerPass:
      MOESTAT_CHECK(cuda_options.pass_ring_size > 0,
                    "CudaOptions: pass_ring_size must be positive, got {}",
                    cuda_options.pass_ring_size);
      return &make<CollectedStorage>;
    case RecordMode::kDecayed:
      return &make<DecayedStorage>;
    case RecordMode::kPerToken:
      MOESTAT_CHECK(!cuda_options.trace_path.empty(),
                    "per_token mode on the CUDA recorder needs a trace file to drain the tokens "
                    "into (trace_path)");
      return &make<TraceStorage>;
  }
  MOESTAT_FAIL("CudaRecorder: unknown record mode {}", static_cast<int>(options.mode));
}

}  // namespace moestat::record::cuda
