"""How well the race picks its leader: today's default race rerun with each racer made the leader in turn.

`make race-oracle`, which gives ``--search`` today's default race (`make`'s FIVE_RACE_660: five racers, 80 turns
each, the leader the last 260 of 660). On the fresh synthetic graphs (or the development ones with
``--development``), per case and seed, that race runs as it does, then once more per racer with that racer made
the leader whatever the race said. Every racer draws exactly as in the race (its own
generator and seed), so each run is what the search would have ended at had the race picked that racer. Writes one
row per racer: its best reward when the race ended, whether the race picked it, and the best step time and reward
the search ended at with it leading; prints, per case and seed, the race's pick against the best in hindsight.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph.synthetic import graph_set  # noqa: E402
from trinity.rl.defaults import TRINITY_SCRATCH_BATCH  # noqa: E402
from trinity.rl.racing import RacingAgent  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402
from trinity.sim import Simulator  # noqa: E402


class ForcedLeaderRace(RacingAgent):
    """The race as it is, then ``forced`` leads (None: the race's own pick)."""

    forced: int | None = None

    def update(self, samples, rewards, iteration):
        metrics = super().update(samples, rewards, iteration)
        if iteration == self.round_ends[-1]:
            self.race_end, self.picked = list(self.best), self.winner
            if self.forced is not None:
                self.racers[self.winner].leading = False
                self.winner = self.alive[0] = self.forced
                self.racers[self.forced].lead()
        return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", default="0,1", help="comma-separated")
    parser.add_argument("--only", default="", help="the cases whose name contains this")
    parser.add_argument("--development", action="store_true", help="the development graphs instead of the fresh ones")
    parser.add_argument("--csv", default="reports/race_oracle.csv")
    parser.add_argument("--iterations", type=int, default=660)
    parser.add_argument("--search", type=json.loads, required=True, metavar="JSON",
                        help="the race (SearchConfig's racers, race_share, race_agents, ...), e.g. make's FIVE_RACE_660")
    args = parser.parse_args()
    if not isinstance(args.search, dict) or args.search.get("racers", 1) < 2:
        parser.error(f"--search: a JSON object of a race (racers of 2 or more), got {args.search!r}")
    race = {"iterations": args.iterations, "batch": TRINITY_SCRATCH_BATCH, **args.search}
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
    rows = []
    for graph in graph_set("development" if args.development else "fresh"):
        for cluster in (load_cluster("p100x2"), load_cluster("p100x4")):
            case = f"{graph.name} ({graph.n_ops} ops) {cluster.name}"
            if args.only not in case:
                continue
            sim = Simulator(graph, cluster)
            for seed in seeds:
                picked = None  # the race's own run first, then each other racer made the leader
                for forced in [None] + list(range(race["racers"])):
                    if forced is not None and forced == picked:
                        continue
                    with tempfile.TemporaryDirectory() as tmp:
                        s = Search(graph, cluster, SearchConfig(seed=seed, checkpoint_every=10**9, **race),
                                   tmp, progress=False, feature_cache="data/.features")
                        s.agent.__class__, s.agent.forced = ForcedLeaderRace, forced
                        best = s.run()
                        s.close()
                    if forced is None:
                        picked, race_end = s.agent.picked, s.agent.race_end
                    rows.append({"case": case, "seed": seed, "racer": picked if forced is None else forced,
                                 "race_end_reward": race_end[picked if forced is None else forced],
                                 "picked": forced is None, "step_time_ms":
                                 sim.simulate(best.placement, check=False).step_time_us / 1e3, "reward": best.reward})
                    print(rows[-1], flush=True)
                pd.DataFrame(rows).to_csv(args.csv, index=False)
    if not rows:
        parser.error(f"--only {args.only!r}: no case's name contains it")
    table = pd.DataFrame(rows)
    for (case, seed), part in table.groupby(["case", "seed"], sort=False):
        pick = part[part["picked"]].iloc[0]
        best = part.loc[part["step_time_ms"].idxmin()]
        print(f"{case} seed {seed}: the race picked racer {pick['racer']} ({pick['step_time_ms']:.2f} ms); best in "
              f"hindsight racer {best['racer']} ({best['step_time_ms']:.2f}, {best['step_time_ms'] / pick['step_time_ms'] - 1:+.1%})")


if __name__ == "__main__":
    main()
