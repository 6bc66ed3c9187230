"""Pipeline partitioners: the exact dynamic program of PipeDream's objective on heterogeneous devices
(`pipedream_partition`; PipeDream's published planner is `trinity.pipeline_parallel.pipedream`), GPipe's
even split, exhaustive search for small cases and random search (a same-budget baseline) for large ones.

PipeDream's objective (Narayanan et al., SOSP'19, section 3.1) is the steady-state time per micro-batch
of the pipeline's slowest part: the largest of every stage's compute time and every boundary's
communication time. Its planner assumes identical workers within a level of the hierarchy
(``optimizer_graph_hierarchical.py``) and replicates stages; here devices differ individually, so the
dynamic program also chooses which device runs each stage, in which order (no stage replication):

    A(j, U, d) = the least bottleneck of the first j layers split into |U| contiguous stages on the
                 devices U (each once), the last of them on d.
    A(j, {d}, d) = T(0, j, d)
    A(k, U + {e}, e) = min over j < k, (j, U, d) of max(A(j, U, d), T(j, k, e), C(j, d, e))

with T(j, k, e) = (forward + backward of layers j..k-1 per micro-batch) / speed of e, and
C(j, d, e) = the larger of the activation's transfer d -> e and its gradient's e -> d (latency +
bytes / bandwidth; links are full duplex, as in the cost model). The plan is the state with j = all
layers of least A. A stage its device cannot hold (weights x 3 + saved activations of the micro-batches
that may be in flight: m under GPipe, D - s under 1F1B, D the number of devices) is not a candidate.

Ties (many plans share the bottleneck, e.g. when one big layer sets it) are broken by a second exact
dynamic program over the same states: least fill latency (sum of all T and C along the pipeline)
among the plans whose every T and C is at most the optimal bottleneck.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from trinity.cluster import Cluster
from trinity.pipeline_parallel.cost import WEIGHT_COPIES, _size, predict
from trinity.pipeline_parallel.plan import PipelineError, PipelinePlan
from trinity.profile.layers import LayerProfile


@dataclass(frozen=True)
class _Tables:
    """Per-micro-batch quantities the partitioners share, in prefix-sum form."""

    compute: np.ndarray  # [n + 1] prefix sums of forward + backward us per micro-batch (at speed 1)
    out_bytes: np.ndarray  # [n] activation bytes after each layer per micro-batch
    weights: np.ndarray  # [n + 1] prefix sums of weight bytes x WEIGHT_COPIES
    saved: np.ndarray  # [n + 1] prefix sums of saved activation bytes per micro-batch


def _tables(profile: LayerProfile, batch: int, m: int) -> _Tables:
    scale = batch / m / profile.batch
    comp = np.concatenate([[0.0], np.cumsum([l.compute_us * scale for l in profile.layers])])
    w = np.concatenate([[0.0], np.cumsum([WEIGHT_COPIES * l.param_bytes for l in profile.layers])])
    sv = np.concatenate([[0.0], np.cumsum([l.saved_bytes * scale for l in profile.layers])])
    return _Tables(comp, np.array([l.output_bytes * scale for l in profile.layers]), w, sv)


def _check_inputs(profile: LayerProfile, cluster: Cluster, batch: int | None, m: int, schedule: str,
                  max_stages: int | None) -> tuple[int, int]:
    batch = profile.batch if batch is None else int(batch)
    n, D = profile.n_layers, cluster.n_devices
    limit = min(n, D) if max_stages is None else max_stages
    if max_stages is not None and max_stages > n:
        raise PipelineError(f"{max_stages} stages but the model has only {n} layers", field="stages")
    if max_stages is not None and max_stages > D:
        raise PipelineError(f"{max_stages} stages but the cluster has only {D} devices", field="stages")
    PipelinePlan((0, n), (0,), m, schedule).check(n, D, batch)  # micro-batches, schedule
    return batch, limit


def bottleneck_us(plan: PipelinePlan, profile: LayerProfile, cluster: Cluster, batch: int | None = None) -> float:
    """PipeDream's objective for ``plan``: its slowest stage or boundary per micro-batch."""
    batch = profile.batch if batch is None else int(batch)
    t = _tables(profile, batch, plan.micro_batches)
    worst = 0.0
    for s, d in enumerate(plan.devices):
        a, b = plan.bounds[s], plan.bounds[s + 1]
        worst = max(worst, (t.compute[b] - t.compute[a]) / cluster.devices[d].speed)
        if s > 0:
            worst = max(worst, _comm(cluster, t, a, plan.devices[s - 1], d))
    return worst


def _comm(cluster: Cluster, t: _Tables, j: int, d: int, e: int) -> float:
    nbytes = t.out_bytes[j - 1]
    return max(cluster.latency[d, e] + nbytes / cluster.bandwidth[d, e],
               cluster.latency[e, d] + nbytes / cluster.bandwidth[e, d])


