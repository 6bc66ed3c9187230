"""Fast event simulator: the semantics of `trinity.sim`, compiled with numba.

`Simulator(graph, cluster)` flattens the graph into arrays once; each
`simulate(placement)` call then runs one compiled event loop whose cost per
event does not depend on the number of devices, so 1,024-device clusters
cost about what 4 do:

* pending completions (one op and ``link_streams`` transfers per device at
  most) sit in a binary heap ordered by (time, order started);
* only devices whose state changed since the last dispatch are visited, in
  device order (the order they start work in breaks later ties);
* a tensor's copies are found through its out-edges (one transfer per
  consuming device, chained edge to edge), not through a tensors x devices
  table, so memory is O(ops + edges + devices).

Ready ops wait in per-device linked lists (FIFO, or a stack with the cluster's
``ready_order: lifo``, whose ops readied by an arriving tensor join its far end
with ``lifo-arrivals-last``), outgoing transfers in FIFO ones. With
``send_on_request`` each copy's request is an item on those lists, at the far
end of the receiver's (issuing it takes ``request_cpu_us``), then of the
sender's (no time); with ``sends_last`` a tensor's send share joins the far
end of the sender's.
"""

from __future__ import annotations

import copy

import numba
import numpy as np

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.heap import earlier, heap_pop, heap_push
from trinity.placement import check_placement
from trinity.costs import op_times
from trinity.sim.result import SimResult, lower_bound


