// The per-request route recorder: the top-k logical expert ids of every token of every request,
// in every MoE layer, kept by request and position until the engine takes them. The interface
// every backend (CPU, CUDA) implements.
#pragma once

#include <cstdint>
#include <map>
#include <moestat/placement.hpp>
#include <moestat/routes/routed_experts.hpp>
#include <moestat/tensor_view.hpp>
#include <moestat/topology.hpp>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace moestat::routes {

/// What a route recorder keys its rows by.
enum class RouteKeys : std::uint8_t {
  /// (request, position): end_pass(batch), take(), finish(). Rows are allocated as passes end
  /// and freed as they are taken.
  kRequestPositions,
  /// An engine-wide slot in [0, num_slots), such as a KV-cache slot: end_pass_slots(),
  /// read_slots(). A slot routed again replaces its row; the engine says which slots a
  /// request's tokens are in when it reads them (SGLang's routed-experts host cache). Where
  /// the slots reach the host only after the pass ended (SGLang's overlap scheduler),
  /// end_pass_pending() ends the pass into rows of their own and commit_slots() gives them
  /// their slots later: the recorder's table maps each slot to its row.
  kSlots,
};

struct RouteRecorderOptions {
  /// Rows of a pass's batch that can be routed: its most tokens, padding included.
  std::int64_t max_tokens_per_pass = 8192;
  /// Tokens held between the pass that records them and the take() that hands them out: the
  /// bound on memory (capacity_tokens * layout.bytes_per_token() bytes). A token with no room
  /// is not recorded, and is returned as not valid. Also the most positions a request's span
  /// may start past the end of what the request routed before (see end_pass).
  std::int64_t capacity_tokens = 65536;
  RouteKeys keys = RouteKeys::kRequestPositions;
  /// Slot keys: the slots, [0, num_slots); 0: capacity_tokens. Rows beyond num_slots hold
  /// passes ended with end_pass_pending() whose slots are not committed yet.
  std::int64_t num_slots = 0;
};

/// Slot keys: the most passes that may wait for commit_slots() at once (SGLang's overlap
/// scheduler has one or two); end_pass_pending() refuses one more.
inline constexpr std::int64_t kMaxPendingPasses = 1024;

/// Slot keys: a pass ended before its slots were known (end_pass_pending), whose rows wait
/// for commit_slots() or release_pending().
struct PendingSlots {
  std::uint64_t id = 0;
  std::int64_t num_tokens = 0;           ///< Slots commit_slots() takes.
  std::int64_t tokens_without_room = 0;  ///< Of them, tokens given no row: they read as such.
};

/// What commit_slots() could not commit. Such tokens' rows are freed.
struct SlotCommit {
  std::int64_t slots_out_of_range = 0;  ///< Slots outside [0, num_slots).
  std::int64_t slots_repeated = 0;      ///< A slot given twice: the later token holds it.
};

/// Tokens [first_position, first_position + num_tokens) of request `request_id`, in batch rows
/// [first_row, first_row + num_tokens) of a pass; first_row kFollows: the row after the
/// previous span's last (0 for the first span).
struct TokenSpan {
  static constexpr std::int64_t kFollows = -1;

  std::string request_id;
  std::int64_t first_position = 0;
  std::int64_t num_tokens = 0;
  std::int64_t first_row = kFollows;
};

/// What a route recorder did, since it was made.
struct RouteTallies {
  std::int64_t passes = 0;                ///< Passes ended (aborted ones not counted).
  std::int64_t tokens_recorded = 0;       ///< Tokens given a row.
  std::int64_t tokens_without_room = 0;   ///< Tokens with no free row: returned not valid.
  std::int64_t tokens_already_taken = 0;  ///< Positions routed again after take(): ignored.
  /// Rows of routed tokens (rows a span covers, padding not counted) whose ids in a layer were
  /// outside [0, P) (or -1) or mapped to one logical expert twice: that layer's row is left
  /// not valid. Counted when the pass ends.
  std::int64_t invalid_ids = 0;
  std::int64_t layers_written_twice = 0;  ///< A layer's row written again in one pass.
  std::int64_t tokens_held = 0;           ///< Rows held: waiting for take(), or slots written.
  std::int64_t tokens_pending = 0;        ///< Slot keys: rows of passes waiting for commit_slots().
};

