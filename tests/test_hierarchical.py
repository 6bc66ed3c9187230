"""Hierarchical as published: the Grouper's inputs and the group embeddings by hand, sampling and
scoring agree, the search runs, resumes exactly and warm-starts; warm-start agreement by hand."""

from dataclasses import replace

from dataclasses import asdict

import numpy as np
import pytest
import torch

from conftest import make_cluster
from trinity.graph import Edge, Op, OpGraph
from trinity.rl.hierarchical import GrouperInputs, HierarchicalConfig, HierarchicalPolicy
from trinity.cluster import interchangeable_devices
from trinity.rl.search import Search, SearchConfig
from trinity.rl.warm_start import agreement

SMALL = HierarchicalConfig(hidden=16, type_embedding=4, max_outputs=2, adjacency=4)


def diamond():
    """a -> (b, c) -> d -> e; types MatMul, Add, MatMul, Relu, Add; outputs in bytes chosen so log10(1 + .) is whole."""
    ops = [Op("a", "MatMul", 10.0, output_bytes=(999,)), Op("b", "Add", 10.0, output_bytes=(0, 99)),
           Op("c", "MatMul", 10.0, output_bytes=(99,)), Op("d", "Relu", 10.0, output_bytes=(0, 0, 0)),
           Op("e", "Add", 10.0, output_bytes=(9999,))]
    edges = [Edge("a", "b"), Edge("a", "c"), Edge("b", "d"), Edge("c", "d"), Edge("d", "e")]
    return OpGraph(ops, edges, name="diamond")


def policy(graph=None, k=3, devices=2, cfg=SMALL):
    graph = graph or diamond()
    torch.manual_seed(0)
    inputs = GrouperInputs(graph, cfg.max_outputs, cfg.adjacency)
    return HierarchicalPolicy(inputs, devices, replace(cfg, num_groups=k))


def test_grouper_inputs_by_hand():
    ug = GrouperInputs(diamond(), max_outputs=2, adjacency=4)
    assert ug.type_names == ["MatMul", "Add", "Relu"] and ug.type_ids.tolist() == [0, 1, 0, 2, 1]
    # log10(1 + bytes) of the first two outputs, -1 where there is none; d's third output is cut
    assert ug.output_sizes.tolist() == [[3, -1], [0, 2], [2, -1], [0, 0], [4, -1]]
    # (neighbour position + 1) / 5 and +1 (it feeds) / -1 (it is fed), in the release's order, 4 values
    expected = [[0.4, 1, 0.6, 1],  # a feeds b, c
                [0.2, -1, 0.8, 1],  # b: fed by a, feeds d
                [0.2, -1, 0.8, 1],  # c: the same
                [0.4, -1, 0.6, -1],  # d: fed by b, c (its feeding e is cut at 4 values)
                [0.8, -1, 0, 0]]  # e: fed by d, then padding
    np.testing.assert_allclose(ug.adjacency.numpy(), expected, rtol=0, atol=1e-7)
    p = policy()
    x = p.op_inputs()
    assert x.shape == (5, 4 + 2 + 4)
    assert torch.equal(x[:, :4], p.type_embedding.weight[[0, 1, 0, 2, 1]])  # a learned type embedding first


def test_group_embeddings_by_hand():
    p = policy()
    groups = torch.tensor([[0, 0, 1, 1, 2]])  # {a, b}, {c, d}, {e}
    # [edges to groups 0..2, edges from groups 0..2, MatMul/Add/Relu counts, log10(1 + bytes) per output slot]
    rows = torch.tensor([[1, 2, 0, 1, 0, 0, 1, 1, 0, 3, 2],  # a->b inside, a->c and b->d to {c, d}; 999 + 0, 99
                         [0, 1, 1, 2, 1, 0, 1, 0, 1, 2, 0],  # c->d inside, d->e out; 99 + 0 and 0 + 0
                         [0, 0, 0, 0, 1, 0, 0, 1, 0, 4, 0]], dtype=torch.float32)
    expected = rows / (rows.amax(dim=1, keepdim=True) + 1)  # the release's normalisation: row max + 1
    torch.testing.assert_close(p.group_embeddings(groups)[0], expected, rtol=0, atol=1e-6)


