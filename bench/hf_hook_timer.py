"""Host time spent in the hooks recording puts on a transformers model, for
bench/hf_step_cost.py's --host-breakdown: what an eager step pays the CPU per MoE layer (the
hooks on its router) and per pass (the hooks on the model, before and after its forward).

Timing hooks bracket the hooks already registered: one goes first (prepend) and one last on
every router and on the model's forward pre-hooks and forward hooks. With nothing else
registered they measure themselves, which is the floor of the numbers.
"""
import statistics
import time

import torch

from moestat.integrations import transformers as moestat_hf


class HookTimer:
    """Register after the hooks to time; remove() before registering others."""

    def __init__(self, model):
        self._began = 0.0  # when the hooks being timed started
        self._begin_seconds = 0.0  # the pass's share before the forward
        self.per_layer = []  # seconds, one per router call
        self.per_pass = []  # seconds, one per forward of the model
        self._handles = []
        for router in moestat_hf.find_routers(model).values():
            self._handles += [router.register_forward_hook(self._start, prepend=True),
                              router.register_forward_hook(self._layer_done)]
        self._handles += [
            model.register_forward_pre_hook(self._start, prepend=True),
            model.register_forward_pre_hook(self._begin_done),
            model.register_forward_hook(self._start, prepend=True),
            model.register_forward_hook(self._pass_done),
        ]
        # A hook that launches a kernel into a full launch queue waits for the GPU: each
        # decoder layer starts with an empty queue, so that only host work is timed.
        self._handles += [layer.register_forward_pre_hook(self._drain_the_gpu)
                          for layer in model.model.layers]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def medians_us(self) -> dict:
        return {"per_layer": 1e6 * statistics.median(self.per_layer),
                "per_pass": 1e6 * statistics.median(self.per_pass)}

    def _start(self, module, *args):
        self._began = time.perf_counter()

    def _layer_done(self, router, args, output):
        self.per_layer.append(time.perf_counter() - self._began)

    def _begin_done(self, model, args):
        self._begin_seconds = time.perf_counter() - self._began

    def _pass_done(self, model, args, output):
        self.per_pass.append(self._begin_seconds + time.perf_counter() - self._began)

    @staticmethod
    def _drain_the_gpu(layer, args):
        torch.cuda.synchronize()
