"""What SGLang 0.5.23's routed-experts capturer does with a step's top-k ids, shared by the route
capture benchmarks: the routers write ``device_cache[:n, layer, :] = topk_ids`` (int32,
[batch, layers, top_k]) inside the graph (``write``); after each replay the overlap
scheduler's path clones the batch's rows and copies them to pinned host memory
(non-blocking), and the previous step's rows are scattered into the [kv_slots, layers, top_k]
int32 host cache by KV slot (``around``)."""
import torch


class SglangStyleRoutes:
    def __init__(self, batch, layers, top_k, slots_per_request):
        shape = (batch, layers, top_k)
        self.device_cache = torch.zeros(shape, dtype=torch.int32, device="cuda")
        self.staging = torch.zeros(shape, dtype=torch.int32, pin_memory=True)
        self.host_cache = torch.zeros((batch * slots_per_request, layers, top_k),
                                      dtype=torch.int32, pin_memory=True)
        self.batch = batch
        self.slots_per_request = slots_per_request
        self.copied = torch.cuda.Event()
        self.pending = None
        self.steps = 0

    def write(self, layer, ids):
        """One router's ids, inside the graph."""
        self.device_cache[:ids.shape[0], layer, :] = ids

    def around(self, replay):
        replay()
        self.finalize()  # the previous step's rows, once their copy is done
        self.staging.copy_(self.device_cache[:self.batch].clone(), non_blocking=True)
        self.copied.record()
        self.pending = (torch.arange(self.batch) * self.slots_per_request
                        + self.steps % self.slots_per_request)
        self.steps += 1

    def finalize(self):
        if self.pending is not None:
            self.copied.synchronize()
            self.host_cache[self.pending] = self.staging
            self.pending = None
