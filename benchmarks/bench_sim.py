"""Simulator and placer benchmarks: `make bench`.

Everything runs pinned to one core. Fast and reference simulators are timed
in interleaved rounds on the same placements, and the figures reported are
medians over rounds, so the speed ratio is measured under the same load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.graph.synthetic import layered_dag  # noqa: E402
from trinity.placers import place  # noqa: E402
from trinity.sim import Simulator, simulate_reference  # noqa: E402

TARGET_MS_15K = 5.0
TARGET_SPEEDUP = 30.0


def pin_to_one_core() -> str:
    try:
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to cpu {cpu}"
    except (AttributeError, OSError):
        return "not pinned"


def bench_simulator(graph, cluster, placer: str, *, rounds: int, fast_repeats: int, n_placements: int = 4) -> dict:
    placements = [place(placer, graph, cluster, seed=s).placement
                  for s in range(n_placements)]
    sim = Simulator(graph, cluster)
    for p in placements:  # compile and warm caches
        sim.simulate(p)
    fast, ref = [], []
    for r in range(rounds):
        p = placements[r % n_placements]
        t0 = time.perf_counter()
        for _ in range(fast_repeats):
            sim.simulate(p)
        fast.append((time.perf_counter() - t0) / fast_repeats)
        t0 = time.perf_counter()
        simulate_reference(graph, cluster, p)
        ref.append(time.perf_counter() - t0)
    f, rf = statistics.median(fast), statistics.median(ref)
    return {"fast_ms": f * 1e3, "sims_per_s": 1 / f, "reference_ms": rf * 1e3, "speedup": rf / f,
            "fast_spread_ms": (min(fast) * 1e3, max(fast) * 1e3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reference-graph", default="../shared/reference/gnmt-baechi/gnmt_forward.json.gz")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    print(f"simulator benchmark ({pin_to_one_core()}), cluster p100x4")
    print("placements: random (worst case: most edges cross devices) and m-topo (contiguous blocks)")
    cluster = load_cluster("p100x4")
    cases = []
    if Path(args.reference_graph).exists():
        cases.append(("GNMT reference", load_graph(args.reference_graph)))
    else:
        print(f"  (reference graph {args.reference_graph} not found: skipped)")
    cases.append(("layered DAG", layered_dag(15_000, 25_000, seed=0)))

    header = f"{'graph':<16}{'placer':>8}{'ops':>7}{'edges':>7}{'fast ms':>9}{'(min-max)':>14}{'sims/s':>9}{'ref ms':>9}{'fast/ref':>10}"
    print(header)
    results = {}
    for (label, graph), placer in [(case, placer) for case in cases for placer in ("random", "m-topo")]:
        r = bench_simulator(graph, cluster, placer, rounds=args.rounds, fast_repeats=20)
        results[label, placer] = r
        lo, hi = r["fast_spread_ms"]
        print(f"{label:<16}{placer:>8}{graph.n_ops:>7}{graph.n_edges:>7}{r['fast_ms']:>9.3f}{f'({lo:.2f}-{hi:.2f})':>14}"
              f"{r['sims_per_s']:>9.0f}{r['reference_ms']:>9.0f}{r['speedup']:>9.0f}x")
    big = results["layered DAG", "random"]
    print(f"target: <= {TARGET_MS_15K} ms per 15k-op simulation: {big['fast_ms']:.2f} ms "
          f"({'met' if big['fast_ms'] <= TARGET_MS_15K else 'MISSED'})")
    worst = min(r["speedup"] for r in results.values())
    print(f"target: >= {TARGET_SPEEDUP:.0f}x the reference: {worst:.0f}x "
          f"({'met' if worst >= TARGET_SPEEDUP else 'MISSED'})")

    if Path(args.reference_graph).exists():
        from trinity.compare import compare_placers

        graph = cases[0][1]
        t0 = time.perf_counter()
        table = compare_placers(graph, [load_cluster("p100x2"), cluster], progress=False)
        seconds = time.perf_counter() - t0
        print(f"\nevery placer on GNMT reference, 2 and 4 devices: {seconds:.1f} s (target < 60 s)")
        print(table[["cluster", "placer", "step_time_ms", "place_s"]].to_string(index=False,
              float_format=lambda x: f"{x:.3f}", na_rep="-"))


if __name__ == "__main__":
    main()
