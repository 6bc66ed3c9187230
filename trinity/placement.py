"""Placements (op -> device) and the strategy file that carries one.

In memory a placement is ``int64[n_ops]`` of device indices into the
cluster. On disk it is a ``trinity-strategy/1`` JSON file mapping op names to
device names, stamped with the graph's digest so it cannot be applied to a
different graph by mistake.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from trinity.cluster import Cluster
from trinity.errors import FormatError, PlacementError
from trinity.fileio import check_format, read_json, write_json
from trinity.graph.ir import OpGraph

FORMAT = "trinity-strategy"
VERSION = 1


def check_placement(graph: OpGraph, cluster: Cluster, placement, source: str | None = None) -> np.ndarray:
    """Return ``placement`` as int64[n_ops], or raise PlacementError naming the first problem."""
    p = np.asarray(placement)
    if p.shape != (graph.n_ops,):
        raise PlacementError(f"has shape {p.shape}, expected ({graph.n_ops},) for graph {graph.name!r}",
                             source=source, field="placement")
    if not np.issubdtype(p.dtype, np.integer):
        raise PlacementError(f"must hold device indices, got dtype {p.dtype}", source=source, field="placement")
    bad = np.flatnonzero((p < 0) | (p >= cluster.n_devices))
    if len(bad):
        raise PlacementError(f"op {graph.ops[bad[0]].name!r} names device {int(p[bad[0]])}, but cluster "
                             f"{cluster.name!r} has {cluster.n_devices}", source=source, field="placement")
    group = graph.arrays.group
    first = np.full(graph.arrays.n_groups, -1, np.int64)
    first[group[::-1]] = np.arange(graph.n_ops)[::-1]  # earliest member of each group
    split = np.flatnonzero(p != p[first[group]])
    if len(split):
        i, j = split[0], first[group[split[0]]]
        raise PlacementError(
            f"splits colocation group {graph.ops[i].colocation_group!r}: {graph.ops[j].name!r} on "
            f"{cluster.devices[p[j]].name}, {graph.ops[i].name!r} on {cluster.devices[p[i]].name}",
            source=source, field="placement")
    return p.astype(np.int64, copy=False)


@dataclass
class Strategy:
    """A placement with the provenance needed to reuse it."""

    graph_name: str
    graph_digest: str
    cluster: str
    devices: list[str]
    placement: dict[str, str]  # op name -> device name
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_array(cls, graph: OpGraph, cluster: Cluster, placement, **meta) -> "Strategy":
        p = check_placement(graph, cluster, placement)
        names = cluster.device_names
        return cls(graph.name, graph.digest(), cluster.name, names,
                   {op.name: names[d] for op, d in zip(graph.ops, p)}, dict(meta))

    def to_array(self, graph: OpGraph, cluster: Cluster, source: str | None = None) -> np.ndarray:
        """Indices into ``cluster``'s devices, matched by name."""
        return check_placement(graph, cluster, self._indices(graph, cluster.device_names, cluster.name, source),
                               source)

    def to_indices(self, graph: OpGraph, source: str | None = None, *, same_graph: bool = True) -> np.ndarray:
        """Indices into this strategy's own device list (device i runs on worker i of a real run).
        ``same_graph=False`` maps by op name onto another graph with the same ops (the same model
        exported at another batch size: only the shapes differ)."""
        return self._indices(graph, self.devices, self.cluster, source, same_graph)

    def _indices(self, graph: OpGraph, names: list[str], cluster_name: str, source: str | None,
                 same_graph: bool = True) -> np.ndarray:
        if same_graph and self.graph_digest != graph.digest():
            raise PlacementError(f"was made for graph {self.graph_name!r} ({self.graph_digest}), not for "
                                 f"{graph.name!r} ({graph.digest()})", source=source, field="graph_digest")
        out = np.empty(graph.n_ops, np.int64)
        for i, op in enumerate(graph.ops):
            dev = self.placement.get(op.name)
            if dev is None:
                raise PlacementError(f"no device for op {op.name!r}", source=source, field="placement")
            if dev not in names:
                raise PlacementError(f"op {op.name!r} names unknown device {dev!r}; cluster {cluster_name!r} "
                                     f"has {names}", source=source, field=f"placement.{op.name}")
            out[i] = names.index(dev)
        return out

    def save(self, path: str | os.PathLike) -> None:
        write_json(path, {"format": f"{FORMAT}/{VERSION}", "graph": self.graph_name,
                          "graph_digest": self.graph_digest, "cluster": self.cluster, "devices": self.devices,
                          "meta": self.meta, "placement": self.placement})

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Strategy":
        doc = read_json(path)
        source = str(path)
        check_format(doc, FORMAT, VERSION, source)
        for key in ("graph", "graph_digest", "cluster", "devices", "placement"):
            if key not in doc:
                raise FormatError("missing", source=source, field=key)
        for key in ("graph", "graph_digest", "cluster"):
            if not isinstance(doc[key], str):
                raise FormatError(f"must be a string, got {type(doc[key]).__name__}", source=source, field=key)
        if not isinstance(doc["devices"], list) or not all(isinstance(d, str) for d in doc["devices"]):
            raise FormatError("must be a list of device names", source=source, field="devices")
        placement = doc["placement"]
        if not isinstance(placement, dict) or not all(isinstance(d, str) for d in placement.values()):
            raise FormatError("must map op names to device names", source=source, field="placement")
        meta = doc.get("meta") or {}
        if not isinstance(meta, dict):
            raise FormatError(f"must be an object, got {type(meta).__name__}", source=source, field="meta")
        return cls(doc["graph"], doc["graph_digest"], doc["cluster"], list(doc["devices"]), dict(placement),
                   dict(meta))
