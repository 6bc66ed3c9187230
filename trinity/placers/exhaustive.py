"""The exact optimum on small graphs: every assignment of colocation units to devices, simulated.

With U units on D devices there are D**U candidates; on a cluster of identical devices joined by
identical links, relabelling devices changes nothing, so only one labelling of each partition of
the units into at most D sets is simulated (restricted growth strings: a unit may open the next
unused device, never skip one; sum of Stirling numbers S(U, j), j <= D). Refused past
``max_candidates``, so a user learns it is infeasible instead of waiting. Candidates whose
weights do not fit are skipped, as every placer must; the best by the given reward wins
(MDPE by default: the searches' objective), ties to the first in enumeration order.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from trinity.cluster import Cluster, interchangeable_devices
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


def _partitions(n: int, k: int) -> int:
    """Partitions of n items into at most k non-empty sets: sum of Stirling numbers of the second kind."""
    row = [1] + [0] * k  # S(0, j)
    for _ in range(n):
        row = [0] + [j * row[j] + row[j - 1] for j in range(1, k + 1)]
    return sum(row)


def _restricted_growth(n: int, k: int):
    """Every a[0..n) with a[0] = 0 and a[i] <= min(k - 1, max(a[:i]) + 1): one labelling per partition."""
    a = [0] * n

    def extend(i: int, top: int):
        if i == n:
            yield tuple(a)
            return
        for d in range(min(top + 2, k)):
            a[i] = d
            yield from extend(i + 1, max(top, d))

    yield from extend(1, 0) if n else iter([()])


def optimum(graph: OpGraph, cluster: Cluster, *, reward: Callable[[SimResult], float] | None = None,
            max_candidates: int = 2_000_000) -> OptimumResult:
    reward = reward or (lambda r: mdpe_reward(r, MDPEConfig()))
    unit_of_op = graph.arrays.group
    n_units, n_dev = graph.arrays.n_groups, cluster.n_devices
    canonical = interchangeable_devices(cluster)
    total = _partitions(n_units, n_dev) if canonical else n_dev ** n_units
    if total > max_candidates:
        # a float overflows past 1e308, and str() of an int past 4,300 digits: count digits from the bits
        shown = f"{total:.3g}" if total < 10 ** 300 else f"about 1e{int((total.bit_length() - 1) * math.log10(2))}"
        raise PlacementError(f"{n_units} units on {n_dev} devices is {shown} candidates, more than "
                             f"max_candidates={max_candidates:,}: exhaustive search is infeasible here",
                             field="max_candidates")
    static = np.bincount(unit_of_op, weights=graph.static_memory(), minlength=n_units)
    capacity = cluster.memory.astype(float)
    sim = Simulator(graph, cluster)
    t0 = time.perf_counter()
    best: OptimumResult | None = None
    simulated = 0
    candidates = _restricted_growth(n_units, n_dev) if canonical else itertools.product(range(n_dev), repeat=n_units)
    for assignment in candidates:
        unit_device = np.array(assignment, np.int64)
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
