"""Scaling benchmark: `make bench`. Time per simulation and per placer against graph size
(1k, 10k, 100k ops) and device count (2 to 1,024), with growth exponents from log-log fits.

Graphs are layered DAGs (edges 1.7 x ops, as `bench_sim.py`'s); clusters are identical devices
(1 GB/s links, 2 us latency, 100 GB each). Simulations use a random placement (by colocation
group: the most transfers); times are the median of a few runs (fewer at large sizes), with the
compile done beforehand. The 15k-op, 4-device case is held to the 2 ms goal. Exponents: the
slope of log(time) on log(ops) at a fixed device count, and on log(devices) at 100k ops.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from trinity.cluster import cluster_from_dict  # noqa: E402
from trinity.graph.synthetic import layered_dag, training_graph  # noqa: E402
from trinity.placers import place  # noqa: E402
from trinity.sim import Simulator  # noqa: E402

SIZES = (1_000, 10_000, 100_000)
DEVICES = (2, 4, 16, 64, 256, 1024)
PLACER_DEVICES = (2, 32, 1024)
PLACERS = ("m-topo", "m-etf", "m-sct", "metis", "expert", "round-robin", "random")
#: m-SCT solves an LP over every op and edge first (HiGHS): too slow past this many ops for this run.
M_SCT_MAX_OPS = 10_000
TARGET_MS_15K = 2.0


def cluster(n: int):
    return cluster_from_dict({"name": f"scale{n}", "devices": [{"name": f"d{i}", "memory_GB": 100.0}
                                                                for i in range(n)],
                              "default_link": {"bandwidth_GBps": 1.0, "latency_us": 2.0}})


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def slope(xs, ys) -> float:
    """Growth exponent: least-squares slope of log y on log x."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def table(title: str, rows: dict, cols, unit: str, scale: float) -> None:
    print(f"\n{title}")
    print(f"{'ops':>8}" + "".join(f"{c:>10}" for c in cols))
    for r, cells in rows.items():
        print(f"{r:>8}" + "".join(f"{cells[c] * scale:>10.3g}" if c in cells else f"{'-':>10}" for c in cols))
    print(f"(in {unit})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-ops", type=int, default=SIZES[-1], help="leave out larger graphs (quick runs)")
    args = parser.parse_args()
    sizes = [n for n in SIZES if n <= args.max_ops]
    graphs = {n: layered_dag(n, int(1.7 * n), seed=0) for n in sizes}
    t_start = time.perf_counter()

    # Compile once, outside the timings.
    small = layered_dag(200, 340, seed=1)
    for name in PLACERS:
        place(name, small, cluster(4), seed=0)
    Simulator(small, cluster(64)).simulate(place("random", small, cluster(64)).placement)

    sim_s: dict[int, dict[int, float]] = {n: {} for n in sizes}
    for n in sizes:
        g = graphs[n]
        for d in DEVICES:
            c = cluster(d)
            sim = Simulator(g, c)
            p = place("random", g, c, seed=0).placement
            sim.simulate(p)
            sim_s[n][d] = timed(lambda: sim.simulate(p, check=False), max(2, 200_000 // n))
    table("simulation (random placement), per simulation", sim_s, DEVICES, "ms", 1e3)
    if len(sizes) > 1:
        print("growth exponent in ops: " + ", ".join(
            f"{d} devices {slope(sizes, [sim_s[n][d] for n in sizes]):.2f}" for d in DEVICES))
    print(f"growth exponent in devices at {sizes[-1]} ops: {slope(DEVICES, list(sim_s[sizes[-1]].values())):.2f}")

    g = layered_dag(15_000, 25_000, seed=0)
    c = cluster(4)
    sim = Simulator(g, c)
    for placer in ("random", "m-topo"):
        p = place(placer, g, c, seed=0).placement
        sim.simulate(p)
        ms = timed(lambda: sim.simulate(p, check=False), 30) * 1e3
        print(f"goal: <= {TARGET_MS_15K} ms per simulation of a 15k-op graph on 4 devices ({placer} placement): "
              f"{ms:.2f} ms ({'met' if ms <= TARGET_MS_15K else 'MISSED'})")

    place_s: dict[str, dict[int, dict[int, float]]] = {}
    for name in PLACERS:
        place_s[name] = {n: {} for n in sizes}
        for n in sizes:
            if name == "m-sct" and n > M_SCT_MAX_OPS:
                continue
            for d in PLACER_DEVICES:
                place_s[name][n][d] = place(name, graphs[n], cluster(d), seed=0).seconds
    print("\nplacers, seconds per placement (one run; includes op_times, the ops x devices cost table)")
    print(f"{'placer':>12}{'ops':>8}" + "".join(f"{d:>9}" for d in PLACER_DEVICES) + "   exponent in ops")
    for name in PLACERS:
        for n in sizes:
            cells = place_s[name][n]
            line = f"{name:>12}{n:>8}" + "".join(f"{cells[d]:>9.3g}" if d in cells else f"{'skipped':>9}"
                                                 for d in PLACER_DEVICES)
            if n == sizes[-1]:
                fitted = [m for m in sizes if PLACER_DEVICES[-1] in place_s[name][m]]
                if len(fitted) > 1:
                    line += f"   {slope(fitted, [place_s[name][m][PLACER_DEVICES[-1]] for m in fitted]):.2f}" \
                            f" ({PLACER_DEVICES[-1]} devices)"
            print(line)
    print(f"(m-sct skipped past {M_SCT_MAX_OPS:,} ops: its LP relaxation alone takes minutes there)")

    if sizes[-1] >= 100_000:
        g = training_graph(100_000, seed=0)
        c = cluster(1024)
        sim = Simulator(g, c)
        p = place("m-etf", g, c, seed=0)
        sim.simulate(p.placement)
        ms = timed(lambda: sim.simulate(p.placement, check=False), 3) * 1e3
        print(f"\nreal-shaped graph (training_graph: {g.n_ops} ops, {g.n_edges} edges), 1024 devices: "
              f"m-etf {p.seconds:.1f} s, simulation of its placement {ms:.1f} ms")
    print(f"\nwhole benchmark: {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
