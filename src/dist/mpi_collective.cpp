// MpiCollective: MPI_Allreduce and MPI_Allgatherv, in pieces where a count passes MPI's int;
// within a reduction with a deadline, their non-blocking forms polled until the deadline,
// after every rank has said it arrived.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <moestat/dist/mpi.hpp>
#include <moestat/error.hpp>
#include <mutex>
#include <string>
#include <vector>

namespace moestat::dist {
namespace {

/// Up to 5 ms between polls, so that ranks sharing cores leave each other the CPU.
constexpr PollPauses kPauses{std::chrono::microseconds(20), std::chrono::milliseconds(5)};

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  MOESTAT_FAIL("{} failed: {}", call, std::string_view(text, std::size_t(length)));
}

/// Keeps the buffers of an operation that timed out until the process ends: MPI may still
/// read or write them if the late rank ever arrives, and no MPI call can take a started
/// collective back.
void abandon(std::shared_ptr<void> buffers) {
  static std::mutex mutex;
  // NOTE: never destroyed, so not even exit() frees what MPI may still touch.
  static auto* abandoned = new std::vector<std::shared_ptr<void>>;
  const std::lock_guard lock(mutex);
  abandoned->push_back(std::move(buffers));
}

/// "2", "2 and 5", "2, 5 and 7", at most 16 ranks named.
std::string rank_list(const std::vector<int>& ranks) {
  constexpr std::size_t kNamed = 16;
  std::string text;
  const std::size_t named = std::min(ranks.size(), kNamed);
  for (std::size_t i = 0; i < named; ++i) {
    const bool last = i + 1 == named && ranks.size() <= kNamed;
    text += i == 0 ? "" : (last ? " and " : ", ");
    text += std::to_string(ranks[i]);
  }
  if (ranks.size() > kNamed) text += fmt::format(" and {} more", ranks.size() - kNamed);
  return text;
}

/// The arrival messages of one start_reduction: this rank's number (sent to every other
/// rank) and one slot per other rank's.
struct Arrival {
  int sent = 0;
  std::vector<int> received;
  std::vector<int> peers;
  std::vector<MPI_Request> sends, receives;
};

/// The requests of `requests` still open (MPI_Test turns a completed one into a null one).
bool all_done(std::vector<MPI_Request>& requests, const char* call) {
  bool done = true;
  for (MPI_Request& request : requests) {
    int flag = 0;
    check(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), call);
    done = done && flag != 0;
  }
  return done;
}

template <typename T>
struct GatherBuffers {
  std::vector<T> local, out;
  int count = 0;
  std::vector<int> counts, offsets;
};

}  // namespace

MpiCollective::MpiCollective(MPI_Comm communicator)
    : communicator_(communicator), deadline_(kPauses) {
  check(MPI_Comm_rank(communicator_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(communicator_, &size_), "MPI_Comm_size");
}

void MpiCollective::start_reduction(std::chrono::steady_clock::time_point deadline) {
  deadline_.start(deadline);
  auto arrival = std::make_shared<Arrival>();
  arrival->sent = rank_;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) arrival->peers.push_back(peer);
  }
  const std::size_t num_peers = arrival->peers.size();
  arrival->received.resize(num_peers);
  arrival->sends.resize(num_peers);
  arrival->receives.resize(num_peers);
  for (std::size_t i = 0; i < num_peers; ++i) {
    check(MPI_Irecv(&arrival->received[i], 1, MPI_INT, arrival->peers[i], kArrivalTag,
                    communicator_, &arrival->receives[i]),
          "MPI_Irecv");
    check(MPI_Isend(&arrival->sent, 1, MPI_INT, arrival->peers[i], kArrivalTag, communicator_,
                    &arrival->sends[i]),
          "MPI_Isend");
  }
  if (deadline_.poll([&] {
        return all_done(arrival->receives, "MPI_Test") && all_done(arrival->sends, "MPI_Test");
      })) {
    return;
  }
  std::vector<int> missing;
  for (std::size_t i = 0; i < num_peers; ++i) {
    if (arrival->receives[i] == MPI_REQUEST_NULL) continue;
    missing.push_back(arrival->peers[i]);
    // A receive can be taken back; a send cannot, so its buffer is kept (abandon).
    MPI_Cancel(&arrival->receives[i]);
    MPI_Request_free(&arrival->receives[i]);
  }
  for (MPI_Request& send : arrival->sends) {
    if (send != MPI_REQUEST_NULL) MPI_Request_free(&send);
  }
  abandon(arrival);
  MOESTAT_CHECK(!missing.empty(),
                "allreduce_snapshot: rank {} could not deliver its arrival to every rank within "
                "{}; this communicator cannot be used for another reduction",
                rank_, deadline_.timeout_text());
  MOESTAT_FAIL(
      "allreduce_snapshot: rank {} did not arrive at the reduction within {} (rank {} waited); "
      "a rank that exited, crashed or is stuck elsewhere; this communicator cannot be used for "
      "another reduction",
      rank_list(missing), deadline_.timeout_text(), rank_);
}