def pipedream_partition(profile: LayerProfile, cluster: Cluster, *, micro_batches: int = 4,
                        schedule: str = "1f1b", batch: int | None = None,
                        max_stages: int | None = None) -> PipelinePlan:
    """PipeDream's dynamic program extended to heterogeneous devices (see the module docstring)."""
    batch, limit = _check_inputs(profile, cluster, batch, micro_batches, schedule, max_stages)
    n, D = profile.n_layers, cluster.n_devices
    t = _tables(profile, batch, micro_batches)
    speed = [dev.speed for dev in cluster.devices]
    cap = [dev.memory_bytes for dev in cluster.devices]

    def stage_time(j: int, k: int, e: int) -> float:
        return (t.compute[k] - t.compute[j]) / speed[e]

    def fits(j: int, k: int, e: int, index: int) -> bool:
        in_flight = micro_batches if schedule == "gpipe" else min(micro_batches, D - index)
        return t.weights[k] - t.weights[j] + (t.saved[k] - t.saved[j]) * in_flight <= cap[e]

    def run(bound: float | None) -> dict:
        """bound None: states -> least bottleneck; else: least fill latency with every term <= bound."""
        best: dict[tuple[int, int, int], tuple[float, tuple | None]] = {}
        eps = 1e-9 * (bound or 0.0)

        def offer(state, value, parent):
            if state not in best or value < best[state][0] - 1e-12:
                best[state] = (value, parent)

        for e in range(D):
            for k in range(1, n + 1):
                if fits(0, k, e, 0):
                    T = stage_time(0, k, e)
                    if bound is None:
                        offer((k, 1 << e, e), T, None)
                    elif T <= bound + eps:
                        offer((k, 1 << e, e), T, None)
        for size in range(1, limit):  # extend states of `size` stages by one stage
            for (j, mask, d), (value, _) in sorted((s, v) for s, v in best.items() if bin(s[1]).count("1") == size):
                if j == n:
                    continue
                for e in range(D):
                    if mask >> e & 1:
                        continue
                    C = _comm(cluster, t, j, d, e)
                    if bound is not None and C > bound + eps:
                        continue
                    for k in range(j + 1, n + 1):
                        if not fits(j, k, e, size):
                            break  # bigger stages hold more
                        T = stage_time(j, k, e)
                        if bound is None:
                            offer((k, mask | 1 << e, e), max(value, T, C), (j, mask, d))
                        elif T <= bound + eps:
                            offer((k, mask | 1 << e, e), value + C + T, (j, mask, d))
        return best

    def best_final(best: dict):
        finals = [(v, s) for s, (v, _) in best.items() if s[0] == n]
        if not finals:
            raise PipelineError(f"no split of {n} layers into at most {limit} stages fits the devices' memory "
                                f"({', '.join(_size(c) for c in cap)})", field="memory")
        return min(finals)

    optimum, _ = best_final(run(None))
    best = run(optimum)
    _, state = best_final(best)
    bounds, devices = [state[0]], [state[2]]
    parent = best[state][1]
    while parent is not None:
        bounds.append(parent[0])
        devices.append(parent[2])
        parent = best[parent][1]
    bounds.append(0)
    return PipelinePlan(tuple(reversed(bounds)), tuple(reversed(devices)), micro_batches, schedule)


