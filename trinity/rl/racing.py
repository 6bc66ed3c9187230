"""Racing: several searches of one method from different seeds share the budget; the best one finishes it.

From scratch, which basin a policy settles in can be close to a coin per seed: in the paper's regime, while
its graph was cost-blind to the policy, 11 seeds of 20 settled on spread splits up to 25% slower than the
seeds that gathered, whatever the rate, the batch or the budget (README, *Is the regime's miss a setting,
or the seeds?*). `RacingAgent` spends the coin's cost inside one search: ``racers`` agents, built from
seeds ``seed``, ``seed + SEED_STRIDE``, ..., take turns for ``race_iterations`` iterations each; the one
whose best sampled strategy has the highest reward then runs the rest of the budget alone, from where it
stopped. Every racer keeps its own iteration count (its noise decays as in a search of its own), its own
generator and its own state, so each racer's draws are exactly those of a search of its own seed, and the
whole race resumes exactly from a checkpoint. The search loop sees one agent; the simulator calls, and so
the wall time, are the budget's. ``race_agents`` (`SearchConfig`) gives racers options of their own, e.g.
another locality prior each: a portfolio, its leader picked by the same reward (README's *Why InceptionV3's
searches gather*).

With ``rounds`` > 1 the race is successive halving (Jamieson & Talwalkar 2016, Hyperband's inner loop): the
race's turns (``racers`` x ``race_iterations``) are split evenly over the rounds; in each round the racers still
in take turns, each as many as the round's share allows, and after it the better half (rounded up) go on,
the best one after the last round leading: the clearly worse go early and the rest are judged later, since a
racer's reward at the race's end is a weak guide to where it ends as the leader (README's *Racing in rounds*, where
two rounds are measured against one: neutral on the fresh graphs, so one stays the default).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from trinity.rl.agent import Agent, Samples
from trinity.sim.result import SimResult

SEED_STRIDE = 100_003  #: racer j's seed is the search's + j * SEED_STRIDE (racer 0's is the search's own)


class RacingAgent(Agent):
    """``racers`` agents of one method taking turns, then the leader alone (see the module's docstring)."""

    def __init__(self, make_agent: Callable[[int, int], Agent], seed: int, racers: int, race_iterations: int,
                 rounds: int = 1):
        """``make_agent(seed, j)``: racer j, from its seed (and, in a portfolio, its own options)."""
        self.racers = [make_agent(seed + j * SEED_STRIDE, j) for j in range(racers)]
        self.generators = [torch.Generator().manual_seed(seed + j * SEED_STRIDE) for j in range(racers)]
        self.race_iterations = race_iterations
        #: (racers in, each one's turns) per round
        self.rounds = race_rounds(racers, race_iterations, rounds)
        #: the loop iteration after which each round ends
        self.round_ends = [int(end) - 1 for end in np.cumsum([n * turns for n, turns in self.rounds])]
        self.alive = list(range(racers))  #: the racers in the current round, in order
        self.best = [-np.inf] * racers  #: each racer's best reward so far
        self.winner: int | None = None  #: the racer running the rest of the budget, once the race is over
        first = self.racers[0]
        self.Options, self.name = first.Options, first.name
        self.options, self.unit_of_op, self.num_groups = first.options, first.unit_of_op, first.num_groups

    def turn(self, iteration: int) -> tuple[int, int]:
        """(the racer whose turn loop iteration ``iteration`` is, that racer's own iteration)."""
        start, before = 0, 0  # the round's first loop iteration; the turns each racer in it had before it
        for n, turns in self.rounds:
            if iteration < start + n * turns:
                return self.alive[(iteration - start) % n], before + (iteration - start) // n
            start, before = start + n * turns, before + turns
        return self.leader, before + iteration - start

    @property
    def leader(self) -> int:
        if self.winner is not None:
            return self.winner
        return max(self.alive, key=lambda j: (self.best[j], -j))  # ties: the lower seed

    def reward(self, result: SimResult) -> float:
        return self.racers[0].reward(result)

    def sample(self, batch: int, generator: torch.Generator, iteration: int | None) -> Samples:
        if iteration is None:  # the policy's own choice, without exploration: the leader's
            return self.racers[self.leader].sample(batch, self.generators[self.leader], None)
        j, own = self.turn(iteration)
        return self.racers[j].sample(batch, self.generators[j], own)

    def update(self, samples: Samples, rewards: torch.Tensor, iteration: int) -> dict[str, float]:
        j, own = self.turn(iteration)
        self.best[j] = max(self.best[j], float(rewards.max()))
        metrics = self.racers[j].update(samples, rewards, own)
        ends = self.round_ends
        if self.winner is None and iteration >= ends[-1]:
            self.winner = self.leader
            self.alive = [self.winner]
            self.racers[self.winner].lead()
        elif self.winner is None and iteration in ends:  # the better half go on (ties: the lower seed)
            ranked = sorted(self.alive, key=lambda i: (-self.best[i], i))
            self.alive = sorted(ranked[:math.ceil(len(self.alive) / 2)])
        return {**metrics, "charts/racer": float(j)}

    def imitation_loss(self, unit_device: np.ndarray) -> torch.Tensor:
        raise NotImplementedError("a race starts from scratch (SearchConfig refuses racers with a warm start)")

    def parameters(self):
        return [p for racer in self.racers for p in racer.parameters()]

    def state_dict(self) -> dict:
        return {"racers": [racer.state_dict() for racer in self.racers],
                "generators": [g.get_state() for g in self.generators],
                "race_iterations": self.race_iterations, "best": list(self.best), "winner": self.winner,
                "alive": list(self.alive)}

    def load_state_dict(self, state: dict) -> None:
        for racer, saved in zip(self.racers, state["racers"], strict=True):
            racer.load_state_dict(saved)
        for g, saved in zip(self.generators, state["generators"], strict=True):
            g.set_state(saved)
        self.race_iterations, self.best, self.winner = state["race_iterations"], list(state["best"]), state["winner"]
        # before rounds, every racer ran until the race ended
        default = list(range(len(self.racers))) if self.winner is None else [self.winner]
        self.alive = list(state.get("alive", default))


def race_rounds(racers: int, race_iterations: int, rounds: int) -> list[tuple[int, int]]:
    """[(racers in, turns each)] per round of a race of ``racers`` x ``race_iterations`` turns in ``rounds``
    rounds of successive halving: ceil(n / 2) of n racers go on after each round, and each round gets an even
    share of the turns (the first rounds' remainders to the last), at least one per racer in it. One round:
    [(racers, race_iterations)], the race without halving."""
    total = racers * race_iterations
    alive, out = racers, []
    for r in range(rounds):
        share = total // rounds if r < rounds - 1 else total - (rounds - 1) * (total // rounds)
        out.append((alive, max(1, share // alive)))
        alive = math.ceil(alive / 2)
    return out
