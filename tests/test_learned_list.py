"""The learned list scheduler (trinity/rl/learned_list.py, list_decoder.py): valid episodes, m-ETF's
decode as its teacher, imitation to m-ETF exactly, the log-probability maths, checkpoints and policy
files, the zero-shot placer's refusals, and the search end to end."""

import math

import numpy as np
import pytest
import torch
from conftest import make_cluster

from trinity.cli import main
from trinity.cluster import load_cluster
from trinity.errors import TrinityError
from trinity.graph import save_graph
from trinity.graph.synthetic import layered_dag, training_graph
from trinity.placers import place
from trinity.reward import MDPEConfig
from trinity.rl import list_decoder as dec
from trinity.rl.agent import AgentContext
from trinity.rl.learned_list import (Decisions, LearnedListAgent, LearnedListOptions, greedy_placement,
                                     load_policy_file, save_policy)
from trinity.rl.search import SearchConfig
from trinity.sim import Simulator


def graph():
    return layered_dag(80, 130, seed=3)


def agent(g, cluster, **options):
    return LearnedListAgent(g, cluster, LearnedListOptions(**options), AgentContext(seed=0, reward=MDPEConfig(),
                                                                                    warm_start=True))


def test_sampled_episodes_place_every_op_in_a_dependency_order_with_groups_whole():
    g, c = graph(), load_cluster("p100x4")
    a = agent(g, c, uniform=20.0)  # fresh weights: every choice uniform, and some more uniform ones
    samples = a.sample(4, torch.Generator().manual_seed(1), 0)
    assert samples.placements.shape == (4, g.n_ops)
    arr = g.arrays
    for p, order in zip(samples.placements, samples.data.orders):
        assert ((p >= 0) & (p < 4)).all()
        assert sorted(order) == list(range(g.n_ops))
        step = np.empty(g.n_ops, np.int64)
        step[order] = np.arange(g.n_ops)
        assert (step[arr.src] < step[arr.dst]).all()  # every op decoded after its producers
        for grp in np.unique(arr.group):
            assert len(set(p[arr.group == grp])) == 1
    assert len({tuple(p) for p in samples.placements}) > 1  # they differ
    # the select policy chooses among the `candidates` ready ops m-ETF would take first; m-ETF's own is one
    few = agent(g, c, candidates=2)
    per_decision = np.bincount(few.sample(2, torch.Generator().manual_seed(1), 0).data.select.segment.numpy())
    assert per_decision.max() == 2 and np.bincount(a.teacher(None).select.segment.numpy()).max() > 2
    assert np.array_equal(few.teacher(None).placement, place("m-etf", g, c).placement)


@pytest.mark.parametrize("cluster", ["p100x2", "p100x4"])
def test_the_teacher_is_m_etf_and_imitation_makes_the_greedy_decode_m_etf(cluster):
    from trinity.rl.warm_start import warm_start

    g, c = graph(), load_cluster(cluster)
    a = agent(g, c)
    etf = place("m-etf", g, c).placement
    assert np.array_equal(a.teacher(None).orders[0].shape, (g.n_ops,))
    assert not np.array_equal(a.greedy(), etf)  # fresh weights: not m-ETF
    warm_start(a, g, c, Simulator(g, c), "m-etf", steps=60, lr=0.05, grad_clip=1.0, batch=2, seed=0,
               progress=False)
    assert np.array_equal(a.greedy(), etf)


@pytest.mark.parametrize("cluster", ["p100x2", "p100x4"])
def test_the_teachers_decode_is_m_etfs_placement_on_a_training_graph(cluster):
    # tensors read on several devices, colocation groups, memory: the decode keeps a waiting op's input arrivals
    # between steps, recomputed when a sender queues a transfer; a stale one would part from m-ETF's schedule
    g, c = training_graph(800, seed=2), load_cluster(cluster)
    assert np.array_equal(agent(g, c).teacher(None).placement, place("m-etf", g, c).placement)


def test_decision_log_probs_by_hand():
    # two decisions: candidates with logits (1, 0) taking the first, and (0, 0, 0) taking the third;
    # one feature, coefficient = the op's row
    d = Decisions(segment=torch.tensor([0, 0, 1, 1, 1]), op=torch.tensor([0, 1, 2, 2, 2]),
                  features=torch.tensor([[1.0], [1.0], [0.0], [5.0], [1.0]]),
                  taken=torch.tensor([True, False, False, False, True]), episode=torch.tensor([0, 0]), n=2)
    coef = torch.tensor([[1.0], [0.0], [0.0]])
    logp, entropy = d.log_probs(coef)
    assert logp.tolist() == pytest.approx([1 - math.log(math.e + 1), -math.log(3)])
    p = math.e / (math.e + 1)
    assert entropy.tolist() == pytest.approx([-(p * math.log(p) + (1 - p) * math.log(1 - p)), math.log(3)])
    # with a uniform decision with probability 0.5: p = 0.5 softmax + 0.5 / candidates
    logp, _ = d.log_probs(coef, uniform=0.5)
    assert logp.tolist() == pytest.approx([math.log(0.5 * p + 0.25), math.log(1 / 3)])