def even_split(profile: LayerProfile, cluster: Cluster, *, micro_batches: int = 4, schedule: str = "gpipe",
               devices: Sequence[int] | None = None, by: str = "layers", batch: int | None = None) -> PipelinePlan:
    """GPipe's split: as many stages as ``devices`` (default: every device, in the cluster's order),
    equal layer counts (``by='layers'``, the earlier stages take the remainder) or equal compute
    (``by='compute'``: cut where the cumulative forward + backward time crosses s / S of the total)."""
    n = profile.n_layers
    devices = list(range(min(n, cluster.n_devices))) if devices is None else [int(d) for d in devices]
    S = len(devices)
    if S > n:
        raise PipelineError(f"{S} stages but the model has only {n} layers", field="stages")
    if by == "layers":
        sizes = [n // S + (1 if s < n % S else 0) for s in range(S)]
        bounds = [0, *itertools.accumulate(sizes)]
    elif by == "compute":
        cum = np.cumsum([l.compute_us for l in profile.layers])
        bounds = [0]
        for s in range(1, S):
            cut = int(np.searchsorted(cum, cum[-1] * s / S)) + 1  # the layer crossing the quantile stays
            bounds.append(min(max(cut, bounds[-1] + 1), n - (S - s)))
        bounds.append(n)
    else:
        raise PipelineError(f"must be 'layers' or 'compute', got {by!r}", field="by")
    plan = PipelinePlan(tuple(bounds), tuple(devices), micro_batches, schedule)
    plan.check(n, cluster.n_devices, profile.batch if batch is None else batch)
    return plan


def count_plans(n_layers: int, n_devices: int, max_stages: int | None = None) -> int:
    """How many plans `enumerate_plans` yields: sum over S of C(n-1, S-1) splits x D!/(D-S)! orders."""
    top = min(n_layers, n_devices, max_stages or n_devices)
    return sum(math.comb(n_layers - 1, S - 1) * math.perm(n_devices, S) for S in range(1, top + 1))


def enumerate_plans(n_layers: int, n_devices: int, micro_batches: int = 4, schedule: str = "1f1b",
                    max_stages: int | None = None) -> Iterator[PipelinePlan]:
    """Every contiguous split into S <= min(layers, devices) stages x every ordered choice of S devices."""
    top = min(n_layers, n_devices, max_stages or n_devices)
    for S in range(1, top + 1):
        for cuts in itertools.combinations(range(1, n_layers), S - 1):
            bounds = (0, *cuts, n_layers)
            for devs in itertools.permutations(range(n_devices), S):
                yield PipelinePlan(bounds, devs, micro_batches, schedule)


@dataclass(frozen=True)
class Exhaustive:
    plan: PipelinePlan
    value: float
    n_plans: int


def exhaustive_search(profile: LayerProfile, cluster: Cluster, *, micro_batches: int = 4, schedule: str = "1f1b",
                      batch: int | None = None, objective: str = "step_time", max_plans: int = 200_000,
                      max_stages: int | None = None) -> Exhaustive:
    """The best of all plans (`enumerate_plans`) by ``objective``: 'step_time' (the cost model's, plans
    that fit only) or 'bottleneck' (PipeDream's). Refuses above ``max_plans`` plans."""
    n, D = profile.n_layers, cluster.n_devices
    total = count_plans(n, D, max_stages)
    if total > max_plans:
        raise PipelineError(f"{total} plans for {n} layers on {D} devices exceed the limit of {max_plans}",
                            field="max_plans")
    score: Callable[[PipelinePlan], float]
    if objective == "step_time":
        def score(p: PipelinePlan) -> float:
            cost = predict(p, profile, cluster, batch)
            return cost.step_time_us if cost.fits else math.inf
    elif objective == "bottleneck":
        def score(p: PipelinePlan) -> float:
            return bottleneck_us(p, profile, cluster, batch)
    else:
        raise PipelineError(f"must be 'step_time' or 'bottleneck', got {objective!r}", field="objective")
    best, best_value = None, math.inf
    for plan in enumerate_plans(n, D, micro_batches, schedule, max_stages):
        v = score(plan)
        if v < best_value:
            best, best_value = plan, v
    if best is None:
        raise PipelineError("no plan fits the devices' memory", field="memory")
    return Exhaustive(best, best_value, total)


@dataclass(frozen=True)
class RandomSearch:
    plan: PipelinePlan
    value: float  # its predicted step time (us)
    evaluations: int


def random_plan(rng: np.random.Generator, n_layers: int, n_devices: int, micro_batches: int = 4,
                schedule: str = "1f1b") -> PipelinePlan:
    """One plan drawn uniformly from `enumerate_plans`: S with probability proportional to its plan count,
    then S - 1 cuts and an ordered choice of S devices, each uniformly."""
    top = min(n_layers, n_devices)
    counts = np.array([math.comb(n_layers - 1, S - 1) * math.perm(n_devices, S) for S in range(1, top + 1)], float)
    S = int(rng.choice(np.arange(1, top + 1), p=counts / counts.sum()))
    cuts = sorted(rng.choice(np.arange(1, n_layers), size=S - 1, replace=False).tolist()) if S > 1 else []
    devices = rng.permutation(n_devices)[:S].tolist()
    return PipelinePlan((0, *cuts, n_layers), tuple(int(d) for d in devices), micro_batches, schedule)


def random_search(profile: LayerProfile, cluster: Cluster, *, evaluations: int, micro_batches: int = 4,
                  schedule: str = "1f1b", batch: int | None = None, seed: int = 0) -> RandomSearch:
    """The best by predicted step time of ``evaluations`` uniform draws (`random_plan`) that fit: the
    same-budget baseline of a search."""
    if isinstance(evaluations, bool) or not isinstance(evaluations, int) or evaluations < 1:
        raise PipelineError(f"must be an integer >= 1, got {evaluations!r}", field="evaluations")
    rng = np.random.default_rng(seed)
    best, best_value = None, math.inf
    for _ in range(evaluations):
        plan = random_plan(rng, profile.n_layers, cluster.n_devices, micro_batches, schedule)
        cost = predict(plan, profile, cluster, batch)
        if cost.fits and cost.step_time_us < best_value:
            best, best_value = plan, cost.step_time_us
    if best is None:
        raise PipelineError(f"none of {evaluations} random plans fits the devices' memory", field="memory")
    return RandomSearch(best, best_value, evaluations)
