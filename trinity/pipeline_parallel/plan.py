"""A pipeline-parallel strategy: contiguous stages of layers, each on one device, fed micro-batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from trinity.errors import FormatError, TrinityError, short_repr
from trinity.fileio import check_format, read_json, write_json

FORMAT = "trinity-pipeline-plan"
VERSION = 1
SCHEDULES = ("gpipe", "1f1b")


class PipelineError(TrinityError):
    """A pipeline plan that cannot run: bad split, device, micro-batch count, or out of memory."""


@dataclass(frozen=True)
class PipelinePlan:
    """Stage ``s`` runs layers ``[bounds[s], bounds[s + 1])`` on device ``devices[s]`` (a cluster index).

    ``bounds`` starts at 0 and ends at the number of layers; each device holds at most one stage
    (one rank per stage when run). ``micro_batches`` split the batch; ``schedule`` is 'gpipe'
    (all forwards, then all backwards) or '1f1b' (PipeDream-flush: one forward, one backward).
    """

    bounds: tuple[int, ...]
    devices: tuple[int, ...]
    micro_batches: int = 4
    schedule: str = "1f1b"

    @property
    def n_stages(self) -> int:
        return len(self.devices)

    @property
    def n_layers(self) -> int:
        return self.bounds[-1]

    def stage_layers(self, s: int) -> range:
        return range(self.bounds[s], self.bounds[s + 1])

    @property
    def key(self) -> tuple:
        """Hashable identity (for caches and de-duplication)."""
        return self.bounds, self.devices, self.micro_batches, self.schedule

    def describe(self, layer_names: Sequence[str] | None = None, device_names: Sequence[str] | None = None) -> str:
        """``[0-3]@fast0 | [4-7]@slow0`` (layer ranges inclusive)."""
        parts = []
        for s, d in enumerate(self.devices):
            a, b = self.bounds[s], self.bounds[s + 1] - 1
            lo = layer_names[a] if layer_names else str(a)
            hi = layer_names[b] if layer_names else str(b)
            parts.append(f"[{lo}{'' if a == b else '-' + hi}]@{device_names[d] if device_names else d}")
        return " | ".join(parts)

    def to_dict(self) -> dict:
        return {"format": f"{FORMAT}/{VERSION}", "bounds": list(self.bounds), "devices": list(self.devices),
                "micro_batches": self.micro_batches, "schedule": self.schedule}

    @classmethod
    def from_dict(cls, doc: Any, source: str = "<pipeline plan>") -> "PipelinePlan":
        check_format(doc, FORMAT, VERSION, source)
        for key in ("bounds", "devices"):
            v = doc.get(key)
            if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
                raise FormatError(f"must be a list of integers, got {short_repr(v)}", source=source, field=key)
        mb = doc.get("micro_batches", 1)
        if not isinstance(mb, int) or isinstance(mb, bool):
            raise FormatError(f"must be an integer, got {short_repr(mb)}", source=source, field="micro_batches")
        plan = cls(tuple(doc["bounds"]), tuple(doc["devices"]), mb, doc.get("schedule", "1f1b"))
        try:
            plan.check()
        except PipelineError as exc:
            raise FormatError(exc.message, source=source, field=exc.field) from None
        return plan

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "PipelinePlan":
        return cls.from_dict(read_json(path), str(path))

    def check(self, n_layers: int | None = None, n_devices: int | None = None, batch: int | None = None) -> None:
        """Raise `PipelineError` (one line, naming the field) unless the plan is well formed for these."""
        b, d = self.bounds, self.devices
        if len(d) < 1:
            raise PipelineError("a pipeline needs at least one stage", field="devices")
        if len(b) != len(d) + 1:
            raise PipelineError(f"{len(d)} stages need {len(d) + 1} bounds, got {len(b)}", field="bounds")
        if b[0] != 0:
            raise PipelineError(f"must start at layer 0, got {b[0]}", field="bounds")
        if any(b[i + 1] <= b[i] for i in range(len(d))):
            raise PipelineError(f"every stage needs at least one layer (increasing bounds), got {list(b)}",
                                field="bounds")
        if n_layers is not None:
            if len(d) > n_layers:
                raise PipelineError(f"{len(d)} stages but the model has only {n_layers} layers", field="stages")
            if b[-1] != n_layers:
                raise PipelineError(f"must end at the model's {n_layers} layers, got {b[-1]}", field="bounds")
        if len(set(d)) != len(d):
            raise PipelineError(f"each device holds at most one stage, got {list(d)}", field="devices")
        if any(i < 0 for i in d) or (n_devices is not None and any(i >= n_devices for i in d)):
            raise PipelineError(f"device indices must be in 0..{(n_devices or 1) - 1}, got {list(d)}",
                                field="devices")
        if self.schedule not in SCHEDULES:
            raise PipelineError(f"must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}", field="schedule")
        if self.micro_batches < 1:
            raise PipelineError(f"must be >= 1, got {self.micro_batches}", field="micro_batches")
        if batch is not None and batch % self.micro_batches:
            raise PipelineError(f"{self.micro_batches} micro-batches do not divide the batch of {batch}",
                                field="micro_batches")


def plan_from_sizes(sizes: Sequence[int], devices: Sequence[int], micro_batches: int = 4,
                    schedule: str = "1f1b") -> PipelinePlan:
    """A plan from each stage's layer count: ``plan_from_sizes([2, 3], [0, 1])`` -> bounds (0, 2, 5)."""
    bounds = [0]
    for n in sizes:
        bounds.append(bounds[-1] + int(n))
    return PipelinePlan(tuple(bounds), tuple(int(d) for d in devices), micro_batches, schedule)
