"""OpGraph IR: validation, file format, importers."""

import gzip
import json

import networkx as nx
import numpy as np
import pytest

from conftest import tiny
from trinity.errors import FormatError, GraphError, TrinityError
from trinity.graph import Edge, Op, OpGraph, load_graph, save_graph
from trinity.graph.synthetic import GRAPH_SETS, graph_set, layered_dag, training_graph




def test_arrays_and_derived_quantities():
    g = tiny()
    a = g.arrays
    assert list(a.src) == [0, 1, 2, 3, 0] and list(a.dst) == [3, 2, 3, 4, 4]
    assert list(a.edge_bytes) == [400, 800, 800, 8, 0]  # control edge moves nothing
    assert list(a.tensor_offset) == [0, 1, 2, 3, 5, 6]
    assert a.group[1] == a.group[2] and a.n_groups == 4
    assert list(g.static_memory()) == [400, 800, 800, 272, 4]  # w's output is its storage
    assert list(g.topological_order()) == [0, 1, 2, 3, 4]
    assert g.colocation_groups() == {"w": ["w", "read"]}
    # groups x 0, {w, read} 1, mm 2, loss 3; w -> read stays inside group 1, x -> loss (control) links 0 and 3
    ptr, nbr = g.group_neighbours()
    assert list(ptr) == [0, 2, 3, 6, 8] and list(nbr) == [2, 3, 2, 0, 1, 3, 0, 2]


def test_breadth_and_depth_first_orders():
    """A diamond a -> (b -> c | d -> e) -> f: breadth first by levels, depth first branch by branch."""
    names = "abcdef"
    edges = [Edge("a", "b", 0), Edge("a", "d", 0), Edge("b", "c", 0), Edge("d", "e", 0), Edge("c", "f", 0),
             Edge("e", "f", 0)]
    g = OpGraph([Op(n, "Add", 1.0, output_bytes=(8,)) for n in names], edges)
    assert "".join(names[i] for i in g.topological_order()) == "abdcef"
    assert "".join(names[i] for i in g.depth_first_order()) == "abcdef"


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_save_load_round_trip(tmp_path, suffix):
    g = tiny()
    path = tmp_path / f"g{suffix}"
    save_graph(g, path)
    h = load_graph(path)
    assert h.ops == g.ops and h.edges == g.edges and h.name == "tiny" and h.meta == {"note": "hand-built"}
    assert h.digest() == g.digest()


def test_bad_graphs_name_the_problem():
    with pytest.raises(GraphError, match=r"cycle: a -> b -> c -> a"):
        OpGraph([Op("a", "T"), Op("b", "T", output_bytes=(1,)), Op("c", "T")],
                [Edge("a", "b", None), Edge("b", "c", 0), Edge("c", "a", None)])
    with pytest.raises(GraphError, match=r"edges\[0\].dst: unknown op 'nope'"):
        OpGraph([Op("a", "T", output_bytes=(1,))], [Edge("a", "nope", 0)])
    with pytest.raises(GraphError, match=r"ops\[0\].compute_us \(a\): must be >= 0"):
        OpGraph([Op("a", "T", -1.0)], [])
    with pytest.raises(GraphError, match=r"ops\[0\].compute_us \(a\): must be finite, got nan"):
        OpGraph([Op("a", "T", float("nan"))], [])
    with pytest.raises(GraphError, match=r"ops\[0\].output_bytes\[1\] \(a\): must be >= 0"):
        OpGraph([Op("a", "T", output_bytes=(1, -5))], [])
    with pytest.raises(GraphError, match=r"ops\[1\].name: duplicate op name 'a' \(also ops\[0\]\)"):
        OpGraph([Op("a", "T"), Op("a", "T")], [])
    with pytest.raises(GraphError, match=r"edges\[0\].src_output: output 2 of 'a' does not exist"):
        OpGraph([Op("a", "T", output_bytes=(1,)), Op("b", "T")], [Edge("a", "b", 2)])