class Simulator:
    """Simulates placements of one graph on one cluster."""

    def __init__(self, graph: OpGraph, cluster: Cluster, times: np.ndarray | None = None):
        self.graph = graph
        self.times = op_times(graph, cluster) if times is None else np.ascontiguousarray(times, np.float64)
        self.lower_bound_us = lower_bound(graph, self.times, cluster.n_devices)
        self._lay_out(cluster)

    def on(self, cluster: Cluster) -> "Simulator":
        """This graph on ``cluster``, whose devices are this simulator's: its op times and bound are kept, the
        rest (transfer terms, the schedule's rules) is ``cluster``'s. A fit over transfer terms builds one per
        grid point, and the op times and bound are most of building one."""
        if cluster.devices != self.cluster.devices:
            raise ValueError(f"cluster {cluster.name!r} has other devices than {self.cluster.name!r}")
        other = copy.copy(self)
        other._lay_out(cluster)
        return other

    def _lay_out(self, cluster: Cluster) -> None:
        """The arrays the event loop reads, for ``cluster``."""
        graph, a = self.graph, self.graph.arrays
        self.cluster = cluster
        owner, edge_tensor = a.tensor_owner, a.edge_tensor
        tensor_bytes = a.tensor_bytes.astype(np.float64)
        if cluster.control_transfers:
            # A control edge between devices moves an empty tensor: each producer of control edges gets one
            # (numbered after the graph's tensors), its edges read it, and it crosses like any other.
            control = edge_tensor < 0
            signalling, signal = np.unique(a.src[control], return_inverse=True)
            edge_tensor = edge_tensor.copy()
            edge_tensor[control] = len(a.tensor_bytes) + signal
            owner = np.concatenate([owner, signalling])
            tensor_bytes = np.concatenate([tensor_bytes, np.zeros(len(signalling))])
        self._owner, self._tensor_bytes = owner, tensor_bytes  # the graph's tensors, then the signals
        # Outputs of ops that hold persistent bytes (variables, parameters) are that storage:
        # they take no extra memory on their own device, only as copies elsewhere.
        local_bytes = np.where(a.persistent_bytes[owner] > 0, 0.0, tensor_bytes)
        # Where each in-edge (by consumer) sits among the out-edges (by producer).
        out_position = np.empty(graph.n_edges, np.int64)
        out_position[a.out_edges] = np.arange(graph.n_edges)
        # Out-edges of each producer by tensor, then in edge order (so each tensor's edges are adjacent).
        out_tensor = edge_tensor[a.out_edges]
        by_tensor = np.lexsort((np.arange(graph.n_edges), out_tensor, a.src[a.out_edges]))
        # Edge endpoints laid out in the order the event loop walks them (by producer, by
        # consumer), so it reads memory sequentially instead of chasing edge ids.
        self._static = (
            np.bincount(owner, weights=local_bytes, minlength=graph.n_ops),  # new output bytes per op
            tensor_bytes, local_bytes, owner, a.tensor_offset,
            a.persistent_bytes.astype(np.float64), a.temporary_bytes.astype(np.float64),
            np.bincount(a.dst, minlength=graph.n_ops).astype(np.int64),
            a.out_ptr, a.dst[a.out_edges], out_tensor, by_tensor,
            a.in_ptr, a.src[a.in_edges], edge_tensor[a.in_edges], out_position[a.in_edges],
            np.ascontiguousarray(cluster.bandwidth), np.ascontiguousarray(cluster.latency),
            float(cluster.send_cpu_share), float(cluster.receive_cpu_share), float(cluster.corun_slowdown),
            float(cluster.step_sync_us),
            int(cluster.link_streams), cluster.cpu_share_of == "bytes", cluster.ready_order != "fifo",
            cluster.ready_order == "lifo-arrivals-last", cluster.latency_overlaps, float(cluster.transfer_cpu_us),
            cluster.send_on_request, cluster.sends_last, float(cluster.request_cpu_us),
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
            producer = self._owner[t]
            output = np.where(t < len(a.tensor_bytes), t - a.tensor_offset[producer], -1)  # -1: a signal
            transfers = np.column_stack([producer, output, x_src[:n_x], x_dst[:n_x],
                                         self._tensor_bytes[t], x_start[:n_x], x_end[:n_x]]).astype(float)
            transfers = transfers[np.lexsort(transfers[:, [3, 1, 0, 2, 5]].T)]
        return SimResult(step_time_us=step, busy_us=busy, sent_bytes=sent, received_bytes=recv,
                         peak_memory_bytes=peak, out_of_memory=peak > self._memory,
                         lower_bound_us=self.lower_bound_us, op_start=start, op_end=end, placement=p,
                         transfers=transfers)


#: Device count past which pending completions live in a heap instead of being scanned.
HEAP_FROM_DEVICES = 48


@numba.njit(cache=True, inline="always")
def _append(head, tail, nxt, queue, item):
    """Append ``item`` to FIFO linked list ``queue`` (head/tail per queue, ``nxt`` per item)."""
    if tail[queue] < 0:
        head[queue] = item
    else:
        nxt[tail[queue]] = item
    tail[queue] = item


@numba.njit(cache=True, inline="always")
def _make_ready(head, tail, nxt, queue, item, lifo):
    """Put ``item`` on ready list ``queue``: at its end (FIFO), or at its front (``lifo``: the next taken)."""
    if not lifo:
        _append(head, tail, nxt, queue, item)
        return
    nxt[item] = head[queue]
    head[queue] = item
    if tail[queue] < 0:
        tail[queue] = item


@numba.njit(cache=True, inline="always")
def _mark(flag, members, d):
    """Add device ``d`` to a set of devices: ``flag[d]``, and the members ``members[1:members[0] + 1]``
    (the count lives in the array: a count passed in and out costs a third of the loop's time)."""
    if not flag[d]:
        flag[d] = True
        members[0] += 1
        members[members[0]] = d


@numba.njit(cache=True, inline="always")
def _sort_members(members):
    """Sort a set's members ascending. Insertion sort: it costs the members plus their inversions, and
    an event marks a handful of devices, mostly in order (only a control edge fanning out to many
    devices marks many out of order). A call to np.sort here, even if never taken, slows the loop."""
    end = members[0] + 1
    for i in range(2, end):
        x = members[i]
        j = i - 1
        while j >= 1 and members[j] > x:
            members[j + 1] = members[j]
            j -= 1
        members[j + 1] = x


@numba.njit(cache=True, inline="always")
def _cpu_part(latency, nbytes, bandwidth, share_of_bytes, per_transfer):
    """The part of a transfer a CPU share is a share of: its whole time, or its bytes' alone; a tensor with
    bytes adds the processors' fixed cost of a transfer (``per_transfer``)."""
    fixed = per_transfer if nbytes > 0.0 else 0.0
    return nbytes / bandwidth + fixed if share_of_bytes else latency + nbytes / bandwidth + fixed


@numba.njit(cache=True, inline="always")
def _ready_readers(x, x_copy, copy_next, out_dst, waiting, compute_flag, compute, ready_head, ready_tail, ready_next,
                   dev, at_front):
    """Transfer ``x``'s copy is on its device: its readers there, in edge order, have one input fewer to
    wait for (readied from outside the device: with `arrivals_last` taken last, so ``at_front`` false)."""
    k = x_copy[x]
    while k >= 0:
        v = out_dst[k]
        waiting[v] -= 1
        if waiting[v] == 0:
            _mark(compute_flag, compute, dev[v])
            _make_ready(ready_head, ready_tail, ready_next, dev[v], v, at_front)
        k = copy_next[k]


@numba.njit(cache=True, inline="always")
def _send(x, du, n, cpu_share, lifo, ready_head, ready_tail, ready_next, out_head, out_tail, x_next, compute_flag,
          compute, send_flag, send):
    """Transfer ``x`` leaves device ``du``: the sender's CPU serialises it first, in turn with ops (a CPU share),
    or it joins the link's queue."""
    if cpu_share > 0.0:
        _make_ready(ready_head, ready_tail, ready_next, du, n + x, lifo)
        _mark(compute_flag, compute, du)
    else:
        _append(out_head, out_tail, x_next, du, x)
        _mark(send_flag, send, du)


@numba.njit(cache=True, error_model="numpy", nogil=True)  # nogil: a batch simulates on several threads
def _simulate(dev, times, output_total, tensor_bytes, local_bytes, tensor_owner, tensor_offset, persistent,
              temporary, indegree, out_ptr, out_dst, out_tensor, by_tensor, in_ptr, in_src, in_tensor, in_position, bandwidth,
              latency, cpu_share, receive_share, corun, sync_us, streams, share_of_bytes, lifo, arrivals_last,
              overlaps, per_transfer, on_request, sends_last, request_us):
    n = dev.shape[0]
    n_dev = bandwidth.shape[0]
    n_tensors = tensor_bytes.shape[0]
    n_edges = out_dst.shape[0]

    # Copies: every cross-device data edge joins the copy of its tensor on its consumer's device,
    # named by that copy's first out-edge (`copy_of`); the copy's edges are chained in edge order
    # (`copy_next`), and the transfer that makes the copy starts at its first edge. Walking each
    # producer's edges tensor by tensor, a device's copy of the tensor is the last one it opened.
    # References that keep each tensor alive: local consumers and outgoing transfers (one per
    # copy) on the producer's device; consumers on the receiving device for each copy.
    copy_of = np.full(n_edges, -1, np.int64)
    copy_next = np.full(n_edges, -1, np.int64)
    local_refs = np.zeros(n_tensors, np.int64)
    remote_refs = np.zeros(n_edges, np.int64)  # per copy
    seen_tensor = np.full(n_dev, -1, np.int64)  # last tensor with a copy on each device
    first_edge = np.empty(n_dev, np.int64)
    copy_producer = np.empty(n_edges, np.int64)  # per copy
    last_edge = np.empty(n_dev, np.int64)
    for u in range(n):
        for i in range(out_ptr[u], out_ptr[u + 1]):
            k = by_tensor[i]
            t = out_tensor[k]
            if t < 0:
                continue
            dv = dev[out_dst[k]]
            if dv == dev[u]:
                local_refs[t] += 1
                continue
            if seen_tensor[dv] != t:
                seen_tensor[dv] = t
                first_edge[dv] = k
                copy_producer[k] = u
                local_refs[t] += 1
            else:
                copy_next[last_edge[dv]] = k
            last_edge[dv] = k
            copy_of[k] = first_edge[dv]
            remote_refs[first_edge[dv]] += 1

    waiting = indegree.copy()
    duration = np.empty(n)
    for i in range(n):
        duration[i] = times[i, dev[i]]
    start = np.zeros(n)
    end = np.zeros(n)

    # Per-device linked lists: ready work (op v, n + x: the sender's CPU share of transfer x, or
    # n + x_cap + x: the receiver's),
    # FIFO or (`lifo`) a stack whose far end (`arrivals_last`) takes the ops readied by an arriving
    # tensor, and transfers waiting for the sender, FIFO.
    x_cap = n_edges + 1
    ready_head = np.full(n_dev, -1, np.int64)
    ready_tail = np.full(n_dev, -1, np.int64)
    n_requests = n_edges if on_request else 0
    ready_next = np.full(n + 2 * x_cap + n_requests, -1, np.int64)
    # With `on_request`, copy k's request (item n + 2 x_cap + k) waits at the far end of the receiver's list
    # until it is issued, then at the far end of the sender's until taken up (`asked`: 0, 1 issued, 2 taken
    # up); a copy whose tensor is done before then is held (`held`: its transfer) until it is.
    asked = np.zeros(n_requests, np.int64)
    held = np.full(n_requests, -1, np.int64)
    request = n + 2 * x_cap
    x_copy = np.empty(x_cap, np.int64)
    x_tensor = np.empty(x_cap, np.int64)
    x_src = np.empty(x_cap, np.int64)
    x_dst = np.empty(x_cap, np.int64)
    x_start = np.zeros(x_cap)
    x_end = np.zeros(x_cap)  # when the copy arrives
    # With `overlaps` a stream is free once a transfer's bytes are on the wire; the transfer then waits
    # out its latency in flight: a heap of transfers by (arrival, order started).
    x_seq = np.zeros(x_cap, np.int64)
    in_flight = np.empty(x_cap, np.int64)
    n_flight = 0
    x_next = np.full(x_cap, -1, np.int64)
    out_head = np.full(n_dev, -1, np.int64)
    out_tail = np.full(n_dev, -1, np.int64)
    n_x = 0

    # Completion slots: slot d = op running on device d, slots n_dev + d * streams + j (j < streams) =
    # transfers sent by d (one slot each: with streams = 1, slot n_dev + d, one transfer at a time).
    # Busy slots sit in a heap by (completion time, order started); on a few devices a scan of the
    # slots is cheaper than keeping the heap (the same choice either way).
    use_heap = n_dev > HEAP_FROM_DEVICES
    n_slots = n_dev * (1 + streams)
    slot_time = np.full(n_slots, np.inf)
    idle = np.iinfo(np.int64).max
    slot_seq = np.full(n_slots, idle, np.int64)  # order started; idle slots: never chosen
    slot_item = np.full(n_slots, -1, np.int64)
    heap = np.empty(n_slots, np.int64)
    n_heap = 0
    seq = 0

    # Co-running processors (corun > 0): each busy processor's item has `left` microseconds of its
    # own (uncontended) work left; with k processors busy every item runs `stretch` = 1 + corun (k - 1)
    # times slower, so its completion moves whenever k changes.
    left = np.zeros(n_dev)
    n_busy = 0
    stretch = 1.0

    live = np.zeros(n_dev)
    peak = np.zeros(n_dev)
    busy = np.zeros(n_dev)
    sent = np.zeros(n_dev)
    recv = np.zeros(n_dev)

    for v in range(n):
        if waiting[v] == 0:
            _make_ready(ready_head, ready_tail, ready_next, dev[v], v, lifo)
    if on_request:  # every copy's request, in the order of the ops that read it
        firsts = np.flatnonzero(copy_of == np.arange(n_edges))
        for k in firsts[np.argsort(out_dst[firsts], kind="mergesort")]:
            _append(ready_head, ready_tail, ready_next, dev[out_dst[k]], request + k)

    # Only devices whose state changed since the last dispatch can start something: those whose
    # processor (`compute`) or sender (`send`) is marked. `grown`: devices whose live bytes grew
    # since the peak was last recorded.
    compute_flag = np.ones(n_dev, np.bool_)
    compute = np.arange(-1, n_dev)
    compute[0] = n_dev
    send_flag = np.zeros(n_dev, np.bool_)
    send = np.zeros(n_dev + 1, np.int64)
    grown_flag = np.zeros(n_dev, np.bool_)
    grown = np.zeros(n_dev + 1, np.int64)
    now = 0.0
    while True:
        # Dispatch: idle devices start their oldest ready op, senders their oldest transfers (one per free stream).
        _sort_members(compute)
        for i in range(1, compute[0] + 1):
            d = compute[i]
            compute_flag[d] = False
            if slot_item[d] < 0 and ready_head[d] >= 0:
                v = ready_head[d]
                ready_head[d] = ready_next[v]
                if ready_head[d] < 0:
                    ready_tail[d] = -1
                if v >= request:  # a request issued (on the receiver: `request_us`) or taken up (no time)
                    slot_item[d] = v
                    left[d] = request_us if asked[v - request] == 0 else 0.0
                elif v >= n + x_cap:  # the receiver's CPU share of a transfer
                    x = v - n - x_cap
                    ds = x_src[x]
                    slot_item[d] = v
                    left[d] = receive_share * _cpu_part(latency[ds, d], tensor_bytes[x_tensor[x]], bandwidth[ds, d],
                                                        share_of_bytes, per_transfer)
                elif v >= n:  # the CPU share of a transfer: the receiver's copy starts now
                    x = v - n
                    nbytes = tensor_bytes[x_tensor[x]]
                    x_start[x] = now
                    live[x_dst[x]] += nbytes
                    _mark(grown_flag, grown, x_dst[x])
                    slot_item[d] = v
                    left[d] = cpu_share * _cpu_part(latency[d, x_dst[x]], nbytes, bandwidth[d, x_dst[x]],
                                                    share_of_bytes, per_transfer)
                else:
                    start[v] = now
                    busy[d] += duration[v]
                    live[d] += temporary[v] + output_total[v]
                    _mark(grown_flag, grown, d)
                    slot_item[d] = v
                    left[d] = duration[v]
                slot_time[d] = now + left[d] * stretch
                n_busy += 1
                slot_seq[d] = seq
                seq += 1
                if use_heap:
                    n_heap = heap_push(heap, n_heap, slot_time, slot_seq, d)
        compute[0] = 0
        _sort_members(send)
        for i in range(1, send[0] + 1):
            d = send[i]
            send_flag[d] = False
            for j in range(streams):
                s = n_dev + d * streams + j
                if slot_item[s] < 0 and out_head[d] >= 0:
                    x = out_head[d]
                    out_head[d] = x_next[x]
                    if out_head[d] < 0:
                        out_tail[d] = -1
                    nbytes = tensor_bytes[x_tensor[x]]
                    dx = x_dst[x]
                    if share_of_bytes:  # the latency is on the wire alone
                        x_end[x] = now + (latency[d, dx] + (1.0 - cpu_share) * (nbytes / bandwidth[d, dx]))
                    else:
                        x_end[x] = now + (1.0 - cpu_share) * (latency[d, dx] + nbytes / bandwidth[d, dx])
                    if cpu_share == 0.0:
                        x_start[x] = now
                        live[x_dst[x]] += nbytes
                        _mark(grown_flag, grown, x_dst[x])
                    slot_item[s] = x
                    slot_time[s] = x_end[x]
                    slot_seq[s] = seq
                    seq += 1
                    if overlaps:  # the stream is free once the bytes are on it: its latency overlaps the next
                        slot_time[s] -= latency[d, dx] if share_of_bytes else (1.0 - cpu_share) * latency[d, dx]
                        x_seq[x] = seq
                        seq += 1
                    if use_heap:
                        n_heap = heap_push(heap, n_heap, slot_time, slot_seq, s)
        send[0] = 0
        if corun > 0.0:  # the number of busy processors changed: every running item's end moves
            new_stretch = 1.0 + corun * (max(n_busy, 1) - 1)
            if new_stretch != stretch:
                stretch = new_stretch
                for d in range(n_dev):
                    if slot_item[d] >= 0:
                        slot_time[d] = now + left[d] * stretch
                if use_heap:
                    n_heap = 0
                    for s in range(n_slots):
                        if slot_item[s] >= 0:
                            n_heap = heap_push(heap, n_heap, slot_time, slot_seq, s)

        # Next completion: earliest time, then earliest started (a slot's, or a transfer in flight arriving).
        best = -1
        if use_heap:
            if n_heap > 0:
                best = heap[0]
        else:
            best_time = np.inf
            best_seq = idle
            for s in range(n_slots):  # idle slots hold time inf
                t_s = slot_time[s]
                if t_s < best_time or (t_s == best_time and slot_seq[s] < best_seq):
                    best = s
                    best_time = t_s
                    best_seq = slot_seq[s]
        arrived = -1
        if n_flight > 0 and (best < 0 or earlier(x_end[in_flight[0]], x_seq[in_flight[0]], slot_time[best],
                                                 slot_seq[best])):
            arrived = in_flight[0]
            n_flight = heap_pop(in_flight, n_flight, x_end, x_seq)
        elif best < 0:
            break
        elif use_heap:
            n_heap = heap_pop(heap, n_heap, slot_time, slot_seq)
        t_next = x_end[arrived] if arrived >= 0 else slot_time[best]
        if t_next > now:
            # Every change at `now` is in: record the peak where memory grew.
            for i in range(1, grown[0] + 1):
                d = grown[i]
                grown_flag[d] = False
                if live[d] > peak[d]:
                    peak[d] = live[d]
            grown[0] = 0
            if corun > 0.0:
                for d in range(n_dev):
                    if slot_item[d] >= 0:
                        left[d] -= (t_next - now) / stretch
            now = t_next
        if arrived >= 0:
            item = arrived
            best = n_slots  # not a slot: a transfer in flight arrived
        else:
            item = slot_item[best]
            slot_item[best] = -1
            slot_time[best] = np.inf
            slot_seq[best] = idle
            if best < n_dev:
                n_busy -= 1

        if overlaps and n_dev <= best < n_slots:  # a stream is free; its transfer flies on
            _mark(send_flag, send, x_src[item])
            n_flight = heap_push(in_flight, n_flight, x_end, x_seq, item)
        elif best < n_dev and item >= request:
            _mark(compute_flag, compute, best)
            k = item - request
            if asked[k] == 0:  # issued: to the far end of the sender's list
                asked[k] = 1
                ds = dev[copy_producer[k]]
                ready_next[item] = -1  # it leaves the receiver's list for the far end of the sender's
                _append(ready_head, ready_tail, ready_next, ds, item)
                _mark(compute_flag, compute, ds)
            else:  # taken up: a tensor already done goes now
                asked[k] = 2
                x = held[k]
                if x >= 0:  # the request's handling serialises it at once (the next item)
                    _send(x, best, n, cpu_share, lifo, ready_head, ready_tail, ready_next, out_head, out_tail, x_next,
                          compute_flag, compute, send_flag, send)
        elif best < n_dev and item >= n + x_cap:  # the receiver's share is done: the copy's readers may run
            _mark(compute_flag, compute, best)
            _ready_readers(item - n - x_cap, x_copy, copy_next, out_dst, waiting, compute_flag, compute,
                           ready_head, ready_tail, ready_next, dev, lifo and not arrivals_last)
        elif best < n_dev and item >= n:  # the CPU share of transfer `item - n` is done: to the wire
            _mark(compute_flag, compute, best)
            _append(out_head, out_tail, x_next, best, item - n)
            _mark(send_flag, send, best)
        elif best < n_dev:  # op `item` finished on device `best`
            u = item
            du = best
            end[u] = now
            _mark(compute_flag, compute, du)
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
                    c = copy_of[in_position[k]]
                    remote_refs[c] -= 1
                    if remote_refs[c] == 0:
                        live[du] -= tensor_bytes[t]
            for k in range(out_ptr[u], out_ptr[u + 1]):
                v = out_dst[k]
                t = out_tensor[k]
                dv = dev[v]
                if t < 0 or dv == du:
                    waiting[v] -= 1
                    if waiting[v] == 0:
                        _mark(compute_flag, compute, dv)
                        _make_ready(ready_head, ready_tail, ready_next, dv, v, lifo)
                elif copy_of[k] == k:  # a tensor goes once to each consuming device
                    x = n_x
                    n_x += 1
                    x_copy[x] = k
                    x_tensor[x] = t
                    x_src[x] = du
                    x_dst[x] = dv
                    if on_request and asked[k] < 2:
                        held[k] = x
                    elif cpu_share > 0.0:  # the sender's CPU serialises it first, in turn with ops
                        if sends_last and tensor_bytes[t] > 0.0:  # after all the work it has ready
                            _append(ready_head, ready_tail, ready_next, du, n + x)
                        else:
                            _make_ready(ready_head, ready_tail, ready_next, du, n + x, lifo)
                        _mark(compute_flag, compute, du)
                    else:
                        _append(out_head, out_tail, x_next, du, x)
                        _mark(send_flag, send, du)
        else:  # transfer `item` arrived
            x = item
            t = x_tensor[x]
            ds, dd = x_src[x], x_dst[x]
            _mark(send_flag, send, ds)
            sent[ds] += tensor_bytes[t]
            recv[dd] += tensor_bytes[t]
            local_refs[t] -= 1
            if local_refs[t] == 0:
                live[ds] -= local_bytes[t]
            if receive_share > 0.0 and _cpu_part(latency[ds, dd], tensor_bytes[t], bandwidth[ds, dd],
                                                 share_of_bytes, per_transfer) > 0.0:
                # the receiver's processor takes it up next (an empty tensor's bytes take it no time)
                _make_ready(ready_head, ready_tail, ready_next, dd, n + x_cap + x, True)
                _mark(compute_flag, compute, dd)
            else:
                _ready_readers(x, x_copy, copy_next, out_dst, waiting, compute_flag, compute,
                               ready_head, ready_tail, ready_next, dev, lifo and not arrivals_last)
    for d in range(n_dev):
        if live[d] > peak[d]:
            peak[d] = live[d]
    for i in range(n):
        peak[dev[i]] += persistent[i]
    step = 0.0
    for i in range(n):
        if end[i] > step:
            step = end[i]
    if sync_us != 0.0:  # a step over k devices waits k - 1 extra rounds of the master's step protocol
        # (below 0 only as a validation's anchor to its rounds: `trinity.runtime.validate.sync_to_rounds`)
        used = np.zeros(n_dev, np.bool_)
        for i in range(n):
            used[dev[i]] = True
        step += sync_us * (used.sum() - 1)
    return step, busy, sent, recv, peak, start, end, n_x, x_tensor, x_src, x_dst, x_start, x_end
