"""Memory-constrained Earliest Task First list scheduling, shared by m-ETF and m-SCT.

Classic ETF (Hwang et al. 1989) as Baechi's m-ETF uses it: among all ready
ops (every predecessor scheduled) and every device the op may use, schedule
the (op, device) pair that can start earliest. An op can start on device d
once d is free and every input has arrived: a predecessor's finish time,
plus the transfer time of the edge's bytes when the predecessor sits on
another device (control edges move nothing and cost no transfer). Ties go
to the op earlier in topological order, then to the lower device index.

Memory and colocation follow `MemoryBudget`: an op whose group is already
placed may only join it; otherwise only devices with room for its whole
group are candidates. An op with no candidate fails the placement at once,
since free memory only shrinks.

Simplifications against Baechi's event-driven scheduler: no link
contention (every transfer starts when its producer finishes), one
transfer per edge, and no insertion into idle gaps of a device's timeline.
"""

from __future__ import annotations

import numpy as np

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.placers.base import MemoryBudget
from trinity.sim.costs import op_times


def list_schedule(graph: OpGraph, cluster: Cluster, favorite_parent: np.ndarray | None = None) -> np.ndarray:
    """Place ``graph`` by ETF list scheduling; return int64[n_ops] device indices.

    ``favorite_parent[j] = i`` (or -1) restricts ready op j to the device of
    its placed parent i whenever memory and colocation allow j there; this is
    the hook m-SCT uses to keep favorite children with their parents.
    """
    n, n_dev = graph.n_ops, cluster.n_devices
    a = graph.arrays
    times = op_times(graph, cluster)
    budget = MemoryBudget(graph, cluster)
    pos = np.empty(n, np.int64)
    pos[graph.topological_order()] = np.arange(n)

    # Out-edges as CSR so a finished op updates its successors in one vectorised step.
    by_src = np.argsort(a.src, kind="stable")
    out_start = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(a.src, minlength=n), out=out_start[1:])
    out_dst = a.dst[by_src]
    out_bytes = a.edge_bytes[by_src].astype(np.float64)
    out_data = a.src_output[by_src] >= 0

    remaining = np.bincount(a.dst, minlength=n)  # unscheduled in-edges per op
    data_ready = np.zeros((n, n_dev))  # when all inputs of op could be on each device
    device_free = np.zeros(n_dev)
    placement = np.full(n, -1, np.int64)
    devices = np.arange(n_dev)

    ready = np.flatnonzero(remaining == 0)
    ready = ready[np.argsort(pos[ready])]
    while len(ready):
        # Devices each ready op may use (MemoryBudget.allowed, vectorised over ops).
        g = budget.group[ready]
        pinned = budget.group_device[g]
        allowed = np.where(pinned[:, None] >= 0, pinned[:, None] == devices,
                           budget.group_bytes[g][:, None] <= budget.free)
        stuck = np.flatnonzero(~allowed.any(axis=1))
        if len(stuck):
            raise budget.no_room(int(ready[stuck[0]]))
        if favorite_parent is not None:
            parent = favorite_parent[ready]
            rows = np.flatnonzero(parent >= 0)
            home = placement[parent[rows]]
            keep = allowed[rows, home]
            rows, home = rows[keep], home[keep]
            allowed[rows] = False
            allowed[rows, home] = True

        start = np.where(allowed, np.maximum(data_ready[ready], device_free), np.inf)
        # Rows are in topological order, so the first minimum honours both tie rules.
        k, d = divmod(int(np.argmin(start)), n_dev)
        op = int(ready[k])
        finish = start[k, d] + times[op, d]
        device_free[d] = finish
        placement[op] = d
        budget.assign(op, d)

        lo, hi = out_start[op], out_start[op + 1]
        ready = np.delete(ready, k)
        if hi > lo:
            succ = out_dst[lo:hi]
            # latency[d, d] = 0 and bandwidth[d, d] = inf, so staying on d costs nothing.
            comm = cluster.latency[d] + out_bytes[lo:hi, None] / cluster.bandwidth[d]
            arrival = finish + np.where(out_data[lo:hi, None], comm, 0.0)
            np.maximum.at(data_ready, succ, arrival)
            np.subtract.at(remaining, succ, 1)
            new = np.unique(succ[remaining[succ] == 0])
            if len(new):
                ready = np.concatenate([ready, new])
                ready = ready[np.argsort(pos[ready], kind="stable")]
    return placement
