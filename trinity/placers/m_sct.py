"""m-SCT (Baechi, SoCC 2020): memory-constrained Small Communication Times.

Step 1, favorite children: solve the LP relaxation of Hanen & Munier's
scheduling problem with unbounded devices. Variables: start time s_i >= 0
of each op, x_e in [0, 1] for each data edge (0 = producer and consumer
share a device), makespan w. Minimise w subject to

* s_j >= s_i + p_i + c_e * x_e for each edge e = (i, j)
  (control edges: c_e = 0, no x),
* sum of x_e over i's data out-edges >= outdeg(i) - 1 (at most one child
  stays with i), and likewise over j's data in-edges,
* w >= s_i + p_i for every sink i,

with p_i the op's mean time over the devices and c_e the mean transfer time
of the edge over all links. An edge with x_e < 0.5 makes j the favorite
child of i; each parent keeps at most one favorite child and each child at
most one favorite parent (the smallest x_e wins, then the lower edge index),
since a tolerant LP solution can round to more.

Step 2, scheduling: m-ETF list scheduling with one rule added: a ready op
whose favorite parent is placed on device d may only go to d, unless memory
or its colocation group rule d out, in which case it gets the plain ETF
choice.

Simplifications against Baechi: parallel data edges between the same two
ops are merged into one LP edge carrying their summed bytes (they are one
placement decision); Baechi's scheduler additionally keeps a device idle
for the favorite child of its last op unless another op is urgent, which
this rule does not model.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from trinity.cluster import Cluster
from trinity.errors import PlacementError
from trinity.graph.ir import OpGraph
from trinity.placers.base import register
from trinity.placers.list_scheduling import list_schedule
from trinity.costs import op_times


def _first_per(key: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Entries of ``order`` that are the first with their ``key`` value."""
    _, first = np.unique(key[order], return_index=True)
    return order[first]


def favorite_parents(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """int64[n_ops]: each op's favorite parent from the rounded LP, or -1."""
    n, n_dev = graph.n_ops, cluster.n_devices
    a = graph.arrays
    p = op_times(graph, cluster).mean(axis=1)

    # One LP edge per (producer, consumer) pair with data; control-only pairs are plain precedences.
    data = a.src_output >= 0
    pairs, inverse = np.unique(a.src[data] * n + a.dst[data], return_inverse=True)
    nbytes = np.bincount(inverse, weights=a.edge_bytes[data], minlength=len(pairs))
    e_src, e_dst = pairs // n, pairs % n
    ctrl = np.setdiff1d(np.unique(a.src[~data] * n + a.dst[~data]), pairs)
    c_src, c_dst = ctrl // n, ctrl % n
    off = ~np.eye(n_dev, dtype=bool)
    if off.any():
        # Mean of latency + bytes / bandwidth over all links.
        comm = cluster.latency[off].mean() + nbytes * (1.0 / cluster.bandwidth[off]).mean()
    else:
        comm = np.zeros(len(pairs))

    m, k = len(pairs), len(ctrl)
    xs = n + np.arange(m)  # column of x_e; s_i is column i, w is column n + m
    w = n + m
    rows, cols, vals, rhs = [], [], [], []

    def add(r: np.ndarray, c: np.ndarray, v: np.ndarray) -> None:
        rows.append(r)
        cols.append(c)
        vals.append(np.broadcast_to(v, r.shape).astype(np.float64))

    # s_i - s_j + c_e x_e <= -p_i for data edges, then s_i - s_j <= -p_i for control edges.
    r = np.arange(m)
    add(r, e_src, 1.0)
    add(r, e_dst, -1.0)
    add(r, xs, comm)
    rhs.append(-p[e_src])
    r = m + np.arange(k)
    add(r, c_src, 1.0)
    add(r, c_dst, -1.0)
    rhs.append(-p[c_src])
    n_rows = m + k
    # -sum x_e <= 1 - degree, over out-edges then in-edges of ops with two or more.
    for end in (e_src, e_dst):
        deg = np.bincount(end, minlength=n)
        ops = np.flatnonzero(deg >= 2)
        row_of = np.full(n, -1, np.int64)
        row_of[ops] = n_rows + np.arange(len(ops))
        sel = deg[end] >= 2
        add(row_of[end[sel]], xs[sel], -1.0)
        rhs.append(1.0 - deg[ops])
        n_rows += len(ops)
    # s_i - w <= -p_i for sinks (other ops are bounded through their successors).
    sinks = np.flatnonzero(np.bincount(a.src, minlength=n) == 0)
    r = n_rows + np.arange(len(sinks))
    add(r, sinks, 1.0)
    add(r, np.full(len(sinks), w), -1.0)
    rhs.append(-p[sinks])
    n_rows += len(sinks)

    a_ub = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(n_rows, n + m + 1))
    cost = np.zeros(n + m + 1)
    cost[w] = 1.0
    bounds = np.zeros((n + m + 1, 2))
    bounds[:, 1] = np.inf
    bounds[xs, 1] = 1.0
    from scipy.optimize import linprog  # here: a process that loads the placers but not this one skips ~0.3 s of import

    res = linprog(cost, A_ub=a_ub, b_ub=np.concatenate(rhs), bounds=bounds, method="highs")
    if res.status != 0:
        raise PlacementError(f"m-sct: LP relaxation failed: {res.message}", field="placer")

    x = res.x[xs]
    fav = np.flatnonzero(x < 0.5)
    fav = fav[np.lexsort((fav, x[fav]))]  # smallest x first, then edge index
    fav = _first_per(e_src, fav)
    fav = _first_per(e_dst, fav[np.lexsort((fav, x[fav]))])
    parent = np.full(n, -1, np.int64)
    parent[e_dst[fav]] = e_src[fav]
    return parent


@register("m-sct")
def place_m_sct(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """m-ETF list scheduling that keeps each favorite child on its parent's device."""
    return list_schedule(graph, cluster, favorite_parent=favorite_parents(graph, cluster))
