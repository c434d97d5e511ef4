"""The ids the engine adapters open a recorder's passes under: one counter for all of them.

A counting recorder files what a pass recorded under the id its caller gave ``begin_pass``
(``Snapshot.pass_ids``, per-token ``token_pass_ids``), so a caller that keeps facts of its own
about each pass (SGLang's ``forward_pass_id`` and per-token metadata) finds them again by that
id. Ids count the passes opened, 0, 1, 2, ... in the order they begin: a pass that ends and
one that is aborted both use their id up, so no two passes share one. They count host calls:
inside a replayed CUDA graph the id captured with the graph is replayed.
"""

from typing import Optional


class PassIds:
    """Opens a recorder's passes under consecutive ids and knows the open one's."""

    __slots__ = ("_next", "open_id")

    def __init__(self):
        self._next = 0
        self.open_id: Optional[int] = None  # None between passes

    def begin(self, recorder) -> int:
        """``recorder.begin_pass`` under the next id; returns the id. When ``begin_pass``
        raises, the id is not used up and no pass is open."""
        pass_id = self._next
        recorder.begin_pass(pass_id)
        self._next = pass_id + 1
        self.open_id = pass_id
        return pass_id

    def close(self) -> Optional[int]:
        """The open pass ended or was aborted; returns its id (None when none was open)."""
        pass_id, self.open_id = self.open_id, None
        return pass_id
