"""m-TOPO (Baechi, SoCC 2020): fill devices in topological order up to a balanced memory share.

Ops are walked in topological order and poured into device 0, 1, ... in
turn. A device's share is the graph's total static memory divided by the
number of devices, capped at the device's capacity; the walk moves on to the
next device once the next op's colocation group would push the current one
past its share. The last device takes whatever is left.

Departures from Baechi: Baechi's share adds the largest op's memory as
slack (total / n + max op); here the share is exactly total / n, and an
empty device accepts a group bigger than its share (rather than being
skipped). A group that fits nowhere along the walk goes to the device with
the most free memory that holds it.
"""

from __future__ import annotations

import numpy as np

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.placers.base import MemoryBudget, register


@register("m-topo")
def place_m_topo(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """Contiguous topological blocks of about equal static memory, one per device."""
    n_dev = cluster.n_devices
    budget = MemoryBudget(graph, cluster)
    capacity = cluster.memory.astype(np.float64)
    share = np.minimum(budget.group_bytes.sum() / n_dev, capacity)
    placement = np.empty(graph.n_ops, np.int64)
    d = 0
    for op in graph.topological_order().tolist():
        dev = budget.pinned(op)
        if dev < 0:
            need = budget.group_bytes[budget.group[op]]
            while d < n_dev - 1:
                used = capacity[d] - budget.free[d]
                if budget.fits(op, d) and (used == 0 or used + need <= share[d]):
                    break
                d += 1
            dev = d
            if not budget.fits(op, dev):
                allowed = budget.allowed(op)
                if len(allowed) == 0:
                    raise budget.no_room(op)
                dev = int(allowed[np.argmax(budget.free[allowed])])
            budget.assign(op, dev)
        placement[op] = dev
    return placement
