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
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from trinity.rl.agent import Agent, Samples
from trinity.sim.result import SimResult

SEED_STRIDE = 100_003  #: racer j's seed is the search's + j * SEED_STRIDE (racer 0's is the search's own)


class RacingAgent(Agent):
    """``racers`` agents of one method taking turns, then the leader alone (see the module's docstring)."""

    def __init__(self, make_agent: Callable[[int, int], Agent], seed: int, racers: int, race_iterations: int):
        """``make_agent(seed, j)``: racer j, from its seed (and, in a portfolio, its own options)."""
        self.racers = [make_agent(seed + j * SEED_STRIDE, j) for j in range(racers)]
        self.generators = [torch.Generator().manual_seed(seed + j * SEED_STRIDE) for j in range(racers)]
        self.race_iterations = race_iterations
        self.best = [-np.inf] * racers  #: each racer's best reward so far
        self.winner: int | None = None  #: the racer running the rest of the budget, once the race is over
        first = self.racers[0]
        self.Options, self.name = first.Options, first.name
        self.options, self.unit_of_op, self.num_groups = first.options, first.unit_of_op, first.num_groups

    def turn(self, iteration: int) -> tuple[int, int]:
        """(the racer whose turn loop iteration ``iteration`` is, that racer's own iteration)."""
        k, r = len(self.racers), self.race_iterations
        if iteration < k * r:
            return iteration % k, iteration // k
        return self.leader, r + iteration - k * r

    @property
    def leader(self) -> int:
        return self.winner if self.winner is not None else int(np.argmax(self.best))

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
        if self.winner is None and iteration + 1 >= len(self.racers) * self.race_iterations:
            self.winner = int(np.argmax(self.best))  # ties: the lower seed
            self.racers[self.winner].lead()
        return {**metrics, "charts/racer": float(j)}

    def imitation_loss(self, unit_device: np.ndarray) -> torch.Tensor:
        raise NotImplementedError("a race starts from scratch (SearchConfig refuses racers with a warm start)")

    def parameters(self):
        return [p for racer in self.racers for p in racer.parameters()]

    def state_dict(self) -> dict:
        return {"racers": [racer.state_dict() for racer in self.racers],
                "generators": [g.get_state() for g in self.generators],
                "race_iterations": self.race_iterations, "best": list(self.best), "winner": self.winner}

    def load_state_dict(self, state: dict) -> None:
        for racer, saved in zip(self.racers, state["racers"], strict=True):
            racer.load_state_dict(saved)
        for g, saved in zip(self.generators, state["generators"], strict=True):
            g.set_state(saved)
        self.race_iterations, self.best, self.winner = state["race_iterations"], list(state["best"]), state["winner"]
