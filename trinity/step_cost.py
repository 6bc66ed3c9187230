"""What a strategy of any family costs per training step: the common currency of the families.

Op placement (`trinity.sim`), pipelines (`trinity.pipeline_parallel`) and data parallelism
(`trinity.data_parallel`) each predict a `StepCost` for a strategy on a `Cluster`, so the
report ranks them side by side and the MDPE reward (`trinity.reward`) scores any of them:
the fields it reads (`step_time_us`, `lower_bound_us`, `peak_comm_bytes`, `max_memory_bytes`,
`fits`) have the same names and meaning as on `SimResult`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trinity.sim.result import SimResult


ARRAYS = ("sent_bytes", "received_bytes", "memory_bytes", "capacity_bytes")


@dataclass(frozen=True)
class StepCost:
    """One training step of one strategy. Times in microseconds, sizes in bytes, arrays per device."""

    step_time_us: float
    comm_us: float  # time of the step during which no device computes but data moves (the exposed communication)
    sent_bytes: np.ndarray  # [D]
    received_bytes: np.ndarray  # [D]
    memory_bytes: np.ndarray  # [D] peak per device
    capacity_bytes: np.ndarray  # [D] what each device holds
    lower_bound_us: float  # placement-free bound: total work / total speed, or the critical path

    @property
    def comm_share(self) -> float:
        """Fraction of the step spent in exposed communication (TAPP's "communication share")."""
        return self.comm_us / self.step_time_us if self.step_time_us > 0 else 0.0

    @property
    def peak_comm_bytes(self) -> float:
        return float((self.sent_bytes + self.received_bytes).max())

    @property
    def total_comm_bytes(self) -> float:
        return float(self.sent_bytes.sum())

    @property
    def max_memory_bytes(self) -> float:
        return float(self.memory_bytes.max())

    @property
    def fits(self) -> bool:
        return bool((self.memory_bytes <= self.capacity_bytes).all())

    def summary(self) -> dict:
        return {
            "step_time_ms": self.step_time_us / 1e3,
            "comm_share": self.comm_share,
            "comm_MB": self.total_comm_bytes / 1e6,
            "peak_comm_MB": self.peak_comm_bytes / 1e6,
            "peak_memory_GB": self.max_memory_bytes / 1e9,
            "fits": self.fits,
        }

    def to_dict(self) -> dict:
        """Every field, arrays as lists (JSON)."""
        return {"step_time_us": self.step_time_us, "comm_us": self.comm_us, "lower_bound_us": self.lower_bound_us,
                **{k: [float(x) for x in getattr(self, k)] for k in ARRAYS}}

    @classmethod
    def from_dict(cls, doc: dict) -> "StepCost":
        return cls(step_time_us=float(doc["step_time_us"]), comm_us=float(doc["comm_us"]),
                   lower_bound_us=float(doc["lower_bound_us"]),
                   **{k: np.asarray(doc[k], dtype=float) for k in ARRAYS})

    @classmethod
    def from_sim(cls, result: SimResult, capacity_bytes: np.ndarray) -> "StepCost":
        """An op placement's simulated step; exposed communication = step time minus the busiest device's work."""
        return cls(step_time_us=result.step_time_us,
                   comm_us=max(0.0, result.step_time_us - float(result.busy_us.max())),
                   sent_bytes=np.asarray(result.sent_bytes, dtype=float),
                   received_bytes=np.asarray(result.received_bytes, dtype=float),
                   memory_bytes=np.asarray(result.peak_memory_bytes, dtype=float),
                   capacity_bytes=np.asarray(capacity_bytes, dtype=float),
                   lower_bound_us=result.lower_bound_us)
