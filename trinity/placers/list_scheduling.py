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

Cost. Re-scoring every ready op on every device at every step costs
ready ops x devices per op scheduled (6 minutes at 100k ops on 1,024
devices). Instead each ready op keeps its best (start, device) in a heap as
a lower bound: a scheduled op only delays devices, senders and memory, which
can only raise other ops' starts, so the top of the heap is re-scored alone
and taken when it still beats the next one. The few changes that can lower a
start are applied at once: a tensor copied to a new device (its ready readers
are re-scored), and an m-SCT favorite parent's device running out of room for
the child (which frees the child to go anywhere). The schedule is the same.
"""

from __future__ import annotations

import numba
import numpy as np

from trinity.cluster import Cluster
from trinity.costs import op_times
from trinity.graph.ir import OpGraph
from trinity.heap import earlier, heap_pop, heap_push
from trinity.placers.base import MemoryBudget


def list_schedule(graph: OpGraph, cluster: Cluster, favorite_parent: np.ndarray | None = None,
                  *, contention: bool = True) -> np.ndarray:
    """Place ``graph`` by ETF list scheduling; return int64[n_ops] device indices.

    ``favorite_parent[j] = i`` (or -1) restricts ready op j to the device of
    its placed parent i whenever memory and colocation allow j there; this is
    the hook m-SCT uses to keep favorite children with their parents.
    """
    n = graph.n_ops
    a = graph.arrays
    budget = MemoryBudget(graph, cluster)
    pos = np.empty(n, np.int64)
    pos[graph.topological_order()] = np.arange(n)
    favorite = np.full(n, -1, np.int64) if favorite_parent is None else np.asarray(favorite_parent, np.int64)
    placement, stuck = _schedule(
        op_times(graph, cluster), pos, a.in_ptr, a.src[a.in_edges], a.edge_tensor[a.in_edges],
        a.edge_bytes[a.in_edges].astype(np.float64), a.out_ptr, a.dst[a.out_edges], a.edge_tensor[a.out_edges],
        a.tensor_offset, a.tensor_owner, budget.group, budget.group_bytes, budget.free, budget.group_device,
        np.ascontiguousarray(cluster.latency), np.ascontiguousarray(cluster.bandwidth), favorite, contention)
    if stuck >= 0:
        raise budget.no_room(int(stuck))
    return placement


@numba.njit(cache=True)
def _schedule(times, pos, in_ptr, in_src, in_tensor, in_bytes, out_ptr, out_dst, out_tensor, tensor_offset,
              tensor_owner, group, group_bytes, free, group_device, latency, bandwidth, favorite, contention):
    """ETF with a lazy heap of per-op best starts. Updates ``free`` and ``group_device`` in place;
    returns (placement, the first op that fits no device or -1)."""
    n, n_dev = times.shape
    n_tensors = tensor_owner.shape[0]
    inf = np.inf
    placement = np.full(n, -1, np.int64)
    finish = np.zeros(n)
    device_free = np.zeros(n_dev)
    sender_free = np.zeros(n_dev)
    remaining = np.zeros(n, np.int64)
    for v in out_dst:
        remaining[v] += 1

    # Where each tensor is, and from when: a linked list of (device, time) copies per tensor.
    cap = n_tensors + in_src.shape[0] + 1
    copy_head = np.full(n_tensors, -1, np.int64)
    copy_dev = np.empty(cap, np.int64)
    copy_time = np.empty(cap)
    copy_next = np.empty(cap, np.int64)
    n_copies = 0

    # Ready ops: a list with positions (for removal), and a heap of entries (start, op) ordered by
    # start, then topological position, then device (ETF's choice and its tie rules: `e_seq`).
    # An op's entry is current while entry_of[op] names it; others are stale and skipped.
    ready = np.empty(n, np.int64)
    ready_at = np.full(n, -1, np.int64)
    n_ready = 0
    restricted = np.zeros(n, np.bool_)  # scored on its favorite parent's device only
    entry_of = np.full(n, -1, np.int64)
    e_time = np.empty(2 * n + 16)
    e_seq = np.empty(2 * n + 16, np.int64)  # pos[op] * n_dev + device
    e_op = np.empty(2 * n + 16, np.int64)
    heap = np.empty(2 * n + 16, np.int64)
    n_heap = 0
    n_entries = 0

    data_ready = np.zeros(n_dev)
    arrival = np.empty(n_dev)
    touched = np.full(n, -1, np.int64)  # the step an op was last re-scored in (one re-score per step)
    fresh = np.empty(n, np.int64)
    max_free = free.max() if n_dev else 0.0

    for v in range(n):
        if remaining[v] == 0:
            ready[n_ready] = v
            ready_at[v] = n_ready
            n_ready += 1
    n_fresh = n_ready
    fresh[:n_ready] = ready[:n_ready]

    step = 0
    scheduled = 0
    shrank = True
    while True:
        # A ready op that fits nowhere fails the placement (free memory only shrinks): check the new
        # ones, or all when the most free memory shrank. The first in topological order is named.
        stuck = -1
        for i in range(n_ready if shrank else n_fresh):
            j = ready[i] if shrank else fresh[i]
            if group_device[group[j]] < 0 and group_bytes[group[j]] > max_free:
                if stuck < 0 or pos[j] < pos[stuck]:
                    stuck = j
        if stuck >= 0:
            return placement, stuck
        # Score the new ready ops and re-score those whose start may have come earlier.
        for i in range(n_fresh):
            j = fresh[i]
            t, d, held = _score(j, in_ptr, in_src, in_tensor, in_bytes, placement, finish, sender_free,
                                device_free, copy_head, copy_dev, copy_time, copy_next, group, group_bytes, free,
                                group_device, latency, bandwidth, favorite, data_ready, arrival)
            restricted[j] = held
            n_heap, n_entries = _add(j, t, pos[j] * n_dev + d, heap, n_heap, n_entries, e_time, e_seq, e_op, entry_of)
        n_fresh = 0
        if scheduled == n:
            break

        # Pop until the top, re-scored, still comes first.
        while True:
            e = heap[0]
            n_heap = heap_pop(heap, n_heap, e_time, e_seq)
            op = e_op[e]
            if entry_of[op] != e:
                continue
            t, d, held = _score(op, in_ptr, in_src, in_tensor, in_bytes, placement, finish, sender_free,
                                device_free, copy_head, copy_dev, copy_time, copy_next, group, group_bytes, free,
                                group_device, latency, bandwidth, favorite, data_ready, arrival)
            restricted[op] = held
            while n_heap and entry_of[e_op[heap[0]]] != heap[0]:
                n_heap = heap_pop(heap, n_heap, e_time, e_seq)
            if n_heap == 0 or earlier(t, pos[op] * n_dev + d, e_time[heap[0]], e_seq[heap[0]]):
                break
            n_heap, n_entries = _add(op, t, pos[op] * n_dev + d, heap, n_heap, n_entries, e_time, e_seq, e_op, entry_of)

        # Schedule `op` on `d`: commit its input transfers on the senders' queues.
        step += 1
        touched[op] = step
        entry_of[op] = -1
        n_rescore = 0
        begin = device_free[d]
        for k in range(in_ptr[op], in_ptr[op + 1]):
            u = in_src[k]
            tk = in_tensor[k]
            if tk < 0 or placement[u] == d:
                begin = max(begin, finish[u])
                continue
            s = placement[u]
            if not contention:
                begin = max(begin, finish[u] + (latency[s, d] + in_bytes[k] / bandwidth[s, d]))
                continue
            c = copy_head[tk]
            while c >= 0 and copy_dev[c] != d:
                c = copy_next[c]
            if c < 0:
                sent = max(finish[u], sender_free[s])
                sender_free[s] = sent + (latency[s, d] + in_bytes[k] / bandwidth[s, d])
                copy_dev[n_copies], copy_time[n_copies], copy_next[n_copies] = d, sender_free[s], copy_head[tk]
                copy_head[tk] = n_copies
                c = n_copies
                n_copies += 1
                # A new copy can make the tensor's other ready readers start earlier: re-score them.
                for kk in range(out_ptr[u], out_ptr[u + 1]):
                    j = out_dst[kk]
                    if out_tensor[kk] == tk and ready_at[j] >= 0 and touched[j] != step:
                        touched[j] = step
                        fresh[n_rescore] = j
                        n_rescore += 1
            begin = max(begin, copy_time[c])
        finish[op] = device_free[d] = begin + times[op, d]
        for tk in range(tensor_offset[op], tensor_offset[op + 1]):
            copy_dev[n_copies], copy_time[n_copies], copy_next[n_copies] = d, finish[op], copy_head[tk]
            copy_head[tk] = n_copies
            n_copies += 1
        placement[op] = d
        scheduled += 1
        g = group[op]
        shrank = False
        if group_device[g] < 0:
            group_device[g] = d
            shrank = free[d] == max_free
            free[d] -= group_bytes[g]
        # Out of the ready list.
        last = ready[n_ready - 1]
        ready[ready_at[op]] = last
        ready_at[last] = ready_at[op]
        ready_at[op] = -1
        n_ready -= 1

        # A favorite child held on its parent's device whose group can no longer go there is free
        # to go anywhere: re-score it.
        if shrank:
            max_free = free.max()
        for i in range(n_ready):
            j = ready[i]
            if restricted[j] and touched[j] != step:
                home = placement[favorite[j]]
                pinned = group_device[group[j]]
                if (pinned != home) if pinned >= 0 else (group_bytes[group[j]] > free[home]):
                    touched[j] = step
                    fresh[n_rescore] = j
                    n_rescore += 1
        n_fresh = n_rescore
        # Successors all of whose inputs are placed become ready.
        for k in range(out_ptr[op], out_ptr[op + 1]):
            v = out_dst[k]
            remaining[v] -= 1
            if remaining[v] == 0:
                ready[n_ready] = v
                ready_at[v] = n_ready
                n_ready += 1
                touched[v] = step
                fresh[n_fresh] = v
                n_fresh += 1
    return placement, -1


@numba.njit(cache=True)
def _add(j, t, seq, heap, n_heap, n_entries, e_time, e_seq, e_op, entry_of):
    """Make (t, seq) op ``j``'s current heap entry; returns (heap size, entries used). When the entry
    store is full, it first keeps only the current entries (at most one per op: room for n more)."""
    if n_entries == e_time.shape[0]:
        kept = 0
        n_heap = 0
        for e in range(n_entries):  # in index order, so no entry is overwritten before it is read
            if entry_of[e_op[e]] == e:
                e_time[kept], e_seq[kept], e_op[kept] = e_time[e], e_seq[e], e_op[e]
                entry_of[e_op[kept]] = kept
                n_heap = heap_push(heap, n_heap, e_time, e_seq, kept)
                kept += 1
        n_entries = kept
    e_time[n_entries], e_seq[n_entries], e_op[n_entries] = t, seq, j
    entry_of[j] = n_entries
    return heap_push(heap, n_heap, e_time, e_seq, n_entries), n_entries + 1


@numba.njit(cache=True)
def _score(j, in_ptr, in_src, in_tensor, in_bytes, placement, finish, sender_free, device_free,
           copy_head, copy_dev, copy_time, copy_next, group, group_bytes, free, group_device, latency, bandwidth,
           favorite, data_ready, arrival):
    """(earliest start, device, restricted to the favorite parent's device) of ready op ``j``."""
    n_dev = device_free.shape[0]
    g = group[j]
    pinned = group_device[g]
    only = pinned
    restricted = False
    if favorite[j] >= 0:
        home = placement[favorite[j]]
        if (pinned == home) if pinned >= 0 else (group_bytes[g] <= free[home]):
            only = home
            restricted = True
    lo, hi = (only, only + 1) if only >= 0 else (0, n_dev)
    data_ready[lo:hi] = 0.0
    for k in range(in_ptr[j], in_ptr[j + 1]):
        u = in_src[k]
        tk = in_tensor[k]
        if tk < 0:
            for dd in range(lo, hi):
                data_ready[dd] = max(data_ready[dd], finish[u])
            continue
        s = placement[u]
        leave = max(finish[u], sender_free[s])
        for dd in range(lo, hi):
            arrival[dd] = leave + latency[s, dd] + in_bytes[k] / bandwidth[s, dd]
        if lo <= s < hi:
            arrival[s] = finish[u]
        c = copy_head[tk]
        while c >= 0:
            dd = copy_dev[c]
            if lo <= dd < hi and copy_time[c] < arrival[dd]:
                arrival[dd] = copy_time[c]
            c = copy_next[c]
        for dd in range(lo, hi):
            data_ready[dd] = max(data_ready[dd], arrival[dd])
    best_t = np.inf
    best_d = -1
    for dd in range(lo, hi):
        if only < 0 and group_bytes[g] > free[dd]:
            continue
        t = max(data_ready[dd], device_free[dd])
        if t < best_t:
            best_t = t
            best_d = dd
    return best_t, best_d, restricted
