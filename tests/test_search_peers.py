"""The same-budget peers of the RL searches: simulated annealing and the exact optimum."""

import numpy as np
import pytest

from conftest import make_cluster
from trinity.errors import PlacementError
from trinity.graph import Edge, Op, OpGraph
from trinity.placers import place
from trinity.placers.annealing import anneal
from trinity.placers.exhaustive import optimum


def two_chains(tensor_bytes=10):
    """a1 -> a2 and b1 -> b2, 50 us each, joined only at the end by a 0-us sum."""
    ops = [Op(n, "MatMul", 50.0, output_bytes=(tensor_bytes,)) for n in ("a1", "a2", "b1", "b2")]
    ops.append(Op("sum", "Add", 0.0, output_bytes=(4,)))
    return OpGraph(ops, [Edge("a1", "a2"), Edge("b1", "b2"), Edge("a2", "sum"), Edge("b2", "sum")])


def test_optimum_splits_independent_chains():
    g = two_chains()
    c = make_cluster(2, latency_us=2.0)  # 10 bytes at 1,000 bytes/us: 2.01 us per transfer
    best = optimum(g, c)
    # one chain per device, the sum beside one of them: 100 us of work + one 2.01 us transfer
    assert best.step_time_us == pytest.approx(102.01)
    assert best.candidates == 2 ** 4  # interchangeable devices: one labelling of each of the S(5,1) + S(5,2) = 16 splits
    p = best.placement
    assert p[0] == p[1] and p[2] == p[3] and p[0] != p[2]


def test_optimum_keeps_a_chain_with_heavy_tensors_together():
    g = two_chains(tensor_bytes=1_000_000)  # 1 ms per transfer, far more than the 100 us saved
    best = optimum(g, make_cluster(2))
    assert best.step_time_us == pytest.approx(200.0)
    assert len(set(best.placement.tolist())) == 1


def test_optimum_refuses_what_it_cannot_enumerate():
    ops = [Op(f"o{i}", "Add", 1.0, output_bytes=(4,)) for i in range(30)]
    g = OpGraph(ops, [Edge(f"o{i}", f"o{i + 1}") for i in range(29)])
    with pytest.raises(PlacementError, match="30 units on 4 devices is 4.8e\\+16 candidates"):
        optimum(g, make_cluster(4))


def test_optimum_refuses_a_real_sized_graph_in_one_line():
    ops = [Op(f"o{i}", "Add", 1.0, output_bytes=(4,)) for i in range(2000)]
    g = OpGraph(ops, [Edge(f"o{i}", f"o{i + 1}") for i in range(1999)])
    with pytest.raises(PlacementError, match="2000 units on 4 devices is about 1e1202 candidates"):
        optimum(g, make_cluster(4))


def test_annealing_reaches_the_optimum_within_its_budget():
    g, c = two_chains(), make_cluster(2)
    start = place("single", g, c).placement
    result = anneal(g, c, start, budget=200, seed=0)
    assert result.step_time_us == pytest.approx(optimum(g, c).step_time_us)
    assert result.calls <= 200
    steps = [s for _, _, s, _ in result.curve]
    assert steps[0] == pytest.approx(200.0) and steps == sorted(steps, reverse=True)
    again = anneal(g, c, start, budget=200, seed=0)  # same seed, same search
    assert np.array_equal(again.placement, result.placement) and again.curve[-1][0] == result.curve[-1][0]


def test_annealing_is_registered_as_a_placer():
    g, c = two_chains(), make_cluster(2)
    assert place("annealing", g, c, seed=1, budget=100).placement.shape == (5,)
    with pytest.raises(PlacementError, match="budget"):
        anneal(g, c, np.zeros(5, np.int64), budget=0)


def test_one_labelling_per_partition():
    from trinity.placers.exhaustive import _partitions, _restricted_growth

    got = list(_restricted_growth(4, 2))
    assert got == [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 0, 1, 1),
                   (0, 1, 0, 0), (0, 1, 0, 1), (0, 1, 1, 0), (0, 1, 1, 1)]
    assert _partitions(4, 2) == 8 and len(list(_restricted_growth(12, 4))) == _partitions(12, 4) == 611501 + 86526 + 2047 + 1


