"""PipeDream's planner as published (Narayanan et al., SOSP'19, section 3.1): stage replication, its
communication term and its objective, graded on that objective and on the cost model's 1F1B step.

The planner sees M identical workers (PipeDream profiles one worker type): each at the cluster's mean
speed, every pair joined by the cluster's slowest link (one level of PipeDream's hierarchy). With T_l
the forward + backward time of layer l per micro-batch, a_l its output bytes, |w_l| its weight bytes,
B the bandwidth and L the latency:

    W_l^m = 4 (m - 1) |w_l| / (m B)                              weights synchronised among m replicas
    T(i -> j, m) = 1/m max(sum_{l=i..j} T_l, sum_{l=i..j} W_l^m)    a stage replicated on m workers
    C_i = L + a_i / B                                            one boundary transfer
    A(j, m) = min( T(1 -> j, m),  min_{i < j, 1 <= m' < m} max(A(i, m - m'), 2 C_i, T(i+1 -> j, m')) )

(2 C_i: the activation forward and its gradient back over the same link.) A(N, m) is the time per
micro-batch of the pipeline's slowest stage in steady state; the plan is the A(N, m) of least value
over m <= M (PipeDream uses all M workers; fewer is allowed in case more do not help). Stage s takes
the next m_s devices of the cluster in order, as PipeDream hands out workers.

A replicated stage processes the micro-batches round-robin over its replicas, and its replicas
all-reduce their weight gradients once per step. `predict_replicated` grades a plan on the cost
model's schedule (`trinity.pipeline_parallel.cost.simulate`): each stage is one virtual device whose
speed is m x its slowest replica's, linked to the next by the slowest link between the two groups, and
whose update also waits for the ring all-reduce of its weights among the replicas. `objective_us`
grades any plan on PipeDream's objective, with the planner's view of the cluster or the real one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from trinity.cluster import Cluster, cluster_from_dict
from trinity.errors import FormatError
from trinity.fileio import read_json, write_json
from trinity.pipeline_parallel.cost import lower_bound_us, simulate, stage_costs
from trinity.pipeline_parallel.plan import SCHEDULES, PipelineError, PipelinePlan
from trinity.profile.layers import LayerProfile
from trinity.step_cost import StepCost


@dataclass(frozen=True)
class ReplicatedPlan:
    """Stage s runs layers ``[bounds[s], bounds[s + 1])`` on the devices ``replicas[s]`` (data parallel)."""

    bounds: tuple[int, ...]
    replicas: tuple[tuple[int, ...], ...]
    micro_batches: int = 4
    schedule: str = "1f1b"

    @property
    def n_stages(self) -> int:
        return len(self.replicas)

    @property
    def replicated(self) -> bool:
        return any(len(r) > 1 for r in self.replicas)

    def check(self, n_layers: int, n_devices: int) -> "ReplicatedPlan":
        b = self.bounds
        if len(b) != self.n_stages + 1 or b[0] != 0 or b[-1] != n_layers or any(x >= y for x, y in zip(b, b[1:])):
            raise PipelineError(f"bounds {b} do not split {n_layers} layers into {self.n_stages} stages",
                                field="bounds")
        used = [d for r in self.replicas for d in r]
        if not all(self.replicas) or len(set(used)) != len(used) or not all(0 <= d < n_devices for d in used):
            raise PipelineError(f"each stage needs its own devices of the {n_devices}, got {self.replicas}",
                                field="replicas")
        if self.schedule not in SCHEDULES:
            raise PipelineError(f"must be one of {SCHEDULES}, got {self.schedule!r}", field="schedule")
        return self

    def as_pipeline(self) -> PipelinePlan | None:
        """The same plan in the one-device-per-stage form the real runs take (None if a stage is replicated)."""
        if self.replicated:
            return None
        return PipelinePlan(self.bounds, tuple(r[0] for r in self.replicas), self.micro_batches, self.schedule)

    def describe(self, device_names: Sequence[str] | None = None) -> str:
        """``[0-3]@d0,d1 | [4-7]@d2`` (layer ranges inclusive, replicas comma-separated)."""
        name = (lambda d: device_names[d]) if device_names else str
        return " | ".join(f"[{a}{'' if a == b - 1 else f'-{b - 1}'}]@{','.join(name(d) for d in r)}"
                          for a, b, r in zip(self.bounds, self.bounds[1:], self.replicas))

    def to_dict(self) -> dict:
        return {"format": "trinity-replicated-pipeline-plan", "version": 1, "bounds": list(self.bounds),
                "replicas": [list(r) for r in self.replicas], "micro_batches": self.micro_batches,
                "schedule": self.schedule}

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "ReplicatedPlan":
        doc = read_json(path)
        try:
            return cls(tuple(doc["bounds"]), tuple(tuple(r) for r in doc["replicas"]), int(doc["micro_batches"]),
                       str(doc["schedule"]))
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"not a replicated pipeline plan ({e})", source=str(path)) from None


@dataclass(frozen=True)
class PlannerView:
    """The cluster as PipeDream's planner sees it: identical workers, one bandwidth and latency."""

    n_workers: int
    speed: float
    bandwidth: float  # bytes per microsecond
    latency_us: float

    @classmethod
    def of(cls, cluster: Cluster) -> "PlannerView":
        D = cluster.n_devices
        off = ~np.eye(D, dtype=bool)
        bw = float(cluster.bandwidth[off].min()) if D > 1 else float("inf")
        lat = float(cluster.latency[off].max()) if D > 1 else 0.0
        return cls(D, float(np.mean([d.speed for d in cluster.devices])), bw, lat)


