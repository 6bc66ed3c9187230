"""What one simulation of a placement returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trinity.graph.ir import OpGraph

#: Columns of `SimResult.transfers`.
TRANSFER_COLUMNS = ("producer", "output", "src", "dst", "bytes", "start_us", "end_us")


@dataclass
class SimResult:
    """Simulated training step of one placement. Times in microseconds, sizes in bytes."""

    step_time_us: float
    busy_us: np.ndarray  # [D] compute time per device
    sent_bytes: np.ndarray  # [D]
    received_bytes: np.ndarray  # [D]
    peak_memory_bytes: np.ndarray  # [D] persistent + peak of live tensors and scratch
    out_of_memory: np.ndarray  # bool[D] peak above the device's capacity
    lower_bound_us: float  # max(critical path, total work / devices), placement-free
    op_start: np.ndarray  # [N]
    op_end: np.ndarray  # [N]
    placement: np.ndarray  # int64[N]
    transfers: np.ndarray | None = None  # [X, 7] rows of TRANSFER_COLUMNS, by start time

    @property
    def comm_bytes(self) -> np.ndarray:
        """Bytes each device sent plus received."""
        return self.sent_bytes + self.received_bytes

    @property
    def peak_comm_bytes(self) -> float:
        """The paper's peak communication: the busiest device's sent + received bytes."""
        return float(self.comm_bytes.max())

    @property
    def max_memory_bytes(self) -> float:
        return float(self.peak_memory_bytes.max())

    @property
    def fits(self) -> bool:
        return not bool(self.out_of_memory.any())

    @property
    def busiest_share(self) -> float:
        """Share of all compute time on the busiest device (1.0: everything on one device)."""
        total = float(self.busy_us.sum())
        return float(self.busy_us.max()) / total if total > 0 else 1.0

    @property
    def ratio_to_lower_bound(self) -> float:
        return self.step_time_us / self.lower_bound_us if self.lower_bound_us > 0 else float("nan")

    def summary(self) -> dict:
        return {
            "step_time_ms": self.step_time_us / 1e3,
            "lower_bound_ms": self.lower_bound_us / 1e3,
            "ratio_to_lower_bound": self.ratio_to_lower_bound,
            "peak_comm_MB": self.peak_comm_bytes / 1e6,
            "peak_memory_GB": self.max_memory_bytes / 1e9,
            "fits": self.fits,
        }

    def gantt(self, graph: OpGraph, device_names: list[str]):
        """Per-op trace as a pandas DataFrame (device, start, end), for Gantt charts."""
        import pandas as pd

        return pd.DataFrame({
            "op": [op.name for op in graph.ops], "type": [op.type for op in graph.ops],
            "device": [device_names[d] for d in self.placement],
            "start_us": self.op_start, "end_us": self.op_end,
        }).sort_values(["device", "start_us"], kind="stable")


    def transfers_frame(self, device_names: list[str]):
        """The transfer trace (needs ``simulate(..., trace=True)``) as a DataFrame."""
        import pandas as pd

        if self.transfers is None:
            raise ValueError("no transfer trace: simulate with trace=True")
        df = pd.DataFrame(self.transfers, columns=TRANSFER_COLUMNS)
        for col in ("producer", "output", "src", "dst"):
            df[col] = df[col].astype(int)
        df["src"] = [device_names[d] for d in df["src"]]
        df["dst"] = [device_names[d] for d in df["dst"]]
        return df


def lower_bound(graph: OpGraph, times: np.ndarray, n_devices: int) -> float:
    """max(critical path, total work / devices), each op at its fastest device's time.

    No placement can beat either: the critical path ignores communication and
    the work bound assumes perfect balance.
    """
    fastest = times.min(axis=1) if times.size else np.zeros(graph.n_ops)
    a = graph.arrays
    finish = np.zeros(graph.n_ops)
    order = graph.topological_order()
    # Longest path: visit ops in topological order, relaxing each op's in-edges.
    for v in order:
        preds = a.src[a.in_edges[a.in_ptr[v]:a.in_ptr[v + 1]]]
        finish[v] = (finish[preds].max() if len(preds) else 0.0) + fastest[v]
    critical = float(finish.max()) if graph.n_ops else 0.0
    return max(critical, float(fastest.sum()) / n_devices)
