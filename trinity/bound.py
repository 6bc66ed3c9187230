"""A lower bound on the simulated step time of every placement that counts communication.

`step_time_bound(graph, cluster)` returns `Bound`: ``bound_us``, a time no placement of the graph on
the cluster can beat in the simulator (`trinity.sim`), and how it was found.

Why it is a lower bound. The simulator runs, per device, one op at a time and one outgoing transfer at
a time; a tensor reaches another device ``latency + bytes / bandwidth`` after its producer ends (the
sender's processor does ``send_cpu_share`` of that, the link the rest); its step time is the last op's
end. Its schedule is a greedy one, so for a placement p its step time is at least OPT(p), the shortest
schedule of p under those rules. Pick a chain of ops s_1 -> s_2 -> ... -> s_m along a longest path
(fastest times), s_1 a source, s_m a sink. The closed *segment* k is s_k, s_{k+1} and every op that is
both a descendant of s_k and an ancestor of s_{k+1}. In any schedule every op of segment k starts after
s_k starts and ends before s_{k+1} starts (so do the transfers between them, and memory is ignored), so
the schedule cut to segment k, shifted to start at 0, is a schedule of segment k alone with s_{k+1}'s
duration set to 0: its length, start(s_{k+1}) - start(s_k), is at least L_k, the shortest makespan of
segment k alone over all its placements (colocation kept). The lengths telescope:

    step time >= sum_k L_k + (fastest time of s_m)

and also >= the compute-only bound (`trinity.sim.result.lower_bound`). Each L_k is bounded below by a
MILP of placement and scheduling with communication on the segment (`segment_milp`), solved by HiGHS
(`scipy.optimize.milp`) within a time limit: its *dual* bound (not its incumbent) is used, and never
less than the segment's own compute-only bound max(critical path, work / devices). Ops outside every
segment (those off the chain's intervals, such as weight-gradient ops in a training graph) only enter
through the compute-only bound: dropping ops, edges or durations can only lower a bound, never make it
invalid. Segments hold at most ``max_segment_ops`` ops (the node budget): larger ones see more of the
communication a split costs, and cost the solver more.

The MILP of a segment: x[g, d] (colocation unit g on device d), start times, the makespan M;
precedence s_v >= s_u + t_u, and for a data edge and devices d != e, s_v >= s_u + t_u + c(d, e) *
(x[u, d] + x[v, e] - 1) (the transfer delay, linearised); ops of positive duration that no path orders
are ordered by a binary per pair when they share a device (big-M); each device's compute load and each
sender's transfer load (a tensor sent once per consuming device; over k ``link_streams``, 1/k of it)
at most M; M at most one device's
serial time (a feasible placement, so no optimum is cut off). On interchangeable devices the first
colocation unit sits on device 0, the second on device 0 or 1, and so on (relabelling devices changes nothing).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from trinity.cluster import Cluster, interchangeable_devices
from trinity.costs import op_times
from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph
from trinity.sim.result import lower_bound

#: Ranges a caller may ask for: seconds of solver time per case, ops per segment.
TIME_LIMIT_RANGE = (0.1, 86_400.0)
NODES_RANGE = (2, 400)


@dataclass
class SegmentBound:
    """One segment's MILP: its ops, the bound used for it, the solver's dual bound and incumbent."""

    n_ops: int
    bound_us: float  # max(dual bound, compute-only bound of the segment)
    compute_only_us: float
    dual_us: float | None  # None: not solved (a chain, nothing to order)
    incumbent_us: float | None
    optimal: bool
    seconds: float


@dataclass
class Bound:
    bound_us: float  # no placement simulates faster
    compute_only_us: float  # max(critical path, work / devices)
    chain_us: float  # sum of the segments' bounds + the last op
    segments: list[SegmentBound] = field(default_factory=list)
    seconds: float = 0.0
    time_limit_s: float = 0.0
    max_segment_ops: int = 0
    pivot_us: float = 0.0  # the chain before and after one separator, each against the work there (`_pivot_bound`)

    @property
    def solved(self) -> int:
        return sum(1 for s in self.segments if s.dual_us is not None)

    @property
    def optimal(self) -> int:
        return sum(1 for s in self.segments if s.optimal)

    @property
    def milp_gap(self) -> float:
        """Largest relative gap (incumbent - dual) / incumbent of a segment MILP stopped by its time limit."""
        gaps = [(s.incumbent_us - s.dual_us) / s.incumbent_us for s in self.segments
                if s.dual_us is not None and s.incumbent_us and not s.optimal]
        return max(gaps, default=0.0)


def check_options(time_limit_s, max_segment_ops) -> None:
    """Refuse a time limit or node budget out of range, naming the field."""
    lo, hi = TIME_LIMIT_RANGE
    if not isinstance(time_limit_s, (int, float)) or isinstance(time_limit_s, bool) \
            or not math.isfinite(time_limit_s) or not lo <= time_limit_s <= hi:
        raise TrinityError(f"must be a number of seconds in [{lo:g}, {hi:g}], got {time_limit_s!r}",
                           field="time_limit")
    lo, hi = NODES_RANGE
    if not isinstance(max_segment_ops, int) or isinstance(max_segment_ops, bool) or not lo <= max_segment_ops <= hi:
        raise TrinityError(f"must be an integer in [{lo}, {hi}], got {max_segment_ops!r}", field="nodes")


class _Reach:
    """Topological ranks, ancestors and descendants of every op (Python-int bitsets; an op is in neither of its own)."""

    def __init__(self, graph: OpGraph):
        a = graph.arrays
        order = graph.topological_order()
        self.rank = np.empty(graph.n_ops, np.int64)
        self.rank[order] = np.arange(graph.n_ops)
        self.anc = [0] * graph.n_ops
        for v in order:
            acc = 0
            for u in a.src[a.in_edges[a.in_ptr[v]:a.in_ptr[v + 1]]]:
                acc |= self.anc[u] | (1 << int(u))
            self.anc[v] = acc
        self.desc = [0] * graph.n_ops
        for u in order[::-1]:
            acc = 0
            for v in a.dst[a.out_edges[a.out_ptr[u]:a.out_ptr[u + 1]]]:
                acc |= self.desc[v] | (1 << int(v))
            self.desc[u] = acc

    def ordered(self, u: int, v: int) -> bool:
        """A path joins u and v (either way)."""
        return bool((self.desc[u] >> v) & 1 or (self.desc[v] >> u) & 1)


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def critical_path(graph: OpGraph, fastest: np.ndarray) -> list[int]:
    """A longest path (op times ``fastest``), source to sink, as op indices."""
    a = graph.arrays
    finish = np.zeros(graph.n_ops)
    best_pred = np.full(graph.n_ops, -1)
    for v in graph.topological_order():
        preds = a.src[a.in_edges[a.in_ptr[v]:a.in_ptr[v + 1]]]
        if len(preds):
            j = int(np.argmax(finish[preds]))
            best_pred[v] = preds[j]
            finish[v] = finish[preds[j]]
        finish[v] += fastest[v]
    order = graph.topological_order()
    v = int(order[::-1][np.argmax(finish[order][::-1])])  # the last of the latest: a sink, not a free op's parent
    path = [v]
    while best_pred[v] >= 0:
        v = int(best_pred[v])
        path.append(v)
    return path[::-1]


def segments(graph: OpGraph, fastest: np.ndarray, max_ops: int, reach: _Reach | None = None) -> list[list[int]]:
    """The chain's closed segments along a critical path, in topological order: each starts with its first
    separator and ends with the next, each as long as ``max_ops`` ops allow (a segment between two adjacent
    path ops may hold more: it cannot be cut)."""
    path = critical_path(graph, fastest)
    reach = reach or _Reach(graph)
    anc, desc = reach.anc, reach.desc
    out, i = [], 0
    while i < len(path) - 1:
        a = path[i]
        j = i + 1
        # a segment only grows along the path (an ancestor of s_j is one of s_{j+1}): extend while it fits
        while j + 1 < len(path) and bin(desc[a] & anc[path[j + 1]]).count("1") + 2 <= max_ops:
            j += 1
        b = path[j]
        inner = sorted(_bits(desc[a] & anc[b]), key=lambda v: reach.rank[v])
        out.append([a] + inner + [b])
        i = j
    return out


def _compute_only(graph: OpGraph, ops: list[int], t: np.ndarray, n_dev: int) -> float:
    """max(critical path, work / devices) of ops (in topological order) alone, ``t`` their fastest times."""
    pos = {v: k for k, v in enumerate(ops)}
    a = graph.arrays
    finish = np.zeros(len(ops))
    for k, v in enumerate(ops):
        preds = [pos[u] for u in a.src[a.in_edges[a.in_ptr[v]:a.in_ptr[v + 1]]] if u in pos]
        finish[k] = (finish[preds].max() if preds else 0.0) + t[k]
    return max(float(finish.max()), float(t.sum()) / n_dev)


def segment_milp(graph: OpGraph, cluster: Cluster, times: np.ndarray, ops: list[int], reach: _Reach,
                 time_limit_s: float, *, last_is_separator: bool = True) -> tuple[float | None, float | None, bool]:
    """(dual bound, incumbent, solved to optimality) in microseconds of the shortest makespan of ``ops`` (in
    topological order) alone over every placement, the last op's duration taken as 0 where it is the next
    segment's separator; None where the solver found none in ``time_limit_s``. The model is the module
    docstring's."""
    from scipy.optimize import LinearConstraint, milp
    from scipy.sparse import coo_matrix

    a = graph.arrays
    n_dev = cluster.n_devices
    scale = 1e-3  # the model in milliseconds: big-M terms stay moderate
    t = times[ops] * scale
    if last_is_separator:
        t[-1] = 0.0
    pos = {v: k for k, v in enumerate(ops)}
    unit_ids: dict[int, int] = {}
    unit = np.array([unit_ids.setdefault(int(a.group[v]), len(unit_ids)) for v in ops])
    n_units, n = len(unit_ids), len(ops)
    # variables: x[unit, d] | start[op] | M | order[pair] | sent[tensor, d, e]
    X, S, M = 0, n_units * n_dev, n_units * n_dev + n
    nvar = M + 1
    xv = lambda k, d: X + unit[k] * n_dev + d  # noqa: E731
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)
             if t[i].max() > 0 and t[j].max() > 0 and not reach.ordered(ops[i], ops[j])]
    O = nvar
    nvar += len(pairs)
    share = cluster.send_cpu_share
    rows, cols, vals, lo, hi = [], [], [], [], []

    def row(entries, lb, ub=np.inf):
        r = len(lo)
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(lb)
        hi.append(ub)

    for k in range(n):  # one device per unit (once per unit)
        if k == int(np.flatnonzero(unit == unit[k])[0]):
            row([(xv(k, d), 1.0) for d in range(n_dev)], 1.0, 1.0)
    dur = lambda k: [(xv(k, d), -t[k, d]) for d in range(n_dev)]  # noqa: E731  (minus the duration)
    for k in range(n):  # M >= end
        row([(M, 1.0), (S + k, -1.0)] + dur(k), 0.0)
    horizon = float(t.sum(axis=0).min())  # one device runs all: feasible, so the optimum is no later
    big = horizon + float(t.max()) + 1.0
    sent_terms: dict[int, list] = {d: [] for d in range(n_dev)}
    tensors: dict[int, list[int]] = {}  # tensor -> consumers' positions
    for k, v in enumerate(ops):
        for e in a.in_edges[a.in_ptr[v]:a.in_ptr[v + 1]]:
            u = int(a.src[e])
            if u not in pos:
                continue
            i = pos[u]
            row([(S + k, 1.0), (S + i, -1.0)] + dur(i), 0.0)  # precedence
            tensor = int(a.edge_tensor[e])
            if tensor < 0 or unit[i] == unit[k]:
                continue
            tensors.setdefault(tensor, [])
            if k not in tensors[tensor]:
                tensors[tensor].append(k)
            nbytes = float(a.tensor_bytes[tensor])
            for d in range(n_dev):
                for f in range(n_dev):
                    if d != f:
                        c = (cluster.latency[d, f] + nbytes / cluster.bandwidth[d, f]) * scale
                        # s_k >= s_i + t_i + c (x[i, d] + x[k, f] - 1)
                        row([(S + k, 1.0), (S + i, -1.0), (xv(i, d), -c), (xv(k, f), -c)] + dur(i), -c)
    for tensor, consumers in tensors.items():
        i = pos[int(a.tensor_owner[tensor])]
        nbytes = float(a.tensor_bytes[tensor])
        for d in range(n_dev):
            for f in range(n_dev):
                if d == f:
                    continue
                y = nvar
                nvar += 1
                c = (cluster.latency[d, f] + nbytes / cluster.bandwidth[d, f]) * scale
                sent_terms[d].append((y, c))
                for k in consumers:  # y >= x[i, d] + x[k, f] - 1
                    row([(y, 1.0), (xv(i, d), -1.0), (xv(k, f), -1.0)], -1.0)
    for d in range(n_dev):  # each device's compute (and its processor's share of sending), each sender's link
        row([(M, 1.0)] + [(xv(k, d), -t[k, d]) for k in range(n)] + [(y, -share * c) for y, c in sent_terms[d]],
            0.0)
        if share < 1.0 and sent_terms[d]:
            # k streams per sender carry its transfers k at a time: the link's load is 1/k of their sum
            row([(M, 1.0)] + [(y, -(1.0 - share) * c / cluster.link_streams) for y, c in sent_terms[d]], 0.0)
    for p, (i, j) in enumerate(pairs):  # same device: one before the other
        o = O + p
        for d in range(n_dev):
            row([(S + j, 1.0), (S + i, -1.0), (o, -big), (xv(i, d), -big), (xv(j, d), -big)], t[i, d] - 3 * big)
            row([(S + i, 1.0), (S + j, -1.0), (o, big), (xv(i, d), -big), (xv(j, d), -big)], t[j, d] - 2 * big)
    objective = np.zeros(nvar)
    objective[M] = 1.0
    lower, upper = np.zeros(nvar), np.full(nvar, np.inf)
    upper[X:S] = 1.0
    upper[O:O + len(pairs)] = 1.0
    upper[M] = horizon
    if interchangeable_devices(cluster):  # relabelling devices changes nothing: label them in order of first use,
        for u in range(min(n_units, n_dev)):  # so the u-th unit sits on one of devices 0..u
            upper[X + u * n_dev + u + 1:X + (u + 1) * n_dev] = 0.0
    integrality = np.zeros(nvar)
    integrality[X:S] = 1
    integrality[O:O + len(pairs)] = 1
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(lo), nvar)).tocsr()
    res = milp(objective, integrality=integrality, bounds=(lower, upper),
               constraints=LinearConstraint(matrix, np.array(lo), np.array(hi)),
               options={"time_limit": float(time_limit_s), "disp": False, "mip_rel_gap": 1e-9})
    dual = getattr(res, "mip_dual_bound", None)
    optimal = res.status == 0
    incumbent = float(res.fun) / scale if res.fun is not None and res.x is not None else None
    if optimal and incumbent is not None:
        dual = res.fun if dual is None or not math.isfinite(dual) else max(dual, -math.inf)
    if dual is None or not math.isfinite(dual):
        return None, incumbent, False
    # HiGHS proves the bound within its feasibility tolerance (1e-6 relative): shave that off
    return max(0.0, float(dual) * (1 - 1e-6) / scale - 1e-6), incumbent, optimal


