"""Faults: what a recording inside an engine could not do. A serving engine must never stop
because of its recording, so an adapter does not raise from inside the engine's forward:
it counts the fault by kind, logs the first of each kind (or of each kind and cause), and
lets the owner read the counts."""

import collections
import collections.abc
import logging
import threading


class Faults(collections.abc.Mapping):
    """The faults of one recording, read as a mapping {kind: count} (``faults == {}``,
    ``faults["kind"]``, ``dict(faults)``); ``faults.add(kind, message)`` counts one
    (``count=``: several) and logs the message the first time its kind (with ``cause``: its
    kind and cause) is seen.

    logger: the adapter's (so its name says which adapter). where: how the owner reads the
    counts, named in the log line. Thread-safe: engines call from their own threads."""

    __slots__ = ("_counts", "_logged", "_lock", "_logger", "_where", "_level")

    def __init__(self, logger: logging.Logger, where: str, level: int = logging.ERROR):
        self._counts = collections.Counter()
        self._logged = set()
        self._lock = threading.Lock()
        self._logger = logger
        self._where = where
        self._level = level

    def add(self, kind: str, message, count: int = 1, cause=None) -> None:
        key = kind if cause is None else (kind, cause)
        with self._lock:
            self._counts[kind] += count
            first = key not in self._logged
            self._logged.add(key)
        if first:
            self._logger.log(self._level, "moestat: %s (logged once; %s[%r] counts them)",
                             message, self._where, kind)

    def __getitem__(self, kind: str) -> int:
        with self._lock:
            if kind not in self._counts:
                raise KeyError(kind)
            return self._counts[kind]

    def __iter__(self):
        with self._lock:
            return iter(list(self._counts))

    def __len__(self) -> int:
        with self._lock:
            return len(self._counts)

    def __repr__(self) -> str:
        with self._lock:
            return repr(dict(self._counts))  # read as what it is: counts by kind

    def clear(self) -> None:
        """Forgets the counts and what was logged."""
        with self._lock:
            self._counts.clear()
            self._logged.clear()
