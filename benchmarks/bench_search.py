"""Search throughput: `make bench` (after bench_sim.py).

Times Trinity's and Hierarchical's search loops on the GNMT reference graph
(and on any other graph files given, such as an exported and profiled
InceptionV3) with 4 devices of the P100 preset, one torch thread per
Python thread. Throughput is timed over iterations after two warm-up ones,
for Trinity with and without overlapped sampling (the ratio is measured in
the same run). Then a whole 1,000-iteration Trinity search on InceptionV3
(checkpoints included) is timed from start to finish against the 300 s
target (``--full-run 0`` skips it).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402

TARGET_S_PER_1000 = 300.0


def bench(graph, cluster, method: str, iterations: int, overlap: bool = True) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SearchConfig(method=method, iterations=iterations + 2, threads=1, checkpoint_every=10**9,
                           overlap_sampling=overlap)
        search = Search(graph, cluster, cfg, tmp, progress=False)
        for _ in range(2):  # compile and warm caches
            search.step()
            search.iteration += 1
        t0 = time.perf_counter()
        for _ in range(iterations):
            search.step()
            search.iteration += 1
        seconds = (time.perf_counter() - t0) / iterations
    return {"s_per_it": seconds, "it_per_s": 1 / seconds, "sims_per_s": search.cfg.batch / seconds,
            "s_per_1000": 1000 * seconds, "groups": search.cfg.policy.num_groups}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("graphs", nargs="*", help="graph files (default: the GNMT reference graph)")
    parser.add_argument("--reference-graph", default="../shared/reference/gnmt-baechi/gnmt_forward.json.gz")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--full-run", type=int, default=1000, help="iterations of the timed whole search")
    args = parser.parse_args()
    paths = [p for p in [args.reference_graph, *args.graphs] if Path(p).exists()]
    cluster = load_cluster("p100x4")
    print(f"\nsearch throughput on {cluster.name}, 1 thread, batch 8 strategies per iteration")
    print(f"{'graph':<22}{'ops':>7}{'method':>14}{'k':>5}{'it/s':>7}{'sims/s':>8}{'s per 1000 it':>15}")
    for path in paths:
        graph = load_graph(path)
        sequential = bench(graph, cluster, "trinity", args.iterations, overlap=False)
        for method in ("trinity", "hierarchical"):
            r = bench(graph, cluster, method, args.iterations)
            print(f"{graph.name[:21]:<22}{graph.n_ops:>7}{method:>14}{r['groups']:>5}{r['it_per_s']:>7.2f}"
                  f"{r['sims_per_s']:>8.1f}{r['s_per_1000']:>15.0f}")
            if method == "trinity":
                print(f"{'':<22}{'':>7}{'(sequential)':>14}{'':>5}{sequential['it_per_s']:>7.2f}"
                      f"{sequential['sims_per_s']:>8.1f}{sequential['s_per_1000']:>15.0f}"
                      f"   overlap: {sequential['s_per_it'] / r['s_per_it']:.2f}x faster")
    inception = [p for p in paths if "inception_v3" in Path(p).name]
    if args.full_run and inception:
        graph = load_graph(inception[0])
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            Search(graph, cluster, SearchConfig(iterations=args.full_run, threads=1), tmp, progress=False).run()
            seconds = time.perf_counter() - t0
        print(f"whole Trinity search, {graph.name} on {cluster.name}, {args.full_run} iterations "
              f"(features, checkpoints every 50): {seconds:.0f} s")
    print(f"target: <= {TARGET_S_PER_1000:.0f} s per 1000 iterations on InceptionV3, 4 devices "
          f"(the paper: 700-20,000 s on its GPUs)")


if __name__ == "__main__":
    main()