def test_bad_files_name_file_and_field(tmp_path):
    good = tmp_path / "g.json"
    save_graph(tiny(), good)
    doc = json.loads(good.read_text())

    truncated = tmp_path / "truncated.json"
    truncated.write_text(good.read_text()[:100])
    with pytest.raises(FormatError, match=r"truncated.json: not valid JSON"):
        load_graph(truncated)

    gz = tmp_path / "truncated.json.gz"
    gz.write_bytes(gzip.compress(good.read_bytes())[:60])
    with pytest.raises(FormatError, match=r"truncated.json.gz: truncated or corrupt gzip"):
        load_graph(gz)

    wrong = tmp_path / "v9.json"
    wrong.write_text(json.dumps({**doc, "format": "trinity-opgraph/9"}))
    with pytest.raises(FormatError, match=r"v9.json: format: version 9 is not supported"):
        load_graph(wrong)

    bad_cost = tmp_path / "nan.json"
    doc["ops"][3]["compute_us"] = float("nan")
    bad_cost.write_text(json.dumps(doc))
    with pytest.raises(GraphError, match=r"nan.json: ops\[3\].compute_us \(mm\): must be finite"):
        load_graph(bad_cost)

    missing = tmp_path / "missing.json"
    del doc["ops"][0]["type"]
    missing.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"missing.json: ops\[0\].type: missing"):
        load_graph(missing)

    with pytest.raises(FormatError, match="file not found"):
        load_graph(tmp_path / "absent.json")


def test_reference_gnmt_import(reference_gnmt_path):
    g = load_graph(reference_gnmt_path)
    s = g.summary()
    assert (s["ops"], s["edges"], s["control_edges"]) == (2828, 5225, 0)
    assert s["compute_us"] == 115871.0  # README: sum of measured compute
    types = [op.type for op in g.ops]
    assert types.count("Const") == 1089 and types.count("LSTMBlockCell") == 360
    groups = g.colocation_groups()
    # colocate_with is symmetric in effect: a variable and everything pinned to it share a group
    assert "encoder/embedding" in groups["encoder/embedding"]
    emb = g.ops[g.index["encoder/embedding"]]
    assert emb.persistent_bytes == 61440000 and emb.output_bytes == (61440000,)


def test_node_link_import(tmp_path):
    nxg = nx.DiGraph()
    nxg.add_node("a", type="MatMul", compute_us=3.0, output_bytes=[100])
    nxg.add_node("b", compute_us=1.0)
    nxg.add_node("c", compute_us=2.0, colocation_group="g")
    nxg.add_edge("a", "b", src_output=0)
    nxg.add_edge("b", "c", bytes=64)
    nxg.add_edge("a", "c", control=True)
    path = tmp_path / "nl.json"
    path.write_text(json.dumps(nx.node_link_data(nxg, edges="links")))
    g = load_graph(path)
    assert g.n_ops == 3 and g.ops[g.index["b"]].output_bytes == (64,)
    assert list(g.arrays.edge_bytes) == [100, 0, 64]
    assert g.ops[g.index["b"]].type == "Unknown"


def test_layered_dag_shape():
    g = layered_dag(3000, 5000, seed=1)
    assert g.n_ops == 3000 and g.n_edges == 5000
    assert len(g.colocation_groups()) > 0
    assert np.all(g.arrays.src < g.arrays.dst)  # a DAG by construction


def test_errors_render_as_one_line():
    err = GraphError("must be >= 0, got -1", source="g.json", field="ops[3].compute_us")
    assert str(err) == "g.json: ops[3].compute_us: must be >= 0, got -1"
    assert isinstance(err, TrinityError)


def test_graph_sets_build_the_graphs_their_seeds_name():
    """The development and fresh sets the search comparisons share: built from (kind, ops, seed), deterministic."""
    dev, fresh = graph_set("development"), graph_set("fresh")
    expected = training_graph(2500, batch=8, seed=7)
    assert dev[0].ops == expected.ops and dev[0].edges == expected.edges
    last = layered_dag(4000, 6000, seed=41)
    assert fresh[2].ops == last.ops and fresh[2].edges == last.edges
    assert [g.n_ops for g in fresh] == [g.n_ops for g in graph_set("fresh")]  # same seeds, same graphs
    assert [kind for kind, _, _ in GRAPH_SETS["development"]] == ["training", "training", "layered"]
    with pytest.raises(ValueError, match="unknown graph set 'held-out'"):
        graph_set("held-out")