def test_colocated_ops_form_one_unit_with_their_mean_logits():
    ops = [Op(f"o{i}", "Add", 1.0, output_bytes=(4,), colocation_group="g" if i in (1, 3) else None)
           for i in range(4)]
    g = OpGraph(ops, [Edge(f"o{i}", f"o{i + 1}") for i in range(3)])
    p = policy(g, k=2)
    per_op = p.grouper(p.op_inputs())
    unit = p.ug.unit_of_op
    assert p.ug.n_units == 3 and unit[1] == unit[3]
    torch.testing.assert_close(p.partition_logits()[unit[1]], (per_op[1] + per_op[3]) / 2)
    torch.testing.assert_close(p.partition_logits()[unit[0]], per_op[0])


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_sampled_logp_is_the_scored_logp(noise):
    p = policy(k=3, devices=2)
    s = p.sample(6, torch.Generator().manual_seed(1), noise=noise)
    assert s.groups.shape == (6, 5) and s.devices.shape == (6, 3) and int(s.devices.max()) < 2
    with torch.no_grad():
        logp, entropy = p.log_prob(s)
        no_noise, _ = p.log_prob(replace(s, noise=0.0))
        placer = p.schedule_logits(p.group_embeddings(s.groups), s.devices)
    assert logp.shape == (6, 5 + 3) and placer.shape == (6, 3, 2)
    torch.testing.assert_close(logp, s.logp, rtol=1e-5, atol=1e-5)
    assert float(entropy) > 0 and float(placer.abs().max()) <= SMALL.tanh_constant
    assert torch.allclose(logp, no_noise, atol=1e-4) == (noise == 0)  # the noise is part of the distribution


def test_same_seed_same_samples():
    a, b = (policy().sample(4, torch.Generator().manual_seed(3), noise=0.5) for _ in range(2))
    assert torch.equal(a.groups, b.groups) and torch.equal(a.devices, b.devices)


def chains():
    """Two chains of four 100 us ops, 100 kB between neighbours: best is one chain per device, 400 us."""
    ops, edges = [], []
    for chain, kind in (("a", "MatMul"), ("b", "Conv2D")):
        for i in range(4):
            ops.append(Op(f"{chain}{i}", kind, 100.0, output_bytes=(100_000,)))
            if i:
                edges.append(Edge(f"{chain}{i - 1}", f"{chain}{i}"))
    return OpGraph(ops, edges, name="chains")


def config(iterations, **kw):
    kw = {"batch": 4, "checkpoint_every": 5, "agent": {"num_groups": 4, "lr": 0.01, "policy": asdict(SMALL)}, **kw}
    return SearchConfig(method="hierarchical", iterations=iterations, **kw)


def test_tiny_search_finds_the_optimum_and_resumes_exactly(tmp_path):
    c = make_cluster(2, latency_us=10.0)
    full = Search(chains(), c, config(30), tmp_path / "full", progress=False)
    best = full.run()
    assert best.step_time_us == 400.0 and best.iteration > 0 and full.agent.options.policy.num_groups == 4
    Search(chains(), c, config(10), tmp_path / "cut", progress=False).run()  # "killed" after its checkpoint
    resumed = Search(chains(), c, config(30), tmp_path / "cut", progress=False)
    assert resumed.iteration == 10
    resumed.run()
    assert [h["charts/reward_mean"] for h in resumed.history] == [h["charts/reward_mean"] for h in full.history]
    for a, b in zip(resumed.agent.policy.state_dict().values(), full.agent.policy.state_dict().values()):
        assert torch.equal(a, b)


def test_published_defaults_and_schedules(tmp_path):
    s = Search(chains(), make_cluster(2), SearchConfig(method="hierarchical", iterations=1,
                                                       agent={"policy": asdict(SMALL)}), tmp_path, progress=False)
    a = s.agent
    assert a.options.lr == 0.1 and s.num_groups == 8  # min(256, 20 x 2 devices), capped at the 8 ops
    assert [a.noise(i) for i in (0, 749, 750)] == [0.5, 0.5, 0.0]  # logits_std_noise until step 750
    assert [a.lr(i) for i in (399, 400, 449, 450, 500)] == [0.1, 0.1, 0.1, 0.1 * 0.95, 0.1 * 0.95 ** 2]
    assert a.units.n_units == 8  # no node2vec: the graph's own features


def test_warm_start_imitates_the_placer_and_starts_from_its_output(tmp_path):
    from trinity.placers import place

    c = make_cluster(2, latency_us=10.0)
    target = place("m-etf", chains(), c).placement
    s = Search(chains(), c, config(1, warm_start="m-etf", warm_start_steps=60), tmp_path, progress=False)
    assert s.agent.options.lr == 0.01 and s.warm_start_placer == "m-etf"
    assert s.best.iteration == -1 and np.array_equal(s.best.placement, target)
    assert s.warm_start_agreement >= 0.75


def test_agreement_by_hand():
    placement = np.array([0, 0, 1, 1, 2, 2])
    samples = np.array([[1, 1, 2, 2, 0, 0],  # the placement with devices renamed 0->1, 1->2, 2->0
                        [1, 1, 2, 0, 0, 0]])  # the same, but op 3 moved: 5 of 6 after the best renaming
    assert agreement(samples, placement, relabel=False) == 0.0
    assert agreement(samples, placement, relabel=True) == (1 + 5 / 6) / 2
    assert agreement(placement[None], placement, relabel=True) == 1.0
    # fewer devices used by the sample than by the placer: unused ones match nothing
    assert agreement(np.zeros((1, 6), np.int64), placement, relabel=True) == 2 / 6


def test_only_interchangeable_devices_are_relabelled():
    assert interchangeable_devices(make_cluster(3))
    assert not interchangeable_devices(make_cluster(2, speeds=[1.0, 2.0]))
