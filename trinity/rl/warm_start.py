"""Warm start: before searching, an agent imitates a placer's placement, which is also the search's
first candidate (so a warm-started search never ends worse than its placer).

Agent-independent: it asks the agent for `Agent.imitation_loss` of the placer's unit -> device map
and minimises it with its own Adam (supervised steps want a larger rate, and should leave no
optimizer state behind). `two_level_imitation_loss` is that loss for the two-level policies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from trinity.cluster import Cluster, interchangeable_devices
from trinity.errors import PlacementError, TrinityError
from trinity.graph.ir import OpGraph
from trinity.progress import progress as progress_bar
from trinity.sim.result import SimResult

#: the placers a warm start (and annealing's ``start: best``) chooses from
WARM_START_PLACERS = ("single", "expert", "metis", "m-topo", "m-etf", "m-sct")


@dataclass
class WarmStart:
    placer: str  #: the placer imitated ("best" resolved)
    placement: np.ndarray  #: its placement, int64[N]
    result: SimResult  #: its simulation
    agreement: float  #: share of ops a sample puts where the placer did (interchangeable devices relabelled)
    agreement_same_labels: float


def warm_start(agent, graph: OpGraph, cluster: Cluster, simulator, placer: str, *, steps: int, lr: float,
               grad_clip: float, batch: int, seed: int, progress: bool = True) -> WarmStart:
    """Imitate ``placer`` (a name, or "best": the best of `WARM_START_PLACERS` by the agent's reward)."""
    placer, placement = target_placement(placer, graph, cluster, agent.reward, seed, simulator)
    unit_device = np.zeros(graph.arrays.n_groups, np.int64)
    unit_device[agent.unit_of_op] = placement
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, foreach=True)
    for _ in progress_bar(range(steps), desc=f"imitating {placer}", disable=not progress):
        loss = agent.imitation_loss(unit_device)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(agent.parameters()), grad_clip)
        optimizer.step()
    agent.imitation_done()
    sampled = agent.sample(batch, torch.Generator().manual_seed(seed), None).placements
    return WarmStart(placer, placement, simulator.simulate(placement, check=False),
                     agreement(sampled, placement, relabel=interchangeable_devices(cluster)),
                     agreement(sampled, placement, relabel=False))


def target_placement(placer: str, graph, cluster, reward, seed: int, simulator) -> tuple[str, np.ndarray]:
    from trinity.placers import best_by_reward, place

    if placer != "best":
        return placer, place(placer, graph, cluster).placement
    try:
        return best_by_reward(WARM_START_PLACERS, graph, cluster, reward, seed=seed, simulator=simulator)
    except PlacementError:
        raise TrinityError("no placer could place the graph, so there is nothing to warm-start from",
                           field="warm_start") from None


def two_level_imitation_loss(policy, unit_device: np.ndarray, dropout_seed: int | None) -> torch.Tensor:
    """Mean negative log-likelihood, under a two-level policy, of a partition and schedule that put
    every unit on ``unit_device``.

    The targets are ones the policy can represent: group g goes to device g mod D (the sequential
    decoder only has to learn "the device after the one before"; the one-pass decoder: floor(g D / k),
    its block prior), and a unit the placer put on device d may join
    any group of that class, so the partition network raises the class's total probability rather
    than one arbitrary group's; each device's units are spread evenly over its class of groups for
    the schedule network's input.
    """
    k, n_dev = policy.cfg.num_groups, policy.n_devices
    one_pass = getattr(policy.cfg, "decoder", "sequential") == "parallel"
    # the one-pass decoder's block prior puts group g on device floor(g D / k): imitate in its terms
    group_device = (np.arange(k) * n_dev) // k if one_pass else np.arange(k) % n_dev
    groups = np.zeros(len(unit_device), np.int64)
    for d in range(n_dev):
        mine, mine_groups = np.flatnonzero(unit_device == d), np.flatnonzero(group_device == d)
        groups[mine] = mine_groups[(np.arange(len(mine)) * len(mine_groups)) // max(len(mine), 1)]
    groups_t, devices_t = torch.from_numpy(groups)[None], torch.from_numpy(group_device)[None]
    outside_class = torch.from_numpy(group_device[None, :] != unit_device[:, None])  # [U, k]
    if one_pass:
        from trinity.rl.policy import SampledStrategies

        logp_groups, log_sched = policy.one_pass(SampledStrategies(groups_t, devices_t, dropout_seed=dropout_seed))
        logp_schedule = log_sched[torch.arange(k), devices_t[0]]
    else:
        logp_groups = torch.log_softmax(policy.partition_logits(dropout_seed), dim=1)
        schedule = policy.schedule_logits(policy.group_embeddings(groups_t), devices_t)
        logp_schedule = torch.log_softmax(schedule, dim=2)[0].gather(1, devices_t[0, :, None])[:, 0]
    logp_device = logp_groups.masked_fill(outside_class, -torch.inf).logsumexp(dim=1)  # [U]
    return -torch.cat([logp_device, logp_schedule]).mean()


def agreement(samples: np.ndarray, placement: np.ndarray, *, relabel: bool) -> float:
    """Share of ops that samples [B, N] put where ``placement`` [N] does, averaged over samples.

    With ``relabel`` (devices interchangeable), each sample is first relabelled by the device
    permutation that agrees most (an assignment problem on its confusion matrix with the
    placement): the warm start imitates the placement as the simulator sees it, and there a
    strategy that only swaps the names of interchangeable devices is the same strategy.
    """
    from scipy.optimize import linear_sum_assignment

    samples = np.atleast_2d(samples)
    if not relabel:
        return float((samples == placement).mean())
    n_dev = int(max(samples.max(), placement.max())) + 1
    shares = []
    for sample in samples:
        confusion = np.zeros((n_dev, n_dev), np.int64)  # [placer's device, sample's device]
        np.add.at(confusion, (placement, sample), 1)
        rows, cols = linear_sum_assignment(confusion, maximize=True)
        shares.append(confusion[rows, cols].sum() / len(placement))
    return float(np.mean(shares))
