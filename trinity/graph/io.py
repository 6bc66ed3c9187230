"""OpGraph files and importers.

Native format ``trinity-opgraph/1`` (JSON, gzip when the name ends in .gz)::

    {
      "format": "trinity-opgraph/1",
      "name": "gnmt",
      "meta": {...},                      # free-form provenance
      "ops": [{"name": str, "type": str,
               "compute_us": float | null,  # on the profiling device (speed 1)
               "compute_us_by_kind": {kind: float},
               "flops": float, "output_bytes": [int, ...],
               "persistent_bytes": int, "temporary_bytes": int,
               "colocation_group": str | null}],
      "edges": [[src, dst, src_output]]   # src_output null = control edge
    }

Units: microseconds and bytes. Fields other than ``name`` and ``type`` may be
left out and take the defaults of `trinity.graph.ir.Op`.

`load_graph` also reads ``trinity-reference-graph/1`` (the Baechi GNMT profile
in ``shared/reference``) and networkx node-link JSON, telling them apart by
their content.
"""

from __future__ import annotations

import math
import os
from typing import Any

from trinity.errors import FormatError, GraphError, TrinityError, short_repr
from trinity.fileio import check_format, read_json, write_json
from trinity.graph.ir import Edge, Op, OpGraph

FORMAT = "trinity-opgraph"
VERSION = 1


def graph_to_dict(graph: OpGraph) -> dict:
    ops = []
    for op in graph.ops:
        d: dict[str, Any] = {"name": op.name, "type": op.type}
        if op.compute_us is not None:
            d["compute_us"] = op.compute_us
        if op.compute_us_by_kind:
            d["compute_us_by_kind"] = dict(op.compute_us_by_kind)
        if op.flops:
            d["flops"] = op.flops
        if op.output_bytes:
            d["output_bytes"] = list(op.output_bytes)
        if op.persistent_bytes:
            d["persistent_bytes"] = op.persistent_bytes
        if op.temporary_bytes:
            d["temporary_bytes"] = op.temporary_bytes
        if op.colocation_group is not None:
            d["colocation_group"] = op.colocation_group
        ops.append(d)
    edges = [[e.src, e.dst, e.src_output] for e in graph.edges]
    return {"format": f"{FORMAT}/{VERSION}", "name": graph.name, "meta": graph.meta, "ops": ops, "edges": edges}


def save_graph(graph: OpGraph, path: str | os.PathLike) -> None:
    """Write ``graph`` atomically in the native format."""
    write_json(path, graph_to_dict(graph))


