"""When each worker starts its part of a step, untraced: do the workers start a split step together?

Traced steps (`make validation-op-traces`) had one worker's first graph op start 1.5-19.5 ms after the other's,
a skew the simulator lacks (it starts every device at once). A trace's first op is not the partition's start,
though: a worker with one inter-op thread runs its ready root ops in its own order, and at batch 64 an input's
generation alone takes tens of ms. This stamps the start itself: a ``Timestamp`` op on each worker that every
root op placed there waits for (so it runs first), fetched with the step, against the client's wall clock just
before the call (one machine, one clock). Placers' strategies of each exported model (``--graph``, repeatable)
run on 2 pinned local workers in interleaved rounds of fresh sessions, 2 untimed steps and ``--steps`` timed ones
each, untraced. One row per timed step: the step and each worker's start after the call; the printed summary
gives per model and strategy the medians and the range of the second worker's start after the first's.

    make step-start   # -> reports/step_start.csv (~7 min)
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
from trinity.runtime.runner import Runner, placed_graph_def
from trinity.runtime.workers import LocalWorkers

#: the whole step on each worker, a split with few crossings, a balanced cut and a chain over both workers
PLACERS = ("m-etf", "metis", "m-topo")


def stamped(graph_def, devices: list[str]):
    """A copy of ``graph_def`` with a ``Timestamp`` op ``start<k>`` on each device that every node placed there
    without inputs waits for: the first op each worker runs in a step."""
    import tensorflow as tf

    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    for k, device in enumerate(devices):
        for node in out.node:
            if node.device == device and not node.input:
                node.input.append(f"^start{k}")
        out.node.add(name=f"start{k}", op="Timestamp", device=device)
    return out


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model and strategy: timed steps, medians of the step and of each worker's start, and the range of
    worker 1's start after worker 0's."""
    table = table.assign(skew_ms=table["start1_ms"] - table["start0_ms"])
    return table.groupby(["graph", "strategy"], sort=False).agg(
        steps=("step_ms", "size"), step_ms=("step_ms", "median"), start0_ms=("start0_ms", "median"),
        start1_ms=("start1_ms", "median"), skew_min_ms=("skew_ms", "min"), skew_median_ms=("skew_ms", "median"),
        skew_max_ms=("skew_ms", "max")).reset_index()


def main(argv=None) -> None:
    import tensorflow as tf

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", action="append", help="an exported model (repeatable; default: InceptionV3's export)")
    p.add_argument("--cluster", default="p100x2", help="the 2-device cluster the placers place on")
    p.add_argument("--placers", nargs="+", default=list(PLACERS))
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of fresh sessions")
    p.add_argument("--steps", type=int, default=3, help="timed steps per session (after 2 untimed)")
    p.add_argument("--csv", default="reports/step_start.csv")
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
                    runner._run(sess, graph.meta["init_op"], f"initialising {name}")
                    for _ in range(2):
                        runner._run(sess, runner.fetches + starts, f"a step of {name}")
                    for _ in range(args.steps):
                        call = time.time()
                        out, _ = runner._run(sess, runner.fetches + starts, f"a step of {name}")
                        rows.append({"graph": f"{graph.name} b{graph.meta.get('batch_size', '?')}", "strategy": name,
                                     "round": r, "step_ms": (time.time() - call) * 1e3,
                                     "start0_ms": (out[-2] - call) * 1e3, "start1_ms": (out[-1] - call) * 1e3})
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    print(summary(table).round(2).to_string(index=False))
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
