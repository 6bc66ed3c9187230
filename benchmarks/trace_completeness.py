"""How complete a traced step's record of what crossed between the workers is, and what pooling traced steps gives.

Validation reads the bytes a strategy sends between workers from a traced step's ``RecvTensor`` records, and a
traced step now and then loses every record of one worker (issue 24: InceptionV3's annealing s3 once recorded
25.3 of 45.6 MB in both of its traced steps). The partition graphs say which tensors should have a record (their
``_Recv`` nodes between workers, `trace_transfers`), so each traced step's loss can be counted. This runs placers'
strategies of one exported model on 2 local workers (pinned, as `validate` runs them), ``--traces`` traced steps
each, one session per step as validation's rounds open one, and writes one row per traced step: the tensors the
partition graphs send between the workers, how many the step recorded, its bytes; and, over the steps so far, the
bytes of the step with the most records (the rule before: the more complete of the first two was kept) and of all
steps pooled (`Measurement.add_trace`, today's rule), beside the simulator's bytes (the graph's tensors, as
validation compares them). Nothing is fitted and nothing is timed; the printed summary gives per strategy the
share of incomplete traced steps and both rules after two traced steps.

    make trace-completeness   # -> reports/trace_completeness.csv (~6 min)
"""

from __future__ import annotations

import argparse

import pandas as pd
from tqdm import tqdm

from trinity.errors import TrinityError, run_main
from trinity.runtime.runner import Measurement, Runner, placed_on_two_workers
from trinity.runtime.workers import LocalWorkers

#: a strategy with few crossings, a balanced cut, and one that sends a tensor across at almost every edge
PLACERS = ("m-etf", "metis", "random")


def completeness_rows(name: str, traces: list[Measurement], sim_MB: float) -> list[dict]:
    """One row per traced step of strategy ``name`` (``traces``: one `Measurement` per traced step), with the
    step's own record and, over the steps up to it, the step with the most transfers and all steps pooled."""
    rows, pooled, kept = [], Measurement(name), None
    for i, m in enumerate(traces):
        pooled.add_trace(m.expected_transfers, m.recorded_bytes, m.peak_memory_bytes, m.overridden)
        if kept is None or m.transfers > kept.transfers:  # the rule before: the trace with the most transfers
            kept = m
        rows.append({"strategy": name, "trace": i, "expected": len(m.expected_transfers),
                     "recorded": len(m.recorded_bytes), "missing": m.transfers_missing,
                     "trace_MB": m.crossed_bytes / 1e6, "most_transfers_MB": kept.crossed_bytes / 1e6,
                     "pooled_MB": pooled.crossed_bytes / 1e6, "pooled_missing": pooled.transfers_missing,
                     "sim_MB": sim_MB})
    return rows


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per strategy: traced steps, the share that missed records, and after two traced steps (validation's
    first two rounds) the bytes each rule reads against the simulator's and how many tensors pooling still
    misses."""
    out = []
    for name, rows in table.groupby("strategy", sort=False):
        two = rows[rows["trace"] == 1].iloc[0] if (rows["trace"] == 1).any() else rows.iloc[-1]
        out.append({"strategy": name, "traces": len(rows), "incomplete": float((rows["missing"] > 0).mean()),
                    "sim_MB": two["sim_MB"], "most_transfers_2_MB": two["most_transfers_MB"],
                    "pooled_2_MB": two["pooled_MB"], "pooled_2_missing": int(two["pooled_missing"]),
                    "pooled_all_missing": int(rows["pooled_missing"].iloc[-1])})
    return pd.DataFrame(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default="data/inception_v3/export/graph.json.gz",
                   help="an exported model (its GraphDef beside it: `dvc repro export@inception_v3`)")
    p.add_argument("--cluster", default="p100x2", help="the 2-device cluster the placers place on")
    p.add_argument("--placers", nargs="+", default=list(PLACERS))
    p.add_argument("--traces", type=int, default=12, help="traced steps per strategy, one session each")
    p.add_argument("--csv", default="reports/trace_completeness.csv")
    args = p.parse_args(argv)
    if args.traces < 1:
        raise TrinityError(f"must be 1 or more, got {args.traces}", field="--traces")
    graph, graph_def, placements = placed_on_two_workers(args.graph, args.cluster, args.placers)
    rows = []
    with LocalWorkers(2, threads=1) as workers:
        runner = Runner(graph, graph_def, workers)
        with tqdm(total=args.traces * len(placements), desc="traced steps", unit="step") as bar:
            for name, placement in placements.items():
                sim = runner.simulator.simulate(runner.check(placement, name), check=False)
                sim_MB = float(sim.sent_bytes.sum()) / 1e6
                traces = []
                for _ in range(args.traces):
                    traces.append(runner.measure(placement, name, steps=0, warmup=1))
                    bar.update()
                rows += completeness_rows(name, traces, sim_MB)
    table = pd.DataFrame(rows)
    table.to_csv(args.csv, index=False)
    pd.set_option("display.width", 250)
    print(summary(table).round(3).to_string(index=False))
    print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
