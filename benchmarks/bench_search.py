"""Search speed: `make bench` (ratios measured in the same run; this machine is shared and noisy).

Prints, on a 3k-op training graph (trinity.graph.synthetic.training_graph, seed 1), the GNMT
reference graph and any graph files given, each on 4 P100s:

1. Trinity's time per iteration against Hierarchical's (batch 8), measured interleaved (A, B, A,
   B, ... rounds of iterations; medians), Trinity's seconds per 1,000 iterations, and its time per
   iteration at its own batch from scratch (64), and that with float32 denormals computed as such (the
   search flushes them to zero: `trinity.rl.search.FLUSH_DENORMALS`), and that with sampling's draws searched
   over all rows end to end (as before stop 69: `draw_rows_end_to_end`), interleaved with it;
2. simulations per second inside a Trinity search (batch 8 and 64) against the simulator's own
   rate on the same placements (one thread, one call after another), and the share of the search's
   wall time spent simulating;
3. time to quality: each method's wall time to reach m-ETF's step time within a wall budget (or
   its best after the budget, said so): Trinity (batch 64) and Hierarchical (batch 8) from scratch,
   calibrated annealing from one device and from m-ETF;
4. the learned list scheduler's decode: one sampled episode (every op placed by its two policies, each
   decision's features recorded) against m-ETF's own list schedule of the same graph, interleaved.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph import load_graph  # noqa: E402
from trinity.graph.synthetic import training_graph  # noqa: E402
from trinity.placers import place  # noqa: E402
from trinity.placers.annealing import anneal, start_placement  # noqa: E402
from trinity.rl import policy as policy_module  # noqa: E402
from trinity.rl import search as search_module  # noqa: E402
from trinity.rl.defaults import TRINITY_SCRATCH_BATCH  # noqa: E402
from trinity.rl.search import Search, SearchConfig  # noqa: E402

BAR_S_PER_1000 = 120.0  # Trinity at batch 8 on a 2-4k-op graph, 4 devices, these 2 cores


def _search(graph, cluster, method: str, batch: int, tmp: str, folder: str = "", **loop) -> Search:
    cfg = SearchConfig(method=method, iterations=10**6, batch=batch, checkpoint_every=10**9, **loop)
    return Search(graph, cluster, cfg, Path(tmp) / (folder or f"{method}-{batch}"), progress=False)


def draw_rows_end_to_end(log_probs, batch: int, generator):
    """How sampling drew before stop 69: one sorted search over all rows laid end to end (the baseline the
    search within each row, `trinity.rl.policy._draw_rows`, is timed against; the same draws)."""
    import torch

    rows, cols = log_probs.shape
    cdf = log_probs.detach().double().exp().cumsum(dim=1)
    cdf = cdf / cdf[:, -1:]
    offset = torch.arange(rows, dtype=cdf.dtype)
    flat = (cdf + offset[:, None]).reshape(-1).contiguous()
    u = torch.rand((batch, rows), generator=generator, dtype=cdf.dtype) + offset
    index = torch.searchsorted(flat, u.reshape(-1)).view(batch, rows) - torch.arange(rows)[None] * cols
    return index.clamp(0, cols - 1)


def _iterations(search: Search, n: int, flush: bool = True, end_to_end: bool = False) -> float:
    """Seconds per iteration over ``n`` iterations (``flush``: denormals computed as zero, as searches do;
    ``end_to_end``: sampling draws as before stop 69, `draw_rows_end_to_end`)."""
    search_module.FLUSH_DENORMALS = flush
    own = policy_module._draw_rows
    if end_to_end:
        policy_module._draw_rows = draw_rows_end_to_end
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            search.step()
            search.iteration += 1
        return (time.perf_counter() - t0) / n
    finally:
        search_module.FLUSH_DENORMALS = True
        policy_module._draw_rows = own


def per_iteration(graph, cluster, rounds: int, per_round: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        runs = {m: _search(graph, cluster, m, 8, tmp) for m in ("trinity", "hierarchical")}
        runs["trinity-own"] = _search(graph, cluster, "trinity", TRINITY_SCRATCH_BATCH, tmp)
        runs["trinity-own-denormals"] = _search(graph, cluster, "trinity", TRINITY_SCRATCH_BATCH, tmp, "denormals")
        runs["trinity-own-end-to-end"] = _search(graph, cluster, "trinity", TRINITY_SCRATCH_BATCH, tmp, "end-to-end")
        for m, s in runs.items():  # compile, warm caches
            _iterations(s, 2, flush=m != "trinity-own-denormals", end_to_end=m == "trinity-own-end-to-end")
        times = {m: [] for m in runs}
        for _ in range(rounds):  # interleaved: all see the same machine
            for m, s in runs.items():
                times[m].append(_iterations(s, per_round, flush=m != "trinity-own-denormals",
                                            end_to_end=m == "trinity-own-end-to-end"))
    med = {m: statistics.median(t) for m, t in times.items()}
    return {"trinity_s": med["trinity"], "hierarchical_s": med["hierarchical"], "trinity_own_s": med["trinity-own"],
            "trinity_own_denormals_s": med["trinity-own-denormals"],
            "trinity_own_end_to_end_s": med["trinity-own-end-to-end"],
            "ratio": med["trinity"] / med["hierarchical"], "groups": runs["trinity"].num_groups,
            "h_groups": runs["hierarchical"].num_groups}


def simulator_share(graph, cluster, batch: int, iterations: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        s = _search(graph, cluster, "trinity", batch, tmp)
        _iterations(s, 2)
        s.sim_seconds, wall = 0.0, 0.0
        t0 = time.perf_counter()
        _iterations(s, iterations)
        wall = time.perf_counter() - t0
        placements = s.last_placements
        t1 = time.perf_counter()
        for p in placements:  # the simulator alone, one thread, on the last batch's placements
            s.simulator.simulate(p, check=False)
        alone = len(placements) / (time.perf_counter() - t1)
        s.close()
    inside = batch * iterations / wall
    return {"inside": inside, "alone": alone, "share": s.sim_seconds / wall}


def time_to_quality(graph, cluster, budget_s: float) -> list[dict]:
    from trinity.sim import Simulator

    sim = Simulator(graph, cluster)
    target = sim.simulate(place("m-etf", graph, cluster).placement).step_time_us
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("trinity", "hierarchical"):
            s = _search(graph, cluster, method, TRINITY_SCRATCH_BATCH if method == "trinity" else 8, tmp)
            t0, reached = time.perf_counter(), None
            while time.perf_counter() - t0 < budget_s:
                s.step()
                s.iteration += 1
                if reached is None and s.best.step_time_us <= target:
                    reached = time.perf_counter() - t0
                    break
            rows.append({"method": f"{method} (from scratch)", "reached_s": reached,
                         "best_ratio": s.best.step_time_us / target, "iterations": s.iteration})
            s.close()
    rate = 1.0 / max(_sim_seconds(sim, graph, cluster), 1e-6)
    for start in ("single", "m-etf"):
        start, initial = start_placement(start, graph, cluster)
        r = anneal(graph, cluster, initial, budget=max(200, int(budget_s * rate)), seed=0, simulator=sim)
        hit = [sec for _, sec, step, _ in r.curve if step <= target]
        rows.append({"method": f"annealing (from {start})", "reached_s": hit[0] if hit else None,
                     "best_ratio": r.step_time_us / target, "iterations": r.calls})
    return rows


def _sim_seconds(sim, graph, cluster) -> float:
    p = place("round-robin", graph, cluster).placement
    sim.simulate(p, check=False)
    t0 = time.perf_counter()
    for _ in range(20):
        sim.simulate(p, check=False)
    return (time.perf_counter() - t0) / 20


def decode_against_m_etf(graph, cluster, rounds: int) -> dict:
    """Median seconds of one sampled learned-list episode and of one m-ETF placement, interleaved."""
    import numpy as np

    from trinity.rl import list_decoder as dec
    from trinity.rl.learned_list import ListGraph, run_episodes

    lg = ListGraph(graph, cluster)
    rng = np.random.default_rng(0)
    cs, cp = rng.normal(size=(graph.n_ops, dec.KS)), rng.normal(size=(graph.n_ops, dec.KP))
    episode = lambda seed: run_episodes(lg, cs, cp, dec.SAMPLE, [seed], learn_select=True)  # noqa: E731
    episode(0), place("m-etf", graph, cluster)  # compiled and cached before timing
    times: dict[str, list[float]] = {"episode": [], "m_etf": []}
    for r in range(rounds):
        for name, run in (("episode", lambda: episode(r)), ("m_etf", lambda: place("m-etf", graph, cluster))):
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("graphs", nargs="*", help="more graph files")
    parser.add_argument("--reference-graph", default="../shared/reference/gnmt-baechi/gnmt_forward.json.gz")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=5)
    parser.add_argument("--quality-seconds", type=float, default=60.0, help="wall budget per method (figure 3)")
    args = parser.parse_args()
    cluster = load_cluster("p100x4")
    graphs = [training_graph(3000, seed=1)]
    graphs += [load_graph(p) for p in [args.reference_graph, *args.graphs] if Path(p).exists()]

    print(f"\n1. time per iteration, batch 8, {cluster.name}, interleaved ({args.rounds} rounds of "
          f"{args.per_round} iterations, medians)")
    print(f"{'graph':<24}{'ops':>7}{'k (T/H)':>10}{'Trinity s/it':>14}{'Hier. s/it':>12}{'ratio':>8}"
          f"{'Trinity s/1000 it':>19}{f'Trinity s/it, batch {TRINITY_SCRATCH_BATCH}':>24}{'denormals kept':>16}"
          f"{'speed-up':>10}{'rows end to end':>17}{'speed-up':>10}")
    for g in graphs:
        r = per_iteration(g, cluster, args.rounds, args.per_round)
        groups = f"{r['groups']}/{r['h_groups']}"
        print(f"{g.name[:23]:<24}{g.n_ops:>7}{groups:>10}{r['trinity_s']:>14.3f}"
              f"{r['hierarchical_s']:>12.3f}{r['ratio']:>7.2f}x{1000 * r['trinity_s']:>19.0f}"
              f"{r['trinity_own_s']:>24.3f}{r['trinity_own_denormals_s']:>16.3f}"
              f"{r['trinity_own_denormals_s'] / r['trinity_own_s']:>9.2f}x{r['trinity_own_end_to_end_s']:>17.3f}"
              f"{r['trinity_own_end_to_end_s'] / r['trinity_own_s']:>9.2f}x")
    print(f"bar: ratio <= 1.0x (goal 0.6x); Trinity <= {BAR_S_PER_1000:.0f} s per 1,000 iterations on the "
          f"2-4k-op graph")

    print("\n2. simulations inside a Trinity search against the simulator alone (one thread)")
    print(f"{'graph':<24}{'batch':>6}{'sims/s inside':>15}{'sims/s alone':>14}{'ratio':>8}{'wall in simulator':>19}")
    for g in graphs[:2]:
        for batch in (8, 64):
            r = simulator_share(g, cluster, batch, 5)
            print(f"{g.name[:23]:<24}{batch:>6}{r['inside']:>15.0f}{r['alone']:>14.0f}"
                  f"{r['inside'] / r['alone']:>7.2f}x{r['share']:>18.0%}")

    print(f"\n3. wall time to reach m-ETF's step time ({args.quality_seconds:.0f} s budget per method, {cluster.name})")
    print(f"{'graph':<24}{'method':<28}{'reached m-ETF':>15}{'best / m-ETF':>14}{'iterations or calls':>21}")
    for g in graphs[:2]:
        for r in time_to_quality(g, cluster, args.quality_seconds):
            reached = f"{r['reached_s']:.1f} s" if r["reached_s"] is not None else "not in budget"
            print(f"{g.name[:23]:<24}{r['method']:<28}{reached:>15}{r['best_ratio']:>14.3f}{r['iterations']:>21}")

    print(f"\n4. learned list: one sampled episode against m-ETF's list schedule ({cluster.name}, medians of "
          f"{2 * args.rounds + 1} interleaved)")
    print(f"{'graph':<24}{'ops':>7}{'episode s':>11}{'m-ETF s':>10}{'ratio':>8}")
    for g in graphs:
        r = decode_against_m_etf(g, cluster, 2 * args.rounds + 1)
        ratio = r["episode"] / r["m_etf"]
        print(f"{g.name[:23]:<24}{g.n_ops:>7}{r['episode']:>11.3f}{r['m_etf']:>10.3f}{ratio:>7.2f}x")


if __name__ == "__main__":
    main()
