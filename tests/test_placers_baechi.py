"""Expert, METIS and Baechi's placers (m-TOPO, m-ETF, m-SCT) on hand-built graphs with exact answers.

Tiny clusters use 1 GB/s links (1000 bytes per microsecond) and 10 us latency,
so a 1,000-byte tensor takes 11 us to cross and a 1 MB one 1,010 us.
"""

from __future__ import annotations


import numpy as np
import pytest
import scipy.sparse as sp

from trinity.cluster import Cluster, cluster_from_dict, load_cluster
from trinity.errors import PlacementError
from trinity.graph import load_graph
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.graph.synthetic import layered_dag
from trinity.placers import place
from trinity.placers.m_sct import favorite_parents
from trinity.placers.metis import _repair_memory

from conftest import REFERENCE_GNMT

PLACERS = ["expert", "metis", "m-topo", "m-etf", "m-sct"]


@pytest.fixture(scope="module")
def gnmt() -> OpGraph:
    if not REFERENCE_GNMT.exists():
        pytest.skip(f"reference graph not found at {REFERENCE_GNMT}")
    return load_graph(REFERENCE_GNMT)


def cluster(n: int = 2, memory_bytes: int = 10**9, speeds: list[float] | None = None) -> Cluster:
    speeds = speeds or [1.0] * n
    return cluster_from_dict({
        "name": "tiny",
        "devices": [{"name": f"d{i}", "speed": s, "memory_GB": memory_bytes / 1e9} for i, s in enumerate(speeds)],
        "default_link": {"bandwidth_GBps": 1.0, "latency_us": 10.0},
    })


def op(name: str, us: float = 100.0, out: int = 1000, mem: int = 0, group: str | None = None) -> Op:
    """An op with one output of ``out`` bytes and ``mem`` persistent bytes."""
    return Op(name, "T", compute_us=us, output_bytes=(out,), persistent_bytes=mem, colocation_group=group)


def graph(ops: list[Op], edges: list[tuple[str, str]]) -> OpGraph:
    return OpGraph(ops, [Edge(s, d) for s, d in edges])


def chain(n: int, **kw) -> OpGraph:
    return graph([op(f"c{i}", **kw) for i in range(n)], [(f"c{i}", f"c{i + 1}") for i in range(n - 1)])


def run(name: str, g: OpGraph, c: Cluster) -> list[int]:
    return place(name, g, c).placement.tolist()


# ---------------------------------------------------------------- expert
def test_expert_cuts_topological_order_by_compute():
    g = graph([op("a", 100), op("b", 100), op("c", 100), op("d", 500)], [("a", "b"), ("b", "c"), ("c", "d")])
    assert run("expert", g, cluster()) == [0, 0, 0, 1]


def test_expert_gives_faster_devices_longer_blocks():
    assert run("expert", chain(6), cluster(speeds=[2.0, 1.0])) == [0, 0, 0, 0, 1, 1]


def test_expert_spills_to_next_device_with_room():
    # 1,000 bytes per device: b (600 + 100 output bytes) does not fit beside a on d0.
    mems = [600, 600, 0, 0]
    g = graph([op(n, mem=m, out=100) for n, m in zip("abcd", mems)], [("a", "b"), ("b", "c"), ("c", "d")])
    assert run("expert", g, cluster(memory_bytes=1000)) == [0, 1, 1, 1]


# ---------------------------------------------------------------- metis
def test_metis_separates_disconnected_cliques():
    ops = [op(f"{k}{i}") for k in "pq" for i in range(4)]
    edges = [(f"{k}{i}", f"{k}{j}") for k in "pq" for i in range(4) for j in range(i + 1, 4)]
    p = run("metis", graph(ops, edges), cluster())
    assert len(set(p[:4])) == 1 and len(set(p[4:])) == 1 and p[0] != p[4]


def test_metis_memory_repair_moves_the_group_that_saves_most_cut():
    # Groups 0-1-2 (400 bytes each) sit on d0, which holds 1,000; group 2 talks mostly to group 3 on d1.
    g = chain(4, out=0)
    adj = sp.csr_matrix(np.array([[0, 5, 0, 0], [5, 0, 1, 0], [0, 1, 0, 9], [0, 0, 9, 0]], float))
    part = np.array([0, 0, 0, 1])
    _repair_memory(g, cluster(memory_bytes=1000), part, np.array([400.0, 400, 400, 100]), adj)
    assert part.tolist() == [0, 0, 1, 1]


def test_metis_heterogeneous_cluster_gives_fast_devices_more_compute():
    g = layered_dag(2000, 3500)
    c = load_cluster("hetero4")
    p = place("metis", g, c).placement
    work = np.bincount(p, weights=[o.compute_us for o in g.ops], minlength=4)
    assert work[0] > 2 * work[3] and work[1] > 2 * work[3]


# ---------------------------------------------------------------- m-topo
def test_m_topo_splits_equal_memory_chain_evenly():
    assert run("m-topo", chain(4, out=100), cluster()) == [0, 0, 1, 1]


