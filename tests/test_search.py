"""The search loop end to end at tiny budgets: finds a known optimum, resumes exactly, refuses bad input."""

from dataclasses import asdict

import numpy as np
import pytest

from trinity.cluster import cluster_from_dict
from trinity.errors import TrinityError
from trinity.graph import Edge, Op, OpGraph
from trinity.placement import Strategy
from trinity.rl.policy import PolicyConfig
from trinity.rl.search import Search, SearchConfig

# block_prior: with every group's device chosen independently, "chain a on 0, b on 1" and its mirror are a
# saddle the one-pass policy leaves slowly; the block prior breaks the tie on this 12-op graph
TINY = PolicyConfig(lstm_hidden=32, device_embedding=8, group_projection=16, type_embedding=8, block_prior=3.0)


def two_chains():
    """Two independent chains of six 100 us ops (different op types); 100 kB between neighbours.

    Best: one chain per device, 600 us; one device: 1,200 us; any split of a chain pays 110 us per cut.
    """
    ops, edges = [], []
    for chain, kind in (("a", "MatMul"), ("b", "Conv2D")):
        for i in range(6):
            ops.append(Op(f"{chain}{i}", kind, 100.0, output_bytes=(100_000,)))
            if i:
                edges.append(Edge(f"{chain}{i - 1}", f"{chain}{i}", 0))
    return OpGraph(ops, edges, name="two_chains")


def cluster(n=2, memory_GB=1.0):
    return cluster_from_dict({"name": f"tiny{n}", "devices": [{"name": f"d{i}", "memory_GB": memory_GB}
                                                              for i in range(n)],
                              "default_link": {"bandwidth_GBps": 1.0, "latency_us": 10.0}})


TINY_HIERARCHICAL = {"hidden": 32, "type_embedding": 8, "grouper_hidden": 16}


def config(method, iterations, policy=TINY, lr=0.01, agent=None, **kw):
    """A tiny search: 4 groups, small networks (``agent`` adds to the method's options)."""
    options = {"num_groups": 4, "lr": lr, **(agent or {})}
    if method == "trinity":
        options.update(embedding_dim=4, policy=asdict(policy) if policy is not None else {})
    else:
        options.update(policy=TINY_HIERARCHICAL)
    return SearchConfig(method=method, iterations=iterations, batch=8, checkpoint_every=10, agent=options, **kw)


@pytest.mark.parametrize("method", ["trinity", "hierarchical"])
def test_finds_the_known_optimum(tmp_path, method):
    g = two_chains()
    # Trinity without exploration, whose sampling temperature would keep a unit per sample off the optimum
    agent = {"explore": 0.0} if method == "trinity" else None
    search = Search(g, cluster(), config(method, 150, agent=agent), tmp_path, progress=False)
    best = search.run()
    assert best.step_time_us == 600.0
    p = best.placement
    assert len(set(p[:6])) == 1 and len(set(p[6:])) == 1 and p[0] != p[6]
    saved = Strategy.load(tmp_path / "best_strategy.json")
    assert list(saved.to_array(g, cluster())) == list(p)
    if method == "trinity":  # PPO converges: the whole last batch is optimal
        assert search.history[-1]["charts/step_time_ms_mean"] == 0.6


def test_the_best_strategy_file_holds_the_last_best_however_rarely_it_is_written(tmp_path, monkeypatch):
    """best_strategy.json is written at most every BEST_SAVE_EVERY_S during the loop (the first best at once),
    and at the loop's end whatever the time: never a best older than the one returned."""
    import trinity.rl.search as search_module

    from trinity.graph.synthetic import layered_dag

    monkeypatch.setattr(search_module, "BEST_SAVE_EVERY_S", 1e9)
    g = layered_dag(40, 60, seed=1)  # its search improves until iteration 21
    search = Search(g, cluster(), config("trinity", 40, agent={"explore": 0.0}), tmp_path, progress=False)
    written = []  # the iteration of each best written
    real_save = search._save_best

    def save():
        if search._unsaved_best is not None:
            written.append(search._unsaved_best["iteration"])
        real_save()

    search._save_best = save
    best = search.run()
    assert written[0] == 0 < best.iteration  # the first best at once; the search improved after it
    saved = Strategy.load(tmp_path / "best_strategy.json")
    assert list(saved.to_array(g, cluster())) == list(best.placement)
    assert saved.meta["iteration"] == best.iteration and saved.meta["reward"] == best.reward
    # then only at the checkpoints (every 10 iterations): not at each improvement
    assert len(written) <= 1 + 40 // 10 and written[-1] == best.iteration


def test_kill_and_resume_equals_uninterrupted(tmp_path):
    g = two_chains()
    full = Search(g, cluster(), config("trinity", 30), tmp_path / "full", progress=False)
    full.run()
    first = Search(g, cluster(), config("trinity", 20), tmp_path / "cut", progress=False)
    first.run()  # "killed" after its checkpoint at iteration 20
    resumed = Search(g, cluster(), config("trinity", 30), tmp_path / "cut", progress=False)
    assert resumed.iteration == 20
    resumed.run()
    assert [h["charts/reward_mean"] for h in resumed.history] == [h["charts/reward_mean"] for h in full.history]
    for a, b in zip(resumed.agent.policy.state_dict().values(), full.agent.policy.state_dict().values()):
        assert np.array_equal(a.numpy(), b.numpy())


