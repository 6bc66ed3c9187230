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

import os
from typing import Any

from trinity.errors import FormatError, GraphError, TrinityError
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


def _field(d: Any, key: str, where: str, source: str, types, default=...):
    if not isinstance(d, dict):
        raise FormatError(f"expected an object, got {type(d).__name__}", source=source, field=where)
    if key not in d:
        if default is ...:
            raise FormatError("missing", source=source, field=f"{where}.{key}")
        return default
    value = d[key]
    if value is not None and not isinstance(value, types):
        raise FormatError(f"expected {getattr(types, '__name__', types)}, got {value!r}",
                          source=source, field=f"{where}.{key}")
    return value


def graph_from_dict(doc: Any, source: str = "<dict>") -> OpGraph:
    check_format(doc, FORMAT, VERSION, source)
    num = (int, float)
    ops = []
    raw_ops = _field(doc, "ops", "", source, list)
    for i, d in enumerate(raw_ops):
        w = f"ops[{i}]"
        ops.append(Op(
            name=_field(d, "name", w, source, str),
            type=_field(d, "type", w, source, str),
            compute_us=_field(d, "compute_us", w, source, num, None),
            compute_us_by_kind=_field(d, "compute_us_by_kind", w, source, dict, None) or {},
            flops=_field(d, "flops", w, source, num, 0.0) or 0.0,
            output_bytes=tuple(_field(d, "output_bytes", w, source, list, None) or ()),
            persistent_bytes=_field(d, "persistent_bytes", w, source, num, 0) or 0,
            temporary_bytes=_field(d, "temporary_bytes", w, source, num, 0) or 0,
            colocation_group=_field(d, "colocation_group", w, source, str, None),
        ))
    edges = []
    for j, e in enumerate(_field(doc, "edges", "", source, list)):
        if not (isinstance(e, list) and len(e) == 3):
            raise FormatError(f"expected [src, dst, src_output], got {e!r}", source=source, field=f"edges[{j}]")
        if e[2] is not None and (not isinstance(e[2], int) or isinstance(e[2], bool)):
            raise FormatError(f"src_output must be an integer or null, got {e[2]!r}",
                              source=source, field=f"edges[{j}]")
        edges.append(Edge(e[0], e[1], e[2]))
    return OpGraph(ops, edges, name=doc.get("name") or "graph", meta=doc.get("meta") or {}, source=source)


# ----------------------------------------------------------------- importers
def import_reference(doc: dict, source: str) -> OpGraph:
    """Read ``trinity-reference-graph/1`` (see shared/reference/gnmt-baechi/README.md).

    Ops the profiler did not time (null costs) are zero-cost. Colocation:
    ``colocate_with`` lists the ops a node must share a device with; groups
    are the connected components of that relation, named after their
    alphabetically first member.
    """
    check_format(doc, "trinity-reference-graph", 1, source)
    nodes = _field(doc, "nodes", "", source, list)
    raw_edges = _field(doc, "edges", "", source, list)
    names = [_field(n, "name", f"nodes[{i}]", source, str) for i, n in enumerate(nodes)]
    name_set = set(names)

    # Ops without measured outputs still feed others; give them zero-byte outputs.
    n_outputs = {n: 0 for n in names}
    for j, e in enumerate(raw_edges):
        if not e.get("control") and e.get("src") in n_outputs:
            n_outputs[e["src"]] = max(n_outputs[e["src"]], int(_field(e, "src_output", f"edges[{j}]", source, int)) + 1)

    parent = {n: n for n in names}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, n in enumerate(nodes):
        for other in n.get("colocate_with") or []:
            if other not in name_set:
                raise GraphError(f"unknown op {other!r}", source=source, field=f"nodes[{i}].colocate_with")
            a, b = find(names[i]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)  # root = alphabetically first member
    members: dict[str, int] = {}
    for n in names:
        members[find(n)] = members.get(find(n), 0) + 1

    ops = []
    for i, n in enumerate(nodes):
        w = f"nodes[{i}]"
        outputs = list(_field(n, "output_bytes", w, source, list, None) or [])
        outputs += [0] * (n_outputs[names[i]] - len(outputs))
        root = find(names[i])
        ops.append(Op(
            name=names[i],
            type=_field(n, "op", w, source, str),
            compute_us=float(_field(n, "compute_us", w, source, (int, float), None) or 0.0),
            output_bytes=tuple(outputs),
            persistent_bytes=_field(n, "persistent_bytes", w, source, (int, float), 0) or 0,
            temporary_bytes=_field(n, "temporary_bytes", w, source, (int, float), 0) or 0,
            colocation_group=root if members[root] > 1 else None,
        ))
    edges = [Edge(_field(e, "src", f"edges[{j}]", source, str), _field(e, "dst", f"edges[{j}]", source, str),
                  None if e.get("control") else e.get("src_output", 0))
             for j, e in enumerate(raw_edges)]
    name = os.path.basename(source).split(".")[0] or "reference"
    return OpGraph(ops, edges, name=name, meta={"imported_from": source, "source": doc.get("source")},
                   source=source)


