"""Does a measurement see another job on its cores? `trinity.machine`'s shares against a known disturbance.

Every real measurement records the share of the cores' time that processes outside the job took
(``other_cpu``) and that other virtual machines took (``steal``). This checks the first against a disturbance
of known size: one strategy of an exported model runs on 2 pinned local workers in interleaved runs, quiet
and with a busy loop pinned to the last worker's core, started outside the job (re-parented, as another
user's process would be), so the job's own CPU time does not hide it. A busy loop that had its core to
itself would read 1 / cores; sharing it with a worker, less. One row per run: the condition, the step
times' median, the shares and the load average before and after; the printed summary gives per condition
the median step and the mean shares, and the disturbed step over the quiet one.

    make interference-check   # -> reports/interference_check.csv (~3 min)
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

import pandas as pd
from tqdm import tqdm

from trinity.errors import TrinityError, run_main
from trinity.runtime.runner import Runner, placed_on_two_workers
from trinity.runtime.workers import LocalWorkers

BUSY_LOOP = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def start_outside_job(core: int) -> int:
    """Start a busy loop pinned to ``core`` whose parent exits at once (so it is no process of this job);
    its pid."""
    shell = f"{sys.executable} -c '{BUSY_LOOP}' {core} >/dev/null 2>&1 & echo $!"
    return int(subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=30, check=True).stdout)


def stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per condition: runs, median step (ms), mean shares; and each condition's step over the quiet one's."""
    out = table.groupby("condition", sort=False).agg(runs=("run", "size"), step_ms=("step_ms", "median"),
                                                      other_cpu=("other_cpu", "mean"), steal=("steal", "mean"))
    out["step_vs_quiet"] = out["step_ms"] / out.loc["quiet", "step_ms"]
    return out.reset_index()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default="data/inception_v3/export/graph.json.gz",
                   help="an exported model (its GraphDef beside it: `dvc repro export@inception_v3`)")
    p.add_argument("--cluster", default="p100x2", help="the 2-device cluster the placer places on")
    p.add_argument("--placer", default="metis", help="the strategy measured: a balanced split keeps both cores busy")
    p.add_argument("--runs", type=int, default=4, help="runs per condition, interleaved")
    p.add_argument("--steps", type=int, default=3, help="timed steps per run (after 2 untimed)")
    p.add_argument("--csv", default="reports/interference_check.csv")
    args = p.parse_args(argv)
    for field, value in (("--runs", args.runs), ("--steps", args.steps)):
        if value < 1:
            raise TrinityError(f"must be 1 or more, got {value}", field=field)
    graph, graph_def, placed = placed_on_two_workers(args.graph, args.cluster, [args.placer])
    placement = placed[args.placer]
    core = sorted(os.sched_getaffinity(0))[-1]  # the last worker's (workers are pinned in order)
    rows = []
    with LocalWorkers(2, threads=1) as workers:
        runner = Runner(graph, graph_def, workers)
        with tqdm(total=2 * args.runs, desc="runs", unit="run") as bar:
            for run in range(args.runs):
                for condition in (("quiet", "busy loop") if run % 2 == 0 else ("busy loop", "quiet")):
                    loop = start_outside_job(core) if condition == "busy loop" else None
                    try:
                        m = runner.measure(placement, args.placer, steps=args.steps, warmup=2, trace=False)
                    finally:
                        if loop is not None:
                            stop(loop)
                    rows.append({"condition": condition, "run": run, "step_ms": m.median_us / 1e3,
                                 "other_cpu": m.other_cpu[0], "steal": m.steal[0], "load_before": m.load[0],
                                 "load_after": m.load[1]})
                    bar.update()
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    print(table.round(4).to_string(index=False))
    print(summary(table).round(4).to_string(index=False))
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