/// Records, per request and token position, the experts each MoE layer routed the token to.
///
/// Hooks (`begin_pass`, `record_topk`, `record_topk_layers`, `end_pass`, `abort_pass`) are
/// called by the engine's forward thread in order. Layer hooks from several threads at once
/// are safe: they hold a shared lock that begin_pass, end_pass and abort_pass take exclusively,
/// so a pass's placement never changes under a hook. The layer hooks take the router's PHYSICAL
/// ids for every row of the pass's batch and keep them, as LOGICAL ids mapped through the
/// placement in force, in a scratch row per batch row. end_pass(batch) says which request and
/// position each batch row is (rows no span covers are padding) and moves those rows into the
/// store, keyed by request and position: what an engine knows once its forward is launched
/// (SGLang's forward batch, vLLM's input batch), so nothing has to reach the device before
/// the forward.
///
/// Control (`take`, `finish`, `set_placement`, `tallies`, `requests`) may come from another
/// thread. take() hands out the rows of ended passes recorded since the previous take, and
/// frees them: memory stays bounded by options.capacity_tokens whatever the requests' length.
///
/// A layer whose row was already written in the pass (a draft model's router beside the
/// target's) keeps its first ids and is tallied; so is an id outside [0, P), which leaves
/// that layer's row not valid. Positions of a request may arrive in any order and with gaps
/// of up to capacity_tokens positions in all between two takes: the gaps are returned not
/// valid. A request's routes
/// start at the first position a pass routed for it: positions before it (a prompt served
/// from the prefix cache) are not handed out at all, and first_position says where they start.
///
/// @code
///   moestat::routes::CpuRouteRecorder routes(topology, {});
///   routes.begin_pass();
///   for (int layer : moe_layers) routes.record_topk(layer, topk_ids_of(layer));  // [6, k]
///   const moestat::routes::TokenSpan batch[] = {{"req-1", 0, 5}, {"req-2", 7, 1}};
///   routes.end_pass(batch);
///   moestat::routes::RoutedExperts first = routes.take("req-1");  // positions 0..4
/// @endcode
class RouteRecorder {
 public:
  /// One MoE layer's router choices, for record_topk_layers.
  struct LayerTopk {
    std::int64_t layer;
    TensorView topk_ids;
  };

  RouteRecorder(ModelTopology topology, RouteRecorderOptions options);
  virtual ~RouteRecorder() = default;
  RouteRecorder(const RouteRecorder&) = delete;
  RouteRecorder& operator=(const RouteRecorder&) = delete;

  // ---- Hooks (forward thread) ----

