"""METIS: balanced k-way min-cut partition of the op graph, one part per device.

Each colocation group is contracted into one vertex, so METIS can never
split a group (contraction may close cycles; METIS partitions undirected
graphs, so that does not matter). A vertex weighs its group's compute time
(mean over devices), an edge the bytes of all op edges between its two
groups; METIS wants positive integers, so both are scaled so the largest is
about 1e6 and the smallest is 1 (an edge that moves nothing still binds its
ends a little). On a heterogeneous cluster part d targets a share of the
compute proportional to device d's speed. Part d goes to device d.

METIS balances compute only, so a memory repair follows: while a device
holds more static memory than it has, one of its groups moves to the device
with the most free memory, choosing the group whose move adds the fewest
cut bytes per byte it frees.
"""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
import pymetis
import scipy.sparse as sp

from trinity.cluster import Cluster
from trinity.errors import PlacementError
from trinity.graph.ir import OpGraph
from trinity.placers.base import register
from trinity.costs import op_times


def _scaled(values: np.ndarray, top: float = 1e6) -> np.ndarray:
    """Integers >= 1 proportional to ``values``, the largest about ``top``."""
    peak = values.max(initial=0.0)
    if peak <= 0:
        return np.ones(len(values), np.int64)
    return np.maximum(1, np.rint(values / peak * top)).astype(np.int64)


def group_graph(graph: OpGraph) -> sp.csr_matrix:
    """The undirected graph of colocation groups (the policy's units): one symmetric entry per pair of groups
    joined by an edge, weighing the bytes of all edges between them (0 where only control edges join them)."""
    a = graph.arrays
    n = a.n_groups
    gs, gd = a.group[a.src], a.group[a.dst]
    cross = gs != gd
    lo, hi = np.minimum(gs, gd)[cross], np.maximum(gs, gd)[cross]
    pairs, inverse = np.unique(lo * n + hi, return_inverse=True)
    nbytes = np.bincount(inverse, weights=a.edge_bytes[cross], minlength=len(pairs))
    u, v = pairs // n, pairs % n
    return sp.csr_matrix((np.concatenate([nbytes, nbytes]), (np.concatenate([u, v]), np.concatenate([v, u]))),
                         shape=(n, n))


def metis_parts(adjacency: sp.csr_matrix, vertex_weights: np.ndarray, n_parts: int, *, seed: int = 0,
                tpwgts: list[float] | None = None, recursive: bool = False) -> np.ndarray:
    """METIS's k-way partition of ``adjacency`` (symmetric, edge weights in any unit) into ``n_parts`` parts
    balanced by ``vertex_weights``, both scaled to METIS's integers; part per vertex. Fewer vertices than parts
    is the caller's case (METIS refuses it). ``recursive``: by recursive bisection, whatever ``n_parts`` (pymetis
    otherwise bisects up to 8 parts and partitions k ways above)."""
    with _silenced_c_output():  # METIS prints (and survives) empty bisections on graphs of many components
        result = pymetis.part_graph(
            n_parts, adjacency=pymetis.CSRAdjacency(adjacency.indptr.astype(np.int64),
                                                    adjacency.indices.astype(np.int64)),
            vweights=_scaled(vertex_weights), eweights=_scaled(adjacency.data), tpwgts=tpwgts,
            recursive=recursive or None, options=pymetis.Options(seed=seed))
    return np.asarray(result.vertex_part, np.int64)


@contextlib.contextmanager
def _silenced_c_output():
    """Send what C code writes to stdout and stderr to /dev/null for the duration (Python's own streams are
    flushed first, so nothing of theirs is lost)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _repair_memory(graph: OpGraph, cluster: Cluster, part: np.ndarray, group_bytes: np.ndarray,
                   adj: sp.csr_matrix) -> None:
    """Move groups off over-full devices, updating ``part`` (group -> device) in place.

    Raises PlacementError when no group of an over-full device fits elsewhere.
    """
    capacity = cluster.memory.astype(np.float64)
    used = np.bincount(part, weights=group_bytes, minlength=cluster.n_devices)
    # Groups only move onto devices with room, so the set of over-full devices only shrinks.
    while (used > capacity).any():
        d = int(np.argmax(used - capacity))
        free = capacity - used
        free[d] = -np.inf
        t = int(np.argmax(free))
        movable = np.flatnonzero((part == d) & (group_bytes > 0) & (group_bytes <= free[t]))
        if not len(movable):
            names = cluster.device_names
            big = int(np.flatnonzero(part == d)[np.argmax(group_bytes[part == d])])
            op = graph.ops[int(np.argmax(graph.arrays.group == big))]  # the group's first member
            raise PlacementError(
                f"metis: {names[d]} holds {used[d] / 1e9:.3f} GB but has {capacity[d] / 1e9:.3f} GB, and none of "
                f"its colocation groups fits in the {free[t] / 1e9:.3f} GB free on {names[t]}; the largest is op "
                f"{op.name!r} with its group ({group_bytes[big] / 1e9:.3f} GB)")
        links = adj[movable]
        added_cut = links @ (part == d).astype(np.float64) - links @ (part == t).astype(np.float64)
        g = int(movable[np.argmin(added_cut / group_bytes[movable])])
        part[g] = t
        used[d] -= group_bytes[g]
        used[t] += group_bytes[g]


@register("metis")
def place_metis(graph: OpGraph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Min-cut partition of the group-contracted graph, balanced by compute, then memory repair."""
    a = graph.arrays
    n_groups, n_dev = a.n_groups, cluster.n_devices
    work = np.bincount(a.group, weights=op_times(graph, cluster).mean(axis=1), minlength=n_groups)
    group_bytes = graph.group_static_memory()
    adj = group_graph(graph)

    if n_dev == 1:
        part = np.zeros(n_groups, np.int64)
    elif n_groups <= n_dev:  # METIS refuses more parts than vertices
        part = np.arange(n_groups, dtype=np.int64)
    else:
        speed = np.array([dev.speed for dev in cluster.devices])
        tpwgts = (speed / speed.sum()).tolist() if np.ptp(speed) > 0 else None
        part = metis_parts(adj, work, n_dev, seed=seed, tpwgts=tpwgts)

    _repair_memory(graph, cluster, part, group_bytes, adj)
    return part[a.group]
