"""PipeDream's planner as published: stage replication, 2 C_i, its objective; hand-built and brute-forced."""

from __future__ import annotations

import itertools
import random

import pytest

from trinity.cluster import cluster_from_dict
from trinity.pipeline_parallel import PipelinePlan, predict
from trinity.pipeline_parallel.pipedream import ReplicatedPlan, objective_us, pipedream_plan, predict_replicated
from trinity.profile.layers import Layer, LayerProfile


def cluster(speeds, bw=100.0, lat=5.0):
    return cluster_from_dict({"name": "t", "devices": [{"name": f"d{i}", "speed": s, "memory_GB": 1}
                                                       for i, s in enumerate(speeds)],
                              "default_link": {"bandwidth_GBps": bw / 1e3, "latency_us": lat}})


def four_layers(param_bytes: int, output_bytes: int) -> LayerProfile:
    """At batch 4, forward 10 + backward 20 us per layer: with 2 micro-batches T_l = 15 us."""
    return LayerProfile("hand", 4, tuple(Layer(f"l{i}", 10, 20, param_bytes, output_bytes, 0, 0) for i in range(4)))


def test_big_activations_replicate_one_stage():
    # a_l = 5000 bytes per micro-batch: any split pays 2 C = 2 (5 + 50) = 110 us; one stage on both workers:
    # sync W = 4 x 1 x 400 / (2 x 100) = 8 us, T = max(60, 8) / 2 = 30 us.
    found = pipedream_plan(four_layers(100, 10_000), cluster([1, 1]), micro_batches=2)
    assert found.plan == ReplicatedPlan((0, 4), ((0, 1),), 2, "1f1b") and found.objective_us == pytest.approx(30)


def test_big_weights_split_into_a_pipeline():
    # |w| = 10 kB per layer: replicating costs W = 4 x 40000 / 200 = 800 us (/ 2 = 400); a split in the
    # middle: max(30, 2 (5 + 5), 30) = 30 us.
    found = pipedream_plan(four_layers(10_000, 1000), cluster([1, 1]), micro_batches=2)
    assert found.plan == ReplicatedPlan((0, 2, 4), ((0,), (1,)), 2, "1f1b") and found.objective_us == pytest.approx(30)
    assert found.plan.as_pipeline() == PipelinePlan((0, 2, 4), (0, 1), 2, "1f1b")


def test_the_planner_sees_identical_workers_and_the_slowest_link():
    # speeds 2 and 0.5: the planner sees two workers of 1.25; on the real cluster the slow replica gates
    c = cluster_from_dict({"name": "h", "devices": [{"name": "a", "speed": 2, "memory_GB": 1},
                                                    {"name": "b", "speed": 0.5, "memory_GB": 1}],
                           "default_link": {"bandwidth_GBps": 0.1, "latency_us": 5}})
    found = pipedream_plan(four_layers(100, 10_000), c, micro_batches=2)
    assert found.objective_us == pytest.approx(60 / 1.25 / 2)
    assert objective_us(found.plan, four_layers(100, 10_000), c, planner_view=True) == pytest.approx(24)
    assert objective_us(found.plan, four_layers(100, 10_000), c) == pytest.approx(60 / 0.5 / 2)


def _all_replicated_plans(n: int, M: int, m: int):
    for S in range(1, min(n, M) + 1):
        for cuts in itertools.combinations(range(1, n), S - 1):
            for reps in itertools.product(range(1, M + 1), repeat=S):
                if sum(reps) <= M:
                    first = list(itertools.accumulate(reps, initial=0))
                    yield ReplicatedPlan((0, *cuts, n), tuple(tuple(range(first[s], first[s] + reps[s]))
                                                              for s in range(S)), m, "1f1b")


@pytest.mark.parametrize("seed", range(6))
def test_the_dynamic_program_finds_the_least_objective_of_every_replicated_plan(seed):
    rng = random.Random(seed)
    n, M = rng.randint(2, 5), rng.randint(1, 4)
    prof = LayerProfile("r", 8, tuple(Layer(f"l{i}", rng.uniform(1, 50), rng.uniform(1, 100), rng.randint(1, 10**5),
                                            rng.randint(1, 10**5), 0) for i in range(n)))
    c = cluster([rng.choice([0.5, 1, 2]) for _ in range(M)], bw=rng.uniform(10, 1000), lat=rng.uniform(0, 20))
    found = pipedream_plan(prof, c, micro_batches=4)
    brute = min(objective_us(p, prof, c, planner_view=True) for p in _all_replicated_plans(n, M, 4))
    assert found.objective_us == pytest.approx(brute, rel=1e-9)
    assert objective_us(found.plan, prof, c, planner_view=True) == pytest.approx(found.objective_us, rel=1e-9)


def test_graded_on_the_1f1b_step():
    three = LayerProfile("hand", 4, (Layer("l0", 20, 40, 100, 2000, 400, 2), Layer("l1", 40, 80, 200, 4000, 800, 4),
                                     Layer("l2", 20, 40, 300, 0, 1200, 2)))
    plain = PipelinePlan((0, 1, 2, 3), (0, 1, 2), 2, "1f1b")  # no replicas: the cost model's own step
    assert predict_replicated(plain, three, cluster([1, 2, 1])).step_time_us == pytest.approx(
        predict(plain, three, cluster([1, 2, 1])).step_time_us)
    # one stage on 2 workers of speed 1, GPipe, 2 micro-batches: a device of speed 2: F 20, 20, B 40, 40;
    # update: one replica's 8 us after the ring all-reduce of 600 bytes, 2 x 5 + 600 / 100 = 16 us
    cost = predict_replicated(ReplicatedPlan((0, 3), ((0, 1),), 2, "gpipe"), three, cluster([1, 1]))
    assert cost.step_time_us == pytest.approx(40 + 80 + 8 + 16)
    assert list(cost.sent_bytes) == [600, 600]  # each replica sends 2 (k - 1) / k x 600 bytes in the ring


def test_a_plan_with_replicated_stages_runs_as_lanes(tmp_path):
    """2 stages x 2 replicas on 4 local ranks: two pipelines of half the batch, gradients averaged per stage."""
    import json

    from trinity.pipeline_parallel import PipelineError, measure
    tiny = {"d_model": 16, "d_ff": 32, "seq_len": 8, "vocab_size": 50, "n_heads": 2}
    plan = ReplicatedPlan((0, 2, 4), ((0, 1), (2, 3)), 4, "1f1b")
    r = measure(plan, "transformer_lm", 8, steps=2, warmup=1, out_dir=tmp_path, options=tiny, timeout_s=120)
    assert r["step_time_us"] > 0 and r["loss"] is not None and r["plan"]["replicas"] == [[0, 1], [2, 3]]
    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in range(4)]
    assert [(x["stage"], x["lane"]) for x in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    whole = measure(ReplicatedPlan((0, 4), ((0, 1, 2, 3),), 4, "1f1b"), "transformer_lm", 8, steps=1, warmup=0,
                    out_dir=tmp_path / "dp", options=tiny, timeout_s=120)  # one stage on all: data parallelism
    assert whole["loss"] is not None
    with pytest.raises(PipelineError, match="same number of replicas"):
        measure(ReplicatedPlan((0, 2, 4), ((0, 1), (2,)), 4, "1f1b"), "transformer_lm", 8, out_dir=tmp_path / "x",
                options=tiny)