def test_same_seed_same_result(tmp_path):
    runs = [Search(two_chains(), cluster(), config("hierarchical", 15), tmp_path / str(i), progress=False).run()
            for i in range(2)]
    assert runs[0].reward == runs[1].reward and np.array_equal(runs[0].placement, runs[1].placement)


def test_busiest_share_by_hand():
    from trinity.sim import Simulator

    g = two_chains()
    sim = Simulator(g, cluster())
    assert sim.simulate(np.zeros(12, np.int64)).busiest_share == 1.0
    assert sim.simulate(np.array([0] * 6 + [1] * 6)).busiest_share == 0.5
    assert sim.simulate(np.array([0] * 9 + [1] * 3)).busiest_share == 0.75


def test_corrupt_checkpoint(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(TrinityError, match=r"checkpoint.pt: checkpoint is corrupt .* pass --fresh"):
        Search(two_chains(), cluster(), config("trinity", 5), tmp_path, progress=False)
    s = Search(two_chains(), cluster(), config("trinity", 5), tmp_path, progress=False, fresh=True)
    assert s.iteration == 0 and not (tmp_path / "checkpoint.pt").exists()


def test_bad_inputs(tmp_path):
    with pytest.raises(TrinityError, match=r"12 placement units .* but the policy has 256 groups"):
        Search(two_chains(), cluster(), SearchConfig(agent={"num_groups": 256}), tmp_path, progress=False)
    tiny = OpGraph([Op("x", "T", 1.0)], [])
    with pytest.raises(TrinityError, match="has 2 devices but graph 'graph' only 1 ops"):
        Search(tiny, cluster(), config("trinity", 1), tmp_path, progress=False)
    heavy = OpGraph([Op(f"v{i}", "VariableV2", 1.0, persistent_bytes=int(0.8e9)) for i in range(12)], [])
    with pytest.raises(TrinityError, match="no placement fits"):
        Search(heavy, cluster(), config("trinity", 1), tmp_path, progress=False)
    with pytest.raises(TrinityError, match="unknown method 'greedy'"):
        SearchConfig(method="greedy")


def test_cli_search_logs_to_mlflow_and_resumes(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from trinity.cli import main
    from trinity.graph import save_graph

    graph_file = tmp_path / "chains.json"
    save_graph(two_chains(), graph_file)
    cluster_file = tmp_path / "c.yaml"
    cluster_file.write_text("devices:\n  - {name: d0, memory_GB: 1}\n  - {name: d1, memory_GB: 1}\n"
                            "default_link: {bandwidth_GBps: 1, latency_us: 10}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["search", str(graph_file), "--cluster", str(cluster_file), "--groups", "4", "--batch", "4",
            "--checkpoint-every", "2", "--out", str(tmp_path / "run"), "--mlflow-uri", uri]
    assert main(args + ["--iterations", "4"]) == 0
    assert main(args + ["--iterations", "6"]) == 0
    out = capsys.readouterr().out
    assert "resuming" in out and "best step time" in out
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("trinity-search").experiment_id])
    assert len(runs) == 1  # the resumed search logged into the same run
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "charts/reward_mean")]
    assert steps == list(range(6))
    assert (tmp_path / "run" / "search_curve.png").exists()
    warm = ["search", str(graph_file), "--cluster", str(cluster_file), "--groups", "4", "--batch", "4",
            "--iterations", "2", "--warm-start", "best", "--warm-start-steps", "20", "--out", str(tmp_path / "warm"),
            "--mlflow-uri", uri, "--experiment", "warm"]
    assert main(warm) == 0
    assert "warm start: imitated metis (100.0% of ops agree); best strategy is metis's own" in capsys.readouterr().out
    run = client.search_runs([client.get_experiment_by_name("warm").experiment_id])[0]
    assert run.data.params["warm_start_placer"] == "metis" and "warm_start/agreement" in run.data.metrics


def test_cli_search_that_fails_ends_its_run_failed_and_a_rerun_continues_it(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from trinity.cli import main
    from trinity.graph import save_graph

    graph_file = tmp_path / "chains.json"
    save_graph(two_chains(), graph_file)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["search", str(graph_file), "--cluster", "cpu2", "--groups", "4", "--batch", "2", "--iterations", "2",
            "--out", str(tmp_path / "run"), "--mlflow-uri", uri]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"not a checkpoint")  # fails after the run is opened
    assert main(args) == 2 and "checkpoint is corrupt" in capsys.readouterr().err
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("trinity-search").experiment_id
    (failed,) = client.search_runs([exp])
    assert failed.info.status == "FAILED"
    (tmp_path / "run" / "checkpoint.pt").unlink()
    assert main(args) == 0
    (again,) = client.search_runs([exp])  # the same run, now finished
    assert again.info.run_id == failed.info.run_id and again.info.status == "FINISHED"


