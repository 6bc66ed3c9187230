"""Racing (trinity/rl/racing.py): each racer draws as a search of its own seed, rounds halve the racers, the leader
finishes, resume is exact."""

import numpy as np
import pytest
import torch

from trinity.errors import TrinityError
from trinity.features import op_features
from trinity.rl.racing import SEED_STRIDE, RacingAgent, race_rounds
from trinity.rl.search import Search, SearchConfig
from trinity.track import NullTracker

from test_search import cluster, config, two_chains


def rewards(search):
    return [h["charts/reward_mean"] for h in search.history]


def test_turns_then_the_leader_alone(tmp_path):
    # 3 racers, race_share 0.6 of 10 iterations: 2 turns each (6 iterations), then 4 by the leader
    s = Search(two_chains(), cluster(), config("trinity", 10, racers=3, race_share=0.6), tmp_path, progress=False)
    assert [s.agent.turn(i) for i in range(6)] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    s.run()
    winner = s.agent.winner
    assert winner == int(np.argmax(s.agent.best))
    assert [h["charts/racer"] for h in s.history] == [0, 1, 2, 0, 1, 2] + [winner] * 4
    assert s.agent.turn(9) == (winner, 5)  # the winner's sixth iteration of its own


def test_each_racer_draws_exactly_as_a_search_of_its_own_seed(tmp_path):
    # every racer embeds the graph with the search's seed; the searches alone are given the same embedding
    features = op_features(two_chains(), embedding_dim=4, seed=4)
    raced = Search(two_chains(), cluster(), config("trinity", 12, racers=2, race_share=1.0, seed=4), tmp_path / "race",
                   features=features, progress=False)
    raced.run()
    for j in range(2):
        alone = Search(two_chains(), cluster(), config("trinity", 6, seed=4 + j * SEED_STRIDE), tmp_path / str(j),
                       features=features, progress=False)
        alone.run()
        assert rewards(raced)[j::2] == rewards(alone)
    # the search's best is the best of both racers' samples
    assert raced.best.reward == max(raced.agent.best)


class KilledAt(NullTracker):
    """Interrupts the search as it logs loop iteration ``at`` (after the checkpoint before it)."""

    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def log_metrics(self, metrics, step=None):
        if step == self.at:
            raise KeyboardInterrupt


def test_a_race_killed_and_resumed_ends_as_an_uninterrupted_one(tmp_path):
    race = config("trinity", 30, racers=2, race_share=0.5)  # 8 turns each (16 iterations), checkpoints every 10
    full = Search(two_chains(), cluster(), race, tmp_path / "full", progress=False)
    full.run()
    with pytest.raises(KeyboardInterrupt):
        Search(two_chains(), cluster(), race, tmp_path / "cut", tracker=KilledAt(13), progress=False).run()
    resumed = Search(two_chains(), cluster(), race, tmp_path / "cut", progress=False)
    assert resumed.iteration == 10 and resumed.agent.winner is None  # mid-race
    resumed.run()
    assert rewards(resumed) == rewards(full) and resumed.agent.winner == full.agent.winner


def test_racing_settings_are_checked():
    with pytest.raises(TrinityError, match="racers: must be a number >= 1 and <= 64, got 0"):
        SearchConfig(racers=0)
    with pytest.raises(TrinityError, match="race_share: must be a number > 0 and <= 1, got 1.5"):
        SearchConfig(racers=2, race_share=1.5)
    with pytest.raises(TrinityError, match="racers: a race starts from scratch"):
        SearchConfig(racers=2, warm_start="m-etf")


def test_a_portfolio_racer_draws_as_a_search_of_its_own_seed_and_options(tmp_path):
    """``race_agents``: racer 1's options (here its rate) merged over the search's; it draws exactly as a search of
    its own seed with those options, and racer 0 as one with the search's own."""
    features = op_features(two_chains(), embedding_dim=4, seed=4)
    raced = Search(two_chains(), cluster(), config("trinity", 12, racers=2, race_share=1.0, seed=4,
                                                   race_agents=[{}, {"lr": 0.05}]), tmp_path / "race",
                   features=features, progress=False)
    raced.run()
    for j, lr in enumerate((0.01, 0.05)):
        alone = Search(two_chains(), cluster(), config("trinity", 6, lr=lr, seed=4 + j * SEED_STRIDE),
                       tmp_path / str(j), features=features, progress=False)
        alone.run()
        assert rewards(raced)[j::2] == rewards(alone)
    assert raced.resolved["race_agents"] == [{}, {"lr": 0.05}]


def test_portfolio_options_merge_nested_keys():
    cfg = config("trinity", 4, racers=2, race_agents=[{}, {"policy": {"locality_order": "bisection"}}])
    assert cfg.racer_agent(0) == cfg.agent
    assert cfg.racer_agent(1)["policy"] == {**cfg.agent["policy"], "locality_order": "bisection"}
    assert cfg.racer_agent(1)["num_groups"] == cfg.agent["num_groups"]


def test_portfolio_settings_are_checked():
    with pytest.raises(TrinityError, match=r"race_agents: must be a list of at most racers=1 option sets"):
        config("trinity", 4, race_agents=[{}, {"lr": 0.05}])
    with pytest.raises(TrinityError, match=r"race_agents\.1: must be a mapping of agent options, got 3"):
        config("trinity", 4, racers=2, race_agents=[{}, 3])
    with pytest.raises(TrinityError, match=r"race_agents\.1\.rate"):
        config("trinity", 4, racers=2, race_agents=[{}, {"rate": 0.05}])


