"""DDP: PyTorch's ``DistributedDataParallel`` on gloo, as users run it.

Its reducer buckets the gradients (25 MB buckets, in reverse order of the parameters) and starts each
bucket's all-reduce as soon as backward has produced it, so communication overlaps the rest of the
backward pass; the optimizer steps once backward has waited for the last bucket. The one change is the
communication hook: a plain sum instead of the default mean, since this worker's gradients are already
shares of the global mean (the hook is torch's default all-reduce hook without the division), and it
counts the bytes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trinity.data_parallel.comm import ring_allreduce_bytes
from trinity.data_parallel.strategies import SyncStrategy


class DDP(SyncStrategy):
    def __init__(self, model, comm, cfg):
        super().__init__(model, comm, cfg)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self._group = comm.group(tuple(range(comm.world))) if comm.world > 1 else None
        self._ddp = DistributedDataParallel(model, process_group=self._group) if comm.world > 1 else None
        if self._ddp is not None:
            self._ddp.register_comm_hook(None, self._sum_hook)

    def _sum_hook(self, _state, bucket):  # no annotations: DDP checks them, and this module defers them
        buf = bucket.buffer()
        self.comm.sent_bytes += ring_allreduce_bytes(buf.numel() * buf.element_size(), self.comm.world)
        work = dist.all_reduce(buf, group=self._group, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0])

    @property
    def module(self) -> torch.nn.Module:
        return self._ddp if self._ddp is not None else self.model

    def step(self, step, samples, compute_s):
        self.optimizer.step()

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])


STRATEGY = DDP