def _prefix(profile: LayerProfile, batch: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prefix sums of T_l (at speed 1) and |w_l|, and a_l, per micro-batch."""
    scale = batch / m / profile.batch
    T = np.concatenate([[0.0], np.cumsum([l.compute_us * scale for l in profile.layers])])
    W = np.concatenate([[0.0], np.cumsum([float(l.param_bytes) for l in profile.layers])])
    a = np.array([l.output_bytes * scale for l in profile.layers])
    return T, W, a


def _stage_time(T: np.ndarray, W: np.ndarray, i: int, j: int, m: int, speed: float, bandwidth: float) -> float:
    """T(i -> j, m) for layers [i, j) on m replicas of ``speed`` joined at ``bandwidth``."""
    sync = 4 * (m - 1) * (W[j] - W[i]) / (m * bandwidth) if m > 1 else 0.0
    return max((T[j] - T[i]) / speed, sync) / m


@dataclass(frozen=True)
class PipeDreamResult:
    plan: ReplicatedPlan
    objective_us: float  # A(N, m): per micro-batch, the slowest stage in steady state (planner's view)


def pipedream_plan(profile: LayerProfile, cluster: Cluster, *, micro_batches: int = 4, schedule: str = "1f1b",
                   batch: int | None = None) -> PipeDreamResult:
    """PipeDream's dynamic program (module docstring); stages take devices in cluster order."""
    batch = profile.batch if batch is None else int(batch)
    n, M = profile.n_layers, cluster.n_devices
    PipelinePlan((0, n), (0,), micro_batches, schedule).check(n, M, batch)
    view = PlannerView.of(cluster)
    T, W, a = _prefix(profile, batch, micro_batches)

    def comm(i: int) -> float:  # 2 C_i: the boundary after layer i (1-based: between layers i-1 and i)
        return 2 * (view.latency_us + a[i - 1] / view.bandwidth)

    # A[j][m] = (value, parent (i, m') or None)
    A: list[list[tuple[float, tuple[int, int] | None]]] = [[(np.inf, None)] * (M + 1) for _ in range(n + 1)]
    for j in range(1, n + 1):
        for m in range(1, M + 1):
            best = (_stage_time(T, W, 0, j, m, view.speed, view.bandwidth), None)
            for i in range(1, j):
                c = comm(i)
                for mp in range(1, m):
                    prev = A[i][m - mp][0]
                    if prev >= best[0] or c >= best[0]:
                        continue
                    v = max(prev, c, _stage_time(T, W, i, j, mp, view.speed, view.bandwidth))
                    if v < best[0] - 1e-12:
                        best = (v, (i, mp))
            A[j][m] = best
    m_best = min(range(1, M + 1), key=lambda m: (A[n][m][0], m))
    stages: list[tuple[int, int, int]] = []  # (from layer, to layer, replicas), last stage first
    j, m = n, m_best
    while True:
        value, parent = A[j][m]
        if parent is None:
            stages.append((0, j, m))
            break
        i, mp = parent
        stages.append((i, j, mp))
        j, m = i, m - mp
    stages.reverse()
    bounds, replicas, next_device = [0], [], 0
    for _, hi, reps in stages:
        bounds.append(hi)
        replicas.append(tuple(range(next_device, next_device + reps)))
        next_device += reps
    plan = ReplicatedPlan(tuple(bounds), tuple(replicas), micro_batches, schedule).check(n, M)
    return PipeDreamResult(plan, float(A[n][m_best][0]))


def _groups_link(cluster: Cluster, a: Sequence[int], b: Sequence[int]) -> tuple[float, float]:
    """The slowest link between two groups of devices: (bandwidth, latency)."""
    pairs = [(x, y) for x in a for y in b if x != y]
    return (min(float(cluster.bandwidth[x, y]) for x, y in pairs), max(float(cluster.latency[x, y]) for x, y in pairs))


def objective_us(plan: ReplicatedPlan | PipelinePlan, profile: LayerProfile, cluster: Cluster,
                 batch: int | None = None, *, planner_view: bool = False) -> float:
    """PipeDream's objective of ``plan``: its slowest replicated stage or doubled boundary per micro-batch,
    on the real ``cluster`` (each stage at its slowest replica's speed, each link as it is) or, with
    ``planner_view``, as the planner sees the cluster (what `pipedream_plan` minimises)."""
    plan = _replicated(plan)
    batch = profile.batch if batch is None else int(batch)
    plan.check(profile.n_layers, cluster.n_devices)
    T, W, a = _prefix(profile, batch, plan.micro_batches)
    view = PlannerView.of(cluster)
    worst = 0.0
    for s, reps in enumerate(plan.replicas):
        i, j = plan.bounds[s], plan.bounds[s + 1]
        if planner_view:
            speed, bw, bw_in, lat_in = view.speed, view.bandwidth, view.bandwidth, view.latency_us
        else:
            speed = min(cluster.devices[d].speed for d in reps)
            bw = _groups_link(cluster, reps, reps)[0] if len(reps) > 1 else np.inf
            bw_in, lat_in = _groups_link(cluster, plan.replicas[s - 1], reps) if s > 0 else (np.inf, 0.0)
        worst = max(worst, _stage_time(T, W, i, j, len(reps), speed, bw))
        if s > 0:
            worst = max(worst, 2 * (lat_in + a[i - 1] / bw_in))
    return worst


def _replicated(plan: ReplicatedPlan | PipelinePlan) -> ReplicatedPlan:
    if isinstance(plan, ReplicatedPlan):
        return plan
    return ReplicatedPlan(plan.bounds, tuple((d,) for d in plan.devices), plan.micro_batches, plan.schedule)


def predict_replicated(plan: ReplicatedPlan | PipelinePlan, profile: LayerProfile, cluster: Cluster,
                       batch: int | None = None) -> StepCost:
    """The cost model's step of a replicated plan (module docstring); equal to `predict` without replicas."""
    plan = _replicated(plan).check(profile.n_layers, cluster.n_devices)
    S = plan.n_stages
    devices = []
    for s, reps in enumerate(plan.replicas):
        devices.append({"name": f"stage{s}", "kind": cluster.devices[reps[0]].kind,
                        "speed": len(reps) * min(cluster.devices[d].speed for d in reps),
                        "memory_GB": min(cluster.devices[d].memory_bytes for d in reps) / 1e9})
    links = []
    for s in range(S):
        for t in range(S):
            if s != t:
                bw, lat = _groups_link(cluster, plan.replicas[s], plan.replicas[t])
                links.append({"src": f"stage{s}", "dst": f"stage{t}", "bandwidth_GBps": bw / 1e3, "latency_us": lat})
    virtual = cluster_from_dict({"name": f"{cluster.name} (stages)", "devices": devices,
                                 "default_link": {"bandwidth_GBps": 1.0, "latency_us": 0.0}, "links": links})
    vplan = PipelinePlan(plan.bounds, tuple(range(S)), plan.micro_batches, plan.schedule)
    stages = stage_costs(vplan, profile, virtual, batch)
    for s, reps in enumerate(plan.replicas):
        k = len(reps)
        if k > 1:  # the replicas' ring all-reduce of the stage's weight gradients, before the update
            bw, lat = _groups_link(cluster, reps, reps)
            weights = stages[s].weight_bytes / 3  # WEIGHT_COPIES: weights, gradients, momentum
            sync = 2 * (k - 1) * lat + 2 * (k - 1) / k * weights / bw
            # the virtual device's speed is k x a replica's: the update itself is one replica's
            stages[s] = replace(stages[s], update_us=stages[s].update_us * k + sync)
    timeline = simulate(vplan, stages, virtual)
    D, m = cluster.n_devices, plan.micro_batches
    sent, received, memory = np.zeros(D), np.zeros(D), np.zeros(D)
    for s, (st, reps) in enumerate(zip(stages, plan.replicas)):
        k = len(reps)
        for d in reps:
            memory[d] = st.weight_bytes + st.activations_kept_bytes / k
            if k > 1:
                sent[d] += 2 * (k - 1) / k * st.weight_bytes / 3
                received[d] += 2 * (k - 1) / k * st.weight_bytes / 3
            if s < S - 1:  # activations forward, gradients back, the micro-batches shared by the replicas
                sent[d] += m * st.activation_bytes / k
                received[d] += m * st.activation_bytes / k
            if s > 0:
                sent[d] += m * stages[s - 1].activation_bytes / k
                received[d] += m * stages[s - 1].activation_bytes / k
    return StepCost(step_time_us=timeline.step_time_us, comm_us=timeline.comm_us, sent_bytes=sent,
                    received_bytes=received, memory_bytes=memory, capacity_bytes=cluster.memory.astype(float),
                    lower_bound_us=lower_bound_us(profile, cluster, batch))
