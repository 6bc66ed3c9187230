"""OpGraph: the one intermediate representation every Trinity stage speaks.

An OpGraph is a DAG of operators of one training step. Units are fixed
everywhere: time in microseconds, sizes in bytes.

* An `Op` carries its measured compute time (on the profiling device, and
  optionally per device kind), its FLOPs, the size of each output tensor, the
  bytes it keeps for the whole step (parameters, optimizer state), the scratch
  bytes it needs while running, and its colocation group.
* An `Edge` is either a data edge, which moves output ``src_output`` of ``src``
  to ``dst`` (its bytes are that output's size), or a control edge
  (``src_output is None``), which only orders the two ops and moves nothing.
* A colocation group is a set of ops that must share a device. TensorFlow
  silently moves every op of a ``loc:@`` group, and every consumer of a
  resource variable, to the variable's device; a placement that splits a
  group simulates something that never runs, so every placer and the
  simulator honour groups.

The graph is immutable and validated on construction. Numeric views of it
(`arrays`) are cached for the simulator and placers.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import deque
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

import numpy as np

from trinity.errors import GraphError, short_repr


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of the training step."""

    name: str
    type: str
    #: Measured time on the profiling device (speed 1.0); None = never profiled.
    compute_us: float | None = None
    #: Time per device kind where measured or fitted (overrides ``compute_us``).
    compute_us_by_kind: Mapping[str, float] = field(default_factory=dict)
    flops: float = 0.0
    #: Size of each output tensor, in output order.
    output_bytes: tuple[int, ...] = ()
    #: Bytes held for the whole step on the op's device (weights, optimizer slots).
    persistent_bytes: int = 0
    #: Scratch bytes held only while the op runs.
    temporary_bytes: int = 0
    #: Ops with the same group name must run on the same device; None = alone.
    colocation_group: str | None = None

    @property
    def time_us(self) -> float:
        """One time for the op whatever device runs it, for what reads the graph without a cluster (op
        features, the policy's groups): the measured time, else the mean over the device kinds costed (a
        graph priced by a speed model only, as the paper's regime), else 0. The simulator prices each
        device on its own (`trinity.costs.op_times`)."""
        if self.compute_us is not None:
            return self.compute_us
        by_kind = self.compute_us_by_kind
        return sum(by_kind.values()) / len(by_kind) if by_kind else 0.0


@dataclass(frozen=True, slots=True)
class Edge:
    """A data edge (``src_output`` is an output index) or a control edge (None)."""

    src: str
    dst: str
    src_output: int | None = 0

    @property
    def is_control(self) -> bool:
        return self.src_output is None


@dataclass(frozen=True)
class GraphArrays:
    """Dense integer views of an OpGraph, indexed by op position."""

    src: np.ndarray  # int64[E] producer index
    dst: np.ndarray  # int64[E] consumer index
    src_output: np.ndarray  # int64[E] output index, -1 for control edges
    edge_bytes: np.ndarray  # int64[E] bytes moved (0 for control edges)
    edge_tensor: np.ndarray  # int64[E] tensor the edge moves, -1 for control edges
    tensor_offset: np.ndarray  # int64[N+1] tensor id of (op i, output k) = offset[i] + k
    tensor_bytes: np.ndarray  # int64[T]
    tensor_owner: np.ndarray  # int64[T] op that produces each tensor
    # Edge ids grouped by producer / by consumer (edge order kept within an op):
    # the out-edges of op i are out_edges[out_ptr[i]:out_ptr[i + 1]].
    out_ptr: np.ndarray  # int64[N+1]
    out_edges: np.ndarray  # int64[E]
    in_ptr: np.ndarray  # int64[N+1]
    in_edges: np.ndarray  # int64[E]
    persistent_bytes: np.ndarray  # int64[N]
    temporary_bytes: np.ndarray  # int64[N]
    group: np.ndarray  # int64[N] colocation group id; ops alone get their own id
    n_groups: int