def _type_name(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object",
             bool: "true or false"}
    if set(types) == {int, float}:
        return "a number"
    return " or ".join(names.get(t, t.__name__) for t in types)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _field(d: Any, key: str, where: str, source: str, types, default=...):
    """``d[key]`` checked against ``types``; null or absent gives ``default`` (absent is an error without one).

    Booleans are not numbers here, though Python says they are ints."""
    if not isinstance(d, dict):
        raise FormatError(f"expected an object, got {short_repr(d)}", source=source, field=where or None)
    if d.get(key) is None:
        if default is ...:
            raise FormatError("missing" if key not in d else "must not be null", source=source,
                              field=_join(where, key))
        return default
    value = d[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise FormatError(f"expected {_type_name(types)}, got {short_repr(value)}", source=source,
                          field=_join(where, key))
    return value


def _name(value: Any, field: str, source: str) -> str:
    """An op name in an edge: JSON gives anything, an edge needs a string."""
    if not isinstance(value, str):
        raise FormatError(f"expected an op name (a string), got {short_repr(value)}", source=source, field=field)
    return value


def _edge(e: Any, j: int, source: str) -> Edge:
    if not (isinstance(e, list) and len(e) == 3):
        raise FormatError(f"expected [src, dst, src_output], got {short_repr(e)}", source=source, field=f"edges[{j}]")
    src, dst = _name(e[0], f"edges[{j}].src", source), _name(e[1], f"edges[{j}].dst", source)
    if e[2] is not None and (not isinstance(e[2], int) or isinstance(e[2], bool)):
        raise FormatError(f"src_output must be an integer or null, got {short_repr(e[2])}",
                          source=source, field=f"edges[{j}]")
    return Edge(src, dst, e[2])


def _op(d: Any, w: str, source: str) -> Op:
    num = (int, float)
    return Op(
        name=_field(d, "name", w, source, str),
        type=_field(d, "type", w, source, str),
        compute_us=_field(d, "compute_us", w, source, num, None),
        compute_us_by_kind=_field(d, "compute_us_by_kind", w, source, dict, {}),
        flops=_field(d, "flops", w, source, num, 0.0),
        output_bytes=tuple(_field(d, "output_bytes", w, source, list, ())),
        persistent_bytes=_field(d, "persistent_bytes", w, source, num, 0),
        temporary_bytes=_field(d, "temporary_bytes", w, source, num, 0),
        colocation_group=_field(d, "colocation_group", w, source, str, None),
    )


def graph_from_dict(doc: Any, source: str = "<dict>") -> OpGraph:
    check_format(doc, FORMAT, VERSION, source)
    ops = [_op(d, f"ops[{i}]", source) for i, d in enumerate(_field(doc, "ops", "", source, list))]
    edges = [_edge(e, j, source) for j, e in enumerate(_field(doc, "edges", "", source, list))]
    return OpGraph(ops, edges, name=_field(doc, "name", "", source, str, "") or "graph",
                   meta=_field(doc, "meta", "", source, dict, {}), source=source)


# ----------------------------------------------------------------- importers
#: Outputs an importer pads an op up to: an output index beyond this is a corrupt file, not an op.
MAX_OUTPUTS = 1 << 16


def _output_index(value: int, field: str, source: str) -> int:
    if not 0 <= value < MAX_OUTPUTS:
        raise FormatError(f"must be between 0 and {MAX_OUTPUTS - 1}, got {value}", source=source, field=field)
    return value


def _reference_edge(e: Any, j: int, source: str) -> Edge:
    w = f"edges[{j}]"
    src, dst = _field(e, "src", w, source, str), _field(e, "dst", w, source, str)
    if _field(e, "control", w, source, bool, False):
        return Edge(src, dst, None)
    return Edge(src, dst, _output_index(_field(e, "src_output", w, source, int, 0), f"{w}.src_output", source))


def _reference_groups(nodes: list, names: list[str], source: str) -> dict[str, str | None]:
    """Op -> colocation group: connected components of ``colocate_with``, named after their first
    member alphabetically; None for ops alone."""
    parent = {n: n for n in names}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, n in enumerate(nodes):
        w = f"nodes[{i}].colocate_with"
        for other in _field(n, "colocate_with", f"nodes[{i}]", source, list, []):
            if not isinstance(other, str) or other not in parent:
                raise GraphError(f"unknown op {short_repr(other)}", source=source, field=w)
            a, b = find(names[i]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)  # root = alphabetically first member
    members: dict[str, int] = {}
    for n in names:
        members[find(n)] = members.get(find(n), 0) + 1
    return {n: find(n) if members[find(n)] > 1 else None for n in names}


def import_reference(doc: dict, source: str) -> OpGraph:
    """Read ``trinity-reference-graph/1`` (see shared/reference/gnmt-baechi/README.md).

    Ops the profiler did not time (null costs) are zero-cost. Colocation:
    ``colocate_with`` lists the ops a node must share a device with; groups
    are the connected components of that relation, named after their
    alphabetically first member.
    """
    check_format(doc, "trinity-reference-graph", 1, source)
    nodes = _field(doc, "nodes", "", source, list)
    edges = [_reference_edge(e, j, source) for j, e in enumerate(_field(doc, "edges", "", source, list))]
    names = [_field(n, "name", f"nodes[{i}]", source, str) for i, n in enumerate(nodes)]

    # Ops without measured outputs still feed others; give them zero-byte outputs.
    n_outputs = {n: 0 for n in names}
    for e in edges:
        if e.src_output is not None and e.src in n_outputs:
            n_outputs[e.src] = max(n_outputs[e.src], e.src_output + 1)
    groups = _reference_groups(nodes, names, source)
    num = (int, float)
    ops = []
    for i, n in enumerate(nodes):
        w = f"nodes[{i}]"
        outputs = list(_field(n, "output_bytes", w, source, list, []))
        outputs += [0] * (n_outputs[names[i]] - len(outputs))
        ops.append(Op(
            name=names[i],
            type=_field(n, "op", w, source, str),
            compute_us=_field(n, "compute_us", w, source, num, 0.0),
            output_bytes=tuple(outputs),
            persistent_bytes=_field(n, "persistent_bytes", w, source, num, 0),
            temporary_bytes=_field(n, "temporary_bytes", w, source, num, 0),
            colocation_group=groups[names[i]],
        ))
    name = os.path.basename(source).split(".")[0] or "reference"
    return OpGraph(ops, edges, name=name, meta={"imported_from": source, "source": doc.get("source")},
                   source=source)


def _node_link_nodes(nodes: list, source: str) -> dict[str, dict]:
    """Node id (as a string) -> its attributes, with the fields edges read already checked."""
    attrs: dict[str, dict] = {}
    for i, n in enumerate(nodes):
        nid = str(_field(n, "id", f"nodes[{i}]", source, (str, int)))
        if nid in attrs:
            raise GraphError(f"duplicate node id {nid!r}", source=source, field=f"nodes[{i}].id")
        _field(n, "output_bytes", f"nodes[{i}]", source, list, None)
        attrs[nid] = dict(n)
    return attrs


def _node_link_edges(links: list, key: str, attrs: dict, source: str) -> tuple[list[Edge], dict[str, list]]:
    """The edges, and the outputs that edges giving only ``bytes`` add to their sources."""
    extra_outputs: dict[str, list] = {k: [] for k in attrs}
    edges = []
    for j, e in enumerate(links):
        w = f"{key}[{j}]"
        s, d = str(_field(e, "source", w, source, (str, int))), str(_field(e, "target", w, source, (str, int)))
        if _field(e, "control", w, source, bool, False):
            edges.append(Edge(s, d, None))
        elif "src_output" in e:  # null: a control edge, as `OpGraph.to_networkx` writes one
            edges.append(Edge(s, d, _field(e, "src_output", w, source, int, None)))
        elif "bytes" in e:
            if s not in attrs:
                raise GraphError(f"unknown op {s!r}", source=source, field=f"{w}.source")
            base = len(attrs[s].get("output_bytes") or [])
            size = _field(e, "bytes", w, source, (int, float))
            # whole bytes; NaN or infinity stay as they are, for OpGraph to refuse by name
            extra_outputs[s].append(int(size) if isinstance(size, float) and math.isfinite(size) else size)
            edges.append(Edge(s, d, base + len(extra_outputs[s]) - 1))
        else:
            edges.append(Edge(s, d, 0))
    return edges, extra_outputs


def import_node_link(doc: dict, source: str) -> OpGraph:
    """Read networkx node-link JSON (``nx.node_link_data``).

    Node attributes are those of `Op` (``type`` defaults to "Unknown"); edges
    take ``src_output`` (default 0) or ``control: true``. An edge that gives
    only ``bytes`` becomes a data edge from a dedicated output of that size,
    one per edge, so plain weighted DAGs import too.
    """
    attrs = _node_link_nodes(_field(doc, "nodes", "", source, list), source)
    links_key = "links" if "links" in doc else "edges"
    edges, extra_outputs = _node_link_edges(_field(doc, links_key, "", source, list), links_key, attrs, source)
    num = (int, float)
    ops = []
    for name, a in attrs.items():
        w = f"nodes[{name}]"
        outputs = list(a.get("output_bytes") or []) + extra_outputs[name]
        if not outputs and any(e.src == name and e.src_output == 0 for e in edges):
            outputs = [0]
        ops.append(Op(
            name=name, type=_field(a, "type", w, source, str, "") or "Unknown",
            compute_us=_field(a, "compute_us", w, source, num, None),
            compute_us_by_kind=_field(a, "compute_us_by_kind", w, source, dict, {}),
            flops=_field(a, "flops", w, source, num, 0.0),
            output_bytes=tuple(outputs),
            persistent_bytes=_field(a, "persistent_bytes", w, source, num, 0),
            temporary_bytes=_field(a, "temporary_bytes", w, source, num, 0),
            colocation_group=_field(a, "colocation_group", w, source, str, None),
        ))
    graph_attrs = _field(doc, "graph", "", source, dict, {})
    name = _field(graph_attrs, "name", "graph", source, str, "") or os.path.basename(source).split(".")[0]
    return OpGraph(ops, edges, name=name, meta={"imported_from": source}, source=source)


def load_graph(path: str | os.PathLike) -> OpGraph:
    """Load any supported graph file; every problem is a one-line TrinityError naming the file."""
    source = str(path)
    doc = read_json(path)
    try:
        if isinstance(doc, dict) and str(doc.get("format", "")).startswith("trinity-reference-graph"):
            return import_reference(doc, source)
        if isinstance(doc, dict) and "format" not in doc and "nodes" in doc and ("links" in doc or "edges" in doc):
            return import_node_link(doc, source)
        return graph_from_dict(doc, source)
    except TrinityError as exc:
        raise exc.at(source)
