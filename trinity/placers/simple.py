"""Trivial placements: one device, round-robin and uniform random (by colocation group)."""

from __future__ import annotations

import numpy as np

from trinity.cluster import Cluster
from trinity.errors import PlacementError
from trinity.graph.ir import OpGraph
from trinity.placers.base import MemoryBudget, group_leaders, register


@register("single")
def place_single(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """Everything on the fastest device that holds the whole graph."""
    need = graph.static_memory().sum()
    fitting = [d for d in range(cluster.n_devices) if cluster.memory[d] >= need]
    if not fitting:
        raise PlacementError(f"graph {graph.name!r} needs {need / 1e9:.2f} GB on one device; the largest "
                             f"device of {cluster.name!r} has {cluster.memory.max() / 1e9:.2f} GB")
    best = max(fitting, key=lambda d: (cluster.devices[d].speed, -d))
    return np.full(graph.n_ops, best, np.int64)


def _by_groups(graph: OpGraph, cluster: Cluster, choose) -> np.ndarray:
    budget = MemoryBudget(graph, cluster)
    group_device = np.empty(graph.arrays.n_groups, np.int64)
    for k, op in enumerate(group_leaders(graph).tolist()):
        allowed = budget.allowed(op)
        if len(allowed) == 0:
            raise budget.no_room(op)
        d = choose(k, allowed)
        budget.assign(op, d)
        group_device[graph.arrays.group[op]] = d
    return group_device[graph.arrays.group]


@register("round-robin")
def place_round_robin(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """Groups in topological order dealt to devices in turn (skipping full ones)."""
    n = cluster.n_devices

    def choose(k, allowed):  # the first allowed device from k % n on, cyclically (allowed is ascending)
        i = int(np.searchsorted(allowed, k % n))
        return int(allowed[i if i < len(allowed) else 0])

    return _by_groups(graph, cluster, choose)


@register("random")
def place_random(graph: OpGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Each group on a uniformly random device that has room for it."""
    rng = np.random.default_rng(seed)
    return _by_groups(graph, cluster, lambda k, allowed: int(rng.choice(allowed)))
