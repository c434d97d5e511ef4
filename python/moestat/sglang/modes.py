"""What a recording keeps of its passes and the dump it makes of them, decided once by mode.

- ``stat`` / ``stat_approx``: the passes recorded since the last reset, and SGLang's ring row
  of the first of them (its circular buffer keeps going round across resets);
- ``per_pass`` / ``per_token``: also, under each recorded pass's moestat id, what the engine
  said about it (its ``forward_pass_id``; per_token: the batch's tokens).

dumps.py builds the dump dicts and writes the files.
"""

from __future__ import annotations

import abc

from ..engines.ranks import adds_its_counts
from . import dumps


def make_pass_log(config, metadata, rank: int, source):
    """The pass log of ``config.mode``; ``source``: the recorder's ``CountSource``."""
    if config.mode in ("stat", "stat_approx"):
        # Ranks of an attention tensor-parallel group may count the same tokens.
        adds = adds_its_counts(config.attn_tp_rank, source.tokens_are_replicated)
        return StatLog(config, metadata, rank, adds)
    return DetailLog(config, metadata, rank, source)


class _PassLog(abc.ABC):
    """The passes recorded since the last reset."""

    def __init__(self, config, metadata, rank: int):
        self._config = config
        self._metadata = metadata
        self._rank = rank
        self.passes_since_reset = 0

    def begin_pass(self, pass_id: int, forward_pass_id, forward_batch):
        """A recorded pass opened under moestat id ``pass_id``."""

    def end_pass(self, pass_id: int, kept: bool):
        """The pass closed: ``kept``, it ended while recording; else it was aborted, failed
        or ended after recording stopped."""
        if kept:
            self.passes_since_reset += 1

    def reset(self, open_pass_id):
        """Forgets the passes recorded so far; ``open_pass_id``: the pass open now, or None."""
        self.passes_since_reset = 0

    @abc.abstractmethod
    def dump(self, snapshot, *, to_file: bool):
        """The dump of ``snapshot``: written where SGLang writes it (``to_file``; None
        returned), else returned as a dict."""


class StatLog(_PassLog):
    """stat / stat_approx: counts summed over ranks, laid out as SGLang's circular buffer."""

    def __init__(self, config, metadata, rank: int, adds: bool):
        super().__init__(config, metadata, rank)
        self._adds = adds  # whether this rank's counts join the cross-rank sum
        self._ring_start = 0  # SGLang's ring row of the first pass since the reset

    def reset(self, open_pass_id):
        if self._config.buffer_size > 0:
            self._ring_start = ((self._ring_start + self.passes_since_reset)
                                % self._config.buffer_size)
        super().reset(open_pass_id)

    def dump(self, snapshot, *, to_file: bool):
        data = dumps.stat_dump(
            snapshot, config=self._config, rank=self._rank, ring_start=self._ring_start,
            num_passes=self.passes_since_reset, num_gpus=self._metadata.ep_size,
            device=self._metadata.physical_to_logical_map.device,
            adds=self._adds)
        if not to_file:
            return dumps.load(data)
        if self._rank == 0:
            dumps.save_atomically(data, self._config.dump_dir(), dumps.stat_file_name())
        return None


class DetailLog(_PassLog):
    """per_pass / per_token: one record per recorded pass, every rank its own file."""

    def __init__(self, config, metadata, rank: int, source):
        super().__init__(config, metadata, rank)
        self._source = source
        self._passes = {}  # moestat pass id -> the source's record of the pass

    def begin_pass(self, pass_id: int, forward_pass_id, forward_batch):
        self._passes[pass_id] = self._source.pass_record(forward_pass_id, forward_batch)

    def end_pass(self, pass_id: int, kept: bool):
        super().end_pass(pass_id, kept)
        if not kept:
            self._passes.pop(pass_id, None)

    def reset(self, open_pass_id):
        super().reset(open_pass_id)
        self._passes = {pass_id: record for pass_id, record in self._passes.items()
                        if pass_id == open_pass_id}

    def dump(self, snapshot, *, to_file: bool):
        data = dumps.detail_dump(snapshot, passes=self._passes, rank=self._rank,
                                 physical_to_logical_map=self._metadata.physical_to_logical_map)
        if not to_file:
            return dumps.load(data)
        dumps.save_atomically(data, self._config.dump_dir(), dumps.detail_file_name(self._rank))
        return None
