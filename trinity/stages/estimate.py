"""Print how long the composed experiment (its params.yaml) will take, then ask before it starts.

    python -m trinity.stages.estimate [--experiment NAME] [--yes | --print-only] [--cache runs/estimate] [--out FILE]

The experiment is the one `make params EXPERIMENT=NAME` composed into its folder (``experiments/NAME/``; the
default experiment's is the checkout root); its data paths are read from that folder, as its stages read them.
`make repro EXPERIMENT=paper` runs it first (`YES=1` answers for you). The figures come from costs
measured here (trinity.estimate): the wall time on this machine one job at a time (as `dvc repro` runs),
on this machine's SLURM (one job per CPU), per SLURM job, and on a cluster running the launcher's
``array_parallelism`` jobs at once. Without a terminal to ask and without ``--yes`` it starts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

from omegaconf import OmegaConf

from trinity.errors import TrinityError
from trinity.estimate import Row, estimate, job_durations, makespan
from trinity.fileio import write_json
from trinity.stages.config import DEFAULT_EXPERIMENT, experiment_params

LAUNCHER = Path(__file__).resolve().parents[2] / "conf" / "hydra" / "launcher" / "submitit_slurm_trinity.yaml"


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.1f} min" if seconds >= 90 \
        else f"{seconds:.1f} s"


def summary(rows: list[Row], cluster_slots: int, local_slots: int) -> dict:
    durations = job_durations(rows)
    longest = max(rows, key=lambda r: r.cost.job_s)
    return {"jobs": len(durations), "sequential_s": sum(durations),
            "local_slurm_s": makespan(durations, local_slots), "local_slots": local_slots,
            "cluster_s": makespan(durations, cluster_slots), "cluster_slots": cluster_slots,
            "median_job_s": sorted(durations)[len(durations) // 2], "longest_job_s": longest.cost.job_s,
            "longest_job": f"{longest.method} on {longest.model}, {longest.cluster}"}


def report(name: str, rows: list[Row], s: dict) -> str:
    by_method: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_method[row.method].append(row)
    lines = [f"Estimate of experiment {name!r} ({s['jobs']} placement and search jobs, costs measured here):",
             f"  {'method':<18} {'jobs':>5} {'per job (median)':>17} {'per iteration/call':>19} {'all jobs':>10}"]
    for method, group in by_method.items():
        jobs = sum(r.jobs for r in group)
        per_job = sorted(r.cost.job_s for r in group)[len(group) // 2]
        unit = sorted(r.cost.per_unit_s for r in group)[len(group) // 2]
        lines.append(f"  {method:<18} {jobs:>5} {hours(per_job):>17} "
                     f"{(f'{unit * 1e3:.2f} ms' if unit else '-'):>19} {hours(sum(job_durations(group))):>10}")
    lines += [f"  this machine, one job at a time (dvc repro): {hours(s['sequential_s'])}",
              f"  this machine's SLURM, {s['local_slots']} jobs at once: {hours(s['local_slurm_s'])}",
              f"  per SLURM job: median {hours(s['median_job_s'])}, longest {hours(s['longest_job_s'])} "
              f"({s['longest_job']})",
              f"  a SLURM cluster of such nodes, {s['cluster_slots']} jobs at once (array_parallelism): "
              f"{hours(s['cluster_s'])}",
              "  not included: export, profile, embed, validate and the pipeline- and data-parallel stages"]
    return "\n".join(lines)


def load_experiment(name: str):
    """The composed config of experiment ``name``, its relative paths (data/, results/, ...) rebased onto its
    folder, so the estimate finds the graphs its stages made."""
    folder, cfg = experiment_params(name)
    for key, value in (cfg.get("paths") or {}).items():
        if value is not None and not Path(value).is_absolute():
            cfg.paths[key] = str(folder / value)
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trinity.stages.estimate", description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="whose params.yaml (default: %(default)s)")
    parser.add_argument("--yes", action="store_true", help="start without asking")
    parser.add_argument("--print-only", action="store_true", help="print the estimate and stop")
    parser.add_argument("--cache", default="runs/estimate", help="where probes and graphs are cached")
    parser.add_argument("--out", help="also write the estimate as JSON here")
    parser.add_argument("--local-slots", type=int, default=os.cpu_count() or 1,
                        help="jobs at once on this machine's SLURM (default: its CPUs)")
    args = parser.parse_args(argv)
    try:
        cfg = load_experiment(args.experiment)
        rows = estimate(cfg, args.cache)
    except TrinityError as exc:
        print(f"trinity estimate: error: {exc}", file=sys.stderr)
        return 2
    slots = int(OmegaConf.load(LAUNCHER).get("array_parallelism", 1))
    s = summary(rows, slots, args.local_slots)
    print(report(str(cfg.run.name), rows, s))
    if args.out:
        write_json(args.out, {"experiment": str(cfg.run.name), **s,
                              "rows": [{"stage": r.stage, "model": r.model, "cluster": r.cluster, "method": r.method,
                                        "jobs": r.jobs, "job_s": r.cost.job_s, "setup_s": r.cost.setup_s,
                                        "per_unit_s": r.cost.per_unit_s, "units": r.cost.units} for r in rows]})
    if args.print_only or args.yes:
        return 0
    if not sys.stdin.isatty():
        print("trinity estimate: not started: confirm with YES=1 (make) or --yes", file=sys.stderr)
        return 1
    answer = input(f"Start it ({hours(s['sequential_s'])} here)? [y/N] ").strip().lower()
    return 0 if answer in ("y", "yes") else 1


if __name__ == "__main__":
    sys.exit(main())
