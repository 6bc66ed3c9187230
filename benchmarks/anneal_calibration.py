"""How cold calibrated annealing should start: `make anneal-calibration`.

The annealing peer's temperature is calibrated to the reward's scale at the start of every run
(`trinity/placers/annealing.py`): T starts where the median reward drop of 100 random moves is accepted
with probability ``accept_start``. This runs that calibration at several ``accept_start`` on four graph
families (the exported InceptionV3, Baechi's GNMT forward graph, a synthetic training graph and a
synthetic layered DAG, of seeds used nowhere else), on 2 and 4 P100s, 2 seeds, at the default
experiment's two budgets (800 and 30,000 simulator calls) from the best placer by the MDPE reward,
and at 30,000 calls from one device (round-robin where one device cannot hold the graph). Writes one
row per run (``--csv``) and prints the mean of the final step time over the start's per budget, start
and ``accept_start``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.graph.synthetic import layered_dag, training_graph  # noqa: E402
from trinity.placers import best_by_reward  # noqa: E402
from trinity.placers.annealing import anneal, start_placement  # noqa: E402
from trinity.progress import progress  # noqa: E402
from trinity.reward import MDPEConfig, mdpe_reward  # noqa: E402
from trinity.rl.warm_start import WARM_START_PLACERS  # noqa: E402
from trinity.sim import Simulator  # noqa: E402


def graphs(args) -> dict:
    out = {"InceptionV3": load_graph(args.inception), "GNMT (Baechi)": load_graph(args.gnmt),
           "training graph(2000, seed=21)": training_graph(2000, seed=21),
           "layered dag(3000, 4500, seed=22)": layered_dag(3000, 4500, seed=22)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inception", default="data/inception_v3/profile/graph.json.gz")
    parser.add_argument("--gnmt", default="../shared/reference/gnmt-baechi/gnmt_forward.json.gz")
    parser.add_argument("--accept-start", default="0.2,0.05,0.005")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--csv", default="reports/anneal_calibration.csv")
    args = parser.parse_args()
    accepts = [float(a) for a in args.accept_start.split(",")]
    config = MDPEConfig()  # the default experiment's reward (conf/reward): alpha 0.5, beta 0.3, gamma 0.2

    def reward(r):
        return mdpe_reward(r, config)

    # (start, budget): the searches' peers as the default experiment runs them
    settings = [("best", 800), ("best", 30_000), ("single", 30_000)]
    jobs = list(itertools.product(graphs(args).items(), ("p100x2", "p100x4"), range(args.seeds), settings, accepts))
    rows, starts = [], {}
    for (name, graph), cluster_name, seed, (start, budget), accept in progress(jobs, desc="annealing"):
        key = (name, cluster_name, seed, start)
        if key not in starts:  # the start, its simulator and step time: once per case, for every accept_start
            cluster = load_cluster(cluster_name)
            sim = Simulator(graph, cluster)
            placer, initial = (best_by_reward(WARM_START_PLACERS, graph, cluster, reward, seed=seed, simulator=sim)
                               if start == "best" else start_placement("single", graph, cluster, seed=seed))
            starts[key] = (cluster, sim, placer, initial, sim.simulate(initial).step_time_us / 1e3)
        cluster, sim, placer, initial, start_ms = starts[key]
        t0 = time.perf_counter()
        result = anneal(graph, cluster, initial, budget=budget, seed=seed, reward=reward, simulator=sim,
                        accept_start=accept)
        rows.append({"graph": name, "cluster": cluster_name, "seed": seed,
                     "from": "best placer" if start == "best" else "one device", "start": placer, "budget": budget,
                     "accept_start": accept, "start_ms": start_ms, "step_time_ms": result.step_time_us / 1e3,
                     "vs_start": result.step_time_us / 1e3 / start_ms, "improvements": len(result.curve) - 1,
                     "t_start": result.t_start, "t_end": result.t_end, "seconds": time.perf_counter() - t0})
    table = pd.DataFrame(rows)
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.csv, index=False)
    per_case = table.pivot_table(index=["from", "budget", "graph", "cluster"], columns="accept_start",
                                 values="vs_start", aggfunc="mean")
    print(per_case.round(3).to_string())
    print("\nmean (max) over cases of the final step time / the start's:")
    summary = table.groupby(["from", "budget", "accept_start"])["vs_start"].agg(["mean", "max"]).unstack()
    print(summary.round(4).to_string())


if __name__ == "__main__":
    main()
