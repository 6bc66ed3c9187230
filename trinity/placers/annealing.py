"""Local search over the same units the RL policies place: simulated annealing.

The peer the searches must beat at equal budget: it scores candidates with the same simulator
and reward, moves one colocation unit to another device at a time, accepts a worse candidate
with probability exp(-delta / T), and cools T geometrically from ``t_start`` to ``t_end``
(in units of the reward, whose scale is log(cost), so ~0.01 is a 1% change of cost). Its
budget is a number of simulator calls, so it compares with a search of iterations x batch
samples; its curve (calls, wall time, best so far) goes on the same time-to-quality figure.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
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
class AnnealResult:
    placement: np.ndarray
    reward: float
    step_time_us: float
    calls: int
    seconds: float
    #: (simulator calls, seconds, best step time us, best reward) each time the best improved
    curve: list[tuple[int, float, float, float]] = field(default_factory=list)


def anneal(graph: OpGraph, cluster: Cluster, start: np.ndarray, *, budget: int, seed: int = 0,
           reward: Callable[[SimResult], float] | None = None, t_start: float = 0.05, t_end: float = 0.0005,
           simulator: Simulator | None = None) -> AnnealResult:
    """Anneal from ``start`` (a placement) for ``budget`` simulator calls; the best placement seen."""
    if budget < 1:
        raise PlacementError(f"must be >= 1 simulator call, got {budget}", field="budget")
    if not (t_start > 0 and t_end > 0):
        raise PlacementError("temperatures must be > 0", field="t_start")
    reward = reward or (lambda r: mdpe_reward(r, MDPEConfig()))
    sim = simulator or Simulator(graph, cluster)
    rng = np.random.default_rng(seed)
    unit_of_op = graph.arrays.group
    n_units, n_dev = graph.arrays.n_groups, cluster.n_devices
    static = np.bincount(unit_of_op, weights=graph.static_memory(), minlength=n_units)
    capacity = cluster.memory.astype(float)
    unit_device = np.zeros(n_units, np.int64)
    unit_device[unit_of_op] = np.asarray(start, np.int64)
    used = np.bincount(unit_device, weights=static, minlength=n_dev)
    t0 = time.perf_counter()
    current = sim.simulate(unit_device[unit_of_op], check=False)
    cur_r = reward(current)
    best = AnnealResult(unit_device[unit_of_op].copy(), cur_r, current.step_time_us, 1, 0.0)
    best.curve.append((1, time.perf_counter() - t0, current.step_time_us, cur_r))
    cooling = (t_end / t_start) ** (1.0 / max(budget - 1, 1))
    temperature, calls, attempts = t_start, 1, 0
    while calls < budget and n_dev > 1 and attempts < 100 * budget:
        attempts += 1
        u = int(rng.integers(n_units))
        old = int(unit_device[u])
        new = int(rng.integers(n_dev - 1))
        new += new >= old  # another device, uniformly
        if used[new] + static[u] > capacity[new]:
            continue  # its weights would not fit: not a candidate, and no simulator call spent
        unit_device[u] = new
        cand = sim.simulate(unit_device[unit_of_op], check=False)
        calls += 1
        temperature *= cooling
        r = reward(cand)
        if r >= cur_r or rng.random() < math.exp((r - cur_r) / temperature):
            cur_r = r
            used[old] -= static[u]
            used[new] += static[u]
            if r > best.reward:
                best.placement, best.reward, best.step_time_us = unit_device[unit_of_op].copy(), r, cand.step_time_us
                best.curve.append((calls, time.perf_counter() - t0, cand.step_time_us, r))
        else:
            unit_device[u] = old
    best.calls = calls
    best.seconds = time.perf_counter() - t0
    return best


@register("annealing")
def place_annealing(graph: OpGraph, cluster: Cluster, seed: int = 0, budget: int = 2000,
                    start: str = "single") -> np.ndarray:
    """Simulated annealing from placer ``start``'s placement, ``budget`` simulator calls."""
    from trinity.placers.base import place

    initial = place(start, graph, cluster, seed=seed).placement
    return anneal(graph, cluster, initial, budget=budget, seed=seed).placement
