"""Room left per op-placement case of an experiment: `make bounds` (writes results/bounds.csv).

For every model x cluster the composed ``params.yaml`` searches (``run`` and ``run.regime``): the lower bound
on any placement's simulated step time that counts communication (`trinity.bound.step_time_bound`, with
its time limit, node budget and the segment MILPs' state), the compute-only bound, an incumbent (the
fastest fitting placement of the cheap placers, simulated here: an upper bound on the optimum) and the
best step time any method reached in ``results/`` (fitting jobs' metrics). ``room_pct`` is how far that
best result sits above the bound, and ``room_5pct`` whether the bound leaves 5% or more: where it does
not, nothing can be 3% below the best placer by more than the table shows. The report's evaluation table
reads this file (`trinity.report.evaluation`).
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402

from trinity.bound import incumbent, step_time_bound  # noqa: E402
from trinity.cluster import cluster_from_dict  # noqa: E402
from trinity.fileio import atomic_write_bytes, read_yaml  # noqa: E402
from trinity.graph import load_graph  # noqa: E402


def cases(params: dict) -> list[tuple[str, str]]:
    run = params["run"]
    out = []
    for part in (run, run.get("regime") or {}):
        out += [(m, c) for m in part.get("models") or [] for c in part.get("clusters") or []]
    return list(dict.fromkeys(out))


def best_known(results: Path, model: str, cluster: str) -> tuple[float | None, str]:
    """The fastest fitting step time (ms) any job of the case reached, and its method."""
    best, method = None, ""
    for folder in (results / "search" / model, results / "regime" / "search" / model):
        for path in folder.glob(f"{cluster}-*.metrics.json"):
            job = json.loads(path.read_text())
            if job.get("fits") and (best is None or job["step_time_ms"] < best):
                best, method = job["step_time_ms"], job["method"]
    return best, method


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data")
    parser.add_argument("--results", default="results")
    parser.add_argument("--time-limit", type=float, default=60.0, help="MILP seconds per case")
    parser.add_argument("--nodes", type=int, default=40, help="ops per segment MILP")
    parser.add_argument("--csv", default="results/bounds.csv")
    args = parser.parse_args()
    params = read_yaml(args.params)
    rows = []
    for model, cluster_name in cases(params):
        graph = load_graph(Path(args.data) / model / "profile" / "graph.json.gz")
        cluster = cluster_from_dict(params["clusters"][cluster_name], args.params)
        b = step_time_bound(graph, cluster, time_limit_s=args.time_limit, max_segment_ops=args.nodes,
                            show_progress=True)
        inc = incumbent(graph, cluster)
        known, method = best_known(Path(args.results), model, cluster_name)
        known = known if known is not None else inc.step_time_us / 1e3
        row = {"model": model, "cluster": cluster_name, "bound_ms": round(b.bound_us / 1e3, 4),
               "compute_only_ms": round(b.compute_only_us / 1e3, 4), "chain_ms": round(b.chain_us / 1e3, 4),
               "incumbent_ms": round(inc.step_time_us / 1e3, 4), "incumbent": inc.method,
               "incumbent_gap_pct": round(100 * (inc.step_time_us / b.bound_us - 1), 2),
               "best_known_ms": round(known, 4), "best_known": method or inc.method,
               "room_pct": round(100 * (known * 1e3 / b.bound_us - 1), 2),
               "room_5pct": bool(known * 1e3 >= 1.05 * b.bound_us),
               "segments": len(b.segments), "segments_solved": b.solved, "segments_optimal": b.optimal,
               "worst_milp_gap_pct": round(100 * b.milp_gap, 2), "time_limit_s": args.time_limit,
               "nodes": args.nodes, "seconds": round(b.seconds, 1)}
        print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        rows.append(row)
    atomic_write_bytes(args.csv, pd.DataFrame(rows).to_csv(index=False).encode())
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
