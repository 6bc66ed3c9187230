"""The step-time lower bound that counts communication (trinity.bound): exact values on hand-built graphs,
never above any placement's simulated step time, and its input checks."""

import itertools

import numpy as np
import pytest

from trinity.bound import Bound, check_options, incumbent, segments, step_time_bound
from trinity.cli import main
from trinity.cluster import cluster_from_dict
from trinity.costs import op_times
from trinity.errors import TrinityError
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.graph.synthetic import layered_dag
from trinity.sim import Simulator

#: 2 devices; a 1 MB tensor takes 100 + 1e6 / 1e4 = 200 us
LINK = {"bandwidth_GBps": 10.0, "latency_us": 100.0}


def two_devices(n=2):
    return cluster_from_dict({"name": "two", "devices": [{"name": f"g{i}", "memory_GB": 1} for i in range(n)],
                              "default_link": LINK})


def fork_join(nbytes: int) -> OpGraph:
    """s -> u, s -> v, u -> z, v -> z; u and v take 1 ms each, s and z nothing; every tensor ``nbytes``."""
    ops = [Op("s", "A", compute_us=0.0, output_bytes=(nbytes,)),
           Op("u", "B", compute_us=1000.0, output_bytes=(nbytes,)),
           Op("v", "B", compute_us=1000.0, output_bytes=(nbytes,)),
           Op("z", "C", compute_us=0.0, output_bytes=(0,))]
    return OpGraph(ops, [Edge("s", "u"), Edge("s", "v"), Edge("u", "z"), Edge("v", "z")], name="fork")


def best_simulated(graph, cluster) -> float:
    sim = Simulator(graph, cluster)
    a = graph.arrays
    return min(sim.simulate(np.array(units)[a.group], check=False).step_time_us
               for units in itertools.product(range(cluster.n_devices), repeat=a.n_groups))


@pytest.mark.parametrize("nbytes, expected", [(1_000_000, 1200.0),  # s, v | u, z: 1 ms + one 200 us transfer
                                              (12_000_000, 2000.0)])  # a transfer of 1.3 ms: one device wins
def test_fork_join_exact(nbytes, expected):
    g, c = fork_join(nbytes), two_devices()
    b = step_time_bound(g, c, time_limit_s=10)
    assert b.bound_us == pytest.approx(expected, rel=1e-5)
    assert b.bound_us <= best_simulated(g, c) == pytest.approx(expected)
    assert b.compute_only_us == 1000.0  # blind to the transfers
    assert b.segments[0].optimal and b.optimal == 1


def test_colocated_ops_cannot_split():
    """u and v in one colocation group: no split, 2 ms, though the transfers are cheap."""
    g = fork_join(1_000_000)
    ops = [Op(o.name, o.type, compute_us=o.compute_us, output_bytes=o.output_bytes,
              colocation_group="g" if o.name in "uv" else None) for o in g.ops]
    g = OpGraph(ops, g.edges)
    assert step_time_bound(g, two_devices(), time_limit_s=10).bound_us == pytest.approx(2000.0, rel=1e-5)


def chained_forks() -> OpGraph:
    """Two fork-joins in series (z of the first is s of the second): 9 ops, cut at the middle op."""
    ops, edges = [Op("s0", "A", compute_us=0.0, output_bytes=(1_000_000,))], []
    for k in range(2):
        ops += [Op(f"u{k}", "B", compute_us=1000.0, output_bytes=(1_000_000,)),
                Op(f"v{k}", "B", compute_us=1000.0, output_bytes=(1_000_000,)),
                Op(f"s{k + 1}", "C", compute_us=0.0, output_bytes=(1_000_000,))]
        edges += [Edge(f"s{k}", f"u{k}"), Edge(f"s{k}", f"v{k}"), Edge(f"u{k}", f"s{k + 1}"),
                  Edge(f"v{k}", f"s{k + 1}")]
    return OpGraph(ops, edges, name="forks")