  /// Opens a pass.
  void begin_pass();
  /// Keeps one layer's choices for the pass's batch rows.
  /// `topk_ids`: [num_rows <= max_tokens_per_pass, num_columns >= top_k] int32 or int64
  ///   PHYSICAL ids, any strides, on the backend's device; only the first top_k columns are
  ///   read (fused shared-expert columns follow them).
  void record_topk(std::int64_t layer, const TensorView& topk_ids);
  /// record_topk for several layers at once (the CUDA backend: one launch per 64 layers).
  void record_topk_layers(std::span<const LayerTopk> layers);
  /// Closes the pass: the batch rows `batch` covers become those requests' positions, and can
  /// be taken. A request at most once; spans may not overlap or pass max_tokens_per_pass; a
  /// span's positions end at kMaxPosition at most, and the gaps it opens past the end of what
  /// its request routed before, with those its request holds since its last take(), are at
  /// most capacity_tokens positions (so a take() never hands out more rows that no pass
  /// routed than that). A batch breaking any of these is refused whole with
  /// moestat::Error, and changes nothing (the pass stays open).
  void end_pass(std::span<const TokenSpan> batch);
  /// Slot keys: closes the pass; batch row t goes to slot slots[t] (-1: not recorded), rows
  /// past slots.size() are padding. Each slot in [0, num_slots), at most once.
  void end_pass_slots(std::span<const std::int64_t> slots);
  /// Slot keys: closes the pass; batch rows [first_row, first_row + num_tokens) go to rows of
  /// their own (a token with no free row is not recorded, and tallied), whose slots
  /// commit_slots() gives once the engine knows them; rows outside are padding.
  PendingSlots end_pass_pending(std::int64_t first_row, std::int64_t num_tokens);
  /// Slot keys: the pending pass's token t now holds slot slots[t] (a token not recorded
  /// makes its slot read as not recorded, never as the slot's previous token); the rows the
  /// slots held are freed. Slots outside [0, num_slots) and all but the last token naming a
  /// slot are not committed, and counted. `slots` must have pending.num_tokens entries; a
  /// pass committed or released already is refused with moestat::Error.
  SlotCommit commit_slots(const PendingSlots& pending, std::span<const std::int64_t> slots);
  /// Slot keys: frees a pending pass's rows (a forward the engine dropped); false when it was
  /// committed or released already.
  bool release_pending(const PendingSlots& pending);
  /// Slot keys: `slots` now read as not recorded (tokens whose routes were lost), never as
  /// their previous tokens; their rows are freed. Returns how many were outside
  /// [0, num_slots), which are skipped.
  std::int64_t clear_slots(std::span<const std::int64_t> slots);
  /// Closes the pass and discards what its hooks wrote.
  void abort_pass();

  // ---- Control (any thread) ----

  /// The rows of `request_id` recorded by ended passes and not yet taken, from the first
  /// position not taken to the last recorded one; frees them. No rows: a request with
  /// 0 tokens (also for a request never seen).
  RoutedExperts take(std::string_view request_id);
  /// take(), then forgets the request.
  RoutedExperts finish(std::string_view request_id);
  /// take() of each request in `request_ids`, in order, with their rows read in one go: the
  /// CUDA backend gathers, copies and waits once, not once per request (a decode batch's
  /// finished requests). A request named twice gets its rows the first time.
  std::vector<RoutedExperts> take_many(std::span<const std::string> request_ids);
  /// finish() of each request in `request_ids`: take_many(), then forgets them.
  std::vector<RoutedExperts> finish_many(std::span<const std::string> request_ids);
  /// Slot keys: the rows of `slots` in their order (slot -1, or one never written: not
  /// valid), as routes of `request_id` from `first_position`. Rows stay where they are; a row
  /// a commit frees during the read is not handed to a pass before the read ends.
  RoutedExperts read_slots(std::span<const std::int64_t> slots, std::string request_id = {},
                           std::int64_t first_position = 0);
  /// Makes `placement` map the ids of passes that begin from now on. Shapes must match the
  /// topology.
  void set_placement(const Placement& placement);
  /// Names the model in every RoutedExperts handed out.
  void set_model(std::string model);
  /// The requests that hold rows or have a pass open.
  std::vector<std::string> requests() const;
  RouteTallies tallies() const;

  const ModelTopology& topology() const noexcept { return topology_; }
  const RouteLayout& layout() const noexcept { return layout_; }
  const RouteRecorderOptions& options() const noexcept { return options_; }
  /// Bytes of the row store: capacity_tokens * layout().bytes_per_token().
  std::int64_t capacity_bytes() const noexcept;

 protected:
  /// One validated layer for the backend: its column and the first top_k columns of its ids.
  struct ColumnIds {
    std::int64_t column;
    TensorView topk_ids;
  };
  /// Tallies only a backend counts (on the device, for CUDA).
  struct BackendTallies {
    std::int64_t invalid_ids = 0;  ///< Of moved rows only (RouteTallies::invalid_ids).
    std::int64_t layers_written_twice = 0;
  };

