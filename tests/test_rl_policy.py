"""The policy: sampling and scoring agree, colocation groups stay whole, strategies map to ops."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from trinity.cluster import load_cluster
from trinity.errors import TrinityError
from trinity.features import op_features, zscore
from trinity.graph import Edge, Op, OpGraph
from trinity.reward import MDPEConfig
from trinity.rl.agent import AgentContext
from trinity.rl.ppo import TrinityAgent, TrinityOptions
from trinity.rl.policy import PlacementPolicy, PolicyConfig, SampledStrategies, UnitGraph


def small_graph():
    ops = [Op(f"o{i}", "MatMul" if i % 2 else "Add", float(i + 1), output_bytes=(100 * (i + 1),),
              colocation_group="g" if i in (2, 7) else None) for i in range(10)]
    return OpGraph(ops, [Edge(f"o{i}", f"o{i + 1}", 0) for i in range(9)])


def make_policy(k=4, devices=3, **settings):
    g = small_graph()
    feats = op_features(g, embedding_dim=4)
    ug = UnitGraph(g, feats)
    torch.manual_seed(0)
    cfg = PolicyConfig(num_groups=k, lstm_hidden=16, device_embedding=8, group_projection=8, **settings)
    return g, ug, PlacementPolicy(ug, devices, feats.vocabulary_size, cfg)


def test_units_merge_colocation_groups():
    g, ug, _ = make_policy()
    assert ug.n_units == 9 and ug.unit_of_op[2] == ug.unit_of_op[7]
    assert float(ug.op_count.sum()) == 10
    assert abs(float(ug.compute_share.sum()) - 1.0) < 1e-6


@pytest.mark.parametrize("decoder", ["sequential", "parallel"])
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_sampled_logp_matches_parallel_scoring(noise, decoder):
    """Sampling (the compiled decoder, or the one pass) and the batched scorer agree on the distribution
    sampled, noise and dropout included."""
    _, _, policy = make_policy(decoder=decoder)
    policy.train()
    strategy = policy.sample(5, torch.Generator().manual_seed(1), noise=noise)
    assert strategy.dropout_seed is not None
    with torch.no_grad():
        logp, entropy = policy.log_prob(strategy)
        other_mask, _ = policy.log_prob(replace(strategy, dropout_seed=strategy.dropout_seed + 1))
        no_noise, _ = policy.log_prob(replace(strategy, noise=0.0))
    assert logp.shape == (5, 9 + 4)
    torch.testing.assert_close(logp, strategy.logp, rtol=1e-5, atol=1e-5)
    assert float(entropy) > 0
    assert not torch.allclose(logp, other_mask, atol=1e-4)  # the mask is part of the distribution
    assert torch.allclose(logp, no_noise, atol=1e-4) == (noise == 0)  # and so is the noise


@pytest.mark.parametrize("decoder", ["sequential", "parallel"])
def test_placements_keep_groups_together_and_are_reproducible(decoder):
    g, ug, policy = make_policy(decoder=decoder)
    a = policy.sample(6, torch.Generator().manual_seed(3), noise=0.1)
    b = policy.sample(6, torch.Generator().manual_seed(3), noise=0.1)
    assert torch.equal(a.groups, b.groups) and torch.equal(a.devices, b.devices)
    p = a.placements(ug.unit_of_op)
    assert p.shape == (6, 10) and np.all(p[:, 2] == p[:, 7]) and p.max() < 3


def test_strategy_maps_units_through_groups():
    s = SampledStrategies(groups=torch.tensor([[1, 0, 1]]), devices=torch.tensor([[2, 5]]))
    assert s.placements(np.array([0, 1, 2, 2, 1])).tolist() == [[5, 2, 5, 5, 2]]


def test_one_pass_scores_a_batch_as_its_samples_one_by_one():
    """The parallel decoder's distributions do not depend on the batch: a batch of 6 is scored exactly as
    each of its strategies alone."""
    _, _, policy = make_policy(decoder="parallel")
    policy.train()
    batch = policy.sample(6, torch.Generator().manual_seed(2), noise=0.3)
    with torch.no_grad():
        together, entropy = policy.log_prob(batch)
        for i in range(6):
            alone, alone_entropy = policy.log_prob(replace(batch, groups=batch.groups[i:i + 1],
                                                           devices=batch.devices[i:i + 1]))
            assert torch.equal(alone[0], together[i]) and torch.equal(alone_entropy, entropy)


def test_draw_rows_samples_each_row_by_inverse_cdf():
    from trinity.rl.policy import _draw_rows

    probs = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [0.2, 0.3, 0.5]])
    draws = _draw_rows(torch.log(probs), 20_000, torch.Generator().manual_seed(0))
    assert draws.shape == (20_000, 3) and (draws[:, 0] == 1).all()  # a certain choice is always drawn
    assert set(draws[:, 1].tolist()) == {0, 2}  # a zero-probability column never is
    freq = torch.bincount(draws[:, 2], minlength=3).double() / 20_000
    torch.testing.assert_close(freq, probs[2].double(), atol=0.01, rtol=0)


def test_draw_rows_draws_what_one_search_over_the_rows_end_to_end_drew():
    """The search within each row compares the same floats as one search over the rows laid end to end (how
    the committed runs drew): the same draws, bit for bit, with near-certain and zero-probability columns."""
    from trinity.rl.policy import _draw_rows

    def end_to_end(log_probs, batch, generator):
        rows, cols = log_probs.shape
        cdf = log_probs.double().exp().cumsum(dim=1)
        cdf = cdf / cdf[:, -1:]
        offset = torch.arange(rows, dtype=cdf.dtype)
        flat = (cdf + offset[:, None]).reshape(-1).contiguous()
        u = torch.rand((batch, rows), generator=generator, dtype=cdf.dtype) + offset
        return (torch.searchsorted(flat, u.reshape(-1)).view(batch, rows) - torch.arange(rows)[None] * cols).clamp(
            0, cols - 1)

    torch.manual_seed(3)
    for rows, cols, batch in ((3840, 64, 16), (64, 4, 64), (5, 3, 1)):
        logits = torch.randn(rows, cols) * 6
        logits[::7, 0] = -torch.inf  # zero-probability columns
        log_probs = torch.log_softmax(logits, 1)
        draws = _draw_rows(log_probs, batch, torch.Generator().manual_seed(rows))
        assert draws.is_contiguous() and draws.shape == (batch, rows)
        assert torch.equal(draws, end_to_end(log_probs, batch, torch.Generator().manual_seed(rows)))


def test_expected_group_embeddings_by_hand():
    """Soft group means, compute shares and expected links, on a 3-op chain and a hard partition."""
    g = OpGraph([Op(n, "Add", t, output_bytes=(8,)) for n, t in (("a", 1.0), ("b", 3.0), ("c", 4.0))],
                [Edge("a", "b"), Edge("b", "c")])
    feats = op_features(g, embedding_dim=2)
    ug = UnitGraph(g, feats)
    torch.manual_seed(0)
    policy = PlacementPolicy(ug, 2, feats.vocabulary_size, PolicyConfig(num_groups=2, lstm_hidden=8,
                                                                         group_projection=4, decoder="parallel"))
    probs = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # {a, b} and {c}
    emb = policy.expected_group_embeddings(probs)[0]
    inputs = policy.unit_inputs()
    f = inputs.shape[1]
    torch.testing.assert_close(emb[0, :f], (inputs[0] + inputs[1]) / 2)
    torch.testing.assert_close(emb[1, :f], inputs[2])
    torch.testing.assert_close(emb[:, f], torch.tensor([0.5, 0.5]))  # compute shares 4/8 and 4/8
    # one link (b-c) between the groups, none counted within a group: log(1 + 1) off the diagonal
    torch.testing.assert_close(emb[:, f + 1:], torch.tensor([[0.0, np.log(2.0)], [np.log(2.0), 0.0]], dtype=torch.float32))


def test_priors_start_groups_contiguous_and_blocks_on_devices():
    """The locality prior: a unit's likeliest group follows its topological rank; the block prior: the
    first groups' likeliest device is the first device, the last groups' the last."""
    _, ug, policy = make_policy(k=4, devices=2, decoder="parallel", topo_prior=50.0, block_prior=50.0)
    policy.eval()
    strategy = policy.sample(1, torch.Generator().manual_seed(0))
    log_part, log_sched = policy.one_pass(strategy)
    likeliest = log_part.argmax(1)
    assert torch.equal(likeliest, (ug.rank("breadth") * 4).long())
    assert log_sched.argmax(1).tolist() == [0, 0, 1, 1]


def test_a_fading_block_prior_weighs_in_by_the_sampled_scale_and_scores_as_sampled():
    """``block_scale`` multiplies the block prior in the schedule's logits (by hand: group g of 4 on 2 devices
    has prior -b * |d + 1/2 - (g + 1/2) / 2|, so -b * (1/4, 5/4) for g = 0 and scale s moves the log-odds of
    device 1 over device 0 by -s * b * (1, 1/2, -1/2, -1) for g = 0..3), and a batch is scored at the scale it
    was sampled at."""
    _, _, policy = make_policy(k=4, devices=2, decoder="parallel", block_prior=2.0)
    _, _, bare = make_policy(k=4, devices=2, decoder="parallel")  # the same weights (seed 0), no prior
    policy.eval(), bare.eval()
    for scale in (1.0, 0.25, 0.0):
        strategy = policy.sample(3, torch.Generator().manual_seed(0), block_scale=scale)
        _, log_sched = policy.one_pass(strategy)
        _, plain = bare.one_pass(replace(strategy, block_scale=1.0))
        odds = (log_sched[:, 1] - log_sched[:, 0]) - (plain[:, 1] - plain[:, 0])
        torch.testing.assert_close(odds, -scale * 2.0 * torch.tensor([1.0, 0.5, -0.5, -1.0]), rtol=0, atol=1e-5)
        logp, _ = policy.log_prob(strategy)
        torch.testing.assert_close(logp, strategy.logp, rtol=1e-5, atol=1e-5)


def test_a_learned_block_prior_starts_at_its_strength_and_learns_it():
    """``block_prior_learned``: the strength is a parameter, starting at ``block_prior`` (the same log-odds as
    the fixed prior), that the loss moves: raising the likelihood of every group on device 1 lowers it."""
    _, _, fixed = make_policy(k=4, devices=2, decoder="parallel", block_prior=2.0)
    _, _, learned = make_policy(k=4, devices=2, decoder="parallel", block_prior=2.0, block_prior_learned=True)
    fixed.eval(), learned.eval()
    assert float(learned.block_strength) == 2.0 and not isinstance(fixed.block_strength, torch.Tensor)
    assert any(p is learned.block_strength for p in learned.parameters())
    strategy = learned.sample(1, torch.Generator().manual_seed(0))
    torch.testing.assert_close(learned.one_pass(strategy)[1], fixed.one_pass(strategy)[1], rtol=0, atol=1e-6)
    loss = -learned.one_pass(strategy)[1][:, 1].sum()  # every group on device 1: the blocks stand in the way
    loss.backward()
    assert float(learned.block_strength.grad) > 0  # so gradient descent weakens them


def test_the_agent_fades_the_block_prior_over_its_steps():
    """TrinityAgent samples at scale 1 - iteration / block_prior_steps, floored at 0, and its own choice
    (no iteration) with the prior gone; without steps the prior stays whole."""
    g = small_graph()
    ctx = AgentContext(seed=0, reward=MDPEConfig(), warm_start=False, features=op_features(g, embedding_dim=4))

    def agent(**policy):
        return TrinityAgent(g, load_cluster("p100x2"), TrinityOptions(num_groups=4, policy=PolicyConfig(
            block_prior=3.0, **policy)), ctx)

    fading, whole = agent(block_prior_steps=8), agent()
    scales = [fading.sample(2, torch.Generator().manual_seed(0), it).data.block_scale for it in (0, 2, 8, 20, None)]
    assert scales == [1.0, 0.75, 0.0, 0.0, 0.0]
    assert whole.sample(2, torch.Generator().manual_seed(0), 5).data.block_scale == 1.0


@pytest.mark.parametrize("order", ["breadth", "depth", "metis"])
def test_locality_prior_follows_levels_branches_or_min_cut_parts(order):
    """A fork s -> (b0..b3 | c0..c3) -> t, ops listed s, t, then the branches interleaved: breadth first,
    the stretches are levels (s b0 c0 b1 c1 | b2 c2 b3 c3 t); depth first, whole branches (s b0-b3 | c0-c3 t);
    METIS, the balanced cut of least bytes (s's 8-byte edge and one 1000-byte edge into t, not two inside the
    branches), parts numbered by mean breadth-first position ({s, b}: 3.2 before {c, t}: 5.8)."""
    names = ["s", "t"] + [f"{x}{i}" for i in range(4) for x in "bc"]
    edges = [Edge("s", "b0", 0), Edge("s", "c0", 0), Edge("b3", "t", 0), Edge("c3", "t", 0)]
    edges += [Edge(f"{x}{i}", f"{x}{i + 1}", 0) for x in "bc" for i in range(3)]
    heavy = 1000 if order == "metis" else 8  # (the stretches' middle unit sits on a tie the network breaks)
    g = OpGraph([Op(n, "Add", 1.0, output_bytes=(8 if n == "s" else heavy,)) for n in names], edges)
    feats = op_features(g, embedding_dim=4)
    ug = UnitGraph(g, feats)
    cfg = PolicyConfig(num_groups=2, lstm_hidden=8, device_embedding=4, group_projection=4, topo_prior=50.0,
                       locality_order=order)
    policy = PlacementPolicy(ug, 2, feats.vocabulary_size, cfg).eval()
    log_part, _ = policy.one_pass(policy.sample(1, torch.Generator().manual_seed(0)))
    likeliest = dict(zip(names, log_part.argmax(1).tolist()))
    expected = {"breadth": "s b0 c0 b1 c1 | b2 c2 b3 c3 t", "depth": "s b0 b1 b2 b3 | c0 c1 c2 c3 t",
                "metis": "s b0 b1 b2 b3 | c0 c1 c2 c3 t"}[order]
    first, second = (part.split() for part in expected.split(" | "))
    assert {n: likeliest[n] for n in first + second} == {**dict.fromkeys(first, 0), **dict.fromkeys(second, 1)}


def test_metis_parts_cover_every_group_once_there_are_more_groups_than_units():
    """More groups than units: each unit is its own part, in breadth-first order (METIS refuses such a k)."""
    _, ug, _ = make_policy()
    assert torch.equal(ug.parts(20), torch.argsort(torch.argsort(ug.rank("breadth"))))


def test_an_unknown_locality_order_is_refused():
    with pytest.raises(ValueError, match="policy.locality_order must be one of breadth, depth, metis"):
        PolicyConfig(locality_order="random")
    with pytest.raises(ValueError, match="policy.block_prior_steps must be >= 0, got -1"):
        PolicyConfig(block_prior_steps=-1)
    with pytest.raises(ValueError, match="policy.block_prior_learned needs a policy.block_prior"):
        PolicyConfig(block_prior_learned=True)


def test_a_graph_priced_by_kind_only_is_not_cost_blind():
    """The paper's regime graph has times per device kind only (a speed model, no measured time): the op
    features and the units' compute shares read each op's mean over the kinds (`Op.time_us`), not zero."""
    ops = [Op("a", "MatMul", compute_us_by_kind={"p100": 10.0, "v100": 30.0}, output_bytes=(8,)),
           Op("b", "MatMul", compute_us_by_kind={"p100": 50.0, "v100": 70.0}, output_bytes=(8,)),
           Op("c", "Add", 20.0, compute_us_by_kind={"p100": 1.0}, output_bytes=(8,)),  # measured time first
           Op("d", "Const", output_bytes=(8,))]
    g = OpGraph(ops, [Edge("a", "b", 0), Edge("b", "c", 0), Edge("d", "c", 0)])
    assert [op.time_us for op in g.ops] == [20.0, 60.0, 20.0, 0.0]
    feats = op_features(g, embedding_dim=0)
    assert np.unique(feats.numeric[:, 0]).size == 3  # log compute: three distinct times, not one constant
    assert UnitGraph(g, feats).compute_share.tolist() == pytest.approx([0.2, 0.6, 0.2, 0.0])


def test_trinity_reads_the_cluster_cost_model_where_asked():
    """``op_costs: cluster``: the compute-time feature, the units' compute shares (and so the METIS parts)
    come from the searched devices' costs (P100: 10, 50, 1, 0 us), not the profile's (20, 60, 20, 0)."""
    g = OpGraph([Op("a", "MatMul", compute_us_by_kind={"p100": 10.0, "v100": 30.0}, output_bytes=(8,)),
                 Op("b", "MatMul", compute_us_by_kind={"p100": 50.0, "v100": 70.0}, output_bytes=(8,)),
                 Op("c", "Add", 20.0, compute_us_by_kind={"p100": 1.0}, output_bytes=(8,)),
                 Op("d", "Const", output_bytes=(8,))], [Edge("a", "b", 0), Edge("b", "c", 0), Edge("d", "c", 0)])
    feats = op_features(g, embedding_dim=0)

    def units(**options):
        ctx = AgentContext(seed=0, reward=MDPEConfig(), warm_start=False, features=feats)
        return TrinityAgent(g, load_cluster("p100x2"), TrinityOptions(**options), ctx).units

    profile, cluster = units(), units(op_costs="cluster")
    assert profile.compute_share.tolist() == pytest.approx([0.2, 0.6, 0.2, 0.0])
    assert cluster.compute_share.tolist() == pytest.approx([10 / 61, 50 / 61, 1 / 61, 0.0])
    np.testing.assert_allclose(cluster.numeric[:, 0].numpy(), zscore(np.log1p([10.0, 50.0, 1.0, 0.0])), rtol=1e-6)
    np.testing.assert_array_equal(cluster.numeric[:, 1:].numpy(), profile.numeric[:, 1:].numpy())  # the rest as is
    np.testing.assert_array_equal(profile.numeric.numpy(), feats.numeric)
    with pytest.raises(TrinityError, match="op_costs"):
        TrinityOptions(op_costs="gpu")


def test_bisection_parts_are_runs_of_the_halves():
    """Recursive bisection of a chain of 8 equal ops into 4 parts, numbered by its tree: 2 neighbouring ops a
    part, and parts 0-1 one half of the chain, 2-3 the other (a run of parts is a piece the bisections cut off)."""
    g = OpGraph([Op(f"a{i}", "Add", 1.0, output_bytes=(64,)) for i in range(8)],
                [Edge(f"a{i}", f"a{i + 1}", 0) for i in range(7)])
    ug = UnitGraph(g, op_features(g, embedding_dim=2))
    part = ug.parts(4, bisection=True)[torch.from_numpy(ug.unit_of_op)].tolist()
    pieces = [[i for i in range(8) if part[i] == p] for p in range(4)]
    assert all(len(p) == 2 and p[1] == p[0] + 1 for p in pieces)
    assert {frozenset(pieces[0] + pieces[1]), frozenset(pieces[2] + pieces[3])} == {frozenset(range(4)),
                                                                                      frozenset(range(4, 8))}
    policy = PlacementPolicy(ug, 2, 8, PolicyConfig(num_groups=4, lstm_hidden=8, group_projection=4,
                                                    topo_prior=50.0, locality_order="bisection"))
    log_part, _ = policy.eval().one_pass(policy.sample(1, torch.Generator().manual_seed(0)))
    assert torch.equal(log_part.argmax(1), ug.parts(4, bisection=True))  # each unit's group starts as its part