def test_checkpoint_round_trip_continues_exactly(tmp_path):
    g, c = graph(), load_cluster("p100x2")
    a = agent(g, c)
    samples = a.sample(3, torch.Generator().manual_seed(0), 0)
    a.update(samples, torch.tensor([0.0, 1.0, 2.0]), 0)
    from trinity.rl import checkpoint

    checkpoint.save(tmp_path / "c.pt", a.state_dict())  # through the file, as the search does
    b = agent(g, c)
    b.load_state_dict(checkpoint.load(tmp_path / "c.pt"))
    for x in (a, b):
        x.update(samples, torch.tensor([2.0, 0.0, 1.0]), 1)
    pa, pb = (x.sample(3, torch.Generator().manual_seed(5), 2).placements for x in (a, b))
    assert np.array_equal(pa, pb)
    # a policy file places as the agent's greedy decode does
    save_policy(tmp_path / "p.pt", a.policy, a.options, feature_width=a.graph.feature_width,
                vocabulary=a.graph.vocabulary, devices=[2], training_set=["layered_dag(80, 130, seed=3)"])
    assert np.array_equal(greedy_placement(g, c, tmp_path / "p.pt"), a.greedy())
    assert load_policy_file(tmp_path / "p.pt")["training_set"] == ["layered_dag(80, 130, seed=3)"]


def test_the_committed_policy_places_zero_shot(tmp_path, capsys):
    path = tmp_path / "g.json.gz"
    save_graph(graph(), path)
    assert main(["place", str(path), "--cluster", "p100x2", "--placer", "learned-list"]) == 0
    assert "learned-list on p100x2" in capsys.readouterr().out


def test_bad_input_is_one_line(tmp_path, capsys):
    g, c = graph(), load_cluster("p100x2")
    path = tmp_path / "g.json.gz"
    save_graph(g, path)
    a = agent(g, c)
    wide = tmp_path / "wide.pt"
    save_policy(wide, a.policy, a.options, feature_width=a.graph.feature_width + 1, vocabulary=a.graph.vocabulary,
                devices=[2], training_set=[])
    (tmp_path / "junk.pt").write_bytes(b"not a policy")
    cases = [
        (["place", str(tmp_path / "none.json.gz"), "--placer", "learned-list"], "none.json.gz"),
        (["place", str(path), "--placer", "learned-list", "--policy", str(tmp_path / "no.pt")],
         "policy file not found"),
        (["place", str(path), "--placer", "learned-list", "--policy", str(tmp_path / "junk.pt")], "not a learned-list"),
        (["place", str(path), "--cluster", "p100x2", "--placer", "learned-list", "--policy", str(wide)],
         "feature_width"),
        (["place", str(path), "--cluster", "p100x8", "--placer", "learned-list"], "devices: the policy was trained"),
        (["place", str(path), "--placer", "m-etf", "--policy", str(wide)], "--policy is for --placer learned-list"),
        (["search", str(path), "--method", "learned-list", "--option", "explore=-1", "--no-mlflow"], "explore"),
        (["search", str(path), "--method", "learned-list", "--option", "select=best", "--no-mlflow"], "select"),
        # a checkpoint for the search to start from that is not there; a budget out of range
        (["search", str(path), "--method", "learned-list", "--option", f"pretrained={tmp_path / 'no.pt'}",
          "--no-mlflow"], "policy file not found"),
        (["search", str(path), "--method", "learned-list", "--option", f"pretrained={wide}", "--no-mlflow"],
         "feature_width"),
        (["search", str(path), "--method", "learned-list", "--iterations", "0", "--no-mlflow"],
         "--iterations: must be >= 1, got 0"),
        (["search", str(path), "--method", "learned-list", "--iterations", "10000001", "--no-mlflow"],
         "--iterations: must be at most 1000000, got 10000001"),
        (["search", str(path), "--method", "learned-list", "--batch", "0", "--no-mlflow"], "--batch: must be >= 1"),
        (["search", str(path), "--method", "learned-list", "--option", "candidates=1", "--no-mlflow"], "candidates"),
    ]
    for argv, words in cases:
        capsys.readouterr()
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's refusals exit
            status = exc.code
        assert status == 2, argv
        err = capsys.readouterr().err
        if "--iterations" in words or "--batch" in words:  # argparse's: the usage, then one line naming it
            err = err.splitlines()[-1] + "\n"
        assert err.count("\n") == 1 and words in err, (argv, err)
    with pytest.raises(TrinityError, match="devices"):
        agent(g, make_cluster(3, memory_GB=10), pretrained="default")
    with pytest.raises(TrinityError, match="iterations"):  # the budget, from a config file too
        SearchConfig(method="learned-list", iterations=10 ** 7)


def test_search_end_to_end(tmp_path, capsys):
    path = tmp_path / "g.json.gz"
    save_graph(graph(), path)
    out = tmp_path / "run"
    assert main(["search", str(path), "--cluster", "p100x2", "--method", "learned-list", "--iterations", "3",
                 "--batch", "4", "--warm-start", "m-etf", "--warm-start-steps", "5", "--no-mlflow",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "learned-list on layered80" in printed and (out / "best_strategy.json").exists()
    assert SearchConfig(method="learned-list", agent={"select": "etf"}).agent == {"select": "etf"}


def test_a_search_killed_and_resumed_ends_as_an_uninterrupted_one(tmp_path):
    from trinity.rl.search import Search

    g, c = graph(), load_cluster("p100x2")

    def cfg(iterations):
        return SearchConfig(method="learned-list", iterations=iterations, batch=3, checkpoint_every=2,
                            warm_start="m-etf", warm_start_steps=5, sim_threads=1)

    full = Search(g, c, cfg(4), tmp_path / "full", progress=False)
    full.run()
    Search(g, c, cfg(2), tmp_path / "cut", progress=False).run()  # "killed" after its checkpoint at 2
    resumed = Search(g, c, cfg(4), tmp_path / "cut", progress=False)
    assert resumed.iteration == 2
    resumed.run()
    assert [h["charts/reward_mean"] for h in resumed.history] == [h["charts/reward_mean"] for h in full.history]
    assert resumed.agent.temperature == full.agent.temperature
