"""Trinity and Hierarchical against every placer, on the same graphs and clusters (issue 4's table).

For each graph and cluster: every algorithmic placer, then both searches
(optionally warm-started from a placer) at a fixed iteration budget; one
row per method with simulated step time, peak communication and peak
memory. A warm-started search counts its placer's strategy as its first
candidate, so ``best_iteration`` says whether the search itself improved
on it (-1: it did not) and ``agreement`` how closely the policy imitated
the placer. Prints the table and writes it as CSV. Long: minutes per search.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import pandas as pd

warnings.filterwarnings("ignore")

from trinity.cluster import load_cluster  # noqa: E402
from trinity.compare import compare_placers  # noqa: E402
from trinity.fileio import atomic_write_bytes  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.plots import plot_search_table  # noqa: E402
from trinity.rl.search import WARM_START_PLACERS, Search, SearchConfig  # noqa: E402

BASELINES = list(WARM_START_PLACERS)  # the placers a "best" warm start chooses from


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("graphs", nargs="+")
    parser.add_argument("--clusters", nargs="+", default=["p100x2", "p100x4"])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--warm-start", default="best",
                        help="placer to imitate first; 'best' = the best placer per case ('' for none)")
    parser.add_argument("--csv", default="reports/search_table.csv")
    parser.add_argument("--plot", default="reports/search_table.png")
    args = parser.parse_args()
    rows = []
    for path in args.graphs:
        graph = load_graph(path)
        clusters = [load_cluster(c) for c in args.clusters]
        table = compare_placers(graph, clusters, BASELINES, progress=False)
        for _, r in table.iterrows():
            rows.append({"graph": graph.name, "cluster": r["cluster"], "method": r["placer"],
                         "step_time_ms": r["step_time_ms"], "peak_comm_MB": r["peak_comm_MB"],
                         "peak_memory_GB": r["peak_memory_GB"], "seconds": r["place_s"]})
        for cluster in clusters:
            for method in ("trinity", "hierarchical"):
                cfg = SearchConfig(method=method, iterations=args.iterations, warm_start=args.warm_start or None,
                                   checkpoint_every=10**9)
                with tempfile.TemporaryDirectory() as tmp:
                    t0 = time.perf_counter()
                    search = Search(graph, cluster, cfg, tmp, progress=False)
                    best = search.run()
                label = method + (f" (from {search.warm_start_placer})" if args.warm_start else "")
                rows.append({"graph": graph.name, "cluster": cluster.name, "method": label,
                             "step_time_ms": best.step_time_us / 1e3, "peak_comm_MB": best.peak_comm_bytes / 1e6,
                             "peak_memory_GB": best.peak_memory_bytes / 1e9, "seconds": time.perf_counter() - t0,
                             "best_iteration": best.iteration, "agreement": search.warm_start_agreement})
                print(pd.DataFrame(rows[-1:]).to_string(index=False, header=False), flush=True)
    df = pd.DataFrame(rows)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    atomic_write_bytes(args.csv, df.to_csv(index=False).encode())
    plot_search_table(df, args.plot, title=f"Trinity and Hierarchical ({args.iterations} iterations) vs placers")


if __name__ == "__main__":
    main()
