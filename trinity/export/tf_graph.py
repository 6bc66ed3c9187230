"""Export TensorFlow training graphs as OpGraphs.

`export_tf` builds a registered TensorFlow model (see `trinity.models`) and
returns two things: the OpGraph of one training step, and a runnable
serialized GraphDef (the step plus the variable initialisers) that
`trinity.profile.tf_profile` runs for real.

One training step = one run of the train op and the loss tensor together.

`opgraph_from_graphdef` converts a `tf.Graph`:

* one Op per node (type = the node's op); with ``fetches`` only the ops a run
  of those fetches executes (their ancestors), so initialisers and the dead
  ops of Keras' symbolic model build do not count as step work;
* a data edge per distinct consumed tensor, a control edge per ``^name`` input;
  loop back edges (NextIteration -> Merge) are dropped so the graph is a DAG;
* output sizes from static shapes x dtype size; an unknown leading dimension
  is taken as the batch size, any other unknown dimension makes the tensor
  0 bytes (counted in ``meta["counts"]["unknown_shape_tensors"]``); resource,
  variant and string tensors are 0 bytes (handles, not data);
* persistent bytes of every variable (VarHandleOp, VariableV2, optimizer slots);
* FLOPs from TensorFlow's registered ``flops`` statistics (convolutions and
  their gradients, MatMul, element-wise ops...; 0 where none is registered,
  e.g. ReluGrad, FusedBatchNormGradV3, BiasAddGrad);
* colocation groups as TensorFlow's placer enforces them: ops sharing a
  ``_class: loc:@X`` attribute, and both ends of every resource- or ref-typed
  edge (every direct consumer of a variable runs where the variable is).
  Groups are named after their variable (or ``loc:@`` target).
"""

from __future__ import annotations

import importlib
import time
from typing import TYPE_CHECKING, Iterable

from trinity.errors import TrinityError
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.models import model_spec

if TYPE_CHECKING:
    import tensorflow as tf

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
LOOP_BACK_OPS = frozenset({"NextIteration", "RefNextIteration"})


def export_tf(name: str, batch_size: int | None = None, **options) -> tuple[OpGraph, bytes]:
    """Build model ``name`` and return (training-step OpGraph, runnable serialized GraphDef)."""
    import tensorflow as tf

    spec = model_spec(name)
    if spec.framework != "tensorflow":
        raise TrinityError(f"model {name!r} is a {spec.framework} model, not a TensorFlow one", field="model")
    batch = spec.default_batch if batch_size is None else batch_size
    module, _, func = spec.builder.partition(":")
    start = time.perf_counter()
    try:
        built = getattr(importlib.import_module(module), func)(batch, **{**spec.options, **options})
    except ValueError as exc:  # Keras rejecting an option value, e.g. images below 75x75 for InceptionV3
        raise TrinityError(f"cannot build {name!r}: {str(exc).splitlines()[0]}", field="options") from None
    graph_def = runnable_graph_def(built.graph, [built.train_op, built.loss, built.init_op])
    meta = {
        "framework": "tensorflow",
        "model": name,
        "batch_size": batch,
        "options": built.options,
        "train_op": built.train_op,
        "init_op": built.init_op,
        "loss": built.loss,
        "tf_version": tf.__version__,
        "graphdef_ops": len(graph_def.node),
    }
    # A step fetches the loss too: the gradients need only its shape, so train_op alone skips it.
    graph = opgraph_from_graphdef(built.graph, fetches=[built.train_op, built.loss], batch_size=batch, name=name,
                                  meta=meta)
    graph.meta["export_s"] = round(time.perf_counter() - start, 3)
    return graph, graph_def.SerializeToString()


def _ancestors(graph: "tf.Graph", fetches: Iterable[str]) -> set[str]:
    """Names of the ops a run of ``fetches`` executes (data and control ancestors)."""
    stack = [graph.get_operation_by_name(f.split(":")[0]) for f in fetches]
    seen = {op.name for op in stack}
    while stack:
        op = stack.pop()
        for pred in [t.op for t in op.inputs] + list(op.control_inputs):
            if pred.name not in seen:
                seen.add(pred.name)
                stack.append(pred)
    return seen


def runnable_graph_def(graph: "tf.Graph", fetches: list[str]) -> "tf.compat.v1.GraphDef":
    """The GraphDef of ``graph`` pruned to what ``fetches`` need (function library kept only if used)."""
    import tensorflow as tf

    keep = _ancestors(graph, fetches)
    full = graph.as_graph_def()
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(full.versions)
    out.node.extend(n for n in full.node if n.name in keep)
    functions = {f.signature.name for f in full.library.function}
    used = {n.op for n in out.node} | {v.func.name for n in out.node for v in n.attr.values() if v.HasField("func")}
    if functions & used:
        out.library.CopyFrom(full.library)
    return out