def test_the_leader_explores_its_own_units_once_the_race_is_over(tmp_path):
    """``leader_explore``: the race is the same draw for draw; the winner alone then samples at the temperature
    that puts that many units off its likeliest devices (0: temperature 1), and keeps leading across a resume."""
    race = {"racers": 2, "race_share": 0.4}  # 4 turns each (8 iterations), then 12 by the leader
    default = Search(two_chains(), cluster(), config("trinity", 20, agent={"explore": 1.0}, **race), tmp_path / "a",
                     progress=False)
    default.run()
    leader = config("trinity", 20, agent={"explore": 1.0, "leader_explore": 0.0}, **race)
    led = Search(two_chains(), cluster(), leader, tmp_path / "b", progress=False)
    led.run()
    assert rewards(led)[:8] == rewards(default)[:8]
    assert [r.leading for r in led.agent.racers] == [j == led.agent.winner for j in range(2)]
    temperatures = [h["charts/temperature"] for h in led.history]
    assert temperatures[8:] == [1.0] * 12 and max(h["charts/temperature"] for h in default.history[8:]) > 1.0
    with pytest.raises(KeyboardInterrupt):  # killed after the checkpoint at iteration 10, the leader's second
        Search(two_chains(), cluster(), leader, tmp_path / "cut", tracker=KilledAt(11), progress=False).run()
    resumed = Search(two_chains(), cluster(), leader, tmp_path / "cut", progress=False)
    assert resumed.agent.racers[led.agent.winner].leading
    resumed.run()
    assert rewards(resumed) == rewards(led)


def test_leader_explore_is_checked():
    with pytest.raises(TrinityError, match="leader_explore: must be a number >= 0"):
        config("trinity", 4, agent={"leader_explore": -1.0})


def test_race_rounds_split_the_turns_evenly_and_halve_the_racers():
    assert race_rounds(5, 80, 1) == [(5, 80)]  # one round: the race without halving
    assert race_rounds(5, 80, 2) == [(5, 40), (3, 66)]  # 400 turns: 200 a round; 5 -> 3 racers
    assert race_rounds(5, 80, 3) == [(5, 26), (3, 44), (2, 67)]  # 133, 133 and 134 turns; 5 -> 3 -> 2
    assert race_rounds(4, 1, 2) == [(4, 1), (2, 1)]  # at least one turn each


class _Stub:
    """A racer that only counts its updates (RacingAgent's bookkeeping, by hand)."""

    name, Options, options, unit_of_op, num_groups = "stub", None, None, None, 1

    def __init__(self):
        self.leading = False

    def update(self, samples, rewards, iteration):
        return {}

    def lead(self):
        self.leading = True


def test_racing_in_rounds_drops_the_worse_half_then_leads_with_the_best():
    race = RacingAgent(lambda seed, j: _Stub(), seed=0, racers=5, race_iterations=4, rounds=3)
    assert race.rounds == [(5, 1), (3, 2), (2, 4)]  # 20 turns: 6, 6 and 8 a round
    reward = {0: 0.3, 1: 0.1, 2: 0.5, 3: 0.2, 4: 0.4}  # each racer's every sample
    schedule = []
    for i in range(5 + 6 + 8 + 3):
        j, own = race.turn(i)
        schedule.append((j, own))
        race.update(None, torch.tensor([reward[j]]), i)
    # round 1: all five once; racers 2, 4, 0 (the best three) race on twice each, then 2 and 4 four times
    assert schedule[:5] == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)]
    assert schedule[5:11] == [(0, 1), (2, 1), (4, 1), (0, 2), (2, 2), (4, 2)]
    assert schedule[11:19] == [(2, 3), (4, 3), (2, 4), (4, 4), (2, 5), (4, 5), (2, 6), (4, 6)]
    assert race.winner == 2 and race.racers[2].leading and not race.racers[4].leading
    assert schedule[19:] == [(2, 7), (2, 8), (2, 9)]  # the leader alone, on from its own eighth turn


def test_a_race_in_rounds_killed_and_resumed_ends_as_an_uninterrupted_one(tmp_path):
    race = config("trinity", 30, racers=3, race_share=0.8, race_rounds=2)  # 24 turns: (3 x 4) then (2 x 6)
    full = Search(two_chains(), cluster(), race, tmp_path / "full", progress=False)
    full.run()
    racers = [h["charts/racer"] for h in full.history]
    assert racers[:12] == [0, 1, 2] * 4 and len(set(racers[12:24])) == 2 and set(racers[24:]) == {full.agent.winner}
    assert full.resolved["race_rounds"] == 2
    with pytest.raises(KeyboardInterrupt):  # killed after the checkpoint at iteration 20: the second round
        Search(two_chains(), cluster(), race, tmp_path / "cut", tracker=KilledAt(21), progress=False).run()
    resumed = Search(two_chains(), cluster(), race, tmp_path / "cut", progress=False)
    assert resumed.iteration == 20 and len(resumed.agent.alive) == 2 and resumed.agent.winner is None
    resumed.run()
    assert rewards(resumed) == rewards(full) and resumed.agent.winner == full.agent.winner


def test_race_rounds_are_checked():
    with pytest.raises(TrinityError, match=r"race_rounds: must be a number >= 1 and <= 3, got 4"):
        SearchConfig(racers=5, race_rounds=4)  # a fourth round would race one racer
    with pytest.raises(TrinityError, match=r"race_rounds: must be a number >= 1 and <= 1, got 2"):
        SearchConfig(race_rounds=2)  # no race
    with pytest.raises(TrinityError, match=r"race_rounds: must be a whole number of rounds, got 1.5"):
        SearchConfig(racers=4, race_rounds=1.5)
