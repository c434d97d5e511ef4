"""The engine core: what every engine adapter (moestat.sglang, moestat.vllm,
moestat.integrations.transformers, and the next) shares, written once.

- ``devices``: where a recording counts (the CPU or a CUDA recorder, made or checked against
  the model's device) and the CUDA stream its work goes to;
- ``passes``: the ids passes open under;
- ``faults``: what a recording inside an engine's forward could not do, counted by kind,
  logged once and readable, never raised into the engine;
- ``topology``: whether an engine's routers fit a recorder's topology;
- ``ranks``: the cross-rank sum through the engine's own ``torch.distributed`` group, each
  token counted once.

An adapter only finds its engine's routers, maps them to layers and says which of their rows
are real tokens; everything else it takes from here (docs/architecture.md, "Engine
adapters").
"""
