"""Data-parallel methods as synchronisation strategies: one module per method, behind one interface.

The worker (`trinity.data_parallel.train`) knows no method by name. Each step it asks the strategy
which share of the global batch each rank computes (`shares`), runs forward and backward through
`module`, then hands over (`step`): the strategy turns this rank's gradients (each the share's loss sum
over the global batch size, so their sum over ranks is the global mean gradient) into the parameters
of the next step, by whatever communication its method does. Around the epochs it may plan
(`start_epoch`, whose answer is the epoch's entry in the run's history), flush (`finish_epoch`) and
adapt (`end_epoch`, given the epoch's mean training loss); `state_dict` / `load_state_dict` make it
resumable from the worker's checkpoint.

A new method is one module here defining ``STRATEGY`` (a `SyncStrategy` subclass) and one file in
``conf/method/`` (``kind: data-parallel``, ``method: <module name>``); `METHODS` lists the modules.
"""

from __future__ import annotations

import importlib
import pkgutil

import torch

from trinity.data_parallel.comm import Comm
from trinity.data_parallel.config import DataParallelError, TrainConfig

METHODS = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


class SyncStrategy:
    """The interface (module docstring); the defaults are a method's plainest choices."""

    def __init__(self, model: torch.nn.Module, comm: Comm, cfg: TrainConfig):
        self.model, self.comm, self.cfg = model, comm, cfg
        self._equal = _equal_shares(cfg.global_batch, comm.world)

    @property
    def module(self) -> torch.nn.Module:
        """What forward and backward run through (DDP's wrapper; the model itself otherwise)."""
        return self.model

    @property
    def shares(self) -> list[int]:
        """Samples of the global batch per rank, by rank (they add up to the global batch)."""
        return self._equal

    def start_epoch(self, epoch: int, steps: int, epoch_losses: list[float]) -> dict | None:
        return None

    def step(self, step: int, samples: int, compute_s: float) -> None:
        """After this rank computed ``samples`` of the step in ``compute_s`` seconds of its thread's CPU time."""
        raise NotImplementedError

    def finish_epoch(self) -> None:
        """Before the epoch's metrics: every transfer of the epoch has landed."""

    def end_epoch(self, train_loss: float) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def flat_grad(self) -> torch.Tensor:
        return torch.cat([p.grad.reshape(-1) for p in self.model.parameters()])

    @torch.no_grad()
    def set_params(self, flat: torch.Tensor) -> None:
        torch.nn.utils.vector_to_parameters(flat, self.model.parameters())


def _equal_shares(batch: int, world: int) -> list[int]:
    base, extra = divmod(batch, world)
    return [base + (r < extra) for r in range(world)]


def strategy_class(method: str) -> type[SyncStrategy]:
    """The strategy of ``method`` (a module of this package)."""
    if method not in METHODS:
        raise DataParallelError(f"unknown method {method!r}; methods are {', '.join(METHODS)}", field="method")
    return importlib.import_module(f"{__name__}.{method}").STRATEGY