def step_time_bound(graph: OpGraph, cluster: Cluster, *, time_limit_s: float = 60.0, max_segment_ops: int = 40,
                    times: np.ndarray | None = None, show_progress: bool = False) -> Bound:
    """The lower bound of the module docstring, with ``time_limit_s`` seconds of solver time in all."""
    from trinity.progress import progress

    check_options(time_limit_s, max_segment_ops)
    t0 = time.perf_counter()
    times = op_times(graph, cluster) if times is None else times
    n_dev = cluster.n_devices
    fastest = times.min(axis=1) if graph.n_ops else np.zeros(0)
    compute_only = lower_bound(graph, times, n_dev)
    if graph.n_ops == 0:
        return Bound(0.0, 0.0, 0.0, [], 0.0, time_limit_s, max_segment_ops)
    reach = _Reach(graph)
    whole = graph.n_ops <= max_segment_ops  # the whole graph is one segment, its last op no separator
    parts = [list(graph.topological_order())] if whole else segments(graph, fastest, max_segment_ops, reach)
    # what the solver gets: segments with two ops of positive duration that no path orders
    def needs_solver(ops):
        busy = [v for v in (ops if whole else ops[:-1]) if times[v].max() > 0]
        return n_dev > 1 and any(not reach.ordered(u, v) for i, u in enumerate(busy) for v in busy[i + 1:])
    todo = [needs_solver(ops) for ops in parts]
    left_to_solve = sum(todo)
    out: list[SegmentBound] = []
    for ops, solve in zip(progress(parts, desc="bound", unit="segment", disable=not show_progress), todo):
        s0 = time.perf_counter()
        t_fast = fastest[ops].copy()
        if not whole:
            t_fast[-1] = 0.0
        own = _compute_only(graph, ops, t_fast, n_dev)
        dual = incumbent = None
        optimal = False
        if solve:
            remaining = time_limit_s - (time.perf_counter() - t0)
            share = max(remaining, 0.0) / left_to_solve
            left_to_solve -= 1
            if share >= 0.05:
                dual, incumbent, optimal = segment_milp(graph, cluster, times, ops, reach, share,
                                                        last_is_separator=not whole)
        else:  # nothing to order on a device: the segment's critical path is its optimum's bound
            optimal = True
        out.append(SegmentBound(len(ops), max(own, dual or 0.0), own, dual, incumbent, optimal,
                                time.perf_counter() - s0))
    chain = sum(s.bound_us for s in out) + (0.0 if whole or not parts else float(fastest[parts[-1][-1]]))
    pivot = 0.0 if whole else _pivot_bound(parts, out, reach, fastest, n_dev)
    return Bound(max(compute_only, chain, pivot), compute_only, chain, out, time.perf_counter() - t0,
                 time_limit_s, max_segment_ops, pivot)