def _tensor_bytes(tensor: "tf.Tensor", batch_size: int | None) -> tuple[int, bool]:
    """(bytes, known) of one output from its static shape; handles and strings are 0 and known."""
    import tensorflow as tf

    dtype = tensor.dtype.base_dtype
    if dtype in (tf.resource, tf.variant, tf.string):
        return 0, True
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    if dims is None:
        return 0, False
    if dims and dims[0] is None and batch_size is not None:
        dims[0] = batch_size
    if any(d is None for d in dims):
        return 0, False
    n = 1
    for d in dims:
        n *= d
    return n * dtype.size, True


def _variable_bytes(op: "tf.Operation") -> int:
    import tensorflow as tf

    shape = tf.TensorShape(op.get_attr("shape"))
    if not shape.is_fully_defined():
        return 0
    return shape.num_elements() * tf.as_dtype(op.get_attr("dtype")).size


def _flops(graph: "tf.Graph", op: "tf.Operation") -> float:
    from tensorflow.python.framework import ops as tf_ops

    try:
        value = tf_ops.get_stats_for_node_def(graph, op.node_def, "flops").value
    except (ValueError, TypeError):  # a registered statistic that needs unknown shapes
        return 0.0
    return float(value or 0)


def _class_targets(op: "tf.Operation") -> list[str]:
    """The ops named by the node's ``_class: loc:@X`` attribute."""
    try:
        values = op.get_attr("_class")
    except ValueError:
        return []
    return [v.decode().removeprefix("loc:@") for v in values if v.startswith(b"loc:@")]


def _colocation_groups(ops: list["tf.Operation"]) -> dict[str, str]:
    """Op name -> group name for ops TensorFlow forces onto one device (groups of two or more)."""
    import tensorflow as tf

    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra

    targets: set[str] = set()
    for op in ops:
        for target in _class_targets(op):
            targets.add(target)
            union(op.name, target)
        for t in op.inputs:
            # TF's placer colocates both ends of every resource or reference edge.
            if t.dtype == tf.resource or t.dtype != t.dtype.base_dtype:
                union(op.name, t.op.name)
    members: dict[str, list["tf.Operation"]] = {}
    for op in ops:
        members.setdefault(find(op.name), []).append(op)
    names: dict[str, str] = {}
    for group in members.values():
        if len(group) < 2:
            continue
        variables = sorted(op.name for op in group if op.type in VARIABLE_OPS)
        anchors = variables or sorted(op.name for op in group if op.name in targets) or sorted(op.name for op in group)
        for op in group:
            names[op.name] = anchors[0]
    return names


def opgraph_from_graphdef(graph: "tf.Graph", *, fetches: list[str] | None = None, batch_size: int | None = None,
                          name: str = "graph", meta: dict | None = None) -> OpGraph:
    """Convert ``graph`` (all of it, or only what ``fetches`` run) into an OpGraph; see the module doc."""
    ops = graph.get_operations()
    if fetches is not None:
        keep = _ancestors(graph, fetches)
        ops = [op for op in ops if op.name in keep]
    groups = _colocation_groups(ops)
    unknown = 0
    out_ops, edges = [], []
    control = back = with_flops = 0
    for op in ops:
        sizes = []
        for t in op.outputs:
            size, known = _tensor_bytes(t, batch_size)
            sizes.append(size)
            unknown += not known
        flops = _flops(graph, op)
        with_flops += flops > 0
        out_ops.append(Op(
            name=op.name, type=op.type, flops=flops, output_bytes=tuple(sizes),
            persistent_bytes=_variable_bytes(op) if op.type in VARIABLE_OPS else 0,
            colocation_group=groups.get(op.name),
        ))
        seen: set[tuple[str, int]] = set()
        for t in op.inputs:
            if t.op.type in LOOP_BACK_OPS:
                back += 1
                continue
            key = (t.op.name, t.value_index)
            if key not in seen:  # one tensor consumed twice moves once
                seen.add(key)
                edges.append(Edge(t.op.name, op.name, t.value_index))
        for c in op.control_inputs:
            edges.append(Edge(c.name, op.name, None))
            control += 1
    full_meta = dict(meta or {})
    full_meta["counts"] = {
        "ops": len(out_ops),
        "edges": len(edges),
        "control_edges": control,
        "unknown_shape_tensors": unknown,
        "ops_with_flops": with_flops,
        "loop_back_edges_dropped": back,
        "colocation_groups": len(set(groups.values())),
    }
    return OpGraph(out_ops, edges, name=name, meta=full_meta)
