"""Layer-wise expert placement: contiguous slices of the topological order.

The hand-made placement of a layered model (embedding and first layers on
device 0, the next layers on device 1, ...): the topological order is cut
into one block per device, in device order, so that each block takes about
the same compute time. An op's compute is its mean time over the devices;
each device's slice of the total is proportional to its speed (equal slices
on a homogeneous cluster).

Colocated ops follow the first member of their group, so the walk counts a
group's whole compute at its first member (in GNMT most compute sits in
groups whose members span the whole order; counting each op where it
stands would leave the last devices idle). An op belongs to the block
holding the midpoint of its compute span; when every op is free, ops are
counted instead. An op whose device
has no room for its group spills to the next device (cyclically) that has.
"""

from __future__ import annotations

import numpy as np

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.placers.base import MemoryBudget, register
from trinity.costs import op_times


@register("expert")
def place_expert(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """One contiguous block of the topological order per device, balanced by compute."""
    n_dev = cluster.n_devices
    order = graph.topological_order()
    # A group runs where its first member goes, so its whole compute counts there.
    group_work = np.bincount(graph.arrays.group, weights=op_times(graph, cluster).mean(axis=1))
    group = graph.arrays.group[order]
    _, first = np.unique(group, return_index=True)
    work = np.zeros(len(order))
    work[first] = group_work[group[first]]
    if work.sum() == 0:
        work = np.ones_like(work)
    speed = np.array([dev.speed for dev in cluster.devices])
    cuts = np.cumsum(speed)[:-1] / speed.sum() * work.sum()
    target = np.searchsorted(cuts, np.cumsum(work) - work / 2, side="right")

    budget = MemoryBudget(graph, cluster)
    placement = np.empty(graph.n_ops, np.int64)
    for op, want in zip(order.tolist(), target.tolist()):
        dev = budget.pinned(op)
        if dev < 0:
            dev = want
            if not budget.fits(op, want):  # the next device with room, cyclically
                allowed = budget.allowed(op)
                if len(allowed) == 0:
                    raise budget.no_room(op)
                i = int(np.searchsorted(allowed, want))
                dev = int(allowed[i if i < len(allowed) else 0])
            budget.assign(op, dev)
        placement[op] = dev
    return placement