def test_segments_sum_along_the_chain():
    """Segments of at most 4 ops: s0..s1 and s1..s2, each exactly 1.2 ms (split, one transfer on the path)."""
    g, c = chained_forks(), two_devices()
    fastest = op_times(g, c).min(axis=1)
    parts = segments(g, fastest, 4)
    names = [[g.ops[v].name for v in part] for part in parts]
    assert [(p[0], p[-1], len(p)) for p in names] == [("s0", "s1", 4), ("s1", "s2", 4)]
    b = step_time_bound(g, c, time_limit_s=10, max_segment_ops=4)
    assert [s.bound_us for s in b.segments] == [pytest.approx(1200.0, rel=1e-5)] * 2
    assert b.chain_us == pytest.approx(2400.0, rel=1e-5)
    assert b.bound_us == pytest.approx(2400.0, rel=1e-5) == pytest.approx(best_simulated(g, c), rel=1e-5)
    whole = step_time_bound(g, c, time_limit_s=10, max_segment_ops=9)  # one segment: the whole graph
    assert len(whole.segments) == 1 and whole.bound_us == pytest.approx(2400.0, rel=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_never_above_any_placement(seed):
    """Random training-like graphs (colocation, control edges, free ops), 2 or 3 devices: the bound, whole
    graph or cut into segments, is at most every placement's simulated step time and at least compute-only."""
    g = layered_dag(9, 14, seed=seed, colocated_fraction=0.2, control_fraction=0.1, log_compute_us=5.0,
                    log_bytes=12.0)
    c = two_devices(2 + seed % 2)
    best = best_simulated(g, c)
    for nodes in (3, 5, 9):
        b = step_time_bound(g, c, time_limit_s=10, max_segment_ops=nodes)
        assert b.compute_only_us - 1e-9 <= b.bound_us <= best + 1e-6, (nodes, b.bound_us, best)


def test_incumbent_is_a_simulated_placement():
    g, c = fork_join(1_000_000), two_devices()
    inc = incumbent(g, c, placers=("single",), extra={"split": np.array([0, 0, 1, 0])})
    assert (inc.method, inc.step_time_us) == ("split", pytest.approx(1400.0))


@pytest.mark.parametrize("time_limit, nodes, field", [(0, 40, "time_limit"), (-1, 40, "time_limit"),
                                                      (float("nan"), 40, "time_limit"), ("5", 40, "time_limit"),
                                                      (10, 1, "nodes"), (10, 401, "nodes"), (10, 2.5, "nodes"),
                                                      (10, True, "nodes")])
def test_refuses_out_of_range(time_limit, nodes, field):
    with pytest.raises(TrinityError) as err:
        check_options(time_limit, nodes)
    assert err.value.field == field


def test_cli_bound(tmp_path, capsys):
    from trinity.graph import save_graph

    path = tmp_path / "g.json.gz"
    save_graph(fork_join(1_000_000), path)
    cluster = tmp_path / "two.yaml"
    cluster.write_text("name: two\ndevices: [{name: g0, memory_GB: 1}, {name: g1, memory_GB: 1}]\n"
                       "default_link: {bandwidth_GBps: 10, latency_us: 100}\n")
    assert main(["bound", str(path), "--cluster", str(cluster), "--time-limit", "5"]) == 0
    out = capsys.readouterr().out
    assert "bound_ms: 1.2\n" in out and "incumbent_ms:" in out and "gap_pct:" in out
    assert main(["bound", str(path), "--cluster", str(cluster), "--time-limit", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "time_limit" in err[0]
    assert main(["bound", str(path), "--cluster", str(cluster), "--nodes", "1"]) == 2
    assert "nodes" in capsys.readouterr().err


def test_bound_fields():
    b = step_time_bound(fork_join(1_000_000), two_devices(), time_limit_s=5)
    assert isinstance(b, Bound) and b.time_limit_s == 5 and b.milp_gap == 0.0