  /// A batch row of the pass and the store row it goes to.
  struct RowMove {
    std::int32_t batch_row;
    std::int32_t store_row;
  };

  /// Where rows [first, first + count) of a read go: `ids` [count, C, K] of the id dtype and
  /// `valid` [count, C]. A read's targets cover its rows in order.
  struct ReadTarget {
    std::size_t first;
    std::size_t count;
    std::byte* ids;
    std::byte* valid;
  };

  virtual void do_begin_pass() = 0;
  /// Called from several threads at once where the engine's hooks are; never while a pass
  /// opens or ends.
  virtual void do_record(std::span<const ColumnIds> layers) = 0;
  /// Moves each batch row's scratch into its store row (valid where the pass wrote it) and
  /// tallies the moved rows' invalid ids, then forgets the pass's scratch.
  virtual void do_end_pass(std::span<const RowMove> moves) = 0;
  /// Forgets the pass's scratch.
  virtual void do_abort_pass() = 0;
  /// Copies store rows `rows` into `targets`, which start zeroed; row -1 leaves zeros. Waits
  /// for the passes that wrote them. Called without the table lock.
  virtual void do_read_rows(std::span<const std::int32_t> rows,
                            std::span<const ReadTarget> targets) = 0;
  /// `physical_to_logical`: [C, P] for the layout's columns.
  virtual void do_set_placement(std::span<const std::int32_t> physical_to_logical) = 0;
  virtual BackendTallies do_backend_tallies() const = 0;
  /// Throws when `call` (begin_pass, end_pass, abort_pass) may not run now; checked before
  /// anything changes. Nothing by default.
  virtual void check_pass_control(const char* call) const { (void)call; }
  /// Whether a layer hook may run with no pass open on the host (a CUDA stream being
  /// captured: the kernels run at replay, reading the rows of the pass open then).
  virtual bool accepts_hooks_outside_pass() const { return false; }
  /// Copies rows [first, first + count) of a read, laid out one after another at `ids` and
  /// `valid`, to where `targets` put them.
  void copy_to_targets(std::span<const ReadTarget> targets, std::size_t first, std::size_t count,
                       const std::byte* ids, const std::byte* valid) const noexcept;

