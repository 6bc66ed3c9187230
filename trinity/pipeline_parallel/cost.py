"""Cost model of pipeline parallelism and of BSP data parallelism on a `Cluster`, from a `LayerProfile`.

Scaling: a profile is measured at one batch size; times and activation sizes scale linearly with the
number of samples (a micro-batch of b samples costs b / profile.batch of the profile's time), then
divide by the device's ``speed``. Optimizer updates (``update_us``) do not scale with the batch.

Pipeline (`predict`), per training step of ``batch`` samples in ``m`` micro-batches:

* each stage runs the forward F and backward B of every micro-batch on its device, in the schedule's
  order: GPipe: F0..F(m-1), then B0..B(m-1); 1F1B (PipeDream-flush, torch's Schedule1F1B):
  min(m, S - s) forwards, then alternately one backward and one forward, then the remaining backwards;
* a forward on stage s > 0 waits for its activation, a backward on stage s < S - 1 for its gradient;
  the last stage's backward follows its own forward (the loss is part of the last layer);
* a boundary's activation (the output of the stage's last layer) goes from device s to device s+1, its
  gradient (same size) back; each direction of a link carries one transfer at a time, in micro-batch
  order, taking ``bytes / bandwidth`` of the link and arriving ``latency`` later (full duplex);
* after its last backward each stage updates its weights (SGD with momentum);
* step time: when the last device finishes. Exposed communication (``comm_us``): time during which
  some transfer is in flight and no device computes.

Memory per device: weights x 3 (weights, gradients, SGD momentum: the optimizer of the real runs) +
the activations autograd keeps (``saved_bytes``) for every micro-batch in flight: m under GPipe,
min(m, S - s) on stage s under 1F1B.

Data parallelism (`predict_data_parallel`, BSP as DDP without overlap): every device runs forward and
backward on batch / D samples at its speed, then the gradients are all-reduced by a ring (2 (D-1)
steps of P / D bytes each, at the slowest link and highest latency of the ring), then every device
updates all weights; the slowest device sets the pace. Memory: weights x 3 + all saved activations
of its batch / D samples.

Lower bound (both): total work (forward + backward of the batch, each update once) / total speed of
the cluster's devices.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from trinity.cluster import Cluster
from trinity.profile.layers import LayerProfile
from trinity.pipeline_parallel.plan import PipelineError, PipelinePlan
from trinity.step_cost import StepCost

#: bytes kept per parameter byte: the weights, their gradients and SGD's momentum buffer
WEIGHT_COPIES = 3


@dataclass(frozen=True)
class StageCost:
    """One stage of a plan, per micro-batch (times at the device's speed)."""

    device: int
    forward_us: float
    backward_us: float
    update_us: float  # once per step
    activation_bytes: float  # sent to the next stage per micro-batch (0 for the last)
    weight_bytes: float  # weights x WEIGHT_COPIES
    activations_kept_bytes: float  # saved activations x micro-batches in flight
    in_flight: int

    @property
    def memory_bytes(self) -> float:
        return self.weight_bytes + self.activations_kept_bytes


def _batch(profile: LayerProfile, batch: int | None) -> int:
    b = profile.batch if batch is None else int(batch)
    if b < 1:
        raise PipelineError(f"must be >= 1, got {b}", field="batch")
    return b


def stage_costs(plan: PipelinePlan, profile: LayerProfile, cluster: Cluster,
                batch: int | None = None) -> list[StageCost]:
    """Per-stage, per-micro-batch costs of ``plan`` (checked against the profile and cluster first)."""
    batch = _batch(profile, batch)
    plan.check(profile.n_layers, cluster.n_devices, batch)
    scale = batch / plan.micro_batches / profile.batch
    out = []
    S, m = plan.n_stages, plan.micro_batches
    for s, d in enumerate(plan.devices):
        layers = [profile.layers[i] for i in plan.stage_layers(s)]
        speed = cluster.devices[d].speed
        in_flight = m if plan.schedule == "gpipe" else min(m, S - s)
        out.append(StageCost(
            device=d,
            forward_us=sum(l.forward_us for l in layers) * scale / speed,
            backward_us=sum(l.backward_us for l in layers) * scale / speed,
            update_us=sum(l.update_us for l in layers) / speed,
            activation_bytes=layers[-1].output_bytes * scale if s < S - 1 else 0.0,
            weight_bytes=float(WEIGHT_COPIES * sum(l.param_bytes for l in layers)),
            activations_kept_bytes=sum(l.saved_bytes for l in layers) * scale * in_flight,
            in_flight=in_flight))
    return out


def schedule_order(schedule: str, stage: int, n_stages: int, m: int) -> list[tuple[str, int]]:
    """The (kind, micro-batch) order in which ``stage`` computes: kind 'F' or 'B'."""
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(m, n_stages - stage)
    order = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while b < m:
        order.append(("B", b))
        b += 1
        if f < m:
            order.append(("F", f))
            f += 1
    return order


def _union_length(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _exposed(transfers: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """Length of the time covered by some transfer and by no computation."""
    total = 0.0
    busy = _union_length(compute)
    for a, b in _union_length(transfers):
        covered = sum(max(0.0, min(b, y) - max(a, x)) for x, y in busy)
        total += (b - a) - covered
    return total


@dataclass(frozen=True)
class Timeline:
    """What `simulate` found: step time, exposed communication and each device's busy intervals."""

    step_time_us: float
    comm_us: float
    compute: dict[int, list[tuple[str, int, float, float]]]  # device -> (kind, micro-batch, start, end)
    transfers: list[tuple[int, int, float, float]]  # (src device, dst device, start, arrival)


def simulate(plan: PipelinePlan, stages: Sequence[StageCost], cluster: Cluster) -> Timeline:
    """Event simulation of one step of ``plan`` (see the module docstring)."""
    S, m = plan.n_stages, plan.micro_batches
    orders = [schedule_order(plan.schedule, s, S, m) for s in range(S)]
    pos = [0] * S
    free = [0.0] * S  # when each stage's device is next free
    f_end = [[None] * m for _ in range(S)]
    f_arrive = [[0.0] * m] + [[None] * m for _ in range(S - 1)]  # activation of (s, i) arrives
    g_arrive = [[None] * m for _ in range(S)]  # gradient of (s, i) arrives from s + 1
    link_f = [0.0] * S  # forward link s -> s+1 next free
    link_b = [0.0] * S  # backward link s+1 -> s next free
    compute: dict[int, list] = {st.device: [] for st in stages}
    transfers: list[tuple[int, int, float, float]] = []

    def send(s_from: int, s_to: int, ready: float, nbytes: float, link: list, li: int) -> float:
        src, dst = stages[s_from].device, stages[s_to].device
        start = max(ready, link[li])
        occupancy = nbytes / cluster.bandwidth[src, dst]
        link[li] = start + occupancy
        arrive = start + float(cluster.latency[src, dst]) + occupancy
        transfers.append((src, dst, start, arrive))
        return arrive

    done = 0
    total = sum(len(o) for o in orders)
    while done < total:
        progressed = False
        for s in range(S):
            st = stages[s]
            while pos[s] < len(orders[s]):
                kind, i = orders[s][pos[s]]
                if kind == "F":
                    ready = f_arrive[s][i]
                else:
                    ready = f_end[s][i] if s == S - 1 else g_arrive[s][i]
                if ready is None:
                    break
                start = max(free[s], ready)
                end = start + (st.forward_us if kind == "F" else st.backward_us)
                free[s] = end
                compute[st.device].append((kind, i, start, end))
                if kind == "F":
                    f_end[s][i] = end
                    if s < S - 1:
                        f_arrive[s + 1][i] = send(s, s + 1, end, st.activation_bytes, link_f, s)
                elif s > 0:
                    g_arrive[s - 1][i] = send(s, s - 1, end, stages[s - 1].activation_bytes, link_b, s - 1)
                pos[s] += 1
                done += 1
                progressed = True
        if not progressed:  # cannot happen for the two schedules; guards against a bad order
            raise PipelineError(f"schedule {plan.schedule!r} deadlocks", field="schedule")
    step = 0.0
    for s, st in enumerate(stages):
        compute[st.device].append(("U", -1, free[s], free[s] + st.update_us))
        step = max(step, free[s] + st.update_us)
    busy = [(a, b) for items in compute.values() for _, _, a, b in items]
    comm = _exposed([(a, b) for _, _, a, b in transfers], busy)
    return Timeline(step_time_us=step, comm_us=comm, compute=compute, transfers=transfers)


def lower_bound_us(profile: LayerProfile, cluster: Cluster, batch: int | None = None) -> float:
    batch = _batch(profile, batch)
    work = profile.compute_us * batch / profile.batch + sum(l.update_us for l in profile.layers)
    return work / sum(d.speed for d in cluster.devices)


def predict(plan: PipelinePlan, profile: LayerProfile, cluster: Cluster, batch: int | None = None) -> StepCost:
    """Predicted step of ``plan`` (``batch`` defaults to the profile's); see the module docstring."""
    stages = stage_costs(plan, profile, cluster, batch)
    timeline = simulate(plan, stages, cluster)
    D, m = cluster.n_devices, plan.micro_batches
    sent, received, memory = np.zeros(D), np.zeros(D), np.zeros(D)
    for s, st in enumerate(stages):
        memory[st.device] = st.memory_bytes
        if s < len(stages) - 1:  # activations forward, gradients of the same size back
            nxt = stages[s + 1].device
            sent[st.device] += m * st.activation_bytes
            received[nxt] += m * st.activation_bytes
            sent[nxt] += m * st.activation_bytes
            received[st.device] += m * st.activation_bytes
    return StepCost(step_time_us=timeline.step_time_us, comm_us=timeline.comm_us, sent_bytes=sent,
                    received_bytes=received, memory_bytes=memory, capacity_bytes=cluster.memory.astype(float),
                    lower_bound_us=lower_bound_us(profile, cluster, batch))


def _size(nbytes: float) -> str:
    """``1.23 GB``, ``45.6 MB``, ``789 kB``, ``12 B``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def require_fits(plan: PipelinePlan, profile: LayerProfile, cluster: Cluster, batch: int | None = None) -> None:
    """Refuse (before running) a plan with a stage its device cannot hold, with the numbers."""
    for s, st in enumerate(stage_costs(plan, profile, cluster, batch)):
        cap = cluster.devices[st.device].memory_bytes
        if st.memory_bytes > cap:
            raise PipelineError(
                f"stage {s} (layers {plan.bounds[s]}..{plan.bounds[s + 1] - 1}) needs "
                f"{_size(st.memory_bytes)} on {cluster.devices[st.device].name} (weights, gradients and momentum "
                f"{_size(st.weight_bytes)} + activations of {st.in_flight} micro-batch(es) in flight "
                f"{_size(st.activations_kept_bytes)}) but it holds {_size(cap)}", field="memory")


def predict_data_parallel(profile: LayerProfile, cluster: Cluster, devices: Sequence[int] | None = None,
                          batch: int | None = None) -> StepCost:
    """BSP data parallelism of the whole model on ``devices`` (default: all, ring in this order): the
    data-parallel family's DDP cost model (`trinity.data_parallel.step_cost`), arrays over every device."""
    from trinity.data_parallel import DataParallelWork, step_cost

    batch = _batch(profile, batch)
    devices = list(range(cluster.n_devices)) if devices is None else [int(d) for d in devices]
    D = len(devices)
    if D < 1 or len(set(devices)) != D or not all(0 <= d < cluster.n_devices for d in devices):
        raise PipelineError(f"need distinct device indices in 0..{cluster.n_devices - 1}, got {devices}",
                            field="devices")
    if batch % D:
        raise PipelineError(f"{D} devices do not divide the batch of {batch}", field="devices")
    work = replace(DataParallelWork.from_layers(profile, batch), optimizer_slots=WEIGHT_COPIES - 2)
    part = step_cost("ddp", cluster.subset(devices), work)
    n = cluster.n_devices

    def spread(values: np.ndarray) -> np.ndarray:
        out = np.zeros(n)
        out[devices] = values
        return out

    return StepCost(step_time_us=part.step_time_us, comm_us=part.comm_us, sent_bytes=spread(part.sent_bytes),
                    received_bytes=spread(part.received_bytes), memory_bytes=spread(part.memory_bytes),
                    capacity_bytes=cluster.memory.astype(float),
                    lower_bound_us=lower_bound_us(profile, cluster, batch))
