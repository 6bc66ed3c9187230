"""Reference simulator: the semantics of `trinity.sim` written as plainly as possible.

Slow (Python objects, a heap of events, memory from a sweep over buffer
lifetimes afterwards). The tests hold the fast simulator to it exactly.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.costs import op_times
from trinity.sim.result import SimResult, lower_bound


#: The output a control edge reads: nothing, or an empty tensor where it crosses devices (``control_transfers``).
SIGNAL = -1


def simulate_reference(graph: OpGraph, cluster: Cluster, placement) -> SimResult:
    n_dev = cluster.n_devices
    dev = [int(d) for d in placement]
    times = op_times(graph, cluster)
    duration = [float(times[i, dev[i]]) for i in range(graph.n_ops)]
    idx = graph.index
    # Edges by (consumer or producer, output); a control edge reads output -1, the empty tensor a producer
    # sends over a control edge between devices when the cluster has control_transfers.
    out_edges: list[list[tuple[int, int]]] = [[] for _ in graph.ops]
    in_edges: list[list[tuple[int, int]]] = [[] for _ in graph.ops]
    for e in graph.edges:
        k = SIGNAL if e.is_control else e.src_output
        out_edges[idx[e.src]].append((idx[e.dst], k))
        in_edges[idx[e.dst]].append((idx[e.src], k))
    waiting = [len(in_edges[v]) for v in range(graph.n_ops)]

    # Per-device runnable ops, taken first in first out or (lifo) last in first out; with
    # lifo-arrivals-last an op readied by an arriving tensor is put at the end taken last.
    ready = [deque() for _ in range(n_dev)]
    lifo = cluster.ready_order != "fifo"
    arrivals_last = cluster.ready_order == "lifo-arrivals-last"
    outbox = [deque() for _ in range(n_dev)]  # per-device FIFO of tensors to send
    computing = [False] * n_dev
    sending = [0] * n_dev  # transfers each sender has on its links (at most the cluster's link_streams)
    streams = cluster.link_streams
    transfers: dict[tuple[int, int, int], dict] = {}  # (producer, output, destination) -> transfer
    start, end = [0.0] * graph.n_ops, [0.0] * graph.n_ops
    events: list = []  # (time, sequence, version, kind, payload)
    seq = 0
    now = 0.0
    # Co-running processors: what each busy processor runs (its event's sequence, kind, payload), its
    # uncontended work left, and the version of its pending event (a moved completion makes the old stale).
    corun = cluster.corun_slowdown
    running: dict[int, tuple] = {}
    left = [0.0] * n_dev
    version = [0] * n_dev
    stretch = 1.0

    def push(t, kind, payload):
        nonlocal seq
        heapq.heappush(events, (t, seq, 0, kind, payload))
        seq += 1

    def run_on(d, work, kind, payload):
        """Processor ``d`` takes ``work`` microseconds of uncontended work."""
        nonlocal seq
        left[d] = work
        version[d] += 1
        running[d] = (seq, kind, payload)
        heapq.heappush(events, (now + work * stretch, seq, version[d], kind, payload))
        seq += 1

    def one_input_arrived(v, from_another_device=False):
        waiting[v] -= 1
        if waiting[v] == 0:
            if from_another_device and arrivals_last:
                ready[dev[v]].appendleft(v)
            else:
                ready[dev[v]].append(v)

    share, receive_share = cluster.send_cpu_share, cluster.receive_cpu_share

    def cpu_part(src, dst, nbytes):
        """What a CPU share of a transfer is a share of: its whole time, or its bytes' alone; a tensor with
        bytes adds the processors' fixed cost of a transfer."""
        fixed = cluster.transfer_cpu_us if nbytes > 0 else 0.0
        if cluster.cpu_share_of == "bytes":
            return nbytes / cluster.bandwidth[src, dst] + fixed
        return cluster.transfer_us(src, dst, nbytes) + fixed

    def take_last(d, item):
        """Put ``item`` on device ``d``'s ready list where it is taken after everything on it."""
        (ready[d].appendleft if lifo else ready[d].append)(item)

    def release(x):
        """Transfer ``x`` leaves: with a CPU share the sender's processor serialises it first, in turn with ops."""
        (ready if share > 0 else outbox)[x["src"]].append(x)

    # With send_on_request each copy's request waits at the far end of the receiver's list until issued, then at
    # the far end of the sender's until taken up; a tensor done before then is held until it is.
    requests: dict[tuple[int, int, int], dict] = {}  # (producer, output, destination) -> its request
    firsts = []  # (the op that reads it first, producer, out-edge position, copy) per request
    if cluster.send_on_request:
        for u in range(graph.n_ops):
            for position, (v, k) in enumerate(out_edges[u]):
                if dev[v] != dev[u] and (k != SIGNAL or cluster.control_transfers) and (u, k, dev[v]) not in requests:
                    requests[(u, k, dev[v])] = {"copy": (u, k, dev[v]), "at": dev[v], "taken_up": False, "held": None}
                    firsts.append((v, u, position, (u, k, dev[v])))

    def dispatch():
        nonlocal stretch
        for d in range(n_dev):
            if not computing[d] and ready[d]:
                v = ready[d].pop() if lifo else ready[d].popleft()
                computing[d] = True
                if isinstance(v, dict) and "copy" in v:  # a request issued (request_cpu_us) or taken up (no time)
                    # the device goes with it: an issued request moves on
                    run_on(d, cluster.request_cpu_us if v["at"] == v["copy"][2] else 0.0, "request", (d, v))
                    continue
                if isinstance(v, tuple):  # the receiver's CPU share of transfer v[1]
                    x = v[1]
                    run_on(d, receive_share * cpu_part(x["src"], d, x["bytes"]), "received", x)
                    continue
                if isinstance(v, dict):  # the sender's CPU share of transfer v
                    v["start"] = now
                    run_on(d, share * cpu_part(d, v["dst"], v["bytes"]), "serialised", v)
                    continue
                start[v] = now
                run_on(d, duration[v], "op", v)
        for d in range(n_dev):
            while sending[d] < streams and outbox[d]:
                x = outbox[d].popleft()
                sending[d] += 1
                if share == 0:
                    x["start"] = now
                if cluster.cpu_share_of == "bytes":  # the latency is on the wire alone
                    wire = cluster.latency[d, x["dst"]] + (1 - share) * (x["bytes"] / cluster.bandwidth[d, x["dst"]])
                else:
                    wire = (1 - share) * cluster.transfer_us(d, x["dst"], x["bytes"])
                x["end"] = now + wire
                if cluster.latency_overlaps:  # the link is free once the bytes are on it; the latency overlaps
                    in_flight = cluster.latency[d, x["dst"]] * (1 if cluster.cpu_share_of == "bytes" else 1 - share)
                    push(x["end"] - in_flight, "link_free", x)
                push(x["end"], "transfer", x)
        new_stretch = 1.0 + corun * (max(len(running), 1) - 1)
        if corun > 0 and new_stretch != stretch:  # every running item's completion moves
            stretch = new_stretch
            for d, (sq, kind, payload) in running.items():
                version[d] += 1
                heapq.heappush(events, (now + left[d] * stretch, sq, version[d], kind, payload))

    for v in range(graph.n_ops):
        if waiting[v] == 0:
            ready[dev[v]].append(v)
    for _, _, _, key in sorted(firsts):  # after the roots, in the order of the ops that read them
        take_last(key[2], requests[key])
    dispatch()
    while events:
        t, _, ver, kind, payload = heapq.heappop(events)
        d = (dev[payload] if kind == "op" else payload["dst"] if kind == "received" else payload[0]
             if kind == "request" else payload["src"])
        if kind not in ("transfer", "link_free") and ver != version[d]:
            continue  # a completion that moved
        if corun > 0:
            for r in running:
                left[r] -= (t - now) / stretch
        now = t
        if kind == "link_free":
            sending[d] -= 1
            dispatch()
            continue
        if kind != "transfer":
            del running[d]
        if kind == "op":
            u = payload
            end[u] = now
            computing[dev[u]] = False
            for v, k in out_edges[u]:
                if (k == SIGNAL and not cluster.control_transfers) or dev[v] == dev[u]:
                    one_input_arrived(v)
                else:
                    key = (u, k, dev[v])
                    if key not in transfers:  # a tensor goes once to each consuming device
                        nbytes = 0 if k == SIGNAL else graph.ops[u].output_bytes[k]
                        transfers[key] = {"src": dev[u], "dst": dev[v], "bytes": nbytes, "producer": u, "output": k}
                        if key in requests and not requests[key]["taken_up"]:
                            requests[key]["held"] = transfers[key]
                        elif share > 0 and cluster.sends_last and nbytes > 0:  # after all the work it has ready
                            take_last(dev[u], transfers[key])
                        else:
                            release(transfers[key])
        elif kind == "request":
            computing[d] = False
            request = payload[1]
            if request["at"] == request["copy"][2]:  # issued: to the far end of the sender's list
                request["at"] = dev[request["copy"][0]]
                take_last(request["at"], request)
            else:  # taken up: a tensor already done goes now (its handling serialises it next)
                request["taken_up"] = True
                if request["held"] is not None:
                    release(request["held"])
        elif kind == "serialised":
            computing[payload["src"]] = False
            outbox[payload["src"]].append(payload)
        elif (kind == "transfer" and receive_share > 0
              and cpu_part(payload["src"], payload["dst"], payload["bytes"]) > 0):
            # the receiver's processor takes it up next (an empty tensor's bytes take it no time)
            sending[payload["src"]] -= 0 if cluster.latency_overlaps else 1
            getattr(ready[payload["dst"]], "append" if lifo else "appendleft")(("received", payload))
        else:
            x = payload
            if kind == "transfer":
                sending[x["src"]] -= 0 if cluster.latency_overlaps else 1
            else:
                computing[x["dst"]] = False
            for v, k in out_edges[x["producer"]]:
                if k == x["output"] and dev[v] == x["dst"]:
                    one_input_arrived(v, from_another_device=True)
        dispatch()

    # Memory: every buffer is live over [alloc, free); the peak is the largest sum at any instant.
    sent_until: dict[tuple[int, int], list[float]] = {}  # (producer, output) -> its transfers' ends
    for (u, k, _), x in transfers.items():
        sent_until.setdefault((u, k), []).append(x["end"])
    buffers: list[tuple[int, float, float, int]] = []  # (device, alloc, free, bytes)
    for u, op in enumerate(graph.ops):
        buffers.append((dev[u], start[u], end[u], op.temporary_bytes))
        for k, nbytes in enumerate(op.output_bytes):
            users = [end[v] for v, kk in out_edges[u] if kk == k and dev[v] == dev[u]]
            # A variable's output is its persistent storage: no extra bytes on its own device.
            own_bytes = 0 if op.persistent_bytes > 0 else nbytes
            buffers.append((dev[u], start[u], max([end[u]] + users + sent_until.get((u, k), [])), own_bytes))
    for (u, k, d), x in transfers.items():
        users = [end[v] for v, kk in out_edges[u] if kk == k and dev[v] == d]
        buffers.append((d, x["start"], max(users), x["bytes"]))
    peak = np.zeros(n_dev)
    for d in range(n_dev):
        changes: dict[float, float] = {}  # time -> net change of live bytes
        for dd, alloc, free, nbytes in buffers:
            if dd == d and free > alloc:
                changes[alloc] = changes.get(alloc, 0) + nbytes
                changes[free] = changes.get(free, 0) - nbytes
        live = 0.0
        for t in sorted(changes):
            live += changes[t]
            peak[d] = max(peak[d], live)
    persistent = np.zeros(n_dev)
    busy = np.zeros(n_dev)
    for u, op in enumerate(graph.ops):
        persistent[dev[u]] += op.persistent_bytes
        busy[dev[u]] += duration[u]
    sent, received = np.zeros(n_dev), np.zeros(n_dev)
    for x in transfers.values():
        sent[x["src"]] += x["bytes"]
        received[x["dst"]] += x["bytes"]
    memory = persistent + peak
    trace = [(x["producer"], x["output"], x["src"], x["dst"], x["bytes"], x["start"], x["end"])
             for x in sorted(transfers.values(), key=lambda x: (x["start"], x["src"], x["producer"], x["output"], x["dst"]))]
    # The master's step protocol: one more round per extra device the step uses.
    sync = cluster.step_sync_us * (len(set(dev)) - 1) if dev else 0.0
    return SimResult(
        step_time_us=max(end, default=0.0) + sync,
        busy_us=busy, sent_bytes=sent, received_bytes=received, peak_memory_bytes=memory,
        out_of_memory=memory > cluster.memory, lower_bound_us=lower_bound(graph, times, n_dev),
        op_start=np.array(start), op_end=np.array(end), placement=np.asarray(dev, np.int64),
        transfers=np.array(trace, dtype=float).reshape(-1, 7),
    )