def test_sigterm_mid_search_then_resume_matches_uninterrupted(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    import torch

    from trinity.cluster import load_cluster
    from trinity.graph import load_graph, save_graph

    graph_file, cluster_file = tmp_path / "chains.json", tmp_path / "c.yaml"
    save_graph(two_chains(), graph_file)
    cluster_file.write_text("devices:\n  - {name: d0, memory_GB: 1}\n  - {name: d1, memory_GB: 1}\n"
                            "default_link: {bandwidth_GBps: 1, latency_us: 10}\n")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "trinity.cli", "search", str(graph_file), "--cluster", str(cluster_file),
           "--groups", "4", "--iterations", "40", "--batch", "8", "--lr", "0.01", "--option", "policy.lstm_hidden=32",
           "--checkpoint-every", "1000",
           "--out", str(out), "--no-mlflow"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not (out / "best_strategy.json").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert proc.returncode == 130 and b"interrupted at iteration" in err
    assert 0 < state["iteration"] < 40  # stopped mid-search, after a whole iteration
    assert subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0

    reference = Search(load_graph(graph_file), load_cluster(cluster_file),
                       SearchConfig(iterations=40, checkpoint_every=1000,
                                    agent={"num_groups": 4, "lr": 0.01, "policy": {"lstm_hidden": 32}}),
                       tmp_path / "ref", progress=False)
    reference.run()
    resumed = torch.load(out / "checkpoint.pt", weights_only=False)["history"]
    assert [h["charts/reward_mean"] for h in resumed] == [h["charts/reward_mean"] for h in reference.history]


def test_warm_start_imitates_a_placer_and_starts_from_its_output(tmp_path):
    from trinity.placers import place

    g = two_chains()
    target = place("m-etf", g, cluster()).placement
    assert target[0] != target[6]  # m-ETF puts the chains on different devices
    s = Search(g, cluster(), config("trinity", 1, warm_start="m-etf", warm_start_steps=150), tmp_path,
               progress=False)
    placements = s.agent.sample(16, s.generator, None).placements
    assert (placements == target).all(axis=1).mean() >= 0.75
    assert s.warm_start_agreement >= 0.9
    # The placer's own strategy is the search's first candidate: a search never ends worse than its start.
    assert s.best.iteration == -1 and s.best.step_time_us == 600.0 and np.array_equal(s.best.placement, target)
    saved = Strategy.load(tmp_path / "best_strategy.json")
    assert saved.meta["method"] == "m-etf (warm start)" and saved.meta["iteration"] == -1


def test_free_logit_tables_start_at_zero_and_can_reproduce_any_strategy(tmp_path):
    import torch

    g = two_chains()
    plain = Search(g, cluster(), config("trinity", 1), tmp_path / "a", progress=False)
    tables = PolicyConfig(**{**TINY.__dict__, "unit_logits": True, "group_logits": True})
    free = Search(g, cluster(), config("trinity", 1, policy=tables), tmp_path / "b", progress=False)
    free.agent.policy.eval(), plain.agent.policy.eval()
    strategy = plain.agent.policy.sample(1, plain.generator)
    for mine, theirs in zip(free.agent.policy.one_pass(strategy), plain.agent.policy.one_pass(strategy)):
        assert torch.equal(mine, theirs)  # zero tables: the same distributions
    with torch.no_grad():  # a table entry alone decides a unit's group or a group's device, whatever the networks say
        free.agent.policy.unit_logits[3, 2] = 100.0
        free.agent.policy.group_logits[1, 0] = 100.0
        free.agent.policy.group_logits[2, 1] = 100.0
    sampled = free.agent.policy.sample(8, free.generator)
    assert (sampled.groups[:, 3] == 2).all() and (sampled.devices[:, 1] == 0).all() and (sampled.devices[:, 2] == 1).all()


def test_defaults_from_scratch_are_the_ablations_last_row(tmp_path):
    """From scratch (one-pass decoder), unset options take what `make ablation-explore` chose: self-imitation
    gated on the policy's own likeliest devices, both free tables at their own rate 0.1, 8 units explored; and
    its last row (18): groups that start as METIS parts under a prior of 3 (64 groups, capped here at 12 units)."""
    s = Search(two_chains(), cluster(), config("trinity", 1, agent={"num_groups": None}, policy=None), tmp_path,
               progress=False)
    o = s.agent.options
    assert (o.normalize_advantages, o.self_imitation, o.self_imitation_gate, o.table_lr, o.explore) == \
        (True, 10.0, "mode", 0.1, 8.0)
    assert o.policy.unit_logits and o.policy.group_logits
    assert (o.num_groups, o.policy.locality_order, o.policy.topo_prior) == (12, "metis", 3.0)
    tables = s.agent.optimizer.param_groups[1]
    assert tables["lr"] == 0.1 and tables["params"] == [s.agent.policy.unit_logits, s.agent.policy.group_logits]


def test_table_lr_is_the_free_tables_own_rate(tmp_path):
    policy = PolicyConfig(**{**TINY.__dict__, "unit_logits": True, "group_logits": True})
    s = Search(two_chains(), cluster(), config("trinity", 1, policy=policy, agent={"table_lr": 0.25}), tmp_path,
               progress=False)
    network, tables = s.agent.optimizer.param_groups
    assert network["lr"] == 0.01 and tables["lr"] == 0.25
    assert tables["params"] == [s.agent.policy.unit_logits, s.agent.policy.group_logits]
    assert len(network["params"]) + 2 == len(list(s.agent.policy.parameters()))


def test_exploring_temperature_by_hand():
    """Two units in one group, its devices' logits (2 ln 3, 0): at temperature t each unit is off device 0 with
    probability 1 / (1 + e^(2 ln 3 / t)), so 0.5 units of 2 are off it at t = 2 (1 / (1 + 3) each)."""
    import math

    import torch

    from trinity.rl.policy import exploring_temperature

    part = torch.zeros(2, 1)
    sched = torch.tensor([[2 * math.log(3), 0.0]])
    assert exploring_temperature(part, sched, 0.5) == pytest.approx(2.0, rel=1e-3)
    assert exploring_temperature(part, sched, 0.1) == 1.0  # 2 / (1 + 9) = 0.2 already at t = 1: never sharper
    assert exploring_temperature(part, sched, 0.5) >= 2.0  # the bisection's upper end: at least the units asked


def test_exploration_keeps_ppos_ratio_exactly_one_and_puts_units_elsewhere(tmp_path):
    """With ``explore``, the batch is sampled at the temperature found (>= 1) and PPO's new log-probabilities
    are under the same: the ratio before the update is exactly 1. Asked for 3 units, 12 units get 1 (the cap)."""
    import torch

    cfg = config("trinity", 5, agent={"explore": 3.0})
    s = Search(two_chains(), cluster(), cfg, tmp_path, progress=False)
    with torch.no_grad():  # a settled policy: every unit's group and every group's device nearly certain
        s.agent.policy.device_logits.bias.copy_(torch.tensor([40.0, -40.0]))
    samples = s.agent.sample(cfg.batch, s.generator, 0)
    strategy = samples.data
    assert strategy.temperature > 1.0
    s.agent.policy.train()
    logp, _ = s.agent.policy.log_prob(strategy)
    assert torch.equal((logp - strategy.logp).exp(), torch.ones_like(logp))
    log_part, log_sched = s.agent.policy.one_pass(strategy)
    off = (1 - (log_part.exp() @ log_sched.exp()).max(1).values).sum()
    assert float(off) == pytest.approx(1.0, rel=1e-2)
    stats = s.agent.update(samples, torch.arange(cfg.batch, dtype=torch.float32), 0)
    assert stats["charts/temperature"] == strategy.temperature  # logged: a settled policy shows as t > 1


def test_adapt_explore_follows_the_one_fifth_rule(tmp_path):
    """``adapt_explore``: the target starts at ``explore`` (8) units; after each iteration it takes 2^0.4 more if a
    sample beat the best sampled before it, else 2^-0.1 fewer, within [1, 8]: replayed from the logged rewards."""
    import numpy as np

    s = Search(two_chains(), cluster(), config("trinity", 40, agent={"explore": 8.0, "adapt_explore": True}), tmp_path,
               progress=False)
    s.run()
    expected, log2, best = [], 0.0, -np.inf
    for h in s.history:
        expected.append(max(1.0, 8.0 * 2.0 ** log2))
        log2 = float(np.clip(log2 + (0.4 if h["charts/reward_max"] > best else -0.1), -3.0, 0.0))
        best = max(best, h["charts/reward_max"])
    targets = [h["charts/explore"] for h in s.history]
    assert targets == expected and targets[0] == 8.0 and min(targets) < 8.0
    # by hand: a success at the top stays at 8; ten failures halve it; a success after them takes 2^0.4 more;
    # thirty failures stop at 1 unit
    import torch

    agent = s.agent
    agent.explore_log2, agent.best_sampled = 0.0, -np.inf
    agent._adapt_explore(torch.tensor([0.5, 0.1]))
    assert agent.explore_units() == 8.0
    for _ in range(10):
        agent._adapt_explore(torch.tensor([0.5]))  # not better than 0.5
    assert agent.explore_units() == pytest.approx(4.0)
    agent._adapt_explore(torch.tensor([0.6]))
    assert agent.explore_units() == pytest.approx(8.0 * 2.0 ** -0.6)
    for _ in range(30):
        agent._adapt_explore(torch.tensor([0.6]))
    assert agent.explore_units() == 1.0 and agent.explore_log2 == -3.0
    fixed = Search(two_chains(), cluster(), config("trinity", 5, agent={"explore": 8.0}), tmp_path / "fixed",
                   progress=False)
    fixed.run()
    assert [h["charts/explore"] for h in fixed.history] == [8.0] * 5


def test_ppo_ratio_is_exactly_one_before_the_update(tmp_path):
    """Old log-probabilities are of the distribution sampled (noise and dropout mask included),
    computed as the update computes the new ones: before the first update the ratio is 1."""
    import torch

    cfg = config("trinity", 5)
    s = Search(two_chains(), cluster(), cfg, tmp_path, progress=False)
    samples = s.agent.sample(cfg.batch, s.generator, 0)
    strategy = samples.data
    assert strategy.noise == s.agent.options.noise_max > 0 and s.agent.options.policy.dropout > 0
    assert strategy.dropout_seed is not None
    s.agent.policy.train()
    logp, _ = s.agent.policy.log_prob(strategy)
    assert torch.equal((logp - strategy.logp).exp(), torch.ones_like(logp))
    rewards = torch.full((cfg.batch,), 0.5)  # all equal: zero advantages, the policy does not move
    stats = s.agent.update(samples, rewards, 0)
    assert stats["losses/approx_kl"] == 0.0 and stats["losses/clipfrac"] == 0.0


@pytest.mark.parametrize("sim_threads", [1, 2])
def test_same_seed_same_history_on_any_number_of_simulation_threads(tmp_path, sim_threads):
    import torch

    # Both made before either runs, and the global generator disturbed: each search has its own stream.
    runs = [Search(two_chains(), cluster(), config("trinity", 12, sim_threads=sim_threads), tmp_path / str(i),
                   progress=False) for i in range(2)]
    for r in runs:
        torch.rand(7)
        r.run()
    assert [h["charts/reward_mean"] for h in runs[0].history] == [h["charts/reward_mean"] for h in runs[1].history]


def test_warm_start_from_the_best_placer(tmp_path):
    from trinity.placers import place
    from trinity.rl.warm_start import WARM_START_PLACERS
    from trinity.sim import Simulator

    g, c = two_chains(), cluster()
    sim = Simulator(g, c)
    times = {name: sim.simulate(place(name, g, c).placement).step_time_us for name in WARM_START_PLACERS}
    first_best = next(name for name in WARM_START_PLACERS if times[name] == min(times.values()))
    s = Search(g, c, config("trinity", 1, warm_start="best", warm_start_steps=5, lr=None), tmp_path, progress=False)
    assert s.warm_start_placer == first_best and s.best.step_time_us == min(times.values()) == 600.0
    assert s.agent.options.lr == 1e-4 and s.agent.options.policy.unit_logits  # fine-tuning defaults after a warm start
    o = s.agent.options  # and nothing of the search from scratch's but the per-unit table, at the network's rate
    assert (o.self_imitation, o.self_imitation_gate, o.table_lr, o.explore) == (0.0, "elite", None, 0.0)
    assert not o.policy.group_logits and len(s.agent.optimizer.param_groups) == 1
    assert (o.policy.locality_order, o.policy.topo_prior) == ("breadth", 1.0)
    s.run()
    resumed = Search(g, c, config("trinity", 1, warm_start="best", warm_start_steps=5, lr=None), tmp_path, progress=False)
    assert resumed.warm_start_placer == first_best and resumed.warm_start_agreement == s.warm_start_agreement


def test_search_table_plot(tmp_path):
    import pandas as pd

    from trinity.plots import plot_search_table

    table = pd.DataFrame({"graph": ["g"] * 3 + ["h"] * 2, "cluster": ["p100x2"] * 5,
                          "method": ["single", "m-etf", "trinity (from m-etf)", "single", "hierarchical (from metis)"],
                          "step_time_ms": [10.0, 7.0, 6.5, 3.0, 2.0]})
    plot_search_table(table, tmp_path / "table.png", title="t")
    assert (tmp_path / "table.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resuming_under_other_settings_is_refused_naming_them(tmp_path):
    g = two_chains()
    agent = dict(num_groups=4, lr=0.01, embedding_dim=4, policy=asdict(TINY))
    cfg = dict(method="trinity", iterations=2, batch=2, checkpoint_every=1, agent=agent)
    Search(g, cluster(), SearchConfig(**cfg), tmp_path, progress=False).run()
    # more iterations (or other threads, checkpoint cadence) resume
    assert Search(g, cluster(), SearchConfig(**{**cfg, "iterations": 3}), tmp_path, progress=False).iteration == 2
    with pytest.raises(TrinityError, match=r"other settings \(agent.lr: 0\.01 then, 0\.02 now\)") as err:
        Search(g, cluster(), SearchConfig(**{**cfg, "agent": {**agent, "lr": 0.02}}), tmp_path, progress=False)
    assert err.value.field == "agent.lr"
    bigger = {**agent, "policy": {**asdict(TINY), "lstm_hidden": 16}}
    with pytest.raises(TrinityError, match="agent.policy.lstm_hidden: 32 then, 16 now"):
        Search(g, cluster(), SearchConfig(**{**cfg, "agent": bigger}), tmp_path, progress=False)
    with pytest.raises(TrinityError, match="cluster: "):
        Search(g, cluster(memory_GB=2.0), SearchConfig(**cfg), tmp_path, progress=False)


def test_the_default_group_count_never_exceeds_the_units(tmp_path):
    cfg = config("hierarchical", 1, agent={"num_groups": None})
    s = Search(two_chains(), cluster(), cfg, tmp_path, progress=False)
    assert s.num_groups == s.agent.options.policy.num_groups == two_chains().arrays.n_groups < 40


@pytest.mark.parametrize("key", ["trinity-scratch", "trinity-m-etf", "hierarchical-scratch", "hierarchical-m-etf"])
def test_the_agent_loop_reproduces_the_search_before_the_move(tmp_path, key):
    """tests/data/search_before_refactor.json holds what the single-file search of commit 11d4fec found
    (sequential sampling, seed 1) on a 60-op graph and 3 devices: the agents behind one loop find the same
    best strategy, at the same iteration, with the same reward every iteration."""
    import json
    from pathlib import Path

    from trinity.graph.synthetic import layered_dag

    before = json.loads((Path(__file__).parent / "data" / "search_before_refactor.json").read_text())[key]
    method, start = key.split("-", 1)
    net = ({"lstm_hidden": 32, "device_embedding": 8, "group_projection": 16, "type_embedding": 8, "decoder": "sequential",
            "topo_prior": 0.0, "block_prior": 0.0}
           if method == "trinity" else {"hidden": 32, "type_embedding": 8, "grouper_hidden": 16})
    agent = {"num_groups": 6, "lr": 0.01, "policy": net, **({"embedding_dim": 4} if method == "trinity" else {})}
    cfg = SearchConfig(method=method, iterations=12, batch=8, checkpoint_every=1000, seed=1, warm_start_steps=20,
                       warm_start=None if start == "scratch" else start, agent=agent, sim_threads=2)
    s = Search(layered_dag(60, 90, seed=3), cluster(3), cfg, tmp_path, progress=False)
    best = s.run()
    assert best.placement.tolist() == before["placement"]
    assert (best.reward, best.iteration) == (before["reward"], before["iteration"])
    assert [h["charts/reward_mean"] for h in s.history] == before["reward_mean"]


@pytest.mark.parametrize("settings, field", [
    ({"iterations": 0}, "iterations"), ({"batch": -1}, "batch"), ({"method": "greedy"}, "method"),
    ({"agent": {"lr": 0.0}}, "agent.lr"), ({"agent": {"lr": 5.0}}, "agent.lr"), ({"agent": {"clip": 1.5}}, "agent.clip"),
    ({"agent": {"learning_rate": 1e-3}}, "agent.learning_rate"),
    ({"agent": {"policy": {"lstm_units": 3}}}, "agent.policy.lstm_units"),
    ({"method": "hierarchical", "agent": {"ppo_epochs": 2}}, "agent.ppo_epochs"),
    ({"warm_start": "m-ect"}, "warm_start"),
    ({"agent": {"self_imitation": -1.0}}, "agent.self_imitation"),
    ({"agent": {"self_imitation": 1.0, "policy": {"decoder": "sequential"}}}, "agent.self_imitation"),
    ({"agent": {"self_imitation_agreement": 1.5}}, "agent.self_imitation_agreement"),
    ({"agent": {"self_imitation_gate": "best"}}, "agent.self_imitation_gate"),
    ({"agent": {"explore": -1}}, "agent.explore"),
    ({"agent": {"explore": 4, "policy": {"decoder": "sequential"}}}, "agent.explore"),
    ({"agent": {"block_moves": 1.5}}, "agent.block_moves"),
    ({"agent": {"block_moves": 0.25, "policy": {"decoder": "sequential"}}}, "agent.block_moves"),
    ({"agent": {"neighbour_moves": -0.1}}, "agent.neighbour_moves"),
    ({"agent": {"neighbour_moves": 0.25, "policy": {"decoder": "sequential"}}}, "agent.neighbour_moves"),
    ({"agent": {"leader_neighbour_moves": 2.0}}, "agent.leader_neighbour_moves"),
    ({"agent": {"leader_neighbour_moves": 0.25, "policy": {"decoder": "sequential"}}}, "agent.leader_neighbour_moves"),
    ({"agent": {"table_lr": 0.0}}, "agent.table_lr"),
    ({"agent": {"policy": {"group_logits": True, "decoder": "sequential"}}}, "agent.policy"),
])
def test_bad_search_settings_are_refused_naming_the_field(settings, field):
    with pytest.raises(TrinityError) as err:
        SearchConfig(**settings)
    assert err.value.field == field, str(err.value)


def test_cli_refuses_a_bad_option_in_one_line(tmp_path, capsys):
    from trinity.cli import main
    from trinity.graph import save_graph

    graph_file = tmp_path / "chains.json"
    save_graph(two_chains(), graph_file)
    for extra, field in ((["--option", "clip=2"], "agent.clip"), (["--option", "nope=1"], "agent.nope"),
                         (["--method", "sa"], "method")):
        assert main(["search", str(graph_file), "--cluster", "cpu2", "--no-mlflow", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and field in err, err


def test_self_imitation_keeps_the_best_sample_and_pulls_the_policy_to_it(tmp_path):
    import torch

    cfg = config("trinity", 1, agent={"self_imitation": 10.0, "self_imitation_agreement": None})
    s = Search(two_chains(), cluster(), cfg, tmp_path, progress=False)
    agent = s.agent
    samples = agent.sample(cfg.batch, s.generator, 0)
    rewards = torch.arange(cfg.batch, dtype=torch.float32)  # the last sample is the best
    stats = agent.update(samples, rewards, 0)
    groups, devices, reward = agent.elite
    assert reward == cfg.batch - 1
    assert torch.equal(groups, samples.data.groups[-1]) and torch.equal(devices, samples.data.devices[-1])
    assert stats["losses/self_imitation"] > 0
    # a worse batch leaves the elite; a few updates make it likelier than it was
    elite = agent.sample(1, s.generator, None).data
    elite.groups, elite.devices = groups[None], devices[None]
    before = float(agent.policy.log_prob(elite)[0].sum())
    for i in range(1, 6):
        agent.update(agent.sample(cfg.batch, s.generator, i), torch.full((cfg.batch,), -1.0), i)
    assert agent.elite[2] == reward
    elite.distributions = None
    assert float(agent.policy.log_prob(elite)[0].sum()) > before
    # the checkpoint carries it
    twin = Search(two_chains(), cluster(), cfg, tmp_path / "twin", progress=False).agent
    assert twin.elite is None
    twin.load_state_dict(agent.state_dict())
    assert torch.equal(twin.elite[0], groups) and twin.elite[2] == reward


def test_agreement_with_the_elite_by_hand(tmp_path):
    """Expected share of units a sample puts on the elite's device: unit 0 sits in group 0, whose device 0 has
    p 0.8; unit 1 is in groups 0 and 1 half and half, whose device 1 has p 0.2 and 0.6: (0.8 + 0.4) / 2."""
    import torch

    from trinity.rl.policy import SampledStrategies

    s = Search(two_chains(), cluster(), config("trinity", 1, agent={"self_imitation": 1.0, "self_imitation_gate": "elite"}),
               tmp_path, progress=False)
    log_part = torch.tensor([[1.0, 0.0], [0.5, 0.5]]).log()
    log_sched = torch.tensor([[0.8, 0.2], [0.4, 0.6]]).log()
    s.agent.elite = (torch.tensor([0, 1]), torch.tensor([0, 1]), 0.0)
    strategy = SampledStrategies(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long),
                                 distributions=(log_part, log_sched))
    assert s.agent._agreement(strategy) == pytest.approx(0.6)


def test_agreement_with_the_policys_own_likeliest_devices_by_hand(tmp_path):
    """Gate "mode": unit 0's devices have p (0.8, 0.2), unit 1's (0.6, 0.4) (groups half and half: (0.8 + 0.4) / 2
    on device 0): each unit's likeliest device, averaged, (0.8 + 0.6) / 2, wherever the elite lies."""
    import torch

    from trinity.rl.policy import SampledStrategies

    s = Search(two_chains(), cluster(), config("trinity", 1, agent={"self_imitation": 1.0, "self_imitation_gate": "mode"}),
               tmp_path, progress=False)
    log_part = torch.tensor([[1.0, 0.0], [0.5, 0.5]]).log()
    log_sched = torch.tensor([[0.8, 0.2], [0.4, 0.6]]).log()
    s.agent.elite = (torch.tensor([0, 1]), torch.tensor([1, 1]), 0.0)  # ignored by this gate
    strategy = SampledStrategies(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long),
                                 distributions=(log_part, log_sched))
    assert s.agent._agreement(strategy) == pytest.approx(0.7)


def test_self_imitation_waits_for_the_policy_to_agree_with_its_elite(tmp_path):
    import torch

    def first_update(agreement):
        cfg = config("trinity", 1, agent={"self_imitation": 10.0, "self_imitation_agreement": agreement})
        s = Search(two_chains(), cluster(), cfg, tmp_path / str(agreement), progress=False)
        samples = s.agent.sample(cfg.batch, s.generator, 0)
        return s.agent, s.agent.update(samples, torch.arange(cfg.batch, dtype=torch.float32), 0)

    fresh, stats = first_update(1.0)  # a fresh policy does not put every unit where one sample did
    assert not fresh.imitating and stats["losses/self_imitation"] == 0.0 and fresh.elite is not None
    agreeing, stats = first_update(0.0)
    assert agreeing.imitating and stats["losses/self_imitation"] > 0


@pytest.mark.parametrize("warm, decoder, expected", [
    (False, "parallel", (True, 10.0)), (True, "parallel", (False, 0.0)), (False, "sequential", (False, 0.0))])
def test_normalised_advantages_and_self_imitation_by_default_from_scratch_only(tmp_path, warm, decoder, expected):
    cfg = config("trinity", 1, policy=PolicyConfig(**{**asdict(TINY), "decoder": decoder}),
                 warm_start="m-topo" if warm else None, warm_start_steps=2)
    o = Search(two_chains(), cluster(), cfg, tmp_path, progress=False).agent.options
    assert (o.normalize_advantages, o.self_imitation) == expected


@pytest.mark.parametrize("warm, groups", [(False, 64), (True, 256)])
def test_64_groups_by_default_from_scratch_the_papers_256_after_a_warm_start(tmp_path, warm, groups):
    chain = OpGraph([Op(f"op{i}", "MatMul", 10.0, output_bytes=(1000,)) for i in range(300)],
                    [Edge(f"op{i - 1}", f"op{i}", 0) for i in range(1, 300)], name="chain300")
    cfg = config("trinity", 1, agent={"num_groups": None}, warm_start="m-topo" if warm else None, warm_start_steps=1)
    search = Search(chain, cluster(), cfg, tmp_path, progress=False)
    assert search.num_groups == search.agent.options.policy.num_groups == groups


@pytest.mark.parametrize("extra, batch", [([], 64), (["--warm-start", "m-topo", "--warm-start-steps", "2"], 8),
                                          (["--method", "hierarchical", "--option", "policy.hidden=8"], 8)])
def test_cli_batch_defaults_to_64_for_trinity_from_scratch_else_8(tmp_path, extra, batch):
    from trinity.cli import main
    from trinity.graph import save_graph
    from trinity.rl import checkpoint

    graph_file = tmp_path / "chains.json"
    save_graph(two_chains(), graph_file)
    out = tmp_path / "run"
    small = [] if "hierarchical" in extra else ["--option", "policy.lstm_hidden=8"]
    assert main(["search", str(graph_file), "--cluster", "cpu2", "--groups", "4", "--iterations", "1", "--no-mlflow",
                 "--out", str(out), *small, *extra]) == 0
    assert checkpoint.load(out / checkpoint.FILE)["config"]["batch"] == batch


def test_trinitys_scratch_batch_is_the_one_its_method_file_sets():
    from pathlib import Path

    import yaml

    from trinity.rl.defaults import TRINITY_SCRATCH_BATCH

    conf = yaml.safe_load((Path(__file__).parent.parent / "conf" / "method" / "trinity.yaml").read_text())
    assert conf["search"]["batch"] == TRINITY_SCRATCH_BATCH == 64


def test_relabelled_batches_keep_the_sampling_log_probabilities(tmp_path):
    """`agent.relabel`: the update sees each sample's mirror image the policy finds likeliest, with that image's
    log-probabilities under the distribution that sampled the batch (so PPO's ratio starts at exactly 1)."""
    from dataclasses import replace

    import torch

    from trinity.rl.algorithms import relabelled_devices

    s = Search(two_chains(), cluster(), config("trinity", 3, agent={"relabel": True}), tmp_path, progress=False)
    agent = s.agent
    samples = agent.sample(8, torch.Generator().manual_seed(0), 0)
    strategy = samples.data
    log_sched = strategy.distributions[1].detach()
    relabelled = agent._relabelled(strategy)
    assert torch.equal(relabelled.devices, relabelled_devices(strategy.devices, log_sched, agent.classes))
    assert torch.equal(relabelled.groups, strategy.groups)
    with torch.no_grad():
        again = agent.policy.log_prob(replace(relabelled, distributions=None))[0]  # the distribution, recomputed
    assert torch.allclose(relabelled.logp, again, atol=1e-6)
    s.run()  # and a search with it runs end to end
    with pytest.raises(TrinityError, match="relabel: needs policy.decoder=parallel"):
        SearchConfig(agent={"relabel": True, "policy": {"decoder": "sequential"}})


@pytest.mark.parametrize("moves", ["block_moves", "neighbour_moves"])
def test_moved_samples_keep_the_sampling_log_probabilities(tmp_path, moves):
    """`agent.block_moves`: that share of a batch gets one block of groups on one device; `agent.neighbour_moves`
    (after the block moves): one unit, with neighbours, into a neighbour's group. Each sample's log-probabilities
    are those of its groups and devices under the distribution that sampled the batch, its placement its groups'
    devices; the rest of the batch is as sampled, and a search with them runs end to end."""
    from dataclasses import replace

    import torch

    from trinity.rl.algorithms import block_moved_devices, neighbour_moved_groups

    options = {"block_moves": 0.5} if moves == "block_moves" else {"block_moves": 0.25, "neighbour_moves": 0.5}
    s = Search(two_chains(), cluster(), config("trinity", 3, agent=options), tmp_path, progress=False)
    agent = s.agent
    moving, agent.options = agent.options, replace(agent.options, **{moves: 0.0})
    gen = torch.Generator().manual_seed(0)
    plain = agent.sample(8, gen, 0).data
    groups, devices = plain.groups, plain.devices
    if moves == "block_moves":  # the next draws
        devices = block_moved_devices(devices, plain.distributions[1].shape[1], 0.5, gen)
    else:
        groups = neighbour_moved_groups(groups, devices, agent.neighbours, 0.5, gen)
    assert not (torch.equal(groups, plain.groups) and torch.equal(devices, plain.devices))  # the test can fail
    agent.options = moving
    after = agent.sample(8, torch.Generator().manual_seed(0), 0)
    assert torch.equal(after.data.devices, devices) and torch.equal(after.data.groups, groups)
    with torch.no_grad():
        again = agent.policy.log_prob(replace(after.data, distributions=None))[0]  # the distribution, recomputed
    assert torch.allclose(after.data.logp, again, atol=1e-6)
    unit_device = devices.gather(1, groups).numpy()  # each unit's group's device
    assert np.array_equal(after.placements, unit_device[:, agent.unit_of_op])
    s.run()


def test_leader_neighbour_moves_start_once_the_agent_leads(tmp_path):
    """`agent.leader_neighbour_moves`: none while racing (the batch as sampled, no draw taken), that share once the
    agent leads; the batch before the moves is the same either way."""
    import torch

    from trinity.rl.algorithms import neighbour_moved_groups

    s = Search(two_chains(), cluster(), config("trinity", 3, agent={"leader_neighbour_moves": 0.5}), tmp_path,
               progress=False)
    agent = s.agent
    assert agent.neighbour_share() == 0.0
    gen = torch.Generator().manual_seed(0)
    racing = agent.sample(16, gen, 0).data
    after_racing = gen.get_state()
    agent.lead()
    assert agent.neighbour_share() == 0.5
    leading = agent.sample(16, torch.Generator().manual_seed(0), 0).data
    gen.set_state(after_racing)
    expected = neighbour_moved_groups(racing.groups, racing.devices, agent.neighbours, 0.5, gen)
    assert not torch.equal(expected, racing.groups) and torch.equal(leading.groups, expected)
    assert torch.equal(leading.devices, racing.devices)


def test_denormals_are_flushed_inside_and_as_before_after():
    import torch

    from trinity.rl.search import denormals_are_flushed, denormals_flushed

    tiny = torch.tensor([1e-20])
    assert not denormals_are_flushed() and float(tiny * tiny) > 0  # 1e-40: a float32 denormal
    with denormals_flushed():
        assert denormals_are_flushed() and float(tiny * tiny) == 0.0
    assert not denormals_are_flushed()
    torch.set_flush_denormal(True)
    try:
        with denormals_flushed():
            pass
        assert denormals_are_flushed()  # a caller's own setting is left as it was
    finally:
        torch.set_flush_denormal(False)


def test_flushing_denormals_changes_no_search(tmp_path, monkeypatch):
    """48 groups under the locality prior (-3 a part away): a unit's probabilities of the groups 29-34 parts off
    are float32 denormals (exp(-87) to exp(-103)); computed as zero, the search finds the same strategies with
    the same rewards."""
    import torch

    from trinity.graph.synthetic import layered_dag
    from trinity.rl import search as search_module

    policy = asdict(PolicyConfig(lstm_hidden=32, group_projection=16, type_embedding=8))
    cfg = SearchConfig(method="trinity", iterations=6, batch=16, checkpoint_every=1000, seed=3,
                       agent={"num_groups": 48, "embedding_dim": 4, "policy": policy})
    runs = []
    for flush in (False, True):
        monkeypatch.setattr(search_module, "FLUSH_DENORMALS", flush)
        s = Search(layered_dag(200, 300, seed=2), cluster(3), cfg, tmp_path / str(flush), progress=False)
        best = s.run()
        runs.append(([h["charts/reward_mean"] for h in s.history], best.placement.tolist(), best.reward))
        assert not search_module.denormals_are_flushed()
    probs = torch.softmax(s.agent.policy.partition_logits().detach(), dim=1)
    assert ((probs > 0) & (probs < torch.finfo(torch.float32).tiny)).float().mean() > 0.05  # the case is real
    assert runs[0] == runs[1]
