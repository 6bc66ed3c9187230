"""When each worker starts its part of a step, untraced: do the workers start a split step together?

Traced steps (`make validation-op-traces`) had one worker's first graph op start 1.5-19.5 ms after the other's,
a skew the simulator lacks (it starts every device at once). A trace's first op is not the partition's start,
though: a worker with one inter-op thread runs its ready root ops in its own order, and at batch 64 an input's
generation alone takes tens of ms. This stamps the start itself: a ``Timestamp`` op on each worker that every
root op of the placed graph there waits for (so it runs before all of them; the ``_Recv`` roots TensorFlow adds
when it partitions the graph are not held), fetched with the step, against the client's wall clock just before
the call (one machine, one clock). Placers' strategies of each exported model (``--graph``, repeatable) run on 2
pinned local workers in interleaved rounds of fresh sessions, 2 untimed steps and ``--steps`` timed ones each,
untraced, then one traced step that counts the tensors crossing between the workers (the partition graphs'
receives, `trace_transfers`, control tensors included) and those each worker receives. One row per timed step:
the step, each worker's start after the call, the crossings and each worker's receives. The summary
(``--summary-csv``) gives per model and strategy the medians, the range of the second worker's start after the
first's, and the later worker's median start against a line fitted per model through every strategy's
(crossings, later start): its intercept and its slope in us per crossing.

    make step-start   # -> reports/step_start.csv, reports/step_start_summary.csv (~10 min)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from tqdm import tqdm

from trinity.cluster import load_cluster
from trinity.errors import TrinityError, run_main
from trinity.export import load_exported
from trinity.placers import place
from trinity.runtime.runner import Runner, crossing_receives, placed_graph_def, trace_transfers
from trinity.runtime.workers import LocalWorkers

#: beside the whole step on each worker: splits from a few crossings (m-ETF, METIS) to a thousand and more
PLACERS = ("m-etf", "metis", "expert", "m-topo", "round-robin")


def stamped(graph_def, devices: list[str]):
    """A copy of ``graph_def`` with a ``Timestamp`` op ``start<k>`` on each device that every node placed there
    without inputs waits for: it runs before any op of the graph on that worker."""
    import tensorflow as tf

    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    for k, device in enumerate(devices):
        for node in out.node:
            if node.device == device and not node.input:
                node.input.append(f"^start{k}")
        out.node.add(name=f"start{k}", op="Timestamp", device=device)
    return out


def receives(run_metadata, devices: list[str]) -> list[int]:
    """How many tensors each of ``devices`` receives from another in a step (its partition graph's ``_Recv``
    and ``_HostRecv`` nodes from another of ``devices``)."""
    counts = [0] * len(devices)
    for _, dst in crossing_receives(run_metadata, devices):
        counts[devices.index(dst)] += 1
    return counts


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model and strategy: timed steps, crossings, medians of the step and of each worker's start, the range
    of worker 1's start after worker 0's, the later worker's median start, and the line fitted per model through
    (crossings, later start) of its strategies (intercept ms, slope us per crossing)."""
    table = table.assign(skew_ms=table["start1_ms"] - table["start0_ms"])
    out = table.groupby(["graph", "strategy"], sort=False).agg(
        steps=("step_ms", "size"), crossings=("crossings", "median"), received0=("received0", "median"),
        received1=("received1", "median"), step_ms=("step_ms", "median"),
        start0_ms=("start0_ms", "median"), start1_ms=("start1_ms", "median"), skew_min_ms=("skew_ms", "min"),
        skew_median_ms=("skew_ms", "median"), skew_max_ms=("skew_ms", "max")).reset_index()
    out["later_start_ms"] = out[["start0_ms", "start1_ms"]].max(axis=1)
    for _, rows in out.groupby("graph", sort=False):
        slope, intercept = np.polyfit(rows["crossings"], rows["later_start_ms"], 1) if len(rows) > 1 else (np.nan,) * 2
        out.loc[rows.index, "fit_intercept_ms"], out.loc[rows.index, "fit_us_per_crossing"] = intercept, slope * 1e3
    return out


def main(argv=None) -> None:
    import tensorflow as tf

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", action="append", help="an exported model (repeatable; default: InceptionV3's export)")
    p.add_argument("--cluster", default="p100x2", help="the 2-device cluster the placers place on")
    p.add_argument("--placers", nargs="+", default=list(PLACERS))
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of fresh sessions")
    p.add_argument("--steps", type=int, default=3, help="timed steps per session (after 2 untimed)")
    p.add_argument("--csv", default="reports/step_start.csv")
    p.add_argument("--summary-csv", default="reports/step_start_summary.csv")
    args = p.parse_args(argv)
    for field, value in (("--rounds", args.rounds), ("--steps", args.steps)):
        if value < 1:
            raise TrinityError(f"must be 1 or more, got {value}", field=field)
    cluster = load_cluster(args.cluster)
    if cluster.n_devices != 2:  # the placers' devices are the workers
        raise TrinityError(f"has {cluster.n_devices} devices for 2 workers", source=args.cluster, field="--cluster")
    models = [load_exported(path, "--graph") for path in args.graph or ["data/inception_v3/export/graph.json.gz"]]
    rows = []
    with LocalWorkers(2, threads=1) as workers:
        runs = []
        for graph, graph_def in models:
            n = graph.n_ops
            strategies = {"worker 0": np.zeros(n, np.int64), "worker 1": np.ones(n, np.int64),
                          **{name: place(name, graph, cluster, seed=0).placement for name in args.placers}}
            runner = Runner(graph, graph_def, workers)
            runs += [(graph, runner, name, runner.check(placement, name)) for name, placement in strategies.items()]
        starts = ["start0:0", "start1:0"]
        for r in tqdm(range(args.rounds), desc="rounds", unit="round"):
            for graph, runner, name, placement in (runs if r % 2 == 0 else runs[::-1]):
                tf_graph = tf.Graph()
                with tf_graph.as_default():
                    placed = placed_graph_def(runner.graph_def, graph, placement, workers.devices)
                    tf.compat.v1.import_graph_def(stamped(placed, workers.devices), name="")
                with tf.compat.v1.Session(workers.target, graph=tf_graph, config=runner.session_config()) as sess:
                    runner.session_run(sess, graph.meta["init_op"], f"initialising {name}")
                    for _ in range(2):
                        runner.session_run(sess, runner.fetches + starts, f"a step of {name}")
                    timed = []
                    for _ in range(args.steps):
                        call = time.time()
                        out, _ = runner.session_run(sess, runner.fetches + starts, f"a step of {name}")
                        timed.append({"graph": f"{graph.name} b{graph.meta.get('batch_size', '?')}",
                                      "strategy": name, "round": r, "step_ms": (time.time() - call) * 1e3,
                                      "start0_ms": (out[-2] - call) * 1e3, "start1_ms": (out[-1] - call) * 1e3})
                    _, traced = runner.session_run(sess, runner.fetches, f"a traced step of {name}", trace=True)
                    crossings = len(trace_transfers(traced, workers.devices)[0])
                    received = receives(traced, workers.devices)
                    rows += [{**row, "crossings": crossings, "received0": received[0], "received1": received[1]}
                             for row in timed]
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    table = summary(table)
    table.to_csv(args.summary_csv, index=False)
    pd.set_option("display.width", 250)
    print(table.round(2).to_string(index=False))
    print(f"-> {args.csv}, {args.summary_csv}")


if __name__ == "__main__":
    run_main(main)
