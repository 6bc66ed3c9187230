"""Simulate a finished validation again, without its workers: the measured step times stay, the
simulated ones are recomputed the way `trinity.runtime.validate` computes them (the strategies it ran,
on the calibrated graph of that batch and the run's calibrated cluster).

For a change to the simulator, or a what-if on a cluster term (``link_streams``), judged on the
strategies already measured. A validation folder (``results/validate/<model>/``) holds one part per
run and batch: the folder itself (run 1, the model's own batch), ``batch<b>/``, ``run<r>/`` and
``run<r>/batch<b>/``; each has results.csv, strategies/ and calibration/graph.json.gz, and each run's
calibration/cluster.yaml serves all its batches (nothing is fitted at the other batches).

    python -m trinity.runtime.resimulate results/validate/nmt_2layer_s12 --link-streams 4
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from trinity.cluster import Cluster, cluster_from_dict, load_cluster
from trinity.errors import TrinityError
from trinity.graph import load_graph
from trinity.placement import Strategy
from trinity.runtime.validate import error_summary
from trinity.sim import Simulator


def parts(folder) -> list[tuple[int, int | None, Path, Path]]:
    """(run, batch or None for the model's own, part folder, the run's cluster file) of every part."""
    folder = Path(folder)
    if not (folder / "results.csv").is_file():
        raise TrinityError("not a validation folder (its parts are DVC outputs: `dvc pull` them)", source=str(folder),
                           field="results.csv")
    runs = [(1, folder)] + sorted((int(p.name[3:]), p) for p in folder.iterdir() if re.fullmatch(r"run\d+", p.name))
    out = []
    for run, top in runs:
        cluster_file = top / "calibration" / "cluster.yaml"
        out.append((run, None, top, cluster_file))
        out += sorted((run, int(p.name[5:]), p, cluster_file) for p in top.iterdir()
                      if re.fullmatch(r"batch\d+", p.name))
    return out


def resimulate_part(part: Path, cluster: Cluster) -> pd.DataFrame:
    """The part's results.csv with ``sim_step_ms`` and ``step_error`` recomputed on ``cluster``
    (rows the workers refused to run, with no measurement, are left as they are)."""
    table = pd.read_csv(part / "results.csv")
    graph = load_graph(part / "calibration" / "graph.json.gz")
    sim = Simulator(graph, cluster)
    table = table.copy()
    for i, row in table.iterrows():
        path = part / "strategies" / f"{row['strategy']}.json"
        placement = Strategy.load(path).to_indices(graph, source=str(path))
        table.loc[i, "sim_step_ms"] = sim.simulate(placement).step_time_us / 1e3
    measured = table["real_step_ms"].notna()
    table.loc[measured, "step_error"] = ((table.loc[measured, "sim_step_ms"] - table.loc[measured, "real_step_ms"])
                                         / table.loc[measured, "real_step_ms"])
    return table


#: The figures the README reports per model, batch and run (held-out split strategies).
FIGURES = ("held_out_split_step_error_median", "held_out_split_step_error_p90", "held_out_split_rank_correlation")


def compare(folder, link_streams: int | None = None) -> pd.DataFrame:
    """One row per run and batch: the committed figures, those of the simulator now on the calibrated
    cluster, and (with ``link_streams``) those of the same cluster carrying that many transfers at once."""
    rows = []
    for run, batch, part, cluster_file in parts(folder):
        cluster = load_cluster(cluster_file)
        committed = pd.read_csv(part / "results.csv")
        tables = {"committed": committed, "now": resimulate_part(part, cluster)}
        if link_streams is not None:
            # through the cluster file's checks: a bad count is refused naming link_streams
            streams = cluster_from_dict({**cluster.to_dict(), "link_streams": link_streams}, str(cluster_file))
            tables[f"streams{link_streams}"] = resimulate_part(part, streams)
        row = {"run": run, "batch": int(committed["batch"].iloc[0]) if batch is None else batch,
               "held_out_split": int(error_summary(committed)["held_out_split_strategies"])}
        for name, table in tables.items():
            summary = error_summary(table)
            row.update({f"{name}_{key.removeprefix('held_out_split_')}": summary[key] for key in FIGURES})
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m trinity.runtime.resimulate", description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="validation folders (results/validate/<model>)")
    p.add_argument("--link-streams", type=int, default=None,
                   help="also simulate each calibrated cluster carrying this many transfers per sender at once")
    args = p.parse_args(argv)
    pd.set_option("display.width", 200)
    for folder in args.folders:
        print(folder)
        print(compare(folder, args.link_streams).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    try:
        main()
    except TrinityError as exc:
        raise SystemExit(f"error: {exc}") from None
