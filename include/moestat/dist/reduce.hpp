// A cluster-wide snapshot from every rank's own (docs/distributed.md).
#pragma once

#include <chrono>
#include <moestat/dist/collective.hpp>
#include <moestat/snapshot.hpp>

namespace moestat::dist {

/// How long allreduce_snapshot waits, by default, for every rank to arrive and the reduction
/// to complete: ranks snapshot at the same step of the engine loop, so they arrive within a
/// step of each other; two minutes is far beyond any step, and short enough that a lost rank
/// is reported while someone is still looking.
inline constexpr std::chrono::milliseconds kDefaultReduceTimeout{std::chrono::minutes(2)};

/// Combines every rank's snapshot into the group's, returned on every rank (an all-reduce).
/// Collective: every rank of `group` calls it with its own snapshot.
///
/// - Counts add up: logical and physical counts [W, L, *], tokens per pass, decayed loads,
///   and the dropped ids, tokens and passes. num_passes is the largest of the ranks'.
/// - Per-token mode: the ranks' tokens, concatenated in rank order.
/// - The snapshots must describe the same recording: mode, sizes (L, E, P, top_k) and the
///   window (the same pass ids and placement versions, oldest first), which is what ranks
///   of one engine get when each snapshots at the same step of its loop. Otherwise every rank
///   throws the same moestat::Error naming the first rank and field that differ, so no rank is
///   left waiting in a later collective.
///
/// - Every rank must arrive within `timeout` of its own call, and the reduction complete by
///   then: otherwise the ranks that are there throw moestat::Error, naming the ranks that did
///   not arrive where the transport can tell (MPI can; NCCL aborts the communicator). After
///   that error the group cannot be used again (Collective::start_reduction).
///
/// Sum only over ranks that see different tokens: under plain tensor parallelism every rank
/// of a TP group routes the same tokens, so pass one rank per TP group (a communicator of
/// data- or expert-parallel peers), or the counts come out tp_size times too large.
Snapshot allreduce_snapshot(const Snapshot& local, Collective& group,
                            std::chrono::milliseconds timeout = kDefaultReduceTimeout);

}  // namespace moestat::dist
