"""DASO (`trinity.data_parallel.daso`: the schedule and the blend) on a model's parameters."""

from __future__ import annotations

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from trinity.data_parallel.comm import Handle
from trinity.data_parallel.daso import BatchPlan, DasoSchedule, blend, epoch_plan
from trinity.data_parallel.strategies import SyncStrategy


class DASO(SyncStrategy):
    """Every step: the node's gradient all-reduce (`after_backward`), the optimizer step, then the plan's
    global sends, receipts and blocking averages (`after_step`)."""

    def __init__(self, model, comm, cfg):
        super().__init__(model, comm, cfg)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.schedule = DasoSchedule(cfg.daso, total_epochs=cfg.epochs)
        self.scale = comm.world / comm.k  # gradients are sums over the global batch: x P/k = the node's mean
        self._plans: list[BatchPlan] = []
        self._pending: dict[int, tuple[Handle | None, torch.Tensor | None, int, int]] = {}

    def start_epoch(self, epoch, steps, epoch_losses):
        s = self.schedule
        self._plans = epoch_plan(steps, s.global_skip, s.local_skip, s.wait, self.comm.k)
        return {"B": s.global_skip, "local_skip": s.local_skip, "S": s.wait}

    def step(self, step, samples, compute_s):
        self.after_backward(step)
        self.optimizer.step()
        self.after_step(step)

    def end_epoch(self, train_loss):
        self.schedule.end_epoch(train_loss)

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(), "schedule": self.schedule.to_dict()}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load(state["schedule"])

    def after_backward(self, batch: int) -> None:
        grads = [p.grad for p in self.model.parameters()]
        if not self._plans[batch].local_sync or self.comm.k == 1:  # a step on this rank's own mean gradient
            for g in grads:
                g.mul_(self.comm.world)
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.comm.all_reduce(flat, self.comm.node_ranks(self.comm.node))
        flat.mul_(self.scale / self.comm.k)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    @torch.no_grad()
    def after_step(self, batch: int) -> None:
        plan = self._plans[batch]
        for sent_at in plan.receive:
            self._receive(sent_at)
        if plan.blocking_group is not None:
            self._blocking(plan.blocking_group)
        elif plan.send_group is not None:
            self._send(batch, plan.send_group, plan.wait)

    def _member(self, group: int) -> bool:
        return self.comm.local_index == group

    def _node_broadcast(self, group: int) -> None:
        """The node's member of ``group`` hands its parameters to the rest of the node."""
        if self.comm.k == 1:
            return
        flat = parameters_to_vector(self.model.parameters())
        src = self.comm.node * self.comm.k + group
        self.comm.broadcast(flat, src, self.comm.node_ranks(self.comm.node))
        vector_to_parameters(flat, self.model.parameters())

    def _send(self, batch: int, group: int, wait: int) -> None:
        if self._member(group):
            buf = parameters_to_vector(self.model.parameters()).clone()
            handle = self.comm.all_reduce(buf, self.comm.global_ranks(group), async_=True)
            self._pending[batch] = (handle, buf, group, wait)
        else:
            self._pending[batch] = (None, None, group, wait)

    def _receive(self, sent_at: int) -> None:
        handle, buf, group, wait = self._pending.pop(sent_at)
        if handle is not None:
            handle.wait()
            local = parameters_to_vector(self.model.parameters())
            vector_to_parameters(blend(local, buf, wait, self.comm.n_nodes), self.model.parameters())
        self._node_broadcast(group)

    def _blocking(self, group: int) -> None:
        if self._member(group):
            buf = parameters_to_vector(self.model.parameters()).clone()
            self.comm.all_reduce(buf, self.comm.global_ranks(group))
            vector_to_parameters(blend(None, buf, 0, self.comm.n_nodes), self.model.parameters())
        self._node_broadcast(group)


STRATEGY = DASO
