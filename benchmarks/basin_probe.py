"""Could two simulator calls tell a search which basin to take? One device against the bisection's blocks.

Trinity from scratch gathers (about 90% of the compute on one device) on InceptionV3 and the synthetic training
graphs; with bisection groups and the block prior (`policy.block_prior`) it stays balanced. Neither serves every
case (README's *The block prior on bisection groups*). A probe a search could run before it starts: simulate
all ops on one device and the blocks the prior starts from (the 64 parts of a recursive bisection, in tree
order, split into one run per device), and take the basin whose start scores the higher MDPE reward. This
prints, per case, both starts' step times and rewards and the probe's choice, on the default experiment's
op-placement cases (with their rewards, the regime's own) and on the synthetic graphs of `search_variety.py`
(its development set and the fresh, held-out one); whether the choice was right is read against the searches'
CSVs in the README.

    python benchmarks/basin_probe.py --csv reports/basin_probe.csv   # needs `make repro`'s data/ (about 10 s)

``--op-costs cluster`` cuts the bisection by the cluster's op costs, as a racer with ``op_costs: cluster`` does
(InceptionV3: its blocks are then METIS's own split, or close to it).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.costs import op_times  # noqa: E402
from trinity.errors import run_main  # noqa: E402
from trinity.features import OpFeatures, op_features  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.graph.synthetic import graph_set  # noqa: E402
from trinity.reward import MDPEConfig, mdpe_reward  # noqa: E402
from trinity.rl.policy import UnitGraph  # noqa: E402
from trinity.sim import Simulator  # noqa: E402
from trinity.stages.config import op_placement_cases  # noqa: E402


def probe(graph, features, cluster, reward: MDPEConfig, k: int, op_costs: str = "profile") -> dict:
    """Both starts' step times (ms) and rewards, and the basin the higher reward picks; ``op_costs``: the parts cut
    by the profile's op costs (as the policy's groups by default) or the cluster's (`op_costs: cluster`)."""
    times = op_times(graph, cluster).mean(axis=1) if op_costs == "cluster" else None
    ug, sim = UnitGraph(graph, features, times), Simulator(graph, cluster)
    part = ug.parts(k, bisection=True).numpy()
    blocks = (np.arange(k) * cluster.n_devices // k)[part][ug.unit_of_op]
    single = np.zeros(graph.n_ops, np.int64)
    rs, rb = sim.simulate(single, check=False), sim.simulate(blocks, check=False)
    r_single, r_blocks = mdpe_reward(rs, reward), mdpe_reward(rb, reward)
    return {"single_ms": rs.step_time_us / 1e3, "single_reward": r_single, "blocks_ms": rb.step_time_us / 1e3,
            "blocks_reward": r_blocks, "blocks_busiest_share": rb.busiest_share,
            "probe": "balanced" if r_blocks > r_single else "gathered"}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--groups", type=int, default=64, help="parts of the bisection (a search's num_groups)")
    p.add_argument("--op-costs", choices=("profile", "cluster"), default="profile",
                   help="cut the bisection by the profile's op costs (the default's groups) or the cluster's")
    p.add_argument("--csv", default="reports/basin_probe.csv")
    args = p.parse_args(argv)
    params = yaml.safe_load(Path(args.params).read_text())
    data, rows = Path(params["paths"]["data"]), []
    for model, cluster_name, reward, regime in op_placement_cases(params):
        name = f"{model} {cluster_name}" + (" (paper's regime)" if regime else "")
        graph = load_graph(data / model / "profile" / "graph.json.gz")
        if graph.arrays.n_groups <= args.groups:  # one unit a part (layered12): no bisection to read
            continue
        features = OpFeatures.load(data / model / "embed" / "features.npz", graph)
        rows.append({"set": "default", "case": name, **probe(graph, features, load_cluster(cluster_name),
                                                              MDPEConfig(**{**params["reward"], **reward}), args.groups,
                                                              args.op_costs)})
    for kind in ("development", "fresh"):
        for graph in graph_set(kind):
            features = op_features(graph, cache_dir=data / ".features")
            for cluster in (load_cluster("p100x2"), load_cluster("p100x4")):
                if graph.group_static_memory().sum() > cluster.memory.sum():  # as search_variety.py skips it
                    continue
                rows.append({"set": kind, "case": f"{graph.name} ({graph.n_ops} ops) {cluster.name}",
                             **probe(graph, features, cluster, MDPEConfig(), args.groups, args.op_costs)})
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    run_main(main)