void MpiCollective::wait(MPI_Request& request, const char* call,
                         const std::shared_ptr<void>& buffers) {
  if (!deadline_.active()) {
    check(MPI_Wait(&request, MPI_STATUS_IGNORE), call);
    return;
  }
  const bool done = deadline_.poll([&] {
    int flag = 0;
    check(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), call);
    return flag != 0;
  });
  if (done) return;
  abandon(buffers);
  deadline_.fail_incomplete(call, rank_,
                            "every rank arrived, but one stopped taking part; this "
                            "communicator cannot be used for another reduction");
}

template <typename T>
void MpiCollective::sum_in_pieces(std::span<T> values, MPI_Datatype type) {
  // On buffers of their own, which outlive this call if it times out.
  auto buffer = std::make_shared<std::vector<T>>(values.begin(), values.end());
  // MPI counts are ints: a window of billions of counts goes in pieces of at most INT_MAX.
  for (std::size_t first = 0; first < values.size(); first += std::size_t(INT_MAX)) {
    const std::size_t count = std::min(values.size() - first, std::size_t(INT_MAX));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, buffer->data() + first, int(count), type, MPI_SUM,
                         communicator_, &request),
          "MPI_Iallreduce");
    wait(request, "MPI_Iallreduce", buffer);
  }
  std::copy(buffer->begin(), buffer->end(), values.begin());
}

template <typename T>
std::vector<T> MpiCollective::gather_all(std::span<const T> local, MPI_Datatype type) {
  MOESTAT_CHECK(local.size() <= std::size_t(INT_MAX),
                "gather: {} elements on one rank is more than MPI can send at once ({})",
                local.size(), INT_MAX);
  auto buffers = std::make_shared<GatherBuffers<T>>();
  buffers->local.assign(local.begin(), local.end());
  buffers->count = int(local.size());
  buffers->counts.resize(std::size_t(size_));
  buffers->offsets.resize(std::size_t(size_));
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(&buffers->count, 1, MPI_INT, buffers->counts.data(), 1, MPI_INT,
                       communicator_, &request),
        "MPI_Iallgather");
  wait(request, "MPI_Iallgather", buffers);
  long long total = 0;
  for (int r = 0; r < size_; ++r) {
    MOESTAT_CHECK(total <= INT_MAX, "gather: more than {} elements over all ranks", INT_MAX);
    buffers->offsets[std::size_t(r)] = int(total);
    total += buffers->counts[std::size_t(r)];
  }
  MOESTAT_CHECK(total <= INT_MAX, "gather: more than {} elements over all ranks", INT_MAX);
  buffers->out.resize(static_cast<std::size_t>(total));
  check(MPI_Iallgatherv(buffers->local.data(), buffers->count, type, buffers->out.data(),
                        buffers->counts.data(), buffers->offsets.data(), type, communicator_,
                        &request),
        "MPI_Iallgatherv");
  wait(request, "MPI_Iallgatherv", buffers);
  return std::move(buffers->out);
}

void MpiCollective::sum(std::span<std::int64_t> values) { sum_in_pieces(values, MPI_INT64_T); }

void MpiCollective::sum(std::span<double> values) { sum_in_pieces(values, MPI_DOUBLE); }

std::vector<std::int64_t> MpiCollective::gather(std::span<const std::int64_t> local) {
  return gather_all(local, MPI_INT64_T);
}

std::vector<std::int32_t> MpiCollective::gather(std::span<const std::int32_t> local) {
  return gather_all(local, MPI_INT32_T);
}

}  // namespace moestat::dist
