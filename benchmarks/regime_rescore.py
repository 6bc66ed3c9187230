"""The paper's regime's committed strategies by one objective, and how deep Trinity's basins are.

Every committed search and placer strategy of the regime (`results/regime/search/<model>/<cluster>-<method>-s<seed>/`)
is simulated again and scored by the MDPE reward with the regime's tolerances (`run.regime.reward`): the metrics'
``reward`` is each method's own objective (Hierarchical's -sqrt(T), Trinity's MDPE), so this puts every row on the
one Trinity maximises. Then simulated annealing (the experiment's calibrated schedule, ``--budget`` calls, seeds 0-1)
starts from each Trinity-from-scratch strategy and from METIS's: what a local search finds next to where Trinity
ended (a deep basin gains little) against what it finds from the placer's. Writes ``--csv`` (one row per strategy)
and ``--anneal-csv``; prints both tables.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.placement import Strategy  # noqa: E402
from trinity.placers.annealing import anneal  # noqa: E402
from trinity.progress import progress  # noqa: E402
from trinity.reward import MDPEConfig, mdpe_reward  # noqa: E402
from trinity.sim import Simulator  # noqa: E402


def rescore(model: str, graph, cluster, folders, score) -> tuple[list[dict], dict]:
    """One row per strategy folder of ``model`` (``<cluster>-<method>-s<seed>/strategy.json``): its simulated step time, its
    ``score`` (a reward of a `SimResult`), peak memory and communication, busiest share; and the (placement,
    result) of each Trinity-from-scratch and METIS strategy, by (method, seed): annealing's starts."""
    sim, rows, starts = Simulator(graph, cluster), [], {}
    for folder in folders:
        method, seed = folder.name[len(cluster.name) + 1:].rsplit("-s", 1)
        placement = Strategy.load(folder / "strategy.json").to_array(graph, cluster)
        res = sim.simulate(placement, check=False)
        rows.append({"model": model, "cluster": cluster.name, "method": method, "seed": int(seed),
                     "step_time_ms": res.step_time_us / 1e3, "mdpe_reward": score(res),
                     "peak_memory_GB": res.max_memory_bytes / 1e9, "peak_comm_MB": res.peak_comm_bytes / 1e6,
                     "busiest_share": res.busiest_share})
        if method in ("trinity", "metis"):
            starts[(method, int(seed))] = (placement, res)
    return rows, starts


def anneal_from(model: str, graph, cluster, starts: dict, score, budget: int, options: dict) -> list[dict]:
    """Annealing (seeds 0 and 1, ``budget`` calls, ``options`` its schedule) from each of ``starts``."""
    sim, rows = Simulator(graph, cluster), []
    for (method, seed), (placement, res) in progress(sorted(starts.items()), desc=f"annealing {model}"):
        for anneal_seed in (0, 1):
            found = anneal(graph, cluster, placement, budget=budget, seed=anneal_seed, reward=score, simulator=sim,
                           **options)
            end = sim.simulate(found.placement, check=False)
            rows.append({"model": model, "cluster": cluster.name, "start": f"{method} s{seed}",
                         "anneal_seed": anneal_seed, "budget": budget, "start_step_time_ms": res.step_time_us / 1e3,
                         "start_mdpe_reward": score(res), "end_step_time_ms": end.step_time_us / 1e3,
                         "end_mdpe_reward": score(end), "end_peak_memory_GB": end.max_memory_bytes / 1e9,
                         "gain_pct": 100 * (1 - end.step_time_us / res.step_time_us)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--budget", type=int, default=5000, help="annealing's simulator calls from each start")
    parser.add_argument("--csv", default="reports/regime_rescore.csv")
    parser.add_argument("--anneal-csv", default="reports/regime_anneal_from_trinity.csv")
    args = parser.parse_args()
    params = yaml.safe_load(Path(args.params).read_text())
    regime = params["run"]["regime"]
    data, results = Path(params["paths"]["data"]), Path(params["paths"]["results"]) / "regime" / "search"
    reward_cfg = MDPEConfig(**{**params["reward"], **regime["reward"]})
    score = lambda r: mdpe_reward(r, reward_cfg)  # noqa: E731
    schedule = {k: v for k, v in params["methods"]["annealing-long"]["options"].items() if k not in ("start", "budget")}
    rows, anneal_rows = [], []
    for model in regime["models"]:
        graph = load_graph(data / model / "profile" / "graph.json.gz")
        for cluster_name in regime["clusters"]:
            cluster = load_cluster(cluster_name)
            found, starts = rescore(model, graph, cluster, sorted((results / model).glob(f"{cluster_name}-*-s*/")), score)
            rows += found
            anneal_rows += anneal_from(model, graph, cluster, starts, score, args.budget, schedule)
    table, annealed = pd.DataFrame(rows), pd.DataFrame(anneal_rows)
    table.to_csv(args.csv, index=False)
    annealed.to_csv(args.anneal_csv, index=False)
    summary = table.groupby(["model", "cluster", "method"]).agg(
        step_ms=("step_time_ms", "mean"), mdpe_reward=("mdpe_reward", "mean"), reward_min=("mdpe_reward", "min"),
        reward_max=("mdpe_reward", "max"), peak_memory_GB=("peak_memory_GB", "mean"), busiest=("busiest_share", "mean"))
    print(summary.sort_values("mdpe_reward", ascending=False).to_string(float_format=lambda x: f"{x:.3f}"))
    print(annealed.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
