"""A synchronous parameter server (`trinity.data_parallel.ps`): every step, gradients in, parameters out."""

from __future__ import annotations

from trinity.data_parallel.ps import ParameterServer
from trinity.data_parallel.strategies import SyncStrategy


class PS(SyncStrategy):
    def __init__(self, model, comm, cfg):
        super().__init__(model, comm, cfg)
        self.server = ParameterServer(model, comm, lr=cfg.lr, momentum=cfg.momentum)

    def step(self, step, samples, compute_s):
        self.set_params(self.server.exchange(self.flat_grad()))

    def state_dict(self):
        return {"server": self.server.state_dict()}

    def load_state_dict(self, state):
        self.server.load_state_dict(state["server"])


STRATEGY = PS
