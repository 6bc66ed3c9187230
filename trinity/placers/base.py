"""The one placer interface and what all placers share.

A placer is a function ``(graph, cluster, **options) -> int64[n_ops]`` of
device indices, registered under a name with `@register`. Every placer must
keep colocation groups together and keep each device's static memory (see
`OpGraph.static_memory`) within its capacity, or raise `PlacementError`
saying why. `place` runs a placer by name and checks both promises.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from trinity.cluster import Cluster
from trinity.errors import PlacementError
from trinity.graph.ir import OpGraph
from trinity.placement import check_placement

PlacerFn = Callable[..., np.ndarray]
PLACERS: dict[str, PlacerFn] = {}


def register(name: str) -> Callable[[PlacerFn], PlacerFn]:
    def deco(fn: PlacerFn) -> PlacerFn:
        PLACERS[name] = fn
        fn.placer_name = name  # type: ignore[attr-defined]
        return fn

    return deco


def get_placer(name: str) -> PlacerFn:
    import trinity.placers  # noqa: F401  (registers every placer)

    if name not in PLACERS:
        raise PlacementError(f"unknown placer {name!r}; known: {', '.join(sorted(PLACERS))}", field="placer")
    return PLACERS[name]


@dataclass
class PlacerResult:
    placer: str
    placement: np.ndarray
    seconds: float


def place(name: str, graph: OpGraph, cluster: Cluster, *, seed: int | None = None, **options) -> PlacerResult:
    """Run placer ``name`` and check that it kept groups together and within memory.

    ``seed`` goes to placers that draw random numbers (those with a ``seed`` option); the others
    ignore it, so callers can pass one seed to every placer.
    """
    fn = get_placer(name)
    if seed is not None and "seed" in inspect.signature(fn).parameters:
        options["seed"] = seed
    t0 = time.perf_counter()
    placement = fn(graph, cluster, **options)
    seconds = time.perf_counter() - t0
    placement = check_placement(graph, cluster, placement)
    used = np.bincount(placement, weights=graph.static_memory(), minlength=cluster.n_devices)
    over = np.flatnonzero(used > cluster.memory)
    if len(over):
        d = over[0]
        raise PlacementError(f"placer {name!r} put {used[d] / 1e9:.2f} GB on {cluster.devices[d].name}, "
                             f"which holds {cluster.memory[d] / 1e9:.2f} GB")
    return PlacerResult(name, placement, seconds)


def place_each(names, graph: OpGraph, cluster: Cluster, *, seed: int = 0
               ) -> tuple[dict[str, PlacerResult], dict[str, str]]:
    """Run each named placer (with ``seed``, see `place`): (results by name, in order;
    why each placer that could not place the graph failed)."""
    placed, failed = {}, {}
    for name in names:
        try:
            placed[name] = place(name, graph, cluster, seed=seed)
        except PlacementError as exc:
            failed[name] = exc.message
    return placed, failed


def best_by_reward(names, graph: OpGraph, cluster: Cluster, reward: Callable, *, seed: int = 0,
                   simulator=None) -> tuple[str, np.ndarray]:
    """(name, placement) of the placer in ``names`` whose simulated step scores the highest ``reward``
    (the first of equals, in ``names``' order); placers that cannot place the graph are skipped."""
    from trinity.sim import Simulator

    sim = simulator or Simulator(graph, cluster)
    placed, _ = place_each(names, graph, cluster, seed=seed)
    if not placed:
        raise PlacementError(f"none of {', '.join(names)} could place the graph")
    best = max(placed, key=lambda n: reward(sim.simulate(placed[n].placement, check=False)))
    return best, placed[best].placement


class MemoryBudget:
    """Static memory left on each device, charged a whole colocation group at a time.

    A group is charged when its first op is placed; later members follow it
    for free (their memory is already counted), as Baechi's placers do.
    """

    def __init__(self, graph: OpGraph, cluster: Cluster):
        self.group = graph.arrays.group
        self.group_bytes = graph.group_static_memory()
        self.free = cluster.memory.astype(np.float64)
        self.group_device = np.full(graph.arrays.n_groups, -1, np.int64)
        self.cluster = cluster
        self.graph = graph

    def pinned(self, op: int) -> int:
        """Device the op's group already sits on, or -1."""
        return int(self.group_device[self.group[op]])

    def fits(self, op: int, device: int) -> bool:
        g = self.group[op]
        if self.group_device[g] >= 0:
            return self.group_device[g] == device
        return self.group_bytes[g] <= self.free[device]

    def allowed(self, op: int) -> np.ndarray:
        """Devices the op may go to (ascending): its group's device, or any with room for the group."""
        g = self.group[op]
        if self.group_device[g] >= 0:
            return self.group_device[g:g + 1].copy()
        return np.flatnonzero(self.group_bytes[g] <= self.free)

    def assign(self, op: int, device: int) -> None:
        g = self.group[op]
        if self.group_device[g] < 0:
            self.group_device[g] = device
            self.free[device] -= self.group_bytes[g]
        elif self.group_device[g] != device:
            raise AssertionError("colocation group moved")

    def no_room(self, op: int) -> PlacementError:
        g = self.group[op]
        return PlacementError(
            f"no device has room for op {self.graph.ops[op].name!r} (with its colocation group: "
            f"{format_bytes(self.group_bytes[g])}); free memory per device: "
            + ", ".join(f"{d.name} {format_bytes(f)}" for d, f in zip(self.cluster.devices, self.free)))


def format_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def group_leaders(graph: OpGraph) -> np.ndarray:
    """The first member (in topological order) of each colocation group, in topological order."""
    order = graph.topological_order()
    _, first = np.unique(graph.arrays.group[order], return_index=True)
    return order[np.sort(first)]
