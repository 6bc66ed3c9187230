"""How a settled Trinity search spends its iterations: `make leader-moves`.

One block racer of today's default (`conf/experiment/default.yaml`: block moves, bisection groups, the cluster's
op costs) searches each graph from scratch, once per ``--explore`` setting (the units a sample is expected to put
off the policy's likeliest devices). Each iteration records how many units every sample puts off the policy's
likeliest device (the block-moved quarter of a block racer's samples moves hundreds) and how many samples beat the
best strategy sampled before it. Over the search's second half, where the policy has settled, it prints per
setting: the best step time at the end, the share of iterations that improved the best, and the median units off
per sample among all samples and among the improving ones. Writes one row per case and setting (``--csv``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph.synthetic import graph_set  # noqa: E402
from trinity.rl.agent import register  # noqa: E402
from trinity.rl.defaults import TRINITY_SCRATCH_BATCH  # noqa: E402
from trinity.rl.ppo import TrinityAgent  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402

BLOCK_RACER = {"block_moves": 0.25, "op_costs": "cluster", "policy": {"locality_order": "bisection"}}


@register("trinity-traced")
class TracedTrinityAgent(TrinityAgent):
    """Trinity, recording per iteration each sample's units off the policy's likeliest device and which samples
    beat the best reward before the batch (it searches exactly as Trinity does)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace: list[dict] = []

    def update(self, samples, rewards, iteration):
        strategy = samples.data
        with torch.no_grad():
            log_part, log_sched = strategy.distributions or self.policy.one_pass(strategy)
            likeliest = (log_part.exp() @ log_sched.exp()).argmax(1)  # each unit's likeliest device
        off = (strategy.devices.gather(1, strategy.groups) != likeliest[None]).sum(1)
        improved = (rewards > self.best_sampled).numpy()  # the best this agent sampled before the batch
        self.trace.append({"iteration": iteration, "off": off.numpy(), "improved": improved})
        return super().update(samples, rewards, iteration)


def trace_search(graph, cluster, explore: float, seed: int, iterations: int, agent: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SearchConfig(method="trinity-traced", iterations=iterations, batch=TRINITY_SCRATCH_BATCH, seed=seed,
                           checkpoint_every=10**9, agent={**BLOCK_RACER, **agent, "explore": explore})
        search = Search(graph, cluster, cfg, tmp, progress=False, feature_cache="data/.features")
        best = search.run()
        search.close()
    late = search.agent.trace[iterations // 2:]
    off = np.concatenate([t["off"] for t in late])
    improving = np.concatenate([t["off"][t["improved"]] for t in late])
    return {"best_ms": best.step_time_us / 1e3, "iterations_improving": np.mean([t["improved"].any() for t in late]),
            "off_median": float(np.median(off)),
            "off_median_improving": float(np.median(improving)) if len(improving) else float("nan"),
            "improving_samples": len(improving), "seconds": search.seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--explore", type=float, nargs="+", default=[8.0, 2.0])
    parser.add_argument("--only", nargs="+", default=["layered4000", "training3203", "training5059"],
                        help="fresh synthetic graphs whose name contains one of these")
    parser.add_argument("--cluster", default="p100x4")
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agent", type=json.loads, default={}, metavar="JSON",
                        help="more of the racer's options, e.g. '{\"adapt_explore\": true}'")
    parser.add_argument("--csv", default="reports/leader_moves.csv")
    args = parser.parse_args()
    cluster = load_cluster(args.cluster)
    rows = []
    for graph in graph_set("fresh"):
        if not any(name in graph.name for name in args.only):
            continue
        for explore in args.explore:
            row = {"graph": graph.name, "cluster": cluster.name, "explore": explore, "seed": args.seed,
                   "agent": json.dumps(args.agent), **trace_search(graph, cluster, explore, args.seed, args.iterations,
                                                                   args.agent)}
            rows.append(row)
            print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
            pd.DataFrame(rows).to_csv(args.csv, index=False)
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