 private:
  struct HeldRow {
    std::int64_t position;
    std::int32_t row;
  };
  /// A request's rows not yet taken: only positions that hold a store row are in `rows`, so
  /// a gap costs nothing until take() hands it out as not valid. A sorted vector, not a map:
  /// positions mostly arrive in order, so a pass appends (end_pass stays cheap per token).
  struct RequestRows {
    std::int64_t first_position = 0;  ///< The first position not taken.
    std::vector<HeldRow> rows;        ///< By position.
    std::int64_t end = 0;             ///< One past the last position an ended pass routed.
    std::int64_t gap_positions = 0;   ///< Positions in [first_position, end) no pass routed.
  };
  /// Hashes a request id whether it comes as a string or a view, so a lookup builds no string.
  struct RequestIdHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view id) const noexcept {
      return std::hash<std::string_view>{}(id);
    }
  };
  using RequestTable = std::unordered_map<std::string, RequestRows, RequestIdHash, std::equal_to<>>;
  /// What end_pass(batch) will change, worked out before anything changes.
  struct PassPlan;
  void check_layer(std::int64_t layer, const TensorView& topk_ids) const;
  void require_keys(RouteKeys keys, const char* call) const;
  /// Checks the batch whole; returns each span's request in the table (nullptr: a new one),
  /// looked up once for the check and the plan.
  std::vector<RequestRows*> check_batch(std::span<const TokenSpan> batch);
  static void check_no_request_twice(std::span<const TokenSpan> batch,
                                     std::span<RequestRows* const> known);
  PassPlan plan_rows(std::span<const TokenSpan> batch, std::span<RequestRows* const> known);
  /// Positions between the end of `request`'s routes and the start of `span`.
  static std::int64_t gap_before(const RequestRows& request, const TokenSpan& span) noexcept;
  /// The store row holding `position` of `request`; -1: none.
  static std::int32_t held_row(const RequestRows& request, std::int64_t position);
  void commit(PassPlan& plan) noexcept;
  void release(std::int32_t row);
  /// Slot keys: frees a row a slot or pending pass held, once no read_slots() may read it.
  void release_slot_row(std::int32_t row);
  /// Slot keys: starts a call's marks (end_pass_slots, commit_slots): no slot is marked.
  void begin_slot_marks() noexcept;
  /// Marks `slot`, in [0, num_slots); false when the call marked it already.
  bool mark_slot(std::int64_t slot) noexcept;
  std::int64_t num_slots() const noexcept;
  /// A request's rows detached from the table by take(), to be read.
  struct Detached {
    std::string request_id;
    std::int64_t first_position = 0;
    std::int64_t num_tokens = 0;  ///< Its rows in the read, from first_row.
    std::size_t first_row = 0;
  };
  /// Takes each request's rows out of the table (forgetting the requests if `forget`), reads
  /// them with one do_read_rows, then frees them.
  std::vector<RoutedExperts> take_then_read(std::span<const std::string_view> request_ids,
                                            bool forget);

  ModelTopology topology_;
  RouteLayout layout_;
  RouteRecorderOptions options_;

  /// A shared mutex under which a waiting exclusive locker goes before shared lockers that
  /// come after it: hooks called back to back from several threads would otherwise hold a
  /// std::shared_mutex shared for ever (glibc's rwlock prefers readers), and end_pass would
  /// never run (seen with four hook threads on a 16-core machine).
  class PassLock {
   public:
    void lock() {
      std::lock_guard turn(gate_);
      hooks_.lock();
    }
    void unlock() { hooks_.unlock(); }
    void lock_shared() {
      std::lock_guard turn(gate_);
      hooks_.lock_shared();
    }
    void unlock_shared() { hooks_.unlock_shared(); }

   private:
    std::mutex gate_;  // NOTE: never waited for while hooks_ is held, so no cycle
    std::shared_mutex hooks_;
  };

  // Layer hooks hold it shared; begin_pass, end_pass and abort_pass exclusive, before mutex_.
  // It guards pass_open_ and what the backend's do_begin_pass changes under the hooks.
  PassLock pass_mutex_;
  bool pass_open_ = false;
  mutable std::mutex mutex_;  // everything below
  RequestTable requests_;
  std::vector<std::int32_t> free_rows_;  // handed out from the back
  // Slot keys: each slot's row (-1: none), the passes waiting for their slots, and the rows
  // freed while a read_slots() was in flight (free once no read is).
  std::vector<std::int32_t> slot_rows_;
  // The slots one call named: slot_marks_[s] == slot_mark_. Kept between calls so that a call
  // finds a slot named twice in time of its own slots, not of the KV pool's (no set, no
  // clearing of num_slots flags per pass).
  std::vector<std::uint32_t> slot_marks_;
  std::uint32_t slot_mark_ = 0;
  std::int64_t slots_written_ = 0;
  struct PendingRows {
    std::int64_t num_tokens = 0;
    std::vector<std::int32_t> rows;  // of its first rows.size() tokens; the rest have none
  };
  std::map<std::uint64_t, PendingRows> pending_;
  std::int64_t pending_rows_ = 0;
  std::uint64_t next_pending_id_ = 1;
  std::int64_t reads_in_flight_ = 0;
  std::vector<std::int32_t> retired_rows_;
  RouteTallies tallies_;
  std::uint64_t placement_version_ = 0;
  std::string model_;
};

}  // namespace moestat::routes