def _group_by(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of edge ids grouped by ``keys`` (stable, so edge order is kept within a group)."""
    order = np.argsort(keys, kind="stable").astype(np.int64)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, order


#: Largest byte count an op may give (1 PiB): sizes are int64 arrays, and anything near that is a corrupt file.
MAX_BYTES = 1 << 50


def _check_cost(value, where: str, source: str | None, limit: float = math.inf) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise GraphError(f"must be a number, got {short_repr(value)}", source=source, field=where)
    try:
        x = float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise GraphError(f"too large: an integer of {len(str(value))} digits",
                         source=source, field=where) from None
    if math.isnan(x) or math.isinf(x):
        raise GraphError(f"must be finite, got {value}", source=source, field=where)
    if x < 0:
        raise GraphError(f"must be >= 0, got {value}", source=source, field=where)
    if x > limit:
        raise GraphError(f"must be at most {limit:.0f}, got {value}", source=source, field=where)


class OpGraph:
    """A validated, immutable DAG of ops. ``source`` names the file it came from."""

    def __init__(
        self,
        ops: Iterable[Op],
        edges: Iterable[Edge],
        *,
        name: str = "graph",
        meta: Mapping | None = None,
        source: str | None = None,
    ):
        self.name = name
        self.meta = dict(meta or {})
        self.source = source
        self.ops: tuple[Op, ...] = tuple(ops)
        self.edges: tuple[Edge, ...] = tuple(edges)
        self.index: dict[str, int] = {}
        self._validate()

    # ------------------------------------------------------------------ checks
    def _validate(self) -> None:
        src = self.source
        for i, op in enumerate(self.ops):
            where = f"ops[{i}]"
            if not isinstance(op.name, str) or not op.name:
                raise GraphError("op name must be a non-empty string", source=src, field=f"{where}.name")
            if op.name in self.index:
                raise GraphError(f"duplicate op name {op.name!r} (also ops[{self.index[op.name]}])",
                                 source=src, field=f"{where}.name")
            self.index[op.name] = i
            if op.compute_us is not None:  # None: never profiled
                _check_cost(op.compute_us, f"{where}.compute_us ({op.name})", src)
            for kind, t in op.compute_us_by_kind.items():
                _check_cost(t, f"{where}.compute_us_by_kind.{kind} ({op.name})", src)
            _check_cost(op.flops, f"{where}.flops ({op.name})", src)
            _check_cost(op.persistent_bytes, f"{where}.persistent_bytes ({op.name})", src, MAX_BYTES)
            _check_cost(op.temporary_bytes, f"{where}.temporary_bytes ({op.name})", src, MAX_BYTES)
            for k, b in enumerate(op.output_bytes):
                _check_cost(b, f"{where}.output_bytes[{k}] ({op.name})", src, MAX_BYTES)
        for j, e in enumerate(self.edges):
            where = f"edges[{j}]"
            for end in ("src", "dst"):
                if not isinstance(getattr(e, end), str) or getattr(e, end) not in self.index:
                    raise GraphError(f"unknown op {short_repr(getattr(e, end))}", source=src, field=f"{where}.{end}")
            if e.src_output is not None:
                n_out = len(self.ops[self.index[e.src]].output_bytes)
                if not (0 <= e.src_output < n_out):
                    raise GraphError(
                        f"output {e.src_output} of {e.src!r} does not exist (it has {n_out} outputs)",
                        source=src, field=f"{where}.src_output")
        order = self._kahn_order()
        if len(order) < len(self.ops):
            raise GraphError(f"graph has a cycle: {self._describe_cycle(order)}", source=src, field="edges")
        self._topo = order

    def _kahn_order(self, depth_first: bool = False) -> np.ndarray:
        """Topological order (Kahn's algorithm); ties broken by op position so it is deterministic. Breadth
        first takes the ready ops as a queue; depth first as a stack, so an op's first consumer to become
        ready is the next op."""
        n = len(self.ops)
        indeg = [0] * n
        succ: list[list[int]] = [[] for _ in range(n)]
        for e in self.edges:
            s, d = self.index[e.src], self.index[e.dst]
            succ[s].append(d)
            indeg[d] += 1
        roots = [i for i in range(n) if indeg[i] == 0]
        ready = deque(reversed(roots) if depth_first else roots)
        order = []
        while ready:
            i = ready.pop() if depth_first else ready.popleft()
            order.append(i)
            for j in (reversed(succ[i]) if depth_first else succ[i]):
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        return np.asarray(order, dtype=np.int64)

    def _describe_cycle(self, order: np.ndarray) -> str:
        import networkx as nx

        left = set(range(len(self.ops))) - set(order.tolist())
        g = nx.DiGraph()
        for e in self.edges:
            s, d = self.index[e.src], self.index[e.dst]
            if s in left and d in left:
                g.add_edge(s, d)
        cycle = nx.find_cycle(g)
        names = [self.ops[u].name for u, _ in cycle] + [self.ops[cycle[0][0]].name]
        return " -> ".join(names)

    # --------------------------------------------------------------- accessors
    @property
    def n_ops(self) -> int:
        return len(self.ops)

    @property
    def n_edges(self) -> int:
        return len(self.edges)

    def topological_order(self) -> np.ndarray:
        """Breadth first (Kahn's queue): ops of one level of the graph lie together."""
        return self._topo.copy()

    @cached_property
    def _depth_first(self) -> np.ndarray:
        return self._kahn_order(depth_first=True)

    def depth_first_order(self) -> np.ndarray:
        """Topological order that follows each op into a consumer as soon as the consumer is ready (Kahn's
        algorithm with a stack): a chain or a branch of the graph lies together; ties by op position."""
        return self._depth_first.copy()

    def edge_bytes(self, e: Edge) -> int:
        if e.src_output is None:
            return 0
        return int(self.ops[self.index[e.src]].output_bytes[e.src_output])

    @cached_property
    def arrays(self) -> GraphArrays:
        n = self.n_ops
        src = np.fromiter((self.index[e.src] for e in self.edges), np.int64, self.n_edges)
        dst = np.fromiter((self.index[e.dst] for e in self.edges), np.int64, self.n_edges)
        out = np.fromiter((-1 if e.src_output is None else e.src_output for e in self.edges),
                          np.int64, self.n_edges)
        n_outputs = np.fromiter((len(op.output_bytes) for op in self.ops), np.int64, n)
        offset = np.zeros(n + 1, np.int64)
        np.cumsum(n_outputs, out=offset[1:])
        tensor_bytes = np.fromiter((b for op in self.ops for b in op.output_bytes), np.int64, int(offset[-1]))
        data = out >= 0
        edge_tensor = np.where(data, offset[src] + out, -1)
        edge_bytes = np.zeros(self.n_edges, np.int64)
        edge_bytes[data] = tensor_bytes[edge_tensor[data]]
        group_ids: dict[str, int] = {}
        group = np.empty(n, np.int64)
        next_id = 0
        for i, op in enumerate(self.ops):
            if op.colocation_group is None:
                group[i] = next_id
                next_id += 1
            else:
                if op.colocation_group not in group_ids:
                    group_ids[op.colocation_group] = next_id
                    next_id += 1
                group[i] = group_ids[op.colocation_group]
        out_ptr, out_edges = _group_by(src, n)
        in_ptr, in_edges = _group_by(dst, n)
        return GraphArrays(
            src=src, dst=dst, src_output=out, edge_bytes=edge_bytes, edge_tensor=edge_tensor,
            tensor_offset=offset, tensor_bytes=tensor_bytes, tensor_owner=np.repeat(np.arange(n), n_outputs),
            out_ptr=out_ptr, out_edges=out_edges, in_ptr=in_ptr, in_edges=in_edges,
            persistent_bytes=np.fromiter((op.persistent_bytes for op in self.ops), np.int64, n),
            temporary_bytes=np.fromiter((op.temporary_bytes for op in self.ops), np.int64, n),
            group=group, n_groups=next_id,
        )

    def colocation_groups(self) -> dict[str, list[str]]:
        """Named groups with more than one member: group -> op names."""
        groups: dict[str, list[str]] = {}
        for op in self.ops:
            if op.colocation_group is not None:
                groups.setdefault(op.colocation_group, []).append(op.name)
        return {g: ops for g, ops in groups.items() if len(ops) > 1}

    def static_memory(self) -> np.ndarray:
        """Per-op footprint if nothing were ever freed: persistent + outputs + temporary.

        Placers budget device memory with this conservative figure (as Baechi
        does); the simulator computes the real peak from tensor lifetimes.
        """
        a = self.arrays
        outputs = np.bincount(a.tensor_owner, weights=a.tensor_bytes, minlength=self.n_ops).astype(np.int64)
        outputs[a.persistent_bytes > 0] = 0  # a variable's output is its persistent storage
        return a.persistent_bytes + outputs + a.temporary_bytes

    def group_static_memory(self) -> np.ndarray:
        """`static_memory` summed per colocation group (index: ``arrays.group``)."""
        return np.bincount(self.arrays.group, weights=self.static_memory(), minlength=self.arrays.n_groups)

    def group_neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """The colocation groups' adjacency (a data or control edge between two groups, either way) as CSR
        (ptr, nbr): group u's neighbours are nbr[ptr[u]:ptr[u + 1]], ascending (the moves of annealing and of
        Trinity's ``neighbour_moves`` follow it)."""
        a = self.arrays
        su, du = a.group[a.src], a.group[a.dst]
        cross = su != du
        pairs = np.unique(np.concatenate([np.stack([su[cross], du[cross]], 1), np.stack([du[cross], su[cross]], 1)]),
                          axis=0)
        return np.searchsorted(pairs[:, 0], np.arange(a.n_groups + 1)), pairs[:, 1].copy()

    def to_networkx(self):
        """A networkx MultiDiGraph with op attributes (for analysis and METIS)."""
        import networkx as nx

        g = nx.MultiDiGraph(name=self.name)
        for op in self.ops:
            g.add_node(op.name, type=op.type, compute_us=op.compute_us, flops=op.flops,
                       output_bytes=list(op.output_bytes), persistent_bytes=op.persistent_bytes,
                       temporary_bytes=op.temporary_bytes, colocation_group=op.colocation_group)
        for e in self.edges:
            g.add_edge(e.src, e.dst, src_output=e.src_output, bytes=self.edge_bytes(e))
        return g

    def digest(self) -> str:
        """A short content hash: strategies record it to refuse a different graph."""
        return self._digest

    @cached_property
    def _digest(self) -> str:  # a search saves every new best strategy with it: hashed once, not per save
        h = hashlib.sha256()
        h.update(json.dumps([(op.name, op.type) for op in self.ops]).encode())
        h.update(json.dumps([(e.src, e.dst, e.src_output) for e in self.edges]).encode())
        return h.hexdigest()[:16]

    def summary(self) -> dict:
        a = self.arrays
        return {
            "name": self.name,
            "ops": self.n_ops,
            "edges": self.n_edges,
            "control_edges": int((a.src_output < 0).sum()),
            "colocation_groups": len(self.colocation_groups()),
            "compute_us": float(sum(op.compute_us or 0.0 for op in self.ops)),
            "persistent_bytes": int(a.persistent_bytes.sum()),
        }

    def __repr__(self) -> str:
        return f"OpGraph({self.name!r}, ops={self.n_ops}, edges={self.n_edges})"
