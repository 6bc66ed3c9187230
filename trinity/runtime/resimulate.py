"""Simulate a finished validation again, without its workers: the measured step times stay, the
simulated ones are recomputed the way `trinity.runtime.validate` computes them (the strategies it ran,
on the calibrated graph of that batch, its op times anchored to the whole step on one worker as the
part's rounds measured it, and the run's calibrated cluster).

For a change to the simulator, or a what-if on a cluster term (``link_streams``), judged on the
strategies already measured; ``--refit`` fits the transfer model again under each rule of `FIT_RULES`
from the calibration's own measurements of the fit placers (nothing held out is read by a fit), the
ablation of how the calibration chooses it; ``--unanchored`` simulates on the calibrated op times as
they are, as validations did before they anchored them to the one-worker step of their own rounds.
A validation folder (``results/validate/<model>/``) holds one part per run and batch: the folder
itself (run 1, the model's own batch), ``batch<b>/``, ``run<r>/`` and ``run<r>/batch<b>/``; each has
results.csv, strategies/ and calibration/graph.json.gz, and each run's calibration/cluster.yaml serves
all its batches (nothing is fitted at the other batches).

    python -m trinity.runtime.resimulate results/validate/nmt_2layer_s12 --link-streams 4
    python -m trinity.runtime.resimulate results/validate/nmt_2layer_s12 --refit calibration
    python -m trinity.runtime.resimulate results/validate/nmt_2layer_s12 --refit calibration --rules LABEL ...
    python -m trinity.runtime.resimulate results/validate/nmt_2layer_s12 --unanchored   # before the round anchor
    python -m trinity.runtime.resimulate results/validate/nmt_2layer_s12 --rounds-refit  # the calibration's fit too
    python -m trinity.runtime.resimulate results/validate/nmt_2layer_s12 --synced  # with and without sync_to_rounds
    make validation-fit-rules   # both models, both sources -> reports/validation_fit_rules*.csv
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from trinity.cluster import Cluster, cluster_from_dict, load_cluster
from trinity.errors import TrinityError, run_main
from trinity.fileio import read_json
from trinity.graph import load_graph
from trinity.placement import Strategy
from trinity.runtime.calibrate import (FITTED_CORUN_SLOWDOWNS, FITTED_LATENCY_SCALES, LATENCY_SCALES,
                                      LINK_STREAMS, RECEIVE_SHARES, SEND_SHARES, TransferFit, fit_transfer_model,
                                      times_scaled)
from trinity.runtime.validate import (SYNC_COLUMNS, Candidate, anchor_row, anchored_to_rounds, error_summary,
                                      fit_set_rows, refit_to_rounds, sync_to_rounds)
from trinity.sim import Simulator

class FitRule(NamedTuple):
    """One way to fit the transfer model: the objective, the link streams tried, and the worker
    semantics of the cluster it is fitted on (control edges sent between workers, ready order) and the
    latency scales tried (1 alone: the lone round trip's latency as measured)."""

    label: str
    objective: str
    link_streams: tuple[int, ...]
    control_transfers: bool = False
    ready_order: str = "fifo"
    latency_scales: tuple[float, ...] = FITTED_LATENCY_SCALES
    corun_slowdowns: tuple[float, ...] | None = None  # tried besides the measured one (None: it alone)
    receive_shares: tuple[float, ...] = (0.0,)  # the receiver's CPU share, of what `cpu_share_of` says
    cpu_share_of: str = "transfer"  # the shares' part of a transfer: all its time, or its bytes' (`trinity.cluster`)
    send_shares: tuple[float, ...] = SEND_SHARES  # the sender's CPU shares tried
    send_on_request: bool = False  # a tensor crosses once the sender has taken up its request (`trinity.cluster`)
    sends_last: bool = False  # a sender serialises a tensor after all the work it has ready (`trinity.cluster`)
    request_costs: tuple[float, ...] = (0.0,)  # what issuing a request costs the receiver, tried (`trinity.cluster`)


#: The default experiment's validation folders (the validate stage's outputs), which the diagnoses read by default
COMMITTED_VALIDATIONS = ("results/validate/inception_v3", "results/validate/nmt_2layer_s12")

#: Oldest first; the last is today's calibration (`trinity.runtime.calibrate`), each adds one change.
FIT_RULES = (FitRule("median-1stream", "median", (1,)), FitRule("mean-1stream", "mean", (1,)),
             FitRule("median-streams", "median", LINK_STREAMS), FitRule("mean-streams", "mean", LINK_STREAMS),
             FitRule("mean-streams-control", "mean", LINK_STREAMS, True),
             FitRule("mean-streams-control-lifo", "mean", LINK_STREAMS, True, "lifo"),
             FitRule("mean-streams-control-lifo-latency-measured", "mean", LINK_STREAMS, True, "lifo", LATENCY_SCALES),
             FitRule("mean-streams-control-lifo-latency-measured-arrivals-last", "mean", LINK_STREAMS, True,
                     "lifo-arrivals-last", LATENCY_SCALES),
             FitRule("mean-streams-control-lifo-latency-measured-arrivals-last-corun-fitted", "mean", LINK_STREAMS,
                     True, "lifo-arrivals-last", LATENCY_SCALES, FITTED_CORUN_SLOWDOWNS),
             FitRule("mean-streams-control-lifo-latency-measured-arrivals-last-corun-fitted-bytes", "mean",
                     LINK_STREAMS, True, "lifo-arrivals-last", LATENCY_SCALES, FITTED_CORUN_SLOWDOWNS, (0.0,), "bytes"),
             FitRule("mean-streams-control-lifo-latency-measured-arrivals-last-corun-fitted-bytes-receive", "mean",
                     LINK_STREAMS, True, "lifo-arrivals-last", LATENCY_SCALES, FITTED_CORUN_SLOWDOWNS, RECEIVE_SHARES,
                     "bytes"),
             FitRule("mean-streams-control-lifo-latency-measured-arrivals-last-corun-fitted-bytes-receive-held-sends",
                     "mean", LINK_STREAMS, True, "lifo-arrivals-last", LATENCY_SCALES, FITTED_CORUN_SLOWDOWNS,
                     RECEIVE_SHARES, "bytes", send_on_request=True, sends_last=True))


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


def _batch(part: Path, table: pd.DataFrame) -> int:
    """The batch a part ran at: its table's (the validate stage's), else its calibrated graph's (`trinity
    validate`'s table has no batch column)."""
    if "batch" in table:
        return int(table["batch"].iloc[0])
    return int(load_graph(part / "calibration" / "graph.json.gz").meta["batch_size"])


def _placement(part: Path, name: str, graph) -> np.ndarray:
    path = part / "strategies" / f"{name}.json"
    return Strategy.load(path).to_indices(graph, source=str(path))


def _anchored_to_part(part: Path, anchor: pd.DataFrame, graph, cluster: Cluster) -> tuple:
    """(``graph`` anchored to the part's rounds, the scale) as `validate` anchors it (`anchored_to_rounds`)."""
    single = _placement(part, anchor["strategy"].iloc[0], graph)
    return anchored_to_rounds(graph, cluster, single, float(anchor["real_step_ms"].iloc[0]) * 1e3)


def resimulate_part(part: Path, cluster: Cluster, round_anchor: bool = True) -> pd.DataFrame:
    """The part's results.csv with ``sim_step_ms`` and ``step_error`` recomputed on ``cluster``, the op
    times anchored to the part's own measurement of the whole step on one worker where it has one (then
    ``anchor_scale`` and that row in the calibration set, as `validate` writes them; rows the workers
    refused to run, with no measurement, keep no error). ``round_anchor=False``: on the calibrated graph's
    op times as they are, as validations before the round anchor simulated them (that row still counted
    in the calibration set, so both are judged on the same strategies)."""
    table = pd.read_csv(part / "results.csv")
    table = table.drop(columns=[c for c in SYNC_COLUMNS if c in table])  # simulated again without that anchor
    graph = load_graph(part / "calibration" / "graph.json.gz")
    anchor = anchor_row(table)
    table["anchor_scale"] = float("nan")  # the file's, if any, is set again below where anchored
    if len(anchor):
        table.loc[anchor.index, "calibration_set"] = True
    if len(anchor) and round_anchor:  # as `validate` anchors the op times to its rounds (older parts too)
        graph, table["anchor_scale"] = _anchored_to_part(part, anchor, graph, cluster)
    sim = Simulator(graph, cluster)
    for i, row in table.iterrows():
        table.loc[i, "sim_step_ms"] = sim.simulate(_placement(part, row["strategy"], graph)).step_time_us / 1e3
    measured = table["real_step_ms"].notna()
    table.loc[measured, "step_error"] = ((table.loc[measured, "sim_step_ms"] - table.loc[measured, "real_step_ms"])
                                         / table.loc[measured, "real_step_ms"])
    return table


#: The figures the README reports per model, batch and run (held-out split strategies).
FIGURES = ("held_out_split_step_error_median", "held_out_split_step_error_p90", "held_out_split_rank_correlation")


def compare(folder, link_streams: int | None = None, unanchored: bool = False, rounds_refit: bool = False,
            synced: bool = False) -> pd.DataFrame:
    """One row per run and batch: the committed figures, those of the simulator now on the calibrated
    cluster, (with ``link_streams``) those of the same cluster carrying that many transfers at once,
    (with ``unanchored``) those of the op times not anchored to the part's rounds (`resimulate_part`), and
    (with ``rounds_refit``) those of the transfer model fitted again to the fit set's rows of the run's
    rounds at its own batch (`refit_to_rounds`, as `validate` does with ``validation.refit_to_rounds``), at every
    batch of the run, and (with ``synced``) those of the simulator now with a step over both workers anchored
    to the fit set's split rows of each part's rounds (`sync_to_rounds`, the ms it added as ``synced_drift_ms``:
    "now" is without it, whether or not the validation anchored it)."""
    rows, refitted = [], {}
    for run, batch, part, cluster_file in parts(folder):
        cluster = load_cluster(cluster_file)
        committed = pd.read_csv(part / "results.csv")
        tables = {"committed": committed, "now": resimulate_part(part, cluster)}
        if rounds_refit:
            if batch is None:  # the run's own batch, the calibration's: its fit set's rows are fitted
                now, graph = tables["now"], load_graph(part / "calibration" / "graph.json.gz")
                candidates = [Candidate(n, s, _placement(part, n, graph)) for n, s in zip(now["strategy"],
                                                                                          now["source"])]
                _, refitted[run], _ = refit_to_rounds(graph, cluster, candidates, now)
            tables["rounds_refit"] = resimulate_part(part, refitted[run])
        if link_streams is not None:
            # through the cluster file's checks: a bad count is refused naming link_streams
            streams = cluster_from_dict({**cluster.to_dict(), "link_streams": link_streams}, str(cluster_file))
            tables[f"streams{link_streams}"] = resimulate_part(part, streams)
        if unanchored:
            tables["unanchored"] = resimulate_part(part, cluster, round_anchor=False)
        drift = float("nan")
        if synced:
            now, graph = tables["now"], load_graph(part / "calibration" / "graph.json.gz")
            candidates = [Candidate(n, s, _placement(part, n, graph)) for n, s in zip(now["strategy"], now["source"])]
            tables["synced"], drift = sync_to_rounds(graph, cluster, candidates, now)
        row = {"run": run, "batch": _batch(part, committed) if batch is None else batch,
               "held_out_split": int(error_summary(committed)["held_out_split_strategies"])}
        for name, table in tables.items():
            summary = error_summary(table)
            row.update({f"{name}_{key.removeprefix('held_out_split_')}": summary[key] for key in FIGURES})
            row[f"{name}_anchor_scale"] = summary["anchor_scale"]
        if synced:
            row["synced_drift_ms"] = drift / 1e3
        if rounds_refit:  # the terms the refit chose (the run's own batch's, for every batch)
            row.update({f"rounds_refit_{key}": float(getattr(refitted[run], key))
                        for key in ("send_cpu_share", "link_streams", "corun_slowdown")})
        rows.append(row)
    return pd.DataFrame(rows)


def refit_run(top: Path, rule: FitRule, measured_from: str = "calibration",
              also_fit: tuple[str, ...] = ()) -> tuple[TransferFit, Cluster]:
    """The transfer model fitted again to run folder ``top``'s calibration set and the calibrated cluster
    it gives: the fit placers' strategies with the calibration's step times (``measured_from=
    "calibration"``: calibration.json, what the run was fitted to), or the validation's rows of the
    calibration set with its own measurements (``"validation"``: medians of its rounds x steps, on the
    op times anchored to those rounds as `resimulate_part` simulates them), under ``rule``.
    ``also_fit`` (with ``"validation"``): the validation's rows of these strategies are fitted too (a
    diagnosis of the fit set's make-up: `benchmarks/validation_fit_set.py`)."""
    from trinity.placers import place_each

    if also_fit and measured_from != "validation":
        raise TrinityError("strategies beyond the fit placers are fitted from the validation's rows only",
                           field="also_fit")
    calibration = top / "calibration"
    report = read_json(calibration / "calibration.json")
    cluster = load_cluster(calibration / "cluster.yaml")
    # the calibration's cluster before its fit: one link, the lone round trip's latency, no CPU share, one stream,
    # the co-running slowdown as measured
    latency = np.full_like(cluster.latency, float(report["link"]["latency_us"]))
    np.fill_diagonal(latency, 0.0)
    shared = report.get("shared_machine") or {}  # rounded as the cluster file records it
    measured_corun = round(shared["corun_slowdown"], 4) if "corun_slowdown" in shared else cluster.corun_slowdown
    base = replace(cluster, latency=latency, send_cpu_share=0.0, receive_cpu_share=0.0, link_streams=1,
                   corun_slowdown=measured_corun, control_transfers=rule.control_transfers,
                   ready_order=rule.ready_order, cpu_share_of=rule.cpu_share_of, send_on_request=rule.send_on_request,
                   sends_last=rule.sends_last, request_cpu_us=0.0)
    graph = load_graph(calibration / "graph.json.gz")
    if measured_from == "calibration":
        measured = report["transfer_fit"]["measured_step_us"]
        # `calibrate` placed its fit set before it scaled the op times to the anchor, and m-ETF places
        # otherwise after (130-488 of InceptionV3's ops): the strategies it timed are placed on that graph
        scale = float((report.get("anchor") or {}).get("scale", 1.0))
        placed, _ = place_each(list(measured), graph if scale == 1.0 else times_scaled(graph, 1.0 / scale), base)
        placements = [placed[n].placement for n in measured]
    elif measured_from == "validation":  # its rows of the calibration set (a searched model's lack round-robin)
        table = pd.read_csv(top / "results.csv")
        anchor = anchor_row(table)
        fitted = fit_set_rows(table)
        if len(anchor):  # fitted on the op times its rows were simulated on: anchored to its rounds
            graph, _ = _anchored_to_part(top, anchor, graph, base)
        table = table[fitted | table["strategy"].isin(also_fit)]
        measured = dict(zip(table["strategy"], table["real_step_ms"] * 1e3))
        placements = [_placement(top, name, graph) for name in measured]
    else:
        raise TrinityError(f"must be calibration or validation, got {measured_from!r}", field="measured_from")
    fit = fit_transfer_model(graph, base, placements, list(measured.values()), shares=rule.send_shares,
                             link_streams=rule.link_streams,
                             latency_scales=rule.latency_scales, objective=rule.objective,
                             corun_slowdowns=rule.corun_slowdowns, receive_shares=rule.receive_shares,
                             request_costs=rule.request_costs)
    fit = replace(fit, corun_slowdown=fit.apply(base).corun_slowdown)  # the measured one, where it was kept
    return fit, fit.apply(base)


def refitted_parts(folder, measured_from: str = "calibration", rules=FIT_RULES):
    """Each run's transfer model fitted again under each rule of ``rules`` (`refit_run`), and every part of
    the run simulated on it: (run, batch, rule, fit, the part's table as `resimulate_part` gives it)."""
    by_run: dict[int, list] = {}
    for run, batch, part, _ in parts(folder):
        by_run.setdefault(run, []).append((batch, part))
    for run, run_parts in by_run.items():
        top = run_parts[0][1]
        for rule in rules:
            fit, cluster = refit_run(top, rule, measured_from)
            for batch, part in run_parts:
                table = resimulate_part(part, cluster)
                yield run, _batch(part, table) if batch is None else batch, rule, fit, table


def refit(folder, measured_from: str = "calibration", rules=FIT_RULES) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per run and rule: the fit chosen; one row per run, batch and rule: the held-out figures)."""
    fits, rows = {}, []
    for run, batch, rule, fit, table in refitted_parts(folder, measured_from, rules):
        fits[run, rule.label] = {"run": run, "rule": rule.label, "send_cpu_share": fit.send_cpu_share,
                                 "latency_scale": fit.latency_scale, "link_streams": fit.link_streams,
                                 "corun_slowdown": fit.corun_slowdown, "receive_cpu_share": fit.receive_cpu_share,
                                 "request_cpu_us": fit.request_cpu_us, "fit_error": fit.error}
        summary = error_summary(table)
        rows.append({"run": run, "batch": batch, "rule": rule.label,
                     **{key.removeprefix("held_out_split_"): summary[key] for key in FIGURES}})
    return pd.DataFrame(list(fits.values())), pd.DataFrame(rows)


def refit_choices(folders, rules, column: str = "rule") -> pd.DataFrame:
    """Every run of each validation folder fitted again under each of ``rules`` (to the calibration's own
    measurements of the fit placers: nothing held out is read), the held-out figures per batch on each fit, and
    the rule with the smallest fit error per run marked ``chosen``: what a calibration that also chose among
    ``rules`` would pick. The rules' labels go in ``column``. A folder that is no validation is refused before any
    work starts."""
    for folder in folders:
        parts(folder)
    tables = []
    for folder in folders:
        fits, figures = refit(folder, "calibration", rules)
        fits["chosen"] = fits["fit_error"] == fits.groupby("run")["fit_error"].transform("min")
        tables.append(figures.merge(fits, on=["run", "rule"]).rename(columns={"rule": column})
                      .assign(model=Path(folder).name))
    table = pd.concat(tables, ignore_index=True)
    first = ["model", "run", "batch", column, "chosen", "fit_error"]
    return table[first + [c for c in table.columns if c not in first]]


def compare_rules_main(argv, description: str, rules, column: str, default_csv: str, shown=()) -> None:
    """The command line of a benchmark that compares fit ``rules`` (`refit_choices`): validation folders (the
    committed ones by default) and ``--csv``; prints each part's rule, whether the fit chose it, its fit error,
    the ``shown`` columns and the held-out figures, and writes the whole table."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("folders", nargs="*", default=list(COMMITTED_VALIDATIONS),
                   help="validation folders (results/validate/<model>)")
    p.add_argument("--csv", default=default_csv)
    args = p.parse_args(argv)
    table = refit_choices(args.folders, rules, column)
    table.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    columns = ["model", "run", "batch", column, "chosen", "fit_error", *shown, "step_error_median", "rank_correlation"]
    print(table[columns].to_string(index=False, float_format="{:.3f}".format))
    print(f"-> {args.csv}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m trinity.runtime.resimulate", description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="validation folders (results/validate/<model>)")
    p.add_argument("--link-streams", type=int, default=None,
                   help="also simulate each calibrated cluster carrying this many transfers per sender at once")
    p.add_argument("--refit", choices=("calibration", "validation"), default=None,
                   help="fit the transfer model again under each rule (objective, streams tried) to the fit placers' "
                        "step times as the calibration measured them, or as the validation did, and compare")
    p.add_argument("--rules", nargs="+", default=None, metavar="LABEL", choices=[r.label for r in FIT_RULES],
                   help="with --refit: these rules of FIT_RULES only (default: all)")
    p.add_argument("--unanchored", action="store_true",
                   help="also simulate on the calibrated op times as they are, not anchored to each part's rounds")
    p.add_argument("--rounds-refit", action="store_true",
                   help="also simulate on the transfer model fitted again to the fit set's rows of each run's rounds")
    p.add_argument("--synced", action="store_true",
                   help="also simulate with a step over both workers anchored to the fit set's split rows of each "
                        "part's rounds (sync_to_rounds), and report the figures without it as 'now'")
    p.add_argument("--csv", default=None, metavar="PATH",
                   help="write every folder's held-out figures per run and batch (with --refit: per rule, with the "
                        "fit; else the comparison printed)")
    args = p.parse_args(argv)
    pd.set_option("display.width", 200)
    fmt = {"float_format": lambda x: f"{x:.3f}", "index": False}
    tables = []
    for folder in args.folders:
        print(folder)
        compared = compare(folder, args.link_streams, args.unanchored, args.rounds_refit, args.synced)
        print(compared.to_string(**fmt))
        if not args.refit:
            tables.append(compared.assign(model=Path(folder).name, folder=str(folder)))
        else:
            rules = [r for r in FIT_RULES if args.rules is None or r.label in args.rules]
            fits, figures = refit(folder, args.refit, rules)
            print(fits.to_string(**fmt))
            print(figures.to_string(**fmt))
            tables.append(figures.merge(fits, on=["run", "rule"]).assign(model=Path(folder).name,
                                                                         measured_from=args.refit, folder=str(folder)))
    if args.csv:
        table = pd.concat(tables, ignore_index=True)
        first = ["model", "measured_from", "run", "batch", "rule"] if args.refit else ["model", "run", "batch"]
        table[first + [c for c in table.columns if c not in first]].to_csv(args.csv, index=False)
        print(f"-> {args.csv}")


if __name__ == "__main__":
    run_main(main)
