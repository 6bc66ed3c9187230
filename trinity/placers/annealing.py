"""Local search over the units the RL policies place: simulated annealing, the searches' honest peer.

It scores candidates with the same simulator and reward as the searches. A move takes a random
unit (colocation group) and sends it, with up to ``max_moved - 1`` of its graph neighbours that
sit where it sits, to the device of one of its neighbours elsewhere (a random other device when
all its neighbours are at home): moves that follow the graph's edges, as a placement's cuts do.
A worse candidate is accepted with probability exp(-delta / T), T cooling geometrically.

The temperature is calibrated to the reward's scale at the start of every run (``calibrate``):
``calibration_moves`` random moves from the start placement (counted in the budget) give the
reward drops a move causes; T starts where the median drop is accepted with probability
``accept_start`` and ends where a drop of the ``end_quantile``-th quantile is accepted with
``accept_end``. The default start is cold (0.005): at the searches' budgets (800 and 30,000 calls on
graphs of thousands of units) a hot start (0.2) spends them on a random walk that never comes back
below its start, and the colder start ends lower on average over four graph families
(`make anneal-calibration`, README). Fixed temperatures (``t_start``/``t_end`` in reward units;
~0.01 is a 1% change of cost on MDPE's log scale) remain for comparison.

The budget is a number of simulator calls (reproducible from the seed); the curve records
(calls, wall time, best step time, best reward) at every improvement, for time-to-quality figures.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

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
    t_start: float = 0.0  #: the temperatures used (calibrated or given)
    t_end: float = 0.0
    accepted: int = 0  #: moves accepted
    #: (simulator calls, seconds, best step time us, best reward) each time the best improved
    curve: list[tuple[int, float, float, float]] = field(default_factory=list)


class _Moves:
    """Neighbour-following moves of units between devices, respecting each device's memory."""

    def __init__(self, graph: OpGraph, cluster: Cluster, unit_device: np.ndarray, rng, max_moved: int):
        a = graph.arrays
        self.unit_of_op, self.n_units, self.n_dev = a.group, a.n_groups, cluster.n_devices
        self.unit_device, self.rng, self.max_moved = unit_device, rng, max_moved
        self.ptr, self.nbr = graph.group_neighbours()
        self.static = graph.group_static_memory()
        self.capacity = cluster.memory.astype(float)
        self.used = np.bincount(unit_device, weights=self.static, minlength=self.n_dev)

    def propose(self) -> tuple[np.ndarray, int, int] | None:
        """(units to move, from, to), or None when the move would not fit in memory."""
        rng, ud = self.rng, self.unit_device
        u = int(rng.integers(self.n_units))
        old = int(ud[u])
        nbrs = self.nbr[self.ptr[u]:self.ptr[u + 1]]
        away = nbrs[ud[nbrs] != old]
        if len(away):
            new = int(ud[away[rng.integers(len(away))]])
        else:
            new = int(rng.integers(self.n_dev - 1))
            new += new >= old  # another device, uniformly
        moved = [u]
        home = nbrs[ud[nbrs] == old]
        extra = int(rng.integers(self.max_moved)) if self.max_moved > 1 else 0
        if extra and len(home):
            moved += [int(v) for v in rng.choice(home, size=min(extra, len(home)), replace=False)]
        moved = np.array(moved, np.int64)
        if self.used[new] + self.static[moved].sum() > self.capacity[new]:
            return None
        return moved, old, new

    def apply(self, moved: np.ndarray, old: int, new: int) -> None:
        self.unit_device[moved] = new
        w = self.static[moved].sum()
        self.used[old] -= w
        self.used[new] += w

    def placement(self) -> np.ndarray:
        return self.unit_device[self.unit_of_op]


#: the calibrated schedule's defaults (module docstring): a cold start, an end where almost no drop is accepted
ACCEPT_START, ACCEPT_END = 0.005, 0.001


def calibrate(drops: np.ndarray, *, accept_start: float = ACCEPT_START, accept_end: float = ACCEPT_END,
              end_quantile: float = 0.1) -> tuple[float, float]:
    """(t_start, t_end) from the reward drops (> 0) of random moves: the median drop accepted with
    probability ``accept_start`` at first, the ``end_quantile`` drop with ``accept_end`` at the end."""
    drops = np.asarray(drops, float)
    drops = drops[drops > 0]
    if not len(drops):  # every move was neutral or better: any small temperature will do
        return 1e-6, 1e-9
    t_start = -float(np.median(drops)) / math.log(accept_start)
    t_end = -float(np.quantile(drops, end_quantile)) / math.log(accept_end)
    return t_start, min(t_end, t_start)


