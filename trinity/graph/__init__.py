"""The OpGraph IR, its file format and importers."""

from trinity.graph.io import load_graph, save_graph
from trinity.graph.ir import Edge, Op, OpGraph

__all__ = ["Edge", "Op", "OpGraph", "load_graph", "save_graph"]
