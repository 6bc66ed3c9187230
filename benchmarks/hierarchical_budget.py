"""Hierarchical from scratch at Trinity's iteration budget, on the default experiment's op-placement cases.

The default experiment gives Trinity from scratch 300 iterations and Hierarchical 100 (README's *Budget and
racing*), so "Trinity below Hierarchical" there compares unequal budgets. This runs every Hierarchical job
of the experiment again, as the `search` and `search_regime` stages do (`pipeline/search.py`, the composed
params.yaml, the regime's reward tolerances), with ``--iterations`` instead, into a work folder outside
`results/` and with its own MLflow store; a job whose metrics are already there is not run again (an
interrupted run resumes). Writes one row per case and seed: Hierarchical's step time and busiest share at
that budget, beside the committed Hierarchical (100 iterations) and Trinity from scratch of the same seed.

    make search-hierarchical-budget      # -> reports/search_hierarchical_budget300.csv (~15 min here)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from trinity.progress import progress

JOB_TIMEOUT_S = 3600  # one search job; they take a minute or two here
HYDRA = ["-cd", ".", "-cn", "params", "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]


def jobs(params: dict) -> list[dict]:
    """Every Hierarchical-from-scratch job of the experiment: model, cluster, seed, where its results go
    (under the work folder and under results/) and its extra overrides."""
    run, out = params["run"], []
    if "hierarchical" in run["searches"]:
        out += [{"model": m, "cluster": c, "seed": s, "sub": "", "overrides": []}
                for m in run["models"] for c in run["clusters"] for s in run["seeds"]]
    regime = run.get("regime") or {}
    if "hierarchical" in regime.get("searches", []):
        tolerances = [f"reward.{k}={v}" for k, v in regime.get("reward", {}).items()]
        out += [{"model": m, "cluster": c, "seed": s, "sub": "regime", "overrides": tolerances}
                for m in regime["models"] for c in regime["clusters"] for s in regime["seeds"]]
    return out


def metrics(folder: Path, job: dict, method: str) -> dict:
    path = folder / job["sub"] / "search" / job["model"] / f"{job['cluster']}-{method}-s{job['seed']}.metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--work", default="data/.hierarchical_budget", help="the runs' results and MLflow store")
    p.add_argument("--csv", default="reports/search_hierarchical_budget300.csv")
    args = p.parse_args()
    if args.iterations < 1:
        p.error(f"--iterations must be at least 1, got {args.iterations}")
    params = yaml.safe_load(Path("params.yaml").read_text())
    work, committed = Path(args.work), Path(params["paths"]["results"])
    rows = []
    for job in progress(jobs(params), desc="hierarchical"):
        if not metrics(work / "results", job, "hierarchical"):
            cmd = [sys.executable, "pipeline/search.py", *HYDRA, f"paths.runs={work / 'runs'}",
                   f"paths.results={work / 'results' / job['sub']}", f"job.model={job['model']}",
                   f"job.cluster={job['cluster']}", "job.method=hierarchical", f"job.seed={job['seed']}",
                   f"methods.hierarchical.search.iterations={args.iterations}", *job["overrides"]]
            what = f"hierarchical on {job['model']} {job['cluster']} seed {job['seed']}"
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # the child is killed; the next run resumes at this job
                sys.exit(f"error: {what}: no result within {JOB_TIMEOUT_S} s")
            if done.returncode:  # the stage script's own one-line error, not a traceback of this one
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                sys.exit(f"error: {what}: {last}")
        now, before = metrics(work / "results", job, "hierarchical"), metrics(committed, job, "hierarchical")
        trinity = metrics(committed, job, "trinity")
        rows.append({"case": f"{job['model']} {job['cluster']}", "seed": job["seed"],
                     "iterations": now["iterations"], "hierarchical_ms": now["step_time_ms"],
                     "hierarchical_busiest_share": now["busiest_share"],
                     "hierarchical_committed_ms": before.get("step_time_ms"),
                     "hierarchical_committed_iterations": before.get("iterations"),
                     "trinity_ms": trinity.get("step_time_ms"), "trinity_iterations": trinity.get("iterations")})
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    means = table.groupby("case", sort=False)[["hierarchical_ms", "hierarchical_committed_ms", "trinity_ms"]]
    summary = means.mean().join(table.groupby("case", sort=False)["hierarchical_ms"].std().rename("hierarchical_std"))
    summary["trinity_vs_hierarchical_pct"] = 100 * (summary["trinity_ms"] / summary["hierarchical_ms"] - 1)
    print(summary.round(3).to_string())
    print(f"-> {args.csv}")


if __name__ == "__main__":
    main()
