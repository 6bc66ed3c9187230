"""Pre-training the learned list scheduler on many graphs at once (its zero-shot policy).

One `LearnedListAgent` per case (a graph on a cluster), all sharing one policy and one Adam. Stage 1
imitates m-ETF on every case (select = m-ETF's order, place = m-ETF's device), one step on the
mean of the cases' losses; stage 2 runs PPO rounds over the cases in turn, one batch of episodes
and one update per case per round (each case's rewards standardised on their own by the agent, so
no graph's scale dominates). A case is (name, graph, cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trinity.progress import progress
from trinity.reward import MDPEConfig
from trinity.rl.agent import AgentContext
from trinity.rl.learned_list import LearnedListAgent, LearnedListOptions, ListPolicy, save_policy
from trinity.sim import Simulator


@dataclass
class PretrainConfig:
    imitation_steps: int = 100
    imitation_lr: float = 1e-2
    rounds: int = 20  #: PPO rounds over every case
    batch: int = 8
    seed: int = 0


def pretrain(cases, options: LearnedListOptions, cfg: PretrainConfig, out, *, log=print) -> ListPolicy:
    """Train one policy on ``cases`` [(name, graph, cluster)] and save it to ``out``; returns it."""
    ctx = AgentContext(seed=cfg.seed, reward=MDPEConfig(), warm_start=True)
    agents = [LearnedListAgent(g, c, options, ctx) for _, g, c in cases]
    policy = agents[0].policy
    for agent in agents:
        agent.policy = policy
    sims = [Simulator(g, c) for _, g, c in cases]
    etf_ms = [sim.simulate(a.teacher(None).placement, check=False).step_time_us / 1e3 for sim, a in zip(sims, agents)]
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.imitation_lr)
    loss = torch.tensor(0.0)
    for _ in progress(range(cfg.imitation_steps), desc="imitating m-ETF"):
        loss = sum(a.imitation_loss(None) for a in agents) / len(agents)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), options.grad_clip)
        optimizer.step()
    log(f"imitation loss {float(loss.detach()):.5f}")
    optimizer = torch.optim.Adam(policy.parameters(), lr=options.lr)
    for agent in agents:
        agent.optimizer = optimizer
        agent.imitation_done()  # each case's sampling temperature
    generator = torch.Generator().manual_seed(cfg.seed)
    best = list(etf_ms)
    for it in progress(range(cfg.rounds), desc="PPO rounds"):
        for i, agent in enumerate(agents):
            samples = agent.sample(cfg.batch, generator, it)
            results = [sims[i].simulate(p, check=False) for p in samples.placements]
            best[i] = min(best[i], *(r.step_time_us / 1e3 for r in results))
            agent.update(samples, torch.tensor([agent.reward(r) for r in results]), it)
    for (name, _, cluster), agent, sim, etf, seen in zip(cases, agents, sims, etf_ms, best):
        ms = sim.simulate(agent.greedy(), check=False).step_time_us / 1e3
        log(f"{name} {cluster.name}: m-ETF {etf:.3f} ms, greedy {ms:.3f} ({ms / etf:.3f}x), "
            f"best sampled {seen:.3f} ({seen / etf:.3f}x), temperature {agent.temperature:.3g}")
    g0 = agents[0].graph
    save_policy(out, policy, options, feature_width=g0.feature_width, vocabulary=g0.vocabulary,
                devices=sorted({c.n_devices for _, _, c in cases}), training_set=sorted({n for n, _, _ in cases}))
    return policy
