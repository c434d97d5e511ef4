"""The placement in force, followed as the engine moves experts: each pass is converted to
logical experts with the map current when it ran (SGLang uses the map current at dump time
for the whole window)."""

from __future__ import annotations

import torch

from .. import _core


class PlacementFollower:
    """Installs the engine's map into a recorder as a new placement version when it changed.

    SGLang updates ``physical_to_logical_map`` (and its CPU copy) in place; torch counts
    in-place writes in ``Tensor._version``, so a change is seen without reading the map, and
    the map is read (host copy preferred: no device sync) only when it changed.
    """

    def __init__(self, metadata):
        self._metadata = metadata
        self._source = None  # the map tensor last installed from
        self._source_version = None  # ... and its version (or contents)
        self._version = 0

    def follow(self, recorder):
        mapping = getattr(self._metadata, "physical_to_logical_map_cpu", None)
        if mapping is None:
            mapping = self._metadata.physical_to_logical_map
        try:
            version = mapping._version
        except RuntimeError:  # an inference tensor has no version counter: compare contents
            version = mapping.detach().cpu().clone()
        if mapping is self._source and _same_version(version, self._source_version):
            return
        self._source, self._source_version = mapping, version
        self._version += 1
        recorder.set_placement(_core.Placement(
            mapping.detach().cpu().numpy(), num_logical_experts=self._metadata.num_logical_experts,
            version=self._version))


def _same_version(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b
