"""One model on one cluster, every strategy family side by side: op placement (the placers and any
searches that ran), pipelines (TAPP, PipeDream, even split) and data parallelism (DDP, PS, DASO, H-PS),
each as the `StepCost` its own cost model predicts on the same `Cluster`.

Op placement is simulated on the model's op graph (per-op costs measured here), pipelines and data
parallelism on its layer profile (per-layer costs measured here): two measurements of one training step
that need not agree (per-op timing leaves out the framework's per-layer overhead, and the profiles may
use other thread counts). So the op graph's times are scaled to the layer profile's total compute
(`op_scale`); the scale is reported. Data parallelism's computation, where a `WholeStepProfile` is given,
is the whole step timed at its ranks' shares instead: a rank runs the whole model on a few samples, where
the overheads that per-layer timing leaves out weigh 1.3-1.6x on these models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trinity.cluster import Cluster
from trinity.errors import PlacementError
from trinity.graph.ir import OpGraph
from trinity.profile.layers import LayerProfile
from trinity.profile.whole_step import WholeStepProfile
from trinity.step_cost import StepCost

FAMILIES = ("op placement", "pipeline", "data parallel")


@dataclass(frozen=True)
class FamilyEntry:
    family: str
    method: str
    cost: StepCost
    detail: str = ""

    def row(self) -> dict:
        return {"family": self.family, "method": self.method, **self.cost.summary(), "detail": self.detail}


def op_scale(graph: OpGraph, profile: LayerProfile) -> float:
    """Factor taking the op graph's total measured compute to the layer profile's."""
    ops = sum(op.compute_us or 0.0 for op in graph.ops)
    layers = sum(x.compute_us for x in profile.layers)
    return layers / ops if ops > 0 else 1.0


def op_placement_entries(graph: OpGraph, cluster: Cluster, placers: list[str], scale: float = 1.0
                         ) -> list[FamilyEntry]:
    """Each placer's placement, simulated with the op's measured time x ``scale`` / the device's speed (as the
    layer profile is costed for the other families); a placer that cannot place the graph is left out.

    Not `op_times`: it prefers a time measured for the device's kind, which ignores ``speed``, and the local
    clusters describe processes of this machine's kind slowed by sharing cores (speed 0.5) or on purpose.
    """
    from trinity.placers import place
    from trinity.sim import Simulator

    measured = np.array([op.compute_us or 0.0 for op in graph.ops])
    speed = np.array([d.speed for d in cluster.devices])
    sim, out = Simulator(graph, cluster, times=measured[:, None] * scale / speed[None, :]), []
    for name in placers:
        try:
            placement = place(name, graph, cluster).placement
        except PlacementError:
            continue
        result = sim.simulate(placement)
        used = len(np.unique(placement))
        out.append(FamilyEntry("op placement", name, StepCost.from_sim(result, cluster.memory),
                               f"{graph.n_ops} ops on {used} of {cluster.n_devices} devices"))
    return out


def data_parallel_entries(profile: LayerProfile, cluster: Cluster, methods: list[str],
                          epoch_steps: int | None = None,
                          whole_step: WholeStepProfile | None = None) -> list[FamilyEntry]:
    """Each method's predicted step; over epochs of ``epoch_steps`` steps where given (as the real runs time
    them), else in the steady state; computation from the `WholeStepProfile` ``whole_step`` where given,
    else from the layer profile."""
    from trinity.data_parallel import DataParallelError, DataParallelWork, step_cost

    work, out = DataParallelWork.from_layers(profile, whole_step=whole_step), []
    for method in methods:
        try:
            out.append(FamilyEntry("data parallel", method, step_cost(method, cluster, work, epoch_steps=epoch_steps),
                                   f"batch {profile.batch} over {cluster.n_devices} devices"))
        except DataParallelError:  # e.g. DASO on nodes of unequal size
            continue
    return out


def winner(entries: list[FamilyEntry]) -> FamilyEntry | None:
    """The lowest predicted step time among the entries that fit (first of equals)."""
    fitting = [e for e in entries if e.cost.fits]
    return min(fitting, key=lambda e: e.cost.step_time_us) if fitting else None
