"""Where a split strategy's real step goes: each worker's ops in traced real steps beside the simulator's schedule.

Issue 24's InceptionV3 misses its rank bar on held-out split strategies, and the simulator's terms fitted so far
do not find why. This runs committed strategies of a validation again on 2 local TensorFlow workers (pinned, as
`validate` runs them), keeps every op of each traced step (`Runner.measure(keep_ops=True)`), and sets each
worker's ops beside the simulator's schedule of the same strategy, on the part's calibrated graph and cluster with
the op times anchored to the whole step on one worker as measured in this run (as `validate` anchors them). One
row per strategy, repeat and worker: the timed steps (min, median, max), the worker's op time in the traced step
against the simulator's (`busy`), the median of real over anchored profiled time of its large ops, the span from
the step's first op to the end of the worker's last graph op against the simulator's, and how alike the order it ran its ops in
is to the simulator's (rank correlation of start times), and when its first graph op started (the workers do not
start a step together). A second table (``--sends-csv``) has one row per strategy and repeat: the tensors with
bytes that crossed, and how many of them were held (their send started more than 1 ms after their producer ended)
and for how long, in the real step, in the simulator's (``sim``), in the simulator's with ``send_on_request``
(``request``: the sender takes the receiver's request up after its own work, `trinity.cluster`) and with it and
``sends_last`` (``both``: the sender serialises a tensor after all the work it has ready); those held past the
step's start-up (``--startup-ms``) apart, and the share of the real held sends that started while their sender
ran no graph op. Nothing is fitted. Needs a quiet machine (2 cores, the workers) and the validation's exported GraphDef
(`dvc repro export@inception_v3`).

    make validation-op-traces   # -> reports/validation_op_traces.csv, reports/validation_send_delays.csv (3 min)
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from trinity.cluster import load_cluster
from trinity.errors import TrinityError, run_main
from trinity.graph import load_graph
from trinity.graph.ir import OpGraph
from trinity.placement import Strategy
from trinity.runtime.validate import anchored_to_rounds
from trinity.sim import Simulator

#: the whole step on one worker (first: it anchors the op times), then InceptionV3 held-out splits the committed
#: validation simulated 4.0-7.1% fast (the next two) and within 1.8% (the last three)
STRATEGIES = ("p100x2-single", "p100x2-annealing-long-s2", "p100x2-annealing-s3", "p100x2-annealing-s0",
              "p100x2-trinity-s3", "p100x2-hierarchical-s2")
#: ops profiled at least this long (us) count in the median ratio of real over profiled time
LARGE_OP_US = 200.0
#: a send that starts this long (us) after its producer ended was held
HELD_US = 1000.0


def worker_figures(records, graph: OpGraph, times: np.ndarray, placement: np.ndarray, sim,
                   large_op_us: float = LARGE_OP_US) -> list[dict]:
    """Per worker of a traced step (``records``: `op_records`' (task, node, start, duration)) beside the
    simulator's step of the same placement (``sim``: its ``busy_us``, ``op_start`` and ``op_end``): the
    worker's graph ops' count and time against the simulator's busy time, the median of real over profiled
    time (``times``: us per op on its device) of ops profiled at ``large_op_us`` or more, the span from the
    step's first op to the end of the worker's last graph op against the simulator's, and the rank
    correlation of their real and simulated start times (the order the worker ran them in). Nodes of no graph
    op (sends, receives, RecvTensor) count in ``other_ms`` alone."""
    index = {op.name: i for i, op in enumerate(graph.ops)}
    rows = []
    for task in range(len(sim.busy_us)):
        mine = [(index.get(node), start, dur) for t, node, start, dur in records if t == task]
        ops = [(i, start, dur) for i, start, dur in mine if i is not None and placement[i] == task]
        ratios = [dur / times[i] for i, _, dur in ops if times[i] >= large_op_us]
        ran = [i for i, _, _ in ops]
        order = (pd.Series([s for _, s, _ in ops]).corr(pd.Series(sim.op_start[ran]), method="spearman")
                 if len(ops) > 1 else float("nan"))
        rows.append({"worker": task, "ops": len(ops), "busy_ms": sum(d for _, _, d in ops) / 1e3,
                     "sim_busy_ms": float(sim.busy_us[task]) / 1e3,
                     "large_op_ratio": float(np.median(ratios)) if ratios else float("nan"),
                     "span_ms": max((s + d for _, s, d in ops), default=0.0) / 1e3,
                     "sim_span_ms": float(sim.op_end[ran].max()) / 1e3 if ran else 0.0,
                     "order_rank": float(order), "other_ms": sum(d for i, _, d in mine if i is None) / 1e3,
                     "first_op_ms": min((s for _, s, _ in ops), default=float("nan")) / 1e3})
    return rows


def send_figures(transfers, records, graph: OpGraph, sims: dict, startup_us: float, held_us: float = HELD_US) -> dict:
    """One traced step's tensors with bytes that crossed (``transfers``: `transfer_records`' rows; ``records``:
    `op_records`'), each with the time from its producer's end to its send's start: how many waited more than
    ``held_us`` (held) and for how long in all (ms), in the real step and in each simulated one (``sims``: name ->
    a step with ``transfers`` and ``op_end``, for the same tensors); those whose producer ended at ``startup_us``
    or later apart (``_late``); and the share of the real held sends that started while their sender ran no
    graph op (``real_held_sender_idle``). Tensors a simulated step did not send are left out of every count."""
    index = {op.name: i for i, op in enumerate(graph.ops)}
    ran = {}  # graph op -> (task, start, end)
    for task, node, start, dur in records:
        if node in index:
            ran[index[node]] = (task, start, start + dur)
    simulated = {name: {(int(u), int(k), int(dst)): start - sim.op_end[int(u)]
                        for u, k, _, dst, nbytes, start, _ in sim.transfers if nbytes > 0} for name, sim in sims.items()}
    sends = [(index[producer], output, src, dst, start) for producer, output, src, dst, nbytes, start, _ in transfers
             if nbytes > 0 and producer in index and ran.get(index[producer], (None,))[0] == src]
    sends = [s for s in sends if all(s[:2] + s[3:4] in delays for delays in simulated.values())]
    row = {"sends": len(sends)}
    late = [ran[u][2] >= startup_us for u, *_ in sends]
    delays = {"real": [start - ran[u][2] for u, _, _, _, start in sends],
              **{name: [d[(u, k, dst)] for u, k, _, dst, _ in sends] for name, d in simulated.items()}}
    for name, delay in delays.items():
        held = np.array(delay) > held_us
        row[f"{name}_held"] = int(held.sum())
        row[f"{name}_held_ms"] = float(np.array(delay)[held].sum()) / 1e3 if held.any() else 0.0
        row[f"{name}_held_late"] = int((held & np.array(late, bool)).sum())
    held_sends = [(src, start) for (u, _, src, _, start), d in zip(sends, delays["real"]) if d > held_us]
    idle = [not any(task == src and begin <= start < end for task, begin, end in ran.values())
            for src, start in held_sends]
    row["real_held_sender_idle"] = float(np.mean(idle)) if idle else float("nan")
    return row


def main(argv=None) -> None:
    from trinity.runtime.runner import Runner
    from trinity.runtime.workers import LocalWorkers

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("part", nargs="?", default="results/validate/inception_v3",
                   help="a validation part (its results.csv, strategies/ and calibration/)")
    p.add_argument("--graphdef", default="data/inception_v3/export/graph.graphdef.pb",
                   help="the exported GraphDef of the part's model")
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES), help="the part's strategies, one worker's first")
    p.add_argument("--repeats", type=int, default=2, help="rounds over the strategies")
    p.add_argument("--steps", type=int, default=3, help="timed steps per run, before its traced one")
    p.add_argument("--csv", default="reports/validation_op_traces.csv")
    p.add_argument("--sends-csv", default="reports/validation_send_delays.csv")
    p.add_argument("--startup-ms", type=float, default=100.0,
                   help="sends whose producer ended this long after the step's first op or later count as late")
    args = p.parse_args(argv)
    part, graphdef = Path(args.part), Path(args.graphdef)
    for path, field in ((part / "calibration" / "graph.json.gz", "part"), (graphdef, "--graphdef")):
        if not path.is_file():
            raise TrinityError("not found (a validation part's calibrated graph; the GraphDef: `dvc repro "
                               "export@inception_v3`)", source=str(path), field=field)
    for field, value in (("--repeats", args.repeats), ("--steps", args.steps)):
        if value < 1:
            raise TrinityError(f"must be 1 or more, got {value}", field=field)
    if not args.startup_ms >= 0:
        raise TrinityError(f"must be 0 or more, got {args.startup_ms}", field="--startup-ms")
    graph = load_graph(part / "calibration" / "graph.json.gz")
    cluster = load_cluster(part / "calibration" / "cluster.yaml")
    placements = {name: Strategy.load(part / "strategies" / f"{name}.json").to_indices(graph)
                  for name in args.strategies}
    measured = {}
    with LocalWorkers(2, threads=1) as workers:
        runner = Runner(graph, graphdef.read_bytes(), workers, cluster=cluster)
        for repeat in range(args.repeats):
            for name, placement in placements.items():
                m = runner.measure(placement, name, steps=args.steps, warmup=2, keep_ops=True)
                measured[name, repeat] = m
                print(f"{name} (repeat {repeat}): steps {[round(s / 1e3, 1) for s in m.step_us]} ms", flush=True)
    first = args.strategies[0]
    one_worker = np.median([m.median_us for (name, _), m in measured.items() if name == first])
    anchored, scale = anchored_to_rounds(graph, cluster, placements[first], float(one_worker))
    simulator = Simulator(anchored, cluster)
    held = {"request": simulator.on(replace(cluster, send_on_request=True)),
            "both": simulator.on(replace(cluster, send_on_request=True, sends_last=True))}
    times = simulator.times  # the anchored op times per device, as the simulator reads them
    rows, send_rows = [], []
    for (name, repeat), m in measured.items():
        placement = placements[name]
        sims = {"sim": simulator.simulate(placement, trace=True),
                **{term: other.simulate(placement, trace=True) for term, other in held.items()}}
        sim = sims["sim"]
        device_times = times[np.arange(graph.n_ops), placement]
        steps = {"strategy": name, "repeat": repeat, "step_min_ms": min(m.step_us) / 1e3,
                 "step_median_ms": m.median_us / 1e3, "step_max_ms": max(m.step_us) / 1e3,
                 "sim_step_ms": sim.step_time_us / 1e3}
        for figures in worker_figures(m.op_trace, graph, device_times, placement, sim):
            rows.append({**steps, "anchor_scale": scale, **figures})
        send_rows.append({**steps, **{f"{term}_step_ms": sims[term].step_time_us / 1e3 for term in held},
                          **send_figures(m.transfer_trace, m.op_trace, graph, sims, args.startup_ms * 1e3)})
    pd.set_option("display.width", 250)
    for table, path in ((pd.DataFrame(rows), args.csv), (pd.DataFrame(send_rows), args.sends_csv)):
        table.to_csv(path, index=False)
        print(table.round(3).to_string(index=False))
        print(f"-> {path}")


if __name__ == "__main__":
    run_main(main)
