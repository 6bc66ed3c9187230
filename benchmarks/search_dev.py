"""The graphs Trinity's default settings from scratch were chosen on, and what was seen there: `make search-dev`.

Development graphs of the held-out table's generators, with seeds and sizes that table never uses
(a layered DAG of 2,500 ops, seed 21; training graphs of 2,500 ops, seed 3, and of 900 ops, seed 13;
the default experiment's 12-op ``layered12``), on 2 P100s, and with fewer variants on 4, 100
iterations x 64 from scratch, seeds 0-3 (``layered12``: 0-4). Every variant is on top of gate ``mode``
except the previous default (gate ``elite``, no free tables, no exploration). Resumes from its CSVs.
Writes one row per run (``--csv``) and, for the traced runs (seed 0 of the layered DAG, seed 1 of the
2,500-op training graph), one row per iteration of the search's own state (``--trace``): the best strategy's reward,
the batch's mean reward, whether self-imitation is on, the sampling temperature, the median number
of units a sample puts off the best strategy's devices, and the share of groups whose likeliest device
is the best strategy's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph.synthetic import layered_dag, training_graph  # noqa: E402
from trinity.placers import place_each  # noqa: E402
from trinity.progress import progress  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402
from trinity.sim import Simulator  # noqa: E402

#: every row spelled out in full, so it means the same whatever the defaults are (groups from stretches of levels
#: under a prior of 1, but in the last row)
PREVIOUS = {"self_imitation_gate": "elite", "explore": 0.0,
            "policy": {"locality_order": "breadth", "topo_prior": 1.0, "unit_logits": False, "group_logits": False}}
MODE = {**PREVIOUS, "self_imitation_gate": "mode"}
TABLES = {**MODE, "table_lr": 0.1, "policy": {**PREVIOUS["policy"], "unit_logits": True, "group_logits": True}}
STRETCHES = "gate mode + tables at 0.1 + explore 8 (the default until METIS groups)"
DEFAULT = "+ 64 groups from METIS parts, prior 3 (the default)"
VARIANTS = {
    "previous default": PREVIOUS,
    "gate mode": MODE,
    "gate mode + tables at 0.1": TABLES,
    "gate mode + tables at 0.1 + entropy 0.01": {**TABLES, "entropy_coef": 0.01},
    "gate mode + tables at 0.1 + entropy 0.05": {**TABLES, "entropy_coef": 0.05},
    "gate mode + tables at 0.1 + explore 3": {**TABLES, "explore": 3.0},
    STRETCHES: {**TABLES, "explore": 8.0},
    "gate mode + tables at 0.1 + explore 24": {**TABLES, "explore": 24.0},
    "gate mode + tables at 0.3 + explore 8": {**TABLES, "table_lr": 0.3, "explore": 8.0},
    "gate mode + tables at 0.3 + explore 3 (second try)": {**TABLES, "table_lr": 0.3, "explore": 3.0},
    DEFAULT: {**TABLES, "explore": 8.0, "num_groups": 64,
              "policy": {**TABLES["policy"], "locality_order": "metis", "topo_prior": 3.0}},
}
#: (graph, cluster, seeds, variants, traced seed)
CASES = [
    (lambda: layered_dag(2500, 3800, seed=21), "p100x2", 4, list(VARIANTS), 0),
    (lambda: training_graph(2500, batch=8, seed=3), "p100x2", 4, list(VARIANTS), 1),
    (lambda: training_graph(900, batch=8, seed=13), "p100x2", 4, list(VARIANTS), None),
    # 4 devices, added after the second try (chosen on 2 devices alone) failed on the held-out graphs' 4-device cases
    *[(make, "p100x4", 4, ["previous default", "gate mode", STRETCHES, DEFAULT,
                           "gate mode + tables at 0.1 + explore 3", "gate mode + tables at 0.3 + explore 8",
                           "gate mode + tables at 0.3 + explore 3 (second try)"], None)
      for make in (lambda: layered_dag(2500, 3800, seed=21), lambda: training_graph(2500, batch=8, seed=3),
                   lambda: training_graph(900, batch=8, seed=13))],
    *[(lambda: layered_dag(12, 18, seed=0, colocated_fraction=0.0, control_fraction=0.0, log_compute_us=6.0,
                           log_bytes=9.0), cluster, 5,
       ["previous default", STRETCHES, "gate mode + tables at 0.3 + explore 3 (second try)"], None)
      for cluster in ("p100x2", "p100x4")],
]
TRACED = ("gate mode", "gate mode + tables at 0.1", STRETCHES)


def traced(agent, rows: list[dict], **key) -> None:
    """Record the search's state after each of ``agent``'s updates (the instance's update, wrapped)."""
    update = agent.update

    def recording(samples, rewards, iteration):
        stats = update(samples, rewards, iteration)
        strategy = samples.data
        groups, devices, elite = agent.elite
        sampled = torch.gather(strategy.devices, 1, strategy.groups)  # [B, U] each unit's device
        with torch.no_grad():
            _, log_sched = agent.policy.one_pass(strategy)
        rows.append({**key, "iteration": iteration, "elite_reward": elite, "reward_mean": float(rewards.mean()),
                     "imitating": agent.imitating, "temperature": strategy.temperature,
                     "units_off_elite_median": float((sampled != devices[groups][None]).sum(1).median()),
                     "groups_on_elite_device": float((log_sched.argmax(1) == devices).float().mean())})
        return stats

    agent.update = recording


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--csv", default="reports/search_dev.csv")
    parser.add_argument("--trace", default="reports/search_dev_trace.csv")
    args = parser.parse_args()
    # resume: runs already in the CSVs are kept (a run is deterministic from its seed)
    rows = pd.read_csv(args.csv).to_dict("records") if Path(args.csv).exists() else []
    trace = pd.read_csv(args.trace).to_dict("records") if Path(args.trace).exists() else []
    jobs = [(make, cluster, seed, variant, traced_seed) for make, cluster, seeds, variants, traced_seed in CASES
            for variant in variants for seed in range(seeds)]
    graphs = {}
    for make, cluster_name, seed, variant, traced_seed in progress(jobs, desc="search-dev"):
        if make not in graphs:
            graph = make()
            graphs[make] = graph
        graph, cluster = graphs[make], load_cluster(cluster_name)
        sim = Simulator(graph, cluster)
        case = f"{graph.name} ({graph.n_ops} ops) {cluster_name}"
        if any(r["case"] == case and r["variant"] == variant and r["seed"] == seed for r in rows):
            continue
        if not any(r["case"] == case for r in rows):
            for placer, placed in place_each(("single", "m-etf", "metis"), graph, cluster)[0].items():
                res = sim.simulate(placed.placement)
                rows.append({"case": case, "variant": placer, "seed": 0, "step_time_ms": res.step_time_us / 1e3,
                             "busiest_share": res.busiest_share})
        with tempfile.TemporaryDirectory() as tmp:
            cfg = SearchConfig(iterations=100, batch=64, seed=seed, checkpoint_every=10**9, agent=VARIANTS[variant])
            s = Search(graph, cluster, cfg, tmp, progress=False, feature_cache="data/.features")
            if seed == traced_seed and variant in TRACED:
                traced(s.agent, trace, case=case, variant=variant, seed=seed)
            best = s.run()
            s.close()
        res = sim.simulate(best.placement, check=False)
        rows.append({"case": case, "variant": variant, "seed": seed, "step_time_ms": res.step_time_us / 1e3,
                     "busiest_share": res.busiest_share})
        pd.DataFrame(rows).to_csv(args.csv, index=False)
        pd.DataFrame(trace).to_csv(args.trace, index=False)
    table = pd.DataFrame(rows)
    summary = table.groupby(["case", "variant"], sort=False).agg(
        step_ms=("step_time_ms", "mean"), sd=("step_time_ms", "std"), busiest=("busiest_share", "mean"),
        runs=("seed", "count"))
    print(summary.to_string(float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
