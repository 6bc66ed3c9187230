"""Settings of the data-parallel runs (one dataclass per concern, so Hydra can merge each) and their error."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from trinity.errors import TrinityError, short_repr
from trinity.runtime.links import LinkSpec

class DataParallelError(TrinityError):
    """A data-parallel setting or input that cannot run (bad share, precision, method, config field)."""


def _check(cond: bool, field_name: str, message: str) -> None:
    if not cond:
        raise DataParallelError(message, field=field_name)


def _positive(value: Any, name: str, *, integer: bool = False, zero_ok: bool = False) -> None:
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    ok = ok_type and not isinstance(value, bool) and math.isfinite(value) and (value >= 0 if zero_ok else value > 0)
    _check(ok, name, f"must be {'an integer' if integer else 'a finite number'} {'>= 0' if zero_ok else '> 0'}, "
                     f"got {short_repr(value)}")


@dataclass(frozen=True)
class DasoConfig:
    """DASO's schedule (defaults as in Heat's DASO and the paper)."""

    warmup_epochs: int = 4  # blocking global averaging after every batch
    cooldown_epochs: int = 4  # the same at the end
    max_global_skip: int = 8  # B after a reset
    local_skip_factor: int = 4  # on a reset, local skip = S = max_global_skip // local_skip_factor
    skip_reduction: int = 2  # a plateau divides B and the local skip by this
    patience: int = 2  # epochs without a `threshold` relative improvement before a plateau is declared
    threshold: float = 0.05

    def validate(self) -> "DasoConfig":
        for name in ("warmup_epochs", "cooldown_epochs", "patience"):
            _positive(getattr(self, name), f"daso.{name}", integer=True, zero_ok=True)
        for name in ("max_global_skip", "local_skip_factor", "skip_reduction"):
            _positive(getattr(self, name), f"daso.{name}", integer=True)
        _check(self.skip_reduction >= 2, "daso.skip_reduction", f"must be >= 2, got {self.skip_reduction}")
        _positive(self.threshold, "daso.threshold")
        _check(self.threshold < 1, "daso.threshold", f"must be < 1, got {self.threshold}")
        return self


@dataclass(frozen=True)
class HpsConfig:
    """H-PS: batch shares from measured speed, overlapped transfers, quantized parameters."""

    rebalance_every: int = 5  # steps between re-measuring the workers' speeds and re-splitting the batch
    speed_smoothing: float = 0.5  # weight of the newest measurement in each worker's speed average
    coarse_bits: int = 8  # parameter precision while the loss still falls fast
    fine_bits: int = 16  # once it falls by less than `plateau_threshold` per epoch
    plateau_threshold: float = 0.05
    overlap: bool = True  # parameters of step t arrive while step t+1 computes (gradients one step stale)
    # The server's momentum when overlapping: a one-step delay acts as momentum of its own ("asynchrony
    # begets momentum", Mitliagkas et al. 2016); with the full 0.9 on top the loss oscillates here.
    stale_momentum: float = 0.5

    def validate(self) -> "HpsConfig":
        from trinity.data_parallel.quantize import check_bits
        _positive(self.rebalance_every, "hps.rebalance_every", integer=True)
        _positive(self.speed_smoothing, "hps.speed_smoothing")
        _check(self.speed_smoothing <= 1, "hps.speed_smoothing", f"must be <= 1, got {self.speed_smoothing}")
        check_bits(self.coarse_bits, "hps.coarse_bits")
        check_bits(self.fine_bits, "hps.fine_bits")
        _check(self.coarse_bits <= self.fine_bits, "hps.coarse_bits",
               f"must be <= fine_bits ({self.fine_bits}), got {self.coarse_bits}")
        _positive(self.plateau_threshold, "hps.plateau_threshold")
        _positive(self.stale_momentum, "hps.stale_momentum", zero_ok=True)
        return self


@dataclass(frozen=True)
class TrainConfig:
    """One training run: 4 local processes in 2 nodes, one of them slow, unless told otherwise."""

    nproc: int = 4
    procs_per_node: int = 2  # ranks [0, k) are node 0, [k, 2k) node 1, ...
    slow_ranks: tuple[int, ...] = (3,)  # these ranks busy-compute `slowdown` x their computation
    slowdown: float = 3.0
    epochs: int = 20
    global_batch: int = 64  # samples per step over all workers
    hidden: tuple[int, ...] = (256, 256)  # MLP widths
    lr: float = 0.05
    momentum: float = 0.9
    target_val_loss: float = 0.15  # time to target = first evaluation at or below this
    data: str = "digits"  # "digits" (scikit-learn) or "synthetic"
    # "mlp": the MLP above on `data`; else a registered PyTorch model (trinity.models) trained on its own
    # example batch of `global_batch` samples (synthetic, fixed: for step times, not for accuracy)
    model: str = "mlp"
    model_options: dict = field(default_factory=dict)
    # between nodes: each node a network namespace, its port shaped by the kernel (trinity.runtime.links);
    # None: every rank on this machine's loopback
    link: LinkSpec | None = field(default_factory=LinkSpec)
    # DASO's warm-up and cool-down scaled from Heat's 4 + 4 of ~90 epochs to this run's 20
    daso: DasoConfig = field(default_factory=lambda: DasoConfig(warmup_epochs=2, cooldown_epochs=2))
    hps: HpsConfig = field(default_factory=HpsConfig)
    threads: int = 1  # torch threads per rank

    def validate(self) -> "TrainConfig":
        _positive(self.nproc, "nproc", integer=True)
        _positive(self.procs_per_node, "procs_per_node", integer=True)
        _check(self.nproc % self.procs_per_node == 0, "procs_per_node",
               f"must divide nproc ({self.nproc}), got {self.procs_per_node}")
        for r in self.slow_ranks:
            _check(isinstance(r, int) and 0 <= r < self.nproc, "slow_ranks",
                   f"ranks must be in [0, {self.nproc}), got {short_repr(r)}")
        _positive(self.slowdown, "slowdown")
        _check(self.slowdown >= 1, "slowdown", f"must be >= 1, got {self.slowdown}")
        _positive(self.epochs, "epochs", integer=True)
        _positive(self.global_batch, "global_batch", integer=True)
        _check(self.global_batch >= self.nproc, "global_batch",
               f"must be at least one sample per worker ({self.nproc}), got {self.global_batch}")
        for h in self.hidden:
            _positive(h, "hidden", integer=True)
        _positive(self.lr, "lr")
        _positive(self.momentum, "momentum", zero_ok=True)
        _positive(self.target_val_loss, "target_val_loss")
        _check(self.data in ("digits", "synthetic"), "data", f"must be 'digits' or 'synthetic', got {self.data!r}")
        _positive(self.threads, "threads", integer=True)
        _check(isinstance(self.model, str) and bool(self.model), "model",
               f"must be 'mlp' or a registered PyTorch model, got {short_repr(self.model)}")
        _check(isinstance(self.model_options, Mapping), "model_options",
               f"must be a mapping, got {short_repr(self.model_options)}")
        if self.link is not None:
            from trinity.runtime.links import MAX_NODES
            self.link.validate("link")
            _check(self.nproc // self.procs_per_node <= MAX_NODES, "procs_per_node",
                   f"{self.nproc // self.procs_per_node} nodes; a shaped network takes at most {MAX_NODES}")
        self.daso.validate()
        self.hps.validate()
        return self

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "TrainConfig":
        """From a plain mapping (a Hydra node): unknown keys refused, nested sections merged over the defaults."""
        if not isinstance(doc, Mapping):
            raise DataParallelError(f"must be a mapping, got {short_repr(doc)}", field="train")
        nested = {"link": LinkSpec, "daso": DasoConfig, "hps": HpsConfig}
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in doc.items():
            if key not in known:
                raise DataParallelError(f"unknown field; fields are {sorted(known)}", field=str(key))
            if key in nested and not (key == "link" and value is None):
                sub = nested[key]
                sub_known = {f.name for f in fields(sub)}
                if not isinstance(value, Mapping):
                    raise DataParallelError(f"must be a mapping, got {short_repr(value)}", field=key)
                bad = set(value) - sub_known
                if bad:
                    raise DataParallelError(f"unknown field; fields are {sorted(sub_known)}",
                                            field=f"{key}.{sorted(bad)[0]}")
                value = sub(**value)
            elif key in ("slow_ranks", "hidden"):
                if not isinstance(value, (list, tuple)):
                    raise DataParallelError(f"must be a list, got {short_repr(value)}", field=key)
                value = tuple(value)
            kwargs[key] = value
        return cls(**kwargs).validate()