def anneal(graph: OpGraph, cluster: Cluster, start: np.ndarray, *, budget: int, seed: int = 0,
           reward: Callable[[SimResult], float] | None = None, t_start: float | None = None,
           t_end: float | None = None, calibration_moves: int = 100, accept_start: float = ACCEPT_START,
           accept_end: float = ACCEPT_END, max_moved: int = 3, simulator: Simulator | None = None) -> AnnealResult:
    """Anneal from ``start`` (a placement) for ``budget`` simulator calls; the best placement seen.
    ``t_start``/``t_end`` None: calibrated from ``calibration_moves`` random moves (see module docstring)."""
    if not (isinstance(budget, int) and budget >= 1):
        raise PlacementError(f"must be an integer >= 1 simulator call, got {budget!r}", field="budget")
    for name, t in (("t_start", t_start), ("t_end", t_end)):
        if t is not None and not (math.isfinite(t) and t > 0):
            raise PlacementError(f"must be a temperature > 0 (or null: calibrated), got {t!r}", field=name)
    if (t_start is None) != (t_end is None):
        raise PlacementError("give both t_start and t_end, or neither (calibrated)", field="t_start")
    for name, p in (("accept_start", accept_start), ("accept_end", accept_end)):
        if not 0 < p < 1:
            raise PlacementError(f"must be a probability in (0, 1), got {p!r}", field=name)
    if not (isinstance(max_moved, int) and 1 <= max_moved <= 16):
        raise PlacementError(f"must be an integer in 1..16, got {max_moved!r}", field="max_moved")
    if not (isinstance(calibration_moves, int) and calibration_moves >= 1):
        raise PlacementError(f"must be an integer >= 1, got {calibration_moves!r}", field="calibration_moves")
    reward = reward or (lambda r: mdpe_reward(r, MDPEConfig()))
    sim = simulator or Simulator(graph, cluster)
    rng = np.random.default_rng(seed)
    unit_device = np.zeros(graph.arrays.n_groups, np.int64)
    unit_device[graph.arrays.group] = np.asarray(start, np.int64)
    moves = _Moves(graph, cluster, unit_device, rng, max_moved)
    t0 = time.perf_counter()
    current = sim.simulate(moves.placement(), check=False)
    cur_r = reward(current)
    best = AnnealResult(moves.placement(), cur_r, current.step_time_us, 1, 0.0)
    best.curve.append((1, time.perf_counter() - t0, current.step_time_us, cur_r))
    calls = 1
    n_dev = cluster.n_devices

    def consider(cand: SimResult, r: float) -> None:
        if r > best.reward:
            best.placement, best.reward, best.step_time_us = moves.placement(), r, cand.step_time_us
            best.curve.append((calls, time.perf_counter() - t0, cand.step_time_us, r))

    if t_start is None:  # calibration: the drops of random moves from the start (each undone)
        drops = []
        for _ in range(min(calibration_moves, budget - 1) if n_dev > 1 else 0):
            move = moves.propose()
            if move is None:
                continue
            moved, old, new = move
            moves.apply(moved, old, new)
            cand = sim.simulate(moves.placement(), check=False)
            calls += 1
            r = reward(cand)
            consider(cand, r)
            drops.append(cur_r - r)
            moves.apply(moved, new, old)
        t_start, t_end = calibrate(np.array(drops), accept_start=accept_start, accept_end=accept_end)
    best.t_start, best.t_end = t_start, t_end
    remaining = budget - calls
    cooling = (t_end / t_start) ** (1.0 / max(remaining - 1, 1))
    temperature, attempts = t_start, 0
    while calls < budget and n_dev > 1 and attempts < 100 * budget:
        attempts += 1
        move = moves.propose()
        if move is None:
            continue  # its weights would not fit: not a candidate, and no simulator call spent
        moved, old, new = move
        moves.apply(moved, old, new)
        cand = sim.simulate(moves.placement(), check=False)
        calls += 1
        r = reward(cand)
        if r >= cur_r or rng.random() < math.exp((r - cur_r) / temperature):
            cur_r = r
            best.accepted += 1
            consider(cand, r)
        else:
            moves.apply(moved, new, old)
        temperature *= cooling
    best.calls = calls
    best.seconds = time.perf_counter() - t0
    return best


def best_step_within(curve: list[tuple[int, float, float, float]], seconds: float) -> float:
    """The best step time (us) an annealing ``curve`` (`AnnealResult.curve`) had reached by ``seconds`` of wall
    time: what annealing offers a search that ran that long (its start's where no point lies within)."""
    return best_by(((sec, step) for _, sec, step, _ in curve), seconds)


def best_by(points: Iterable[tuple[float, float]], seconds: float) -> float:
    """The least value among (wall time, value) ``points`` taken by ``seconds``; the first point's where none is."""
    points = list(points)
    within = [value for sec, value in points if sec <= seconds]
    return min(within) if within else points[0][1]


def start_placement(name: str, graph: OpGraph, cluster: Cluster, *, seed: int | None = None
                    ) -> tuple[str, np.ndarray]:
    """(placer used, placement) annealing starts from: placer ``name``'s, or round-robin's where ``name``
    cannot place the graph (e.g. one device cannot hold it)."""
    from trinity.placers.base import place

    try:
        return name, place(name, graph, cluster, seed=seed).placement
    except PlacementError:
        return "round-robin", place("round-robin", graph, cluster, seed=seed).placement


@register("annealing")
def place_annealing(graph: OpGraph, cluster: Cluster, seed: int = 0, budget: int = 2000,
                    start: str = "single") -> np.ndarray:
    """Simulated annealing (calibrated temperature) from placer ``start``'s placement, ``budget`` simulator calls."""
    from trinity.placers.base import place

    initial = place(start, graph, cluster, seed=seed).placement
    return anneal(graph, cluster, initial, budget=budget, seed=seed).placement