def _pivot_bound(parts: list[list[int]], bounds: list[SegmentBound], reach: _Reach, fastest: np.ndarray,
                 n_dev: int) -> float:
    """max over separators s_k of  max(sum_{i<k} L_i, work of s_k's ancestors / D)  +  fastest(s_k)  +
    max(sum_{i>=k} L_i (s_k's own time out) + fastest(s_m), work of s_k's descendants / D).
    Every ancestor of s_k ends before it starts and every descendant starts after it ends, so the chain's
    bound before (after) s_k and the ancestors' (descendants') work spread over every device both bound
    the time before (after) it: this lets the chain's communication count beside the rest of the work."""
    lengths = np.array([b.bound_us for b in bounds])
    last = float(fastest[parts[-1][-1]])
    best = 0.0
    for k, ops in enumerate(parts):
        s = ops[0]
        before = max(float(lengths[:k].sum()), _work(reach.anc[s], fastest) / n_dev)
        after_chain = float(lengths[k:].sum()) - float(fastest[s]) + last
        after = max(after_chain, _work(reach.desc[s], fastest) / n_dev)
        best = max(best, before + float(fastest[s]) + after)
    return best


def _work(mask: int, fastest: np.ndarray) -> float:
    return float(fastest[_bits(mask)].sum()) if mask else 0.0


@dataclass
class Incumbent:
    """The best placement found by placers, simulated: an upper bound on the optimum."""

    method: str
    step_time_us: float
    placement: np.ndarray


#: cheap placers whose best simulated step time is the incumbent (an upper bound on the optimum)
INCUMBENT_PLACERS = ("single", "metis", "m-topo", "m-etf")


def incumbent(graph: OpGraph, cluster: Cluster, placers=INCUMBENT_PLACERS, extra: dict | None = None) -> Incumbent:
    """The fastest placement that fits among ``placers``' and ``extra`` (name -> placement), simulated."""
    from trinity.placers import place_each
    from trinity.sim import Simulator

    sim = Simulator(graph, cluster)
    placed, _ = place_each(placers, graph, cluster)
    candidates = {name: r.placement for name, r in placed.items()} | dict(extra or {})
    best = None
    for name, p in candidates.items():
        res = sim.simulate(p)
        if res.fits and (best is None or res.step_time_us < best.step_time_us):
            best = Incumbent(name, res.step_time_us, res.placement)
    if best is None:
        raise TrinityError("no placer's placement fits the devices' memory", field="placers")
    return best
