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

import numpy as np
import pymetis
import scipy.sparse as sp

from trinity.cluster import Cluster
from trinity.errors import PlacementError
from trinity.graph.ir import OpGraph
from trinity.placers.base import register
from trinity.costs import op_times


def metis_weights(values: np.ndarray, top: float = 1e6) -> np.ndarray:
    """Integers >= 1 proportional to ``values``, the largest about ``top`` (METIS takes integer weights)."""
    peak = values.max(initial=0.0)
    if peak <= 0:
        return np.ones(len(values), np.int64)
    return np.maximum(1, np.rint(values / peak * top)).astype(np.int64)


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

    # Undirected group graph: one edge per pair of groups, weighing the bytes of all edges between them.
    gs, gd = a.group[a.src], a.group[a.dst]
    cross = gs != gd
    lo, hi = np.minimum(gs, gd)[cross], np.maximum(gs, gd)[cross]
    pairs, inverse = np.unique(lo * n_groups + hi, return_inverse=True)
    nbytes = np.bincount(inverse, weights=a.edge_bytes[cross], minlength=len(pairs))
    u, v = pairs // n_groups, pairs % n_groups
    rows, cols = np.concatenate([u, v]), np.concatenate([v, u])
    adj = sp.csr_matrix((np.concatenate([nbytes, nbytes]), (rows, cols)), shape=(n_groups, n_groups))

    if n_dev == 1:
        part = np.zeros(n_groups, np.int64)
    elif n_groups <= n_dev:  # METIS refuses more parts than vertices
        part = np.arange(n_groups, dtype=np.int64)
    else:
        weights = metis_weights(nbytes)
        csr = sp.csr_matrix((np.concatenate([weights, weights]), (rows, cols)), shape=(n_groups, n_groups))
        speed = np.array([dev.speed for dev in cluster.devices])
        tpwgts = (speed / speed.sum()).tolist() if np.ptp(speed) > 0 else None
        result = pymetis.part_graph(
            n_dev, adjacency=pymetis.CSRAdjacency(csr.indptr.astype(np.int64), csr.indices.astype(np.int64)),
            vweights=metis_weights(work), eweights=csr.data.astype(np.int64), tpwgts=tpwgts,
            options=pymetis.Options(seed=seed))
        part = np.asarray(result.vertex_part, np.int64)

    _repair_memory(graph, cluster, part, group_bytes, adj)
    return part[a.group]
