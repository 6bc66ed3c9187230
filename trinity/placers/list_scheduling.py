"""Memory-constrained Earliest Task First list scheduling, shared by m-ETF and m-SCT.

ETF (Hwang et al. 1989) as Baechi's m-ETF uses it: among all ready ops
(every predecessor scheduled) and every device the op may use, schedule the
(op, device) pair that can start earliest. An op can start on device d once
d is free and every input is on d. Ties go to the op earlier in topological
order, then to the lower device index.

Communication model. With ``contention=True`` (the default) the estimate
follows the simulator's semantics: a tensor is sent once to each device
that reads it, and each device sends one tensor at a time, so an input from
device s arrives at ``max(producer end, s's sender free) + latency +
bytes / bandwidth`` unless it is already on d. Textbook ETF
(``contention=False``) lets every edge start its own transfer when its
producer ends; it underestimates transfers badly when many small tensors
leave one device (GNMT on 134 us links), so it is kept for comparison only.

Memory and colocation follow `MemoryBudget`: an op whose group is already
placed may only join it; otherwise only devices with room for its whole
group are candidates. An op with no candidate fails the placement at once,
since free memory only shrinks. No insertion into idle gaps of a device's
timeline (Baechi's scheduler does not either).
"""

from __future__ import annotations

import numpy as np

from trinity.cluster import Cluster
from trinity.costs import op_times
from trinity.graph.ir import OpGraph
from trinity.placers.base import MemoryBudget


def list_schedule(graph: OpGraph, cluster: Cluster, favorite_parent: np.ndarray | None = None,
                  *, contention: bool = True) -> np.ndarray:
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

    # In-edges grouped by consumer: producer, tensor id (-1 for control), bytes.
    in_start = a.in_ptr
    in_src = a.src[a.in_edges]
    in_tensor = a.edge_tensor[a.in_edges]
    in_bytes = a.edge_bytes[a.in_edges].astype(np.float64)
    in_data = in_tensor >= 0
    out_start = a.out_ptr
    out_dst = a.dst[a.out_edges]

    remaining = np.bincount(a.dst, minlength=n)  # unscheduled in-edges per op
    on_device = np.full((len(a.tensor_bytes), n_dev), np.inf)  # when each tensor is on each device
    finish = np.zeros(n)
    device_free = np.zeros(n_dev)
    sender_free = np.zeros(n_dev)
    placement = np.full(n, -1, np.int64)

    ready = np.flatnonzero(remaining == 0)
    while len(ready):
        ready = ready[np.argsort(pos[ready], kind="stable")]
        allowed = budget.allowed_matrix(ready)
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

        # When all inputs of each ready op could be on each device.
        counts = in_start[ready + 1] - in_start[ready]
        data_ready = np.zeros((len(ready), n_dev))
        if counts.sum():
            first = np.repeat(in_start[ready] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
            edges = first + np.arange(counts.sum())
            arrival = _arrival(edges, in_src, in_tensor, in_bytes, in_data, placement, finish, sender_free,
                               on_device, cluster)
            row = np.repeat(np.arange(len(ready)), counts)
            np.maximum.at(data_ready, row, arrival)

        start = np.where(allowed, np.maximum(data_ready, device_free), np.inf)
        # Rows are in topological order, so the first minimum honours both tie rules.
        k, d = divmod(int(np.argmin(start)), n_dev)
        op = int(ready[k])
        begin = device_free[d]
        for e in range(in_start[op], in_start[op + 1]):
            u = in_src[e]
            if not in_data[e] or placement[u] == d:
                begin = max(begin, finish[u])
                continue
            t = in_tensor[e]
            if not contention:
                begin = max(begin, finish[u] + cluster.transfer_us(placement[u], d, in_bytes[e]))
                continue
            if on_device[t, d] == np.inf:  # commit the transfer on the sender's queue
                s = placement[u]
                sent = max(finish[u], sender_free[s])
                on_device[t, d] = sender_free[s] = sent + cluster.transfer_us(s, d, in_bytes[e])
            begin = max(begin, on_device[t, d])
        finish[op] = device_free[d] = begin + times[op, d]
        on_device[a.tensor_offset[op]:a.tensor_offset[op + 1], d] = finish[op]
        placement[op] = d
        budget.assign(op, d)

        ready = np.delete(ready, k)
        succ = out_dst[out_start[op]:out_start[op + 1]]
        if len(succ):
            np.subtract.at(remaining, succ, 1)
            new = np.unique(succ[remaining[succ] == 0])
            ready = np.concatenate([ready, new])
    return placement


def _arrival(edges, in_src, in_tensor, in_bytes, in_data, placement, finish, sender_free, on_device,
             cluster) -> np.ndarray:
    """[len(edges), n_devices]: when each in-edge's input could be on each device."""
    u = in_src[edges]
    src_dev = placement[u]
    done = finish[u][:, None]
    # A new transfer waits for the sender (sender_free stays 0 without contention).
    leave = np.maximum(finish[u], sender_free[src_dev])[:, None]
    new = leave + cluster.latency[src_dev] + in_bytes[edges][:, None] / cluster.bandwidth[src_dev]
    new[np.arange(len(edges)), src_dev] = finish[u]  # same device: ready when the producer ends
    present = np.where(in_data[edges][:, None], on_device[np.maximum(in_tensor[edges], 0)], np.inf)
    arrival = np.minimum(present, new)
    return np.where(in_data[edges][:, None], arrival, done)
