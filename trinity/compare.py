"""Run placers on a graph and tabulate what the simulator says of each."""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from trinity.cluster import Cluster
from trinity.errors import PlacementError
from trinity.graph.ir import OpGraph
from trinity.placers import PLACERS, place
from trinity.progress import progress as progress_bar
from trinity.sim import Simulator

COLUMNS = ["cluster", "placer", "step_time_ms", "ratio_to_lower_bound", "peak_comm_MB", "peak_memory_GB",
           "fits", "place_s", "note"]


def compare_placers(graph: OpGraph, clusters: Iterable[Cluster], placers: Iterable[str] | None = None,
                    *, seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """One row per (cluster, placer); a placer that cannot place says why in ``note``."""
    clusters = list(clusters)
    names = list(placers) if placers is not None else sorted(PLACERS)
    rows = []
    jobs = [(c, p) for c in clusters for p in names]
    sims = {c.name: Simulator(graph, c) for c in clusters}
    for cluster, name in progress_bar(jobs, desc="placers", disable=not progress, leave=False):
        try:
            placed = place(name, graph, cluster, seed=seed)
        except PlacementError as exc:
            rows.append({"cluster": cluster.name, "placer": name, "fits": False, "note": exc.message})
            continue
        res = sims[cluster.name].simulate(placed.placement)
        rows.append({"cluster": cluster.name, "placer": name, "step_time_ms": res.step_time_us / 1e3,
                     "ratio_to_lower_bound": res.ratio_to_lower_bound, "peak_comm_MB": res.peak_comm_bytes / 1e6,
                     "peak_memory_GB": res.max_memory_bytes / 1e9, "fits": res.fits,
                     "place_s": placed.seconds, "note": "" if res.fits else "out of memory"})
    return pd.DataFrame(rows, columns=COLUMNS)
