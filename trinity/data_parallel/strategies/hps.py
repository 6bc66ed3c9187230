"""H-PS (`trinity.data_parallel.hps`): the parameter server with batch shares by measured speed, the
exchange of step t overlapped with step t + 1 (on the background thread), and quantized parameters."""

from __future__ import annotations

from trinity.data_parallel.hps import SpeedMeter, batch_shares
from trinity.data_parallel.ps import ParameterServer
from trinity.data_parallel.quantize import precision_for
from trinity.data_parallel.strategies import SyncStrategy


class HPS(SyncStrategy):
    def __init__(self, model, comm, cfg):
        super().__init__(model, comm, cfg)
        h = cfg.hps
        self.server = ParameterServer(model, comm, lr=cfg.lr, momentum=h.stale_momentum if h.overlap else cfg.momentum)
        self.meter = SpeedMeter(h.speed_smoothing)
        self._shares = list(self._equal)
        self.bits: int | None = None
        self.pending = None  # the exchange in flight
        self.steps_done = 0

    @property
    def shares(self):
        return self._shares

    def start_epoch(self, epoch, steps, epoch_losses):
        h = self.cfg.hps
        self.bits = precision_for(epoch_losses, coarse_bits=h.coarse_bits, fine_bits=h.fine_bits,
                                  threshold=h.plateau_threshold)
        return {"shares": list(self._shares), "bits": self.bits}

    def step(self, step, samples, compute_s):
        self.meter.add(samples, compute_s)
        grad = self.flat_grad()
        if self.pending is not None:  # parameters of the previous exchange, received while computing
            self.set_params(self.pending.result())
        self.pending = self.comm.submit(lambda g=grad, b=self.bits: self.server.exchange(g, b))
        if not self.cfg.hps.overlap:
            self.finish_epoch()
        self.steps_done += 1
        if self.steps_done % self.cfg.hps.rebalance_every == 0:
            me, world = self.comm.rank, self.comm.world
            speeds = self.comm.world_sum([self.meter.speed if r == me else 0.0 for r in range(world)])
            self._shares = batch_shares(speeds, self.cfg.global_batch)

    def finish_epoch(self):
        if self.pending is not None:
            self.set_params(self.pending.result())
            self.pending = None

    def state_dict(self):
        return {"server": self.server.state_dict(), "shares": self._shares, "steps_done": self.steps_done}

    def load_state_dict(self, state):
        self.server.load_state_dict(state["server"])
        self._shares, self.steps_done = state["shares"], state["steps_done"]


STRATEGY = HPS
