// MpiCollective: MPI_Allreduce and MPI_Allgatherv, in pieces where a count passes MPI's int.
#include <algorithm>
#include <climits>
#include <moestat/dist/mpi.hpp>
#include <moestat/error.hpp>

namespace moestat::dist {
namespace {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  MOESTAT_FAIL("{} failed: {}", call, std::string_view(text, std::size_t(length)));
}

template <typename T>
void sum_in_pieces(std::span<T> values, MPI_Datatype type, MPI_Comm communicator) {
  // MPI counts are ints: a window of billions of counts goes in pieces of at most INT_MAX.
  for (std::size_t first = 0; first < values.size(); first += std::size_t(INT_MAX)) {
    const std::size_t count = std::min(values.size() - first, std::size_t(INT_MAX));
    check(
        MPI_Allreduce(MPI_IN_PLACE, values.data() + first, int(count), type, MPI_SUM, communicator),
        "MPI_Allreduce");
  }
}

template <typename T>
std::vector<T> gather_all(std::span<const T> local, MPI_Datatype type, MPI_Comm communicator,
                          int num_ranks) {
  MOESTAT_CHECK(local.size() <= std::size_t(INT_MAX),
                "gather: {} elements on one rank is more than MPI can send at once ({})",
                local.size(), INT_MAX);
  const int count = int(local.size());
  std::vector<int> counts(static_cast<std::size_t>(num_ranks));
  check(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, communicator),
        "MPI_Allgather");
  std::vector<int> offsets(static_cast<std::size_t>(num_ranks));
  long long total = 0;
  for (int r = 0; r < num_ranks; ++r) {
    MOESTAT_CHECK(total <= INT_MAX, "gather: more than {} elements over all ranks", INT_MAX);
    offsets[std::size_t(r)] = int(total);
    total += counts[std::size_t(r)];
  }
  MOESTAT_CHECK(total <= INT_MAX, "gather: more than {} elements over all ranks", INT_MAX);
  std::vector<T> out(static_cast<std::size_t>(total));
  check(MPI_Allgatherv(local.data(), count, type, out.data(), counts.data(), offsets.data(), type,
                       communicator),
        "MPI_Allgatherv");
  return out;
}

}  // namespace

MpiCollective::MpiCollective(MPI_Comm communicator) : communicator_(communicator) {
  check(MPI_Comm_rank(communicator_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(communicator_, &size_), "MPI_Comm_size");
}

void MpiCollective::sum(std::span<std::int64_t> values) {
  sum_in_pieces(values, MPI_INT64_T, communicator_);
}

void MpiCollective::sum(std::span<double> values) {
  sum_in_pieces(values, MPI_DOUBLE, communicator_);
}

std::vector<std::int64_t> MpiCollective::gather(std::span<const std::int64_t> local) {
  return gather_all(local, MPI_INT64_T, communicator_, size_);
}

std::vector<std::int32_t> MpiCollective::gather(std::span<const std::int32_t> local) {
  return gather_all(local, MPI_INT32_T, communicator_, size_);
}

}  // namespace moestat::dist
