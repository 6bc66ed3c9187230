"""Synthetic OpGraphs for tests and benchmarks (seeded, so reproducible)."""

from __future__ import annotations

import numpy as np

from trinity.graph.ir import Edge, Op, OpGraph


def layered_dag(
    n_ops: int,
    n_edges: int,
    *,
    width: int | None = None,
    seed: int = 0,
    colocated_fraction: float = 0.05,
    zero_cost_fraction: float = 0.1,
    control_fraction: float = 0.02,
    log_compute_us: float = 3.0,
    log_bytes: float = 11.0,
) -> OpGraph:
    """A DAG shaped like a training graph: layers of ops, edges mostly between neighbours.

    Every op past the first layer reads one output of the layer before; the
    remaining edges join random earlier ops, mostly within a few layers.
    Compute times are log-normal (a few zero-cost ops, like constants), each
    op has one or two outputs, some ops hold parameters, and a fraction of
    ops are paired into colocation groups with one of their consumers
    (like a variable and its reader). ``log_compute_us`` and ``log_bytes`` are the means of
    the log-normal op times and tensor sizes (e^3 = 20 us, e^11 = 60 kB by default).
    """
    rng = np.random.default_rng(seed)
    width = width or max(1, int(round(np.sqrt(n_ops) / 2)))
    layer = np.minimum(np.arange(n_ops) // width, n_ops)
    n_out = rng.integers(1, 3, n_ops)
    compute = rng.lognormal(log_compute_us, 1.0, n_ops)
    compute[rng.random(n_ops) < zero_cost_fraction] = 0.0
    out_bytes = [tuple(int(b) for b in rng.lognormal(log_bytes, 1.5, k)) for k in n_out]
    persistent = np.where(rng.random(n_ops) < 0.1, rng.lognormal(14.0, 1.0, n_ops), 0).astype(np.int64)
    temporary = np.where(rng.random(n_ops) < 0.2, rng.lognormal(12.0, 1.0, n_ops), 0).astype(np.int64)

    edges: list[tuple[int, int, int | None]] = []
    seen: set[tuple[int, int]] = set()
    for v in range(width, n_ops):
        lo = (layer[v] - 1) * width
        u = int(rng.integers(lo, lo + width))
        edges.append((u, v, int(rng.integers(0, n_out[u]))))
        seen.add((u, v))
    attempts = 0
    while len(edges) < n_edges and attempts < 20 * n_edges:
        attempts += 1
        v = int(rng.integers(width, n_ops))
        back = 1 + int(rng.geometric(0.5)) - 1
        lo = max(0, (layer[v] - back) * width)
        hi = layer[v] * width
        u = int(rng.integers(lo, hi))
        if (u, v) in seen:
            continue
        seen.add((u, v))
        kind = None if rng.random() < control_fraction else int(rng.integers(0, n_out[u]))
        edges.append((u, v, kind))

    group: list[str | None] = [None] * n_ops
    consumers: dict[int, int] = {}
    for u, v, k in edges:
        if k is not None:
            consumers.setdefault(u, v)
    for u in np.flatnonzero(rng.random(n_ops) < colocated_fraction):
        u = int(u)
        if u in consumers and group[u] is None and group[consumers[u]] is None:
            group[u] = group[consumers[u]] = f"g{u}"

    ops = [Op(name=f"op{i}", type=("Const" if compute[i] == 0 else f"T{i % 7}"), compute_us=float(compute[i]),
              output_bytes=out_bytes[i], persistent_bytes=int(persistent[i]),
              temporary_bytes=int(temporary[i]), colocation_group=group[i]) for i in range(n_ops)]
    return OpGraph(ops, [Edge(f"op{u}", f"op{v}", k) for u, v, k in edges],
                   name=f"layered{n_ops}x{len(edges)}", meta={"synthetic": "layered_dag", "seed": seed})


def random_dag(n_ops: int, edge_prob: float, *, seed: int = 0) -> OpGraph:
    """A small random DAG with integer costs: the simulator's property tests use it.

    Integer times and sizes keep simulated times exact, so two simulators
    that apply the same semantics agree to the last bit, ties included.
    """
    rng = np.random.default_rng(seed)
    n_out = rng.integers(1, 3, n_ops)
    ops = []
    for i in range(n_ops):
        ops.append(Op(
            name=f"n{i}", type="Op",
            compute_us=float(rng.integers(0, 6)),
            output_bytes=tuple(int(b) for b in rng.integers(0, 5, n_out[i]) * 1000),
            persistent_bytes=int(rng.integers(0, 3) * 500),
            temporary_bytes=int(rng.integers(0, 3) * 100),
            colocation_group=(f"c{rng.integers(0, 3)}" if rng.random() < 0.15 else None),
        ))
    edges = []
    for v in range(n_ops):
        for u in range(v):
            if rng.random() < edge_prob:
                edges.append(Edge(f"n{u}", f"n{v}", None if rng.random() < 0.1 else int(rng.integers(0, n_out[u]))))
                if rng.random() < 0.1:  # a second edge from the same tensor or another output
                    edges.append(Edge(f"n{u}", f"n{v}", int(rng.integers(0, n_out[u]))))
    return OpGraph(ops, edges, name=f"random{n_ops}", meta={"seed": seed})
