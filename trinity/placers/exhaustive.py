"""The exact optimum on small graphs: every assignment of colocation units to devices, simulated.

With U units on D devices there are D**U candidates (D**(U-1) on a cluster of identical devices
joined by identical links, where unit 0 may stay on device 0 without loss). Refused past
``max_candidates``, so a user learns it is infeasible instead of waiting. Candidates whose
weights do not fit are skipped, as every placer must; the best by the given reward wins
(MDPE by default: the searches' objective), ties to the first in enumeration order.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from trinity.cluster import Cluster
from trinity.errors import PlacementError
from trinity.graph.ir import OpGraph
from trinity.placers.base import register
from trinity.reward import MDPEConfig, mdpe_reward
from trinity.sim import Simulator
from trinity.sim.result import SimResult


@dataclass
class OptimumResult:
    placement: np.ndarray
    reward: float
    step_time_us: float
    candidates: int  # simulated (fitting) candidates
    seconds: float


def _interchangeable(cluster: Cluster) -> bool:
    """All devices alike and all links alike: relabelling devices changes nothing."""
    d = cluster.devices
    alike = all((x.kind, x.speed, x.memory_bytes, x.flops_per_s) == (d[0].kind, d[0].speed, d[0].memory_bytes,
                                                                     d[0].flops_per_s) for x in d)
    off = ~np.eye(cluster.n_devices, dtype=bool)
    return alike and np.ptp(cluster.bandwidth[off]) == 0 and np.ptp(cluster.latency[off]) == 0 if len(d) > 1 \
        else True


def optimum(graph: OpGraph, cluster: Cluster, *, reward: Callable[[SimResult], float] | None = None,
            max_candidates: int = 2_000_000) -> OptimumResult:
    reward = reward or (lambda r: mdpe_reward(r, MDPEConfig()))
    unit_of_op = graph.arrays.group
    n_units, n_dev = graph.arrays.n_groups, cluster.n_devices
    fixed_first = _interchangeable(cluster)
    free = n_units - 1 if fixed_first else n_units
    total = n_dev ** free
    if total > max_candidates:
        raise PlacementError(f"{n_units} units on {n_dev} devices is {total:.3g} candidates, more than "
                             f"max_candidates={max_candidates:,}: exhaustive search is infeasible here",
                             field="max_candidates")
    static = np.bincount(unit_of_op, weights=graph.static_memory(), minlength=n_units)
    capacity = cluster.memory.astype(float)
    sim = Simulator(graph, cluster)
    t0 = time.perf_counter()
    best: OptimumResult | None = None
    simulated = 0
    for rest in itertools.product(range(n_dev), repeat=free):
        unit_device = np.array(((0,) + rest) if fixed_first else rest, np.int64)
        if (np.bincount(unit_device, weights=static, minlength=n_dev) > capacity).any():
            continue
        result = sim.simulate(unit_device[unit_of_op], check=False)
        simulated += 1
        r = reward(result)
        if best is None or r > best.reward:
            best = OptimumResult(unit_device[unit_of_op], r, result.step_time_us, 0, 0.0)
    if best is None:
        raise PlacementError("no assignment of units to devices fits the devices' memory")
    best.candidates, best.seconds = simulated, time.perf_counter() - t0
    return best


@register("exhaustive")
def place_exhaustive(graph: OpGraph, cluster: Cluster, max_candidates: int = 2_000_000) -> np.ndarray:
    """The placement with the best MDPE reward of all (feasible only for small graphs)."""
    return optimum(graph, cluster, max_candidates=max_candidates).placement
