"""Fast event simulator: the semantics of `trinity.sim`, compiled with numba.

`Simulator(graph, cluster)` flattens the graph into arrays once; each
`simulate(placement)` call then runs one compiled event loop. Only running
work has a pending completion (one op and one transfer per device at most),
so the "event queue" is 2 slots per device scanned linearly: cheaper than a
heap for the 2-8 devices placement deals with. Ready ops and outgoing
transfers wait in per-device FIFO linked lists.
"""

from __future__ import annotations

import numba
import numpy as np

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.placement import check_placement
from trinity.costs import op_times
from trinity.sim.result import SimResult, lower_bound


class Simulator:
    """Simulates placements of one graph on one cluster."""

    def __init__(self, graph: OpGraph, cluster: Cluster, times: np.ndarray | None = None):
        self.graph, self.cluster = graph, cluster
        a = graph.arrays
        self.times = op_times(graph, cluster) if times is None else np.ascontiguousarray(times, np.float64)
        self.lower_bound_us = lower_bound(graph, self.times, cluster.n_devices)
        owner = a.tensor_owner
        tensor_bytes = a.tensor_bytes.astype(np.float64)
        # Outputs of ops that hold persistent bytes (variables, parameters) are that storage:
        # they take no extra memory on their own device, only as copies elsewhere.
        local_bytes = np.where(a.persistent_bytes[owner] > 0, 0.0, tensor_bytes)
        # Edge endpoints laid out in the order the event loop walks them (by producer, by
        # consumer), so it reads memory sequentially instead of chasing edge ids.
        self._static = (
            np.bincount(owner, weights=local_bytes, minlength=graph.n_ops),  # new output bytes per op
            tensor_bytes, local_bytes, owner, a.tensor_offset,
            a.persistent_bytes.astype(np.float64), a.temporary_bytes.astype(np.float64),
            np.bincount(a.dst, minlength=graph.n_ops).astype(np.int64),
            a.out_ptr, a.dst[a.out_edges], a.edge_tensor[a.out_edges],
            a.in_ptr, a.src[a.in_edges], a.edge_tensor[a.in_edges],
            np.ascontiguousarray(cluster.bandwidth), np.ascontiguousarray(cluster.latency),
            float(cluster.send_cpu_share),
        )
        self._memory = cluster.memory.astype(np.float64)

    def simulate(self, placement, *, check: bool = True, trace: bool = False) -> SimResult:
        """Simulate one step. ``check=False`` skips validation (the caller guarantees it)."""
        p = check_placement(self.graph, self.cluster, placement) if check else np.asarray(placement, np.int64)
        out = _simulate(p, self.times, *self._static)
        step, busy, sent, recv, peak, start, end, n_x, x_tensor, x_src, x_dst, x_start, x_end = out
        transfers = None
        if trace:
            a = self.graph.arrays
            t = x_tensor[:n_x]
            producer = a.tensor_owner[t]
            transfers = np.column_stack([producer, t - a.tensor_offset[producer], x_src[:n_x], x_dst[:n_x],
                                         a.tensor_bytes[t], x_start[:n_x], x_end[:n_x]]).astype(float)
            transfers = transfers[np.lexsort(transfers[:, [3, 1, 0, 2, 5]].T)]
        return SimResult(step_time_us=step, busy_us=busy, sent_bytes=sent, received_bytes=recv,
                         peak_memory_bytes=peak, out_of_memory=peak > self._memory,
                         lower_bound_us=self.lower_bound_us, op_start=start, op_end=end, placement=p,
                         transfers=transfers)


@numba.njit(cache=True, inline="always")
def _append(head, tail, nxt, queue, item):
    """Append ``item`` to FIFO linked list ``queue`` (head/tail per queue, ``nxt`` per item)."""
    if tail[queue] < 0:
        head[queue] = item
    else:
        nxt[tail[queue]] = item
    tail[queue] = item