def test_m_topo_last_device_takes_the_rest():
    assert run("m-topo", chain(7, out=100), cluster(3)) == [0, 0, 1, 1, 2, 2, 2]


# ---------------------------------------------------------------- m-etf
def test_m_etf_puts_independent_chains_on_their_own_devices():
    ops = [op(f"{k}{i}") for k in "ab" for i in range(3)]
    edges = [(f"{k}{i}", f"{k}{i + 1}") for k in "ab" for i in range(2)]
    assert run("m-etf", graph(ops, edges), cluster()) == [0, 0, 0, 1, 1, 1]


def test_m_etf_keeps_op_where_its_input_is_when_transfer_is_slow():
    # x could start at once on the idle d1, but its 1 MB input would take 1,010 us to get there.
    g = graph([op("r", 10, out=10**6), op("x", 100), op("y", 100)], [("r", "x"), ("r", "y")])
    assert run("m-etf", g, cluster()) == [0, 0, 0]


# ---------------------------------------------------------------- m-sct
def test_m_sct_favorite_child_is_the_heavy_edge():
    # r's 1 MB output feeds y, its 1 KB output feeds x.
    ops = [Op("r", "T", compute_us=10.0, output_bytes=(1000, 10**6)), op("x"), op("y")]
    g = OpGraph(ops, [Edge("r", "x", 0), Edge("r", "y", 1)])
    assert favorite_parents(g, cluster()).tolist() == [-1, -1, 0]


def test_m_sct_keeps_chain_with_huge_edges_on_one_device():
    g = chain(4, out=10**6)
    assert favorite_parents(g, cluster()).tolist() == [-1, 0, 1, 2]
    assert run("m-sct", g, cluster()) == [0, 0, 0, 0]


def test_m_sct_favorite_child_follows_parent_where_etf_moves_it():
    # r feeds z (1 KB) and y (290 KB, 300 us away); y feeds k (1 MB). The LP's critical path is
    # r -> y -> k, so y is r's favorite child. z wins d0 first (tie, earlier in topological order);
    # ETF then starts y on d1 at 310 us rather than wait for d0 until 510 us; SCT keeps y with r.
    ops = [Op("r", "T", compute_us=10.0, output_bytes=(1000, 290_000)), op("z", 500), op("y", 100, out=10**6),
           op("k", 1000)]
    g = OpGraph(ops, [Edge("r", "z", 0), Edge("r", "y", 1), Edge("y", "k")])
    assert favorite_parents(g, cluster()).tolist() == [-1, -1, 0, 2]
    assert run("m-etf", g, cluster()) == [0, 0, 1, 1]
    assert run("m-sct", g, cluster()) == [0, 0, 0, 0]


# ---------------------------------------------------------------- all placers
@pytest.mark.parametrize("name", PLACERS)
def test_colocation_group_across_the_graph_stays_together(name):
    # c0 and c7 share a group; every device has room for it.
    ops = [op(f"c{i}", mem=100, group="g" if i in (0, 7) else None) for i in range(8)]
    g = graph(ops, [(f"c{i}", f"c{i + 1}") for i in range(7)])
    p = run(name, g, cluster(4))
    assert p[0] == p[7]


@pytest.mark.parametrize("name", PLACERS)
def test_op_too_big_for_any_device_is_named(name):
    g = graph([op("a", out=100), op("huge", mem=5000), op("b", out=100)], [("a", "huge"), ("huge", "b")])
    with pytest.raises(PlacementError, match="'huge'"):
        place(name, g, cluster(memory_bytes=1000))


@pytest.mark.parametrize("name", PLACERS)
def test_placers_on_layered_dag_are_valid_and_deterministic(name):
    g = layered_dag(2000, 3500)
    c = load_cluster("p100x4")
    first = place(name, g, c).placement
    assert np.array_equal(first, place(name, g, c).placement)
    assert len(np.unique(first)) > 1


@pytest.mark.parametrize("name", PLACERS)
def test_placers_on_reference_gnmt(name, gnmt):
    p = place(name, gnmt, load_cluster("p100x4")).placement
    assert len(np.unique(p)) > 1


# ---------------------------------------------------------------- sender contention
def test_list_scheduling_sees_the_senders_queue():
    # a (100 us) has four 200 kB outputs (210 us to cross), one per 150 us child; three devices.
    # b, c run on d0 and d moves to d1 (its transfer occupies d0's sender over [100, 310]).
    # Textbook ETF thinks e's tensor also reaches d2 at 310; it cannot leave before 310, so
    # would arrive at 520, and the contention-aware schedule keeps e on d0 (free at 400).
    from trinity.placers.list_scheduling import list_schedule

    a = Op("a", "T", compute_us=100.0, output_bytes=(200_000,) * 4)
    kids = [Op(name, "T", compute_us=150.0) for name in "bcde"]
    g = OpGraph([a] + kids, [Edge("a", name, k) for k, name in enumerate("bcde")])
    assert list_schedule(g, cluster(3), contention=False).tolist() == [0, 0, 0, 1, 2]
    assert list_schedule(g, cluster(3)).tolist() == [0, 0, 0, 1, 0]
