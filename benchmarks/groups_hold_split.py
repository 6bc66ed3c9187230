"""Can the policy's groups hold a balanced split? METIS's own split, read through the groups a search starts from.

Trinity from scratch chooses one device per group, and its groups start as the parts of a 64-way partition of
the units (`UnitGraph.parts`). Per op-placement case of the default experiment (and its regime) this places
each part on the device that holds most of its compute in the METIS placer's strategy, and simulates it: the
closest the groups, as they start, come to METIS's balanced split. ``kway`` parts are today's METIS groups
(`locality_order: metis`), ``bisection`` those of METIS's recursive bisection (`locality_order: bisection`),
where a run of parts is a piece the bisections cut off; for those, ``blocks`` also simulates the parts split
into runs, one run per device, in their tree order. ``pure_share``: the share of parts whose units all sit on
one device of METIS's split.

    make groups-hold-split   # -> reports/groups_hold_split.csv (about 1 min)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from trinity.cluster import load_cluster
from trinity.errors import run_main
from trinity.features import OpFeatures
from trinity.graph import load_graph
from trinity.placers import get_placer
from trinity.rl.policy import UnitGraph
from trinity.sim import Simulator
from trinity.stages.config import op_placement_cases


def rows_for(graph, features, cluster, k: int) -> list[dict]:
    ug, sim, n_dev = UnitGraph(graph, features), Simulator(graph, cluster), cluster.n_devices
    metis = np.asarray(get_placer("metis")(graph, cluster))
    unit_device = np.zeros(ug.n_units, np.int64)
    unit_device[ug.unit_of_op] = metis
    share = ug.compute_share.numpy().astype(np.float64) + 1e-12  # a part of zero compute goes by its op count
    base = {"metis_ms": sim.simulate(metis, check=False).step_time_us / 1e3}
    out = []
    for kind in ("kway", "bisection"):
        part = ug.parts(k, bisection=kind == "bisection").numpy()
        majority = np.array([np.bincount(unit_device[part == p], weights=share[part == p], minlength=n_dev).argmax()
                             if (part == p).any() else 0 for p in range(k)])
        pure = np.mean([len(set(unit_device[part == p])) == 1 for p in range(k) if (part == p).any()])
        row = {**base, "parts": kind, "k": k, "pure_share": pure,
               "majority_ms": sim.simulate(majority[part][ug.unit_of_op], check=False).step_time_us / 1e3}
        if kind == "bisection":
            blocks = np.arange(k) * n_dev // k
            row["blocks_ms"] = sim.simulate(blocks[part][ug.unit_of_op], check=False).step_time_us / 1e3
        out.append(row)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--groups", type=int, default=64, help="parts a search's groups start as (its num_groups)")
    p.add_argument("--csv", default="reports/groups_hold_split.csv")
    args = p.parse_args(argv)
    params = yaml.safe_load(Path(args.params).read_text())
    data, rows = Path(params["paths"]["data"]), []
    for model, cluster_name, _, _ in op_placement_cases(params):
        graph = load_graph(data / model / "profile" / "graph.json.gz")
        if graph.arrays.n_groups <= args.groups:  # one unit a part: any split is a union of parts
            continue
        features = OpFeatures.load(data / model / "embed" / "features.npz", graph)
        rows += [{"model": model, "cluster": cluster_name, **r}
                 for r in rows_for(graph, features, load_cluster(cluster_name), args.groups)]
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    run_main(main)