@numba.njit(cache=True, error_model="numpy")
def _simulate(dev, times, output_total, tensor_bytes, local_bytes, tensor_owner, tensor_offset, persistent,
              temporary, indegree, out_ptr, out_dst, out_tensor, in_ptr, in_src, in_tensor, bandwidth, latency,
              cpu_share):
    n = dev.shape[0]
    n_dev = bandwidth.shape[0]
    n_tensors = tensor_bytes.shape[0]
    n_edges = out_dst.shape[0]
    inf = np.inf

    # References that keep each tensor alive: local consumers and outgoing transfers on the
    # producer's device; consumers on each receiving device for its copy.
    local_refs = np.zeros(n_tensors, np.int64)
    remote_refs = np.zeros(n_tensors * n_dev, np.int64)
    transfer_of = np.full(n_tensors * n_dev, -1, np.int64)
    for v in range(n):
        d = dev[v]
        for k in range(in_ptr[v], in_ptr[v + 1]):
            t = in_tensor[k]
            if t < 0:
                continue
            if d == dev[in_src[k]]:
                local_refs[t] += 1
            else:
                if remote_refs[t * n_dev + d] == 0:
                    local_refs[t] += 1
                remote_refs[t * n_dev + d] += 1

    waiting = indegree.copy()
    duration = np.empty(n)
    for i in range(n):
        duration[i] = times[i, dev[i]]
    start = np.zeros(n)
    end = np.zeros(n)

    # Per-device FIFO linked lists: ready work (op v, or n + x: the sender's CPU share of
    # transfer x) and transfers waiting for the sender.
    x_cap = n_edges + 1
    ready_head = np.full(n_dev, -1, np.int64)
    ready_tail = np.full(n_dev, -1, np.int64)
    ready_next = np.full(n + x_cap, -1, np.int64)
    x_tensor = np.empty(x_cap, np.int64)
    x_src = np.empty(x_cap, np.int64)
    x_dst = np.empty(x_cap, np.int64)
    x_start = np.zeros(x_cap)
    x_end = np.zeros(x_cap)
    x_next = np.full(x_cap, -1, np.int64)
    out_head = np.full(n_dev, -1, np.int64)
    out_tail = np.full(n_dev, -1, np.int64)
    n_x = 0

    # Completion slots: slot d = op running on device d, slot n_dev + d = transfer sent by d.
    slot_time = np.full(2 * n_dev, inf)
    idle = np.iinfo(np.int64).max
    slot_seq = np.full(2 * n_dev, idle, np.int64)  # order started; idle slots: never chosen
    slot_item = np.full(2 * n_dev, -1, np.int64)
    seq = 0

    live = np.zeros(n_dev)
    peak = np.zeros(n_dev)
    busy = np.zeros(n_dev)
    sent = np.zeros(n_dev)
    recv = np.zeros(n_dev)

    for v in range(n):
        if waiting[v] == 0:
            _append(ready_head, ready_tail, ready_next, dev[v], v)

    # Only devices whose state changed since the last dispatch can start something:
    # `compute_dirty[d]` / `send_dirty[d]` mark device d's processor / sender (flags, not the bits of
    # one integer: an int64 holds 63 devices, and a cluster may have thousands).
    compute_dirty = np.ones(n_dev, np.bool_)
    send_dirty = np.zeros(n_dev, np.bool_)
    grown = np.zeros(n_dev, np.bool_)  # devices whose live bytes grew since the peak was last recorded
    now = 0.0
    while True:
        # Dispatch: idle devices start their oldest ready op, idle senders their oldest transfer.
        for d in range(n_dev):
            if compute_dirty[d] and slot_item[d] < 0 and ready_head[d] >= 0:
                v = ready_head[d]
                ready_head[d] = ready_next[v]
                if ready_head[d] < 0:
                    ready_tail[d] = -1
                if v >= n:  # the CPU share of a transfer: the receiver's copy starts now
                    x = v - n
                    nbytes = tensor_bytes[x_tensor[x]]
                    x_start[x] = now
                    live[x_dst[x]] += nbytes
                    grown[x_dst[x]] = True
                    slot_item[d] = v
                    slot_time[d] = now + cpu_share * (latency[d, x_dst[x]] + nbytes / bandwidth[d, x_dst[x]])
                    slot_seq[d] = seq
                    seq += 1
                    continue
                start[v] = now
                end[v] = now + duration[v]
                busy[d] += duration[v]
                live[d] += temporary[v] + output_total[v]
                grown[d] = True
                slot_item[d] = v
                slot_time[d] = end[v]
                slot_seq[d] = seq
                seq += 1
        for d in range(n_dev):
            s = n_dev + d
            if send_dirty[d] and slot_item[s] < 0 and out_head[d] >= 0:
                x = out_head[d]
                out_head[d] = x_next[x]
                if out_head[d] < 0:
                    out_tail[d] = -1
                nbytes = tensor_bytes[x_tensor[x]]
                x_end[x] = now + (1.0 - cpu_share) * (latency[d, x_dst[x]] + nbytes / bandwidth[d, x_dst[x]])
                if cpu_share == 0.0:
                    x_start[x] = now
                    live[x_dst[x]] += nbytes
                    grown[x_dst[x]] = True
                slot_item[s] = x
                slot_time[s] = x_end[x]
                slot_seq[s] = seq
                seq += 1
        compute_dirty[:] = False
        send_dirty[:] = False

        # Next completion: earliest time, then earliest started (idle slots hold inf).
        best = -1
        best_time = inf
        best_seq = idle
        for s in range(2 * n_dev):
            t_s = slot_time[s]
            if t_s < best_time or (t_s == best_time and slot_seq[s] < best_seq):
                best = s
                best_time = t_s
                best_seq = slot_seq[s]
        if best < 0:
            break
        if best_time > now:
            # Every change at `now` is in: record the peak where memory grew.
            for d in range(n_dev):
                if grown[d] and live[d] > peak[d]:
                    peak[d] = live[d]
            grown[:] = False
            now = best_time
        item = slot_item[best]
        slot_item[best] = -1
        slot_time[best] = inf
        slot_seq[best] = idle

        if best < n_dev and item >= n:  # the CPU share of transfer `item - n` is done: to the wire
            compute_dirty[best] = True
            _append(out_head, out_tail, x_next, best, item - n)
            send_dirty[best] = True
        elif best < n_dev:  # op `item` finished on device `best`
            u = item
            du = best
            compute_dirty[du] = True
            live[du] -= temporary[u]
            for t in range(tensor_offset[u], tensor_offset[u + 1]):
                if local_refs[t] == 0:  # output nobody reads
                    live[du] -= local_bytes[t]
            for k in range(in_ptr[u], in_ptr[u + 1]):  # release inputs
                t = in_tensor[k]
                if t < 0:
                    continue
                w = in_src[k]
                if dev[w] == du:
                    local_refs[t] -= 1
                    if local_refs[t] == 0:
                        live[du] -= local_bytes[t]
                else:
                    remote_refs[t * n_dev + du] -= 1
                    if remote_refs[t * n_dev + du] == 0:
                        live[du] -= tensor_bytes[t]
            for k in range(out_ptr[u], out_ptr[u + 1]):
                v = out_dst[k]
                t = out_tensor[k]
                dv = dev[v]
                if t < 0 or dv == du:
                    waiting[v] -= 1
                    if waiting[v] == 0:
                        compute_dirty[dv] = True
                        _append(ready_head, ready_tail, ready_next, dv, v)
                elif transfer_of[t * n_dev + dv] < 0:  # a tensor goes once to each consuming device
                    x = n_x
                    n_x += 1
                    transfer_of[t * n_dev + dv] = x
                    x_tensor[x] = t
                    x_src[x] = du
                    x_dst[x] = dv
                    if cpu_share > 0.0:  # the sender's CPU serialises it first, in turn with ops
                        _append(ready_head, ready_tail, ready_next, du, n + x)
                        compute_dirty[du] = True
                    else:
                        _append(out_head, out_tail, x_next, du, x)
                        send_dirty[du] = True
        else:  # transfer `item` arrived
            x = item
            t = x_tensor[x]
            u = tensor_owner[t]
            ds, dd = x_src[x], x_dst[x]
            send_dirty[ds] = True
            sent[ds] += tensor_bytes[t]
            recv[dd] += tensor_bytes[t]
            local_refs[t] -= 1
            if local_refs[t] == 0:
                live[ds] -= local_bytes[t]
            for k in range(out_ptr[u], out_ptr[u + 1]):
                v = out_dst[k]
                if out_tensor[k] == t and dev[v] == dd:
                    waiting[v] -= 1
                    if waiting[v] == 0:
                        compute_dirty[dd] = True
                        _append(ready_head, ready_tail, ready_next, dd, v)
    for d in range(n_dev):
        if live[d] > peak[d]:
            peak[d] = live[d]
    for i in range(n):
        peak[dev[i]] += persistent[i]
    step = 0.0
    for i in range(n):
        if end[i] > step:
            step = end[i]
    return step, busy, sent, recv, peak, start, end, n_x, x_tensor, x_src, x_dst, x_start, x_end