def test_heterogeneous_devices_are_all_enumerated():
    g, c = two_chains(), make_cluster(2, speeds=[1.0, 2.0])
    best = optimum(g, c)
    assert best.candidates == 2 ** 5
    # the slow device runs one chain head (50 us) while the fast one runs the other chain (2 x 25 us); b1's output
    # reaches the fast device at 52.01 us, b2 and the sum follow there: 77.01 us (all on the fast: 100)
    assert best.step_time_us == pytest.approx(77.01)
    assert sorted(best.placement.tolist()) == [0, 1, 1, 1, 1]  # one chain head on the slow device


def test_calibrated_temperatures_by_hand():
    import math

    from trinity.placers.annealing import calibrate

    drops = np.array([-0.5, 0.0, 0.01, 0.02, 0.03, 0.04, 0.05])  # improvements and neutral moves are left out
    t_start, t_end = calibrate(drops, accept_start=0.5, accept_end=0.01, end_quantile=0.0)
    assert t_start == pytest.approx(0.03 / math.log(2))  # the median drop is accepted half the time ...
    assert t_end == pytest.approx(0.01 / math.log(100))  # ... and the smallest 1 time in 100 at the end
    assert calibrate(np.array([0.0, -1.0])) == (1e-6, 1e-9)  # nothing got worse: any small temperature


def test_the_best_step_annealing_had_reached_by_a_wall_time():
    from trinity.placers.annealing import best_step_within

    curve = [(1, 0.01, 900.0, -9.0), (40, 0.5, 700.0, -7.0), (300, 2.0, 720.0, -6.5), (900, 6.0, 500.0, -5.0)]
    assert best_step_within(curve, 0.001) == 900.0  # nothing yet: where it started
    assert best_step_within(curve, 0.5) == 700.0
    assert best_step_within(curve, 5.9) == 700.0  # a better reward at a longer step does not undo it
    assert best_step_within(curve, 6.0) == 500.0


def test_the_least_value_among_points_taken_by_a_wall_time():
    from trinity.placers.annealing import best_by

    points = [(0.2, 31.0), (1.0, 29.5), (3.0, 30.0), (4.5, 28.0)]  # e.g. a history.csv's seconds and best ms
    assert best_by(points, 0.1) == 31.0  # nothing yet: the first point's value
    assert best_by(iter(points), 3.0) == 29.5  # a generator is read once
    assert best_by(points, 10.0) == 28.0


def test_annealing_calibrates_and_refuses_bad_settings():
    g, c = two_chains(), make_cluster(2)
    start = place("single", g, c).placement
    r = anneal(g, c, start, budget=300, seed=0)
    assert r.t_start > r.t_end > 0 and r.calls == 300 and 0 < r.accepted < 300
    fixed = anneal(g, c, start, budget=300, seed=0, t_start=0.05, t_end=0.0005)
    assert (fixed.t_start, fixed.t_end) == (0.05, 0.0005)
    for bad, field in (({"t_start": 0.1}, "t_start"), ({"t_start": -1.0, "t_end": 0.1}, "t_start"),
                       ({"accept_start": 1.5}, "accept_start"), ({"max_moved": 0}, "max_moved"),
                       ({"budget": 2.5}, "budget")):
        with pytest.raises(PlacementError) as err:
            anneal(g, c, start, **{"budget": 10, **bad})
        assert err.value.field == field


def test_annealing_starts_from_round_robin_where_its_placer_cannot_place_the_graph():
    from trinity.placers.annealing import start_placement

    g, c = two_chains(), make_cluster(2)
    assert start_placement("single", g, c)[0] == "single"
    heavy = OpGraph([Op(f"v{i}", "VariableV2", 1.0, persistent_bytes=int(0.4e9)) for i in range(4)], [])
    name, placement = start_placement("single", heavy, make_cluster(2))  # 1.6 GB: one 1 GB device cannot hold it
    assert name == "round-robin" and placement.tolist() == [0, 1, 0, 1]
