"""Per-op times on device kinds this machine lacks: a roofline over each op's FLOPs and bytes.

    t(op, kind) = overhead_us + max(flops / (peak_flops * compute_efficiency),
                                    bytes / (memory_bandwidth * memory_efficiency)) * 1e6

``bytes`` is what the op reads and writes: its data inputs (the producers' output tensors
on its in-edges) plus its own outputs. An op that neither computes nor moves data (NoOp,
a control dependency, a constant already on the device) costs nothing. Peaks are from the
vendors' data sheets (FP32, no tensor cores); the efficiencies and the per-kernel overhead
are stated assumptions (cuDNN/cuBLAS kernels reach roughly 60-80% of peak on large
convolutions and matmuls, streaming kernels ~80% of HBM bandwidth, a kernel launch costs
~5 us; Placeto's simulator charges 5.7 us per op). Nothing here was fitted to a GPU
measurement; `benchmarks/speed_model_check.py` checks the model against one (an H200).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph


@dataclass(frozen=True)
class DeviceSpec:
    kind: str
    peak_flops: float  # FP32 FLOP/s, data sheet
    memory_bandwidth: float  # bytes/s, data sheet
    source: str
    compute_efficiency: float = 0.7
    memory_efficiency: float = 0.8
    overhead_us: float = 5.0  # per kernel

    def op_us(self, flops: np.ndarray | float, nbytes: np.ndarray | float) -> np.ndarray:
        """Roofline time of ops with these FLOPs and bytes moved (0 for ops that do neither)."""
        flops, nbytes = np.asarray(flops, float), np.asarray(nbytes, float)
        busy = np.maximum(flops / (self.peak_flops * self.compute_efficiency),
                          nbytes / (self.memory_bandwidth * self.memory_efficiency)) * 1e6
        return np.where((flops > 0) | (nbytes > 0), self.overhead_us + busy, 0.0)


SPECS: dict[str, DeviceSpec] = {s.kind: s for s in (
    DeviceSpec("p100", 9.3e12, 732e9, "NVIDIA Tesla P100 PCIe 16 GB data sheet: 9.3 TFLOPS FP32, 732 GB/s HBM2"),
    DeviceSpec("v100", 15.7e12, 900e9, "NVIDIA Tesla V100 SXM2 data sheet: 15.7 TFLOPS FP32, 900 GB/s HBM2"),
    DeviceSpec("gtx1080ti", 11.3e12, 484e9, "NVIDIA GeForce GTX 1080 Ti: 11.3 TFLOPS FP32, 484 GB/s GDDR5X "
                                            "(the paper's 11 GB GPU)"),
    # The one GPU the speed model has been checked against (benchmarks/speed_model_check.py).
    DeviceSpec("h200", 67e12, 4.8e12, "NVIDIA H200 SXM data sheet: 67 TFLOPS FP32, 4.8 TB/s HBM3e"),
)}


def spec(kind: str) -> DeviceSpec:
    if kind not in SPECS:
        raise TrinityError(f"no speed model for device kind {kind!r}; models exist for {', '.join(SPECS)} "
                           "(or give the graph measured times for it)", field="speed_models")
    return SPECS[kind]


def bytes_moved(graph: OpGraph) -> np.ndarray:
    """float64[N]: bytes each op reads over its data edges plus the bytes it writes."""
    a = graph.arrays
    read = np.bincount(a.dst, weights=a.edge_bytes, minlength=graph.n_ops)
    written = np.array([float(sum(op.output_bytes)) for op in graph.ops])
    return read + written


def apply_speed_models(graph: OpGraph, kinds: list[str]) -> OpGraph:
    """The graph with every op's time on each kind filled from its roofline, unless already measured there."""
    specs = [spec(k) for k in kinds]
    if not specs:
        return graph
    flops = np.array([op.flops for op in graph.ops])
    moved = bytes_moved(graph)
    times = {s.kind: s.op_us(flops, moved) for s in specs}
    ops = []
    for i, op in enumerate(graph.ops):
        by_kind = dict(op.compute_us_by_kind)
        for kind, t in times.items():
            by_kind.setdefault(kind, float(t[i]))
        ops.append(replace(op, compute_us_by_kind=by_kind))
    models = {**graph.meta.get("speed_models", {}), **{s.kind: {"model": "roofline", **asdict(s)} for s in specs}}
    return OpGraph(ops, graph.edges, name=graph.name, meta={**graph.meta, "speed_models": models},
                   source=graph.source)


def cost_source(graph: OpGraph, kind: str) -> str:
    """How the graph's op times on ``kind`` were made, in words (for the report)."""
    model = graph.meta.get("speed_models", {}).get(kind)
    if model:
        return (f"roofline ({model['peak_flops'] / 1e12:g} TFLOPS x {model['compute_efficiency']:g}, "
                f"{model['memory_bandwidth'] / 1e9:g} GB/s x {model['memory_efficiency']:g}, "
                f"{model['overhead_us']:g} us per op)")
    if any(kind in op.compute_us_by_kind for op in graph.ops):
        return f"measured or fitted on {kind}"
    where = graph.meta.get("profiled_on")
    return f"measured on {where}, scaled by device speed" if where else "as imported, scaled by device speed"