def import_node_link(doc: dict, source: str) -> OpGraph:
    """Read networkx node-link JSON (``nx.node_link_data``).

    Node attributes are those of `Op` (``type`` defaults to "Unknown"); edges
    take ``src_output`` (default 0) or ``control: true``. An edge that gives
    only ``bytes`` becomes a data edge from a dedicated output of that size,
    one per edge, so plain weighted DAGs import too.
    """
    nodes = _field(doc, "nodes", "", source, list)
    links_key = "links" if "links" in doc else "edges"
    links = _field(doc, links_key, "", source, list)
    attrs = {}
    for i, n in enumerate(nodes):
        nid = _field(n, "id", f"nodes[{i}]", source, (str, int))
        attrs[str(nid)] = dict(n)
    extra_outputs: dict[str, list[int]] = {k: [] for k in attrs}
    edges = []
    for j, e in enumerate(links):
        w = f"{links_key}[{j}]"
        s, d = str(_field(e, "source", w, source, (str, int))), str(_field(e, "target", w, source, (str, int)))
        if e.get("control"):
            edges.append(Edge(s, d, None))
        elif "src_output" in e:
            edges.append(Edge(s, d, _field(e, "src_output", w, source, int)))
        elif "bytes" in e:
            if s not in attrs:
                raise GraphError(f"unknown op {s!r}", source=source, field=f"{w}.source")
            base = len(attrs[s].get("output_bytes") or [])
            extra_outputs[s].append(int(_field(e, "bytes", w, source, (int, float))))
            edges.append(Edge(s, d, base + len(extra_outputs[s]) - 1))
        else:
            edges.append(Edge(s, d, 0))
    ops = []
    for name, a in attrs.items():
        w = f"nodes[{name}]"
        outputs = list(_field(a, "output_bytes", w, source, list, None) or []) + extra_outputs[name]
        if not outputs and any(e.src == name and e.src_output == 0 for e in edges):
            outputs = [0]
        ops.append(Op(
            name=name, type=_field(a, "type", w, source, str, "Unknown") or "Unknown",
            compute_us=_field(a, "compute_us", w, source, (int, float), None),
            compute_us_by_kind=_field(a, "compute_us_by_kind", w, source, dict, None) or {},
            flops=_field(a, "flops", w, source, (int, float), 0.0) or 0.0,
            output_bytes=tuple(outputs),
            persistent_bytes=_field(a, "persistent_bytes", w, source, (int, float), 0) or 0,
            temporary_bytes=_field(a, "temporary_bytes", w, source, (int, float), 0) or 0,
            colocation_group=_field(a, "colocation_group", w, source, str, None),
        ))
    name = (doc.get("graph") or {}).get("name") or os.path.basename(source).split(".")[0]
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
