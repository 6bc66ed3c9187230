"""The policy: sampling and scoring agree, colocation groups stay whole, strategies map to ops."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from trinity.features import op_features
from trinity.graph import Edge, Op, OpGraph
from trinity.rl.policy import PlacementPolicy, PolicyConfig, Strategy, UnitGraph


def small_graph():
    ops = [Op(f"o{i}", "MatMul" if i % 2 else "Add", float(i + 1), output_bytes=(100 * (i + 1),),
              colocation_group="g" if i in (2, 7) else None) for i in range(10)]
    return OpGraph(ops, [Edge(f"o{i}", f"o{i + 1}", 0) for i in range(9)])


def make_policy(k=4, devices=3):
    g = small_graph()
    feats = op_features(g, embedding_dim=4)
    ug = UnitGraph(g, feats)
    torch.manual_seed(0)
    cfg = PolicyConfig(num_groups=k, lstm_hidden=16, device_embedding=8, group_projection=8)
    return g, ug, PlacementPolicy(ug, devices, feats.vocabulary_size, cfg)


def test_units_merge_colocation_groups():
    g, ug, _ = make_policy()
    assert ug.n_units == 9 and ug.unit_of_op[2] == ug.unit_of_op[7]
    assert float(ug.op_count.sum()) == 10
    assert abs(float(ug.compute_share.sum()) - 1.0) < 1e-6


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_sampled_logp_matches_parallel_scoring(noise):
    """The compiled decoder and the batched scorer agree on the distribution sampled, noise and dropout included."""
    _, _, policy = make_policy()
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


def test_placements_keep_groups_together_and_are_reproducible():
    g, ug, policy = make_policy()
    a = policy.sample(6, torch.Generator().manual_seed(3), noise=0.1)
    b = policy.sample(6, torch.Generator().manual_seed(3), noise=0.1)
    assert torch.equal(a.groups, b.groups) and torch.equal(a.devices, b.devices)
    p = a.placements(ug.unit_of_op)
    assert p.shape == (6, 10) and np.all(p[:, 2] == p[:, 7]) and p.max() < 3


def test_strategy_maps_units_through_groups():
    s = Strategy(groups=torch.tensor([[1, 0, 1]]), devices=torch.tensor([[2, 5]]))
    assert s.placements(np.array([0, 1, 2, 2, 1])).tolist() == [[5, 2, 5, 5, 2]]
