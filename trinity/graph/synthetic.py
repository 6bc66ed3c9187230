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


#: Convolutions per branch of one Inception-style block: 1x1; 1x1 -> 3x3; 1x1 -> 3x3 -> 3x3; pool -> 1x1.
_BRANCHES = (1, 2, 3, 1)


def training_graph(n_ops: int = 100_000, *, batch: int = 32, seed: int = 0) -> OpGraph:
    """A training step shaped like a real one, of at least ``n_ops`` ops: a deep stack of
    Inception-style blocks (four branches of convolutions, joined by a concat), then the backward
    pass in reverse and one optimizer update per weight.

    Each convolution is a variable with its read (colocated, as TensorFlow does), Conv2D and Relu;
    backward, ReluGrad, the two conv gradients (input and filter) and ApplyAdam (colocated with
    its variable). A concat's gradient is sliced back to the branches and the branches' input
    gradients summed (AddN). Sizes follow the network: activations of batch x H x W x C floats
    (the spatial size halves and channels double every quarter of the depth), weights of
    3x3 or 1x1 x C x C floats (kept three times: weights and Adam's two slots); times are
    proportional to FLOPs at about 10 TFLOP/s with log-normal noise; convolutions hold scratch
    space while they run. Deterministic for a seed.
    """
    rng = np.random.default_rng(seed)
    ops: list[Op] = []
    edges: list[Edge] = []

    def op(name, kind, us, out=(), persistent=0, temporary=0, group=None) -> str:
        noise = float(rng.lognormal(0.0, 0.3))
        ops.append(Op(name, kind, compute_us=float(us) * noise, output_bytes=tuple(int(b) for b in out),
                      persistent_bytes=int(persistent), temporary_bytes=int(temporary), colocation_group=group))
        return name

    def edge(src, dst, k: int | None = 0) -> None:
        edges.append(Edge(src, dst, k))

    per_block = sum(8 * n for n in _BRANCHES) + 1 + 1 + 4 + 1 + 1  # convs, pool, concat, slices, AddN, pool grad
    n_blocks = max(1, -(-(n_ops - 3) // per_block))  # 3: input, loss, loss gradient
    flops_per_us = 1e7  # 10 TFLOP/s
    x = op("input", "Placeholder", 0.0, out=(batch * 56 * 56 * 64 * 4,))
    blocks = []
    for b in range(n_blocks):
        stage = min(3, 4 * b // n_blocks)
        hw, channels = 56 >> stage, 64 << stage
        act = batch * hw * hw * channels * 4
        p = f"b{b}/"
        pool = op(p + "pool", "MaxPool", act / 4e4, out=(act,))
        edge(x, pool)
        layers = []  # per branch: [(input, var, read, conv, relu)]
        ends = []
        for r, depth in enumerate(_BRANCHES):
            prev = pool if r == 3 else x
            branch = []
            for i in range(depth):
                q = f"{p}r{r}c{i}/"
                k = 3 if (r in (1, 2) and i > 0) else 1
                weights = k * k * channels * channels * 4
                var = op(q + "w", "VariableV2", 0.0, out=(weights,), persistent=3 * weights, group=q + "w")
                read = op(q + "read", "Identity", 1.0, out=(weights,), group=q + "w")
                flops = 2.0 * batch * hw * hw * k * k * channels * channels
                conv = op(q + "conv", "Conv2D", flops / flops_per_us, out=(act,), temporary=act // 2)
                relu = op(q + "relu", "Relu", act / 4e4, out=(act,))
                edge(var, read)
                edge(prev, conv)
                edge(read, conv)
                edge(conv, relu)
                branch.append((prev, var, read, conv, relu, flops, weights))
                prev = relu
            layers.append(branch)
            ends.append(prev)
        concat = op(p + "concat", "ConcatV2", act / 2e4, out=(act,))
        for end in ends:
            edge(end, concat)
        blocks.append((pool, layers, act))
        x = concat
    loss = op("loss", "Mean", 10.0, out=(4,))
    edge(x, loss)
    grad = op("loss_grad", "Fill", 5.0, out=(blocks[-1][2],))
    edge(loss, grad)

    for b in reversed(range(n_blocks)):  # backward, last block first
        pool, layers, act = blocks[b]
        p = f"b{b}/"
        to_input = []
        for r, branch in enumerate(layers):
            g = op(f"{p}r{r}/slice", "Slice", act / 4e4, out=(act,))
            edge(grad, g)
            for prev, var, read, conv, relu, flops, weights in reversed(branch):
                q = conv[:-len("conv")]
                rg = op(q + "relu_grad", "ReluGrad", act / 4e4, out=(act,))
                edge(g, rg)
                edge(relu, rg)
                gi = op(q + "grad_input", "Conv2DBackpropInput", flops / flops_per_us, out=(act,), temporary=act // 2)
                gf = op(q + "grad_filter", "Conv2DBackpropFilter", flops / flops_per_us, out=(weights,),
                        temporary=act // 2)
                edge(rg, gi)
                edge(read, gi)
                edge(rg, gf)
                edge(prev, gf)
                update = op(q + "adam", "ApplyAdam", weights / 4e4, group=q + "w")
                edge(gf, update)
                edge(var, update, None)  # updates the variable in place
                g = gi
            if r == 3:  # through the pool
                pg = op(f"{p}pool_grad", "MaxPoolGrad", act / 4e4, out=(act,))
                edge(g, pg)
                edge(pool, pg)
                g = pg
            to_input.append(g)
        summed = op(f"{p}addn", "AddN", act / 2e4, out=(act,))
        for g in to_input:
            edge(g, summed)
        grad = summed
    return OpGraph(ops, edges, name=f"training{len(ops)}",
                   meta={"synthetic": "training_graph", "seed": seed, "batch": batch, "blocks": n_blocks})


#: The synthetic graph sets searches are compared on (`benchmarks/search_variety.py`, `basin_probe.py`), as
#: (kind, ops, seed): "development", the set search variants were developed on, and "fresh", sizes and seeds
#: no table had used before the METIS groups were chosen (held out from that choice). Training graphs at
#: batch 8 (2 P100s hold them); layered DAGs with 1.5 edges an op.
GRAPH_SETS = {
    "development": (("training", 2500, 7), ("training", 4000, 11), ("layered", 3000, 5)),
    "fresh": (("training", 3200, 23), ("training", 5000, 29), ("layered", 4000, 41)),
}


def graph_set(name: str) -> list[OpGraph]:
    """The graphs of one of `GRAPH_SETS`, built from their seeds."""
    if name not in GRAPH_SETS:
        raise ValueError(f"unknown graph set {name!r}; known: {', '.join(GRAPH_SETS)}")
    return [training_graph(n, batch=8, seed=seed) if kind == "training" else layered_dag(n, n * 3 // 2, seed=seed)
            for kind, n, seed in GRAPH_SETS[name]]
