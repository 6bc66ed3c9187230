"""The ``trinity`` command line.

Every user error is printed as one line (``trinity: error: <file>: <field>:
<message>``) with exit status 2; outputs are written atomically.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import pandas as pd

from trinity.errors import TrinityError
from trinity.rl.defaults import BATCH, TRINITY_SCRATCH_BATCH


def _graph(path):
    from trinity.graph import load_graph

    return load_graph(path)


def cmd_info(args) -> None:
    g = _graph(args.graph)
    for k, v in g.summary().items():
        print(f"{k:>20}: {v}")


def cmd_convert(args) -> None:
    from trinity.graph import save_graph

    g = _graph(args.graph)
    save_graph(g, args.out)
    print(f"wrote {args.out}: {g.n_ops} ops, {g.n_edges} edges")


def cmd_clusters(args) -> None:
    from trinity.cluster import load_cluster, preset_names

    for name in preset_names():
        c = load_cluster(name)
        devs = ", ".join(f"{d.name}({d.kind} x{d.speed:g}, {d.memory_bytes / 1e9:g} GB)" for d in c.devices)
        print(f"{name:>8}: {devs}")


def _print_result(res, cluster) -> None:
    for k, v in res.summary().items():
        print(f"{k:>22}: {v:.4g}" if isinstance(v, float) else f"{k:>22}: {v}")
    per_device = pd.DataFrame({
        "device": cluster.device_names, "ops": np.bincount(res.placement, minlength=cluster.n_devices),
        "busy_ms": res.busy_us / 1e3, "sent_MB": res.sent_bytes / 1e6, "received_MB": res.received_bytes / 1e6,
        "peak_memory_GB": res.peak_memory_bytes / 1e9, "capacity_GB": cluster.memory / 1e9})
    print(per_device.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def cmd_place(args) -> None:
    from trinity.cluster import load_cluster
    from trinity.placement import Strategy
    from trinity.placers import place
    from trinity.sim import Simulator

    g, cluster = _graph(args.graph), load_cluster(args.cluster)
    options = {}
    if args.policy is not None:  # a pre-trained policy file: only the learned placer reads one
        if args.placer != "learned-list":
            raise TrinityError(f"--policy is for --placer learned-list, not {args.placer!r}", field="policy")
        options["policy"] = args.policy
    placed = place(args.placer, g, cluster, seed=args.seed, **options)
    res = Simulator(g, cluster).simulate(placed.placement)
    print(f"{args.placer} on {cluster.name}: placed {g.n_ops} ops in {placed.seconds:.2f} s")
    _print_result(res, cluster)
    if args.out:
        Strategy.from_array(g, cluster, placed.placement, placer=args.placer,
                            simulated_step_time_us=res.step_time_us).save(args.out)
        print(f"wrote {args.out}")


def cmd_simulate(args) -> None:
    from trinity.cluster import load_cluster
    from trinity.placement import Strategy
    from trinity.sim import Simulator

    g, cluster = _graph(args.graph), load_cluster(args.cluster)
    placement = Strategy.load(args.strategy).to_array(g, cluster, source=args.strategy)
    res = Simulator(g, cluster).simulate(placement, trace=True)
    _print_result(res, cluster)
    gantt = res.gantt(g, cluster.device_names)
    if args.trace:
        from trinity.fileio import atomic_write_bytes

        atomic_write_bytes(args.trace, gantt.to_csv(index=False).encode())
        print(f"wrote {args.trace}")
    if args.gantt:
        from trinity.plots import plot_gantt

        plot_gantt(gantt, args.gantt, title=f"{g.name} on {cluster.name}: {res.step_time_us / 1e3:.2f} ms",
                   transfers=res.transfers_frame(cluster.device_names))
        print(f"wrote {args.gantt}")


# --- trinity bound (issue 22): a lower bound on the step time that counts communication -------------
def cmd_bound(args) -> None:
    from trinity.bound import check_options, incumbent, step_time_bound
    from trinity.cluster import load_cluster

    check_options(args.time_limit, args.nodes)  # before loading anything: a bad option costs nothing
    g, cluster = _graph(args.graph), load_cluster(args.cluster)
    b = step_time_bound(g, cluster, time_limit_s=args.time_limit, max_segment_ops=args.nodes, show_progress=True)
    inc = incumbent(g, cluster)
    gap = 100 * (inc.step_time_us / b.bound_us - 1) if b.bound_us > 0 else float("nan")
    for key, value in (("bound_ms", b.bound_us / 1e3), ("compute_only_ms", b.compute_only_us / 1e3),
                       ("chain_ms", b.chain_us / 1e3), ("pivot_ms", b.pivot_us / 1e3),
                       ("incumbent_ms", inc.step_time_us / 1e3), ("incumbent", inc.method), ("gap_pct", gap),
                       ("segments", len(b.segments)), ("segments_solved", b.solved),
                       ("segments_optimal", b.optimal), ("worst_milp_gap_pct", 100 * b.milp_gap),
                       ("time_limit_s", b.time_limit_s), ("nodes", b.max_segment_ops), ("seconds", b.seconds)):
        print(f"{key:>20}: {value:.4g}" if isinstance(value, float) else f"{key:>20}: {value}")
# --- end trinity bound ---------------------------------------------------------------------------


def cmd_compare(args) -> None:
    from trinity.cluster import load_cluster
    from trinity.compare import compare_placers
    from trinity.placers.base import get_placer

    g = _graph(args.graph)
    clusters = [load_cluster(c) for c in args.cluster]
    for p in args.placers or []:
        get_placer(p)
    table = compare_placers(g, clusters, args.placers, seed=args.seed, progress=True)
    print(f"{g.name}: {g.n_ops} ops, {g.n_edges} edges")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
    if args.csv:
        from trinity.fileio import atomic_write_bytes

        atomic_write_bytes(args.csv, table.to_csv(index=False).encode())
    if args.plot:
        from trinity.plots import plot_comparison

        plot_comparison(table, args.plot, title=f"{g.name}: {g.n_ops} ops")


def _options(pairs: list[str] | None, flag: str = "--option") -> dict:
    """``key=value`` strings to a dict, values parsed as YAML scalars (ints, floats, bools)."""
    import yaml

    options = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TrinityError(f"expected key=value, got {pair!r}", field=flag)
        try:
            options[key] = yaml.safe_load(value)
        except (yaml.YAMLError, ValueError, RecursionError):
            raise TrinityError(f"cannot read the value of {pair!r}", field=flag) from None
    return options


def _nested(options: dict) -> dict:
    """``{"policy.hidden": 32}`` to ``{"policy": {"hidden": 32}}``."""
    out: dict = {}
    for key, value in options.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def _speedups(pairs: list[str] | None) -> dict[str, float]:
    """``KIND=X`` pairs: X must be a finite number > 0."""
    speedups = {}
    for kind, value in _options(pairs, "--kind-speedup").items():
        try:
            x = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        except OverflowError:  # an integer of hundreds of digits
            x = math.inf
        if not 0 < x < math.inf:
            raise TrinityError(f"{kind}: must be a finite number > 0, got {str(value)[:40]}", field="--kind-speedup")
        speedups[kind] = x
    return speedups


def cmd_models(args) -> None:
    from trinity.models import known_models, model_spec

    rows = []
    for name in known_models():
        spec = model_spec(name)
        ops, edges = spec.paper_table3 or ("-", "-")
        rows.append({"model": name, "framework": spec.framework, "batch": spec.default_batch,
                     "paper_ops": ops, "paper_edges": edges, "description": spec.description})
    print(pd.DataFrame(rows).to_string(index=False))


def cmd_export(args) -> None:
    import time

    from trinity.export import export_model
    from trinity.models import model_spec

    spec = model_spec(args.model)
    out = args.out or f"{args.model}.json.gz"
    t0 = time.perf_counter()
    g = export_model(args.model, out, args.batch, **_options(args.option))
    paper = f" (paper's Table 3: {spec.paper_table3[0]} ops, {spec.paper_table3[1]} edges)" if spec.paper_table3 else ""
    print(f"wrote {out}: {g.n_ops} ops, {g.n_edges} edges{paper} in {time.perf_counter() - t0:.1f} s")


def cmd_profile(args) -> None:
    from trinity.export import profile_graph

    out = args.out or args.graph
    speedups = _speedups(args.kind_speedup)
    if args.speed_model is None:
        args.speed_model = ["p100", "v100"]
    g, report = profile_graph(args.graph, out, steps=args.steps, warmup=args.warmup, threads=args.threads,
                              progress=True, kind_speedups=speedups, speed_models=args.speed_model)
    for k, v in report.items():
        print(f"{k:>28}: {v}")
    print(f"wrote {out}")


def cmd_search(args) -> None:
    from pathlib import Path

    from trinity.cluster import load_cluster
    from trinity.fileio import atomic_write_bytes
    from trinity.plots import plot_search_curve
    from trinity.rl.search import SearchConfig, checkpoint_run_id
    from trinity.track import MLflowTracker, NullTracker, end_status

    agent = _nested(_options(args.option))  # the method's own settings, checked by its Options dataclass
    agent.update({k: v for k, v in (("num_groups", args.groups), ("lr", args.lr)) if v is not None})
    batch = args.batch or (TRINITY_SCRATCH_BATCH if args.method == "trinity" and not args.warm_start else BATCH)
    cfg = SearchConfig(method=args.method, iterations=args.iterations, batch=batch, seed=args.seed,
                       warm_start=args.warm_start, threads=args.threads, sim_threads=args.sim_threads,
                       warm_start_steps=args.warm_start_steps, checkpoint_every=args.checkpoint_every, agent=agent,
                       racers=args.racers, race_share=args.race_share, race_rounds=args.race_rounds)
    g, cluster = _graph(args.graph), load_cluster(args.cluster)
    out = Path(args.out or f"runs/{g.name}-{cluster.name}-{args.method}-s{args.seed}")
    tracker = NullTracker()
    if not args.no_mlflow:
        # the run this folder logged to (even if it was stopped before its first checkpoint): a rerun continues it
        run_file = out / ".mlflow_run_id"
        run_id = None if args.fresh else checkpoint_run_id(out) or (run_file.read_text().strip()
                                                                   if run_file.exists() else None)
        tracker = MLflowTracker(args.experiment, run_name=out.name, uri=args.mlflow_uri, run_id=run_id)
        atomic_write_bytes(run_file, tracker.run_id.encode())
    try:
        search, best = _run_search(g, cluster, cfg, out, tracker, args.fresh)
    except BaseException as exc:  # the MLflow run ends FAILED or KILLED, never RUNNING
        tracker.close(end_status(exc))
        raise
    history = pd.DataFrame(search.history)
    atomic_write_bytes(out / "history.csv", history.to_csv(index=False).encode())
    plot_search_curve(history, out / "search_curve.png", title=f"{cfg.method} on {g.name}, {cluster.name}")
    for name in ("best_strategy.json", "history.csv", "search_curve.png"):
        tracker.log_artifact(out / name)
    tracker.log_metrics({"best/step_time_ms": best.step_time_us / 1e3, "best/peak_comm_MB": best.peak_comm_bytes / 1e6,
                         "best/peak_memory_GB": best.peak_memory_bytes / 1e9, "best/reward": best.reward},
                        step=search.iteration)
    tracker.close()
    print(f"{cfg.method} on {g.name} ({cluster.name}), {search.iteration} iterations in {search.seconds:.0f} s: "
          f"best step time {best.step_time_us / 1e3:.3f} ms (lower bound {search.simulator.lower_bound_us / 1e3:.3f}), "
          f"peak comm {best.peak_comm_bytes / 1e6:.1f} MB, peak memory {best.peak_memory_bytes / 1e9:.3f} GB; "
          f"strategy in {out / 'best_strategy.json'}")
    if search.warm_start_placer:
        found = (f"the search's, from iteration {best.iteration}" if best.iteration >= 0
                 else f"{search.warm_start_placer}'s own: the search found nothing better")
        print(f"warm start: imitated {search.warm_start_placer} ({search.warm_start_agreement:.1%} of ops agree); "
              f"best strategy is {found}")


def _run_search(g, cluster, cfg, out, tracker, fresh: bool):
    from trinity.rl.search import Search

    search = Search(g, cluster, cfg, out, tracker=tracker, fresh=fresh, progress=True,
                    feature_cache=out.parent / ".features")
    if search.iteration:
        print(f"resuming {out} at iteration {search.iteration}")
    try:
        best = search.run()
    except KeyboardInterrupt:  # the search checkpointed after its last whole iteration
        print(f"interrupted at iteration {search.iteration}; run the same command to resume", file=sys.stderr)
        raise
    return search, best


def _workers(args):
    from trinity.runtime.workers import open_workers

    return open_workers(args.workers, args.cluster_spec, threads=args.threads_per_worker)


def _exported(path):
    """(graph, GraphDef bytes) of a TensorFlow export."""
    from trinity.export import read_graph_def

    g = _graph(path)
    return g, read_graph_def(path, g)


def _anchor_range(args) -> tuple[float, float]:
    """--anchor-range, refused in one line unless 0 < LOW <= 1 <= HIGH; the default without it."""
    from trinity.runtime.calibrate import ANCHOR_RANGE, check_anchor_range

    return ANCHOR_RANGE if args.anchor_range is None else check_anchor_range(args.anchor_range, field="anchor-range")


def _calibration(args, g, gd, workers, reuse: bool = True):
    """The calibrated (cluster, graph) for these workers: read from --calibration DIR (if ``reuse``),
    else measured and written there."""
    from trinity.runtime.calibrate import calibration_for

    # `trinity validate` times the fit set as it times every strategy; `trinity calibrate` as its defaults
    timing = {f"fit_{k}": getattr(args, k) for k in ("rounds", "steps", "warmup") if hasattr(args, k)}
    timing.update({k: getattr(args, k) for k in ("retime_above", "retries") if hasattr(args, k)})
    cluster, cg, report = calibration_for(g, gd, workers, args.calibration, reuse=reuse, steps=args.profile_steps,
                                          anchor_range=_anchor_range(args), **timing)
    if report is not None:
        link, fit = report["link"], report["transfer_fit"]
        print(f"calibrated {workers.n} workers ({', '.join(workers.hosts)}): link latency {link['latency_us']:.0f} us, "
              f"bandwidth {link['bandwidth_GBps']:.2f} GB/s (R^2 {link['r2']:.3f}); fitted to {', '.join(fit['placers'])}: the sender's processor spends "
              f"{fit['send_cpu_share']:.2f} of a transfer's bytes' time on it, the receiver's "
              f"{fit.get('receive_cpu_share', 0.0):.2f} and {fit.get('request_cpu_us', 0.0):g} us to issue a request, "
              f"latency x{fit['latency_scale']:g}, "
              f"{fit['link_streams']} transfer(s) at once per sender (mean error {fit['mean_error']:.3f}); both workers computing at once run {cluster.corun_slowdown:.1%} "
              f"slower (measured: {report['shared_machine']['corun_slowdown']:.1%}), a second worker adds {report['shared_machine']['step_sync_us']:.0f} us a step; one worker runs a step in "
              f"{report['worker_step_us_median'] / 1e3:.1f} ms (x{report['anchor']['scale']:.3f} when timed beside the "
              f"fit set); written to {args.calibration}")
    return cluster, cg


def cmd_calibrate(args) -> None:
    _anchor_range(args)  # refused before any worker starts
    g, gd = _exported(args.graph)
    with _workers(args) as workers:
        _calibration(args, g, gd, workers, reuse=False)


def cmd_validate(args) -> None:
    from pathlib import Path

    from trinity.fileio import write_json
    from trinity.placement import Strategy
    from trinity.plots import plot_sim_vs_real
    from trinity.runtime.validate import (Candidate, candidate_strategies, error_summary, refit_to_rounds,
                                          sync_to_rounds, validate)

    _anchor_range(args)  # refused before any worker starts
    g, gd = _exported(args.graph)
    out = Path(args.out)
    if args.calibration is None:
        args.calibration = str(out / "calibration")
    strategies = []
    for path in args.strategy:  # checked before any worker starts
        s = Strategy.load(path)
        strategies.append((path, s, s.to_indices(g, source=path)))
    with _workers(args) as workers:
        for path, s, _ in strategies:
            if len(s.devices) > workers.n:
                raise TrinityError(f"uses {len(s.devices)} devices but there are {workers.n} workers", source=path,
                                   field="devices")
        cluster, cg = _calibration(args, g, gd, workers, reuse=not args.recalibrate)
        candidates = [Candidate(Path(p).stem if len(strategies) > 1 else Path(p).name, p, idx)
                      for p, _, idx in strategies]
        if args.placers or args.search_samples:
            candidates += candidate_strategies(cg, cluster, placers=args.placers or (),
                                               search_samples=args.search_samples, seed=args.seed)
        if not candidates:
            raise TrinityError("nothing to run: give strategy files, --placers or --search-samples",
                               field="strategy")
        table = validate(cg, gd, workers, cluster, candidates, out_dir=out, rounds=args.rounds, steps=args.steps,
                         warmup=args.warmup, timeout_s=args.timeout, progress=True, anchor_range=_anchor_range(args),
                         retime_above=args.retime_above, retries=args.retries)
        if args.refit_to_rounds:
            table, cluster, refitted = refit_to_rounds(cg, cluster, candidates, table)
            if refitted is not None:
                table.to_csv(out / "results.csv", index=False)
                print(f"the transfer model refitted to the fit set's rows of these rounds: send CPU share "
                      f"{refitted.send_cpu_share:.2f}, receive {refitted.receive_cpu_share:.2f}, co-running slowdown "
                      f"{cluster.corun_slowdown:.3f}")
        if args.sync_to_rounds:
            table, drift = sync_to_rounds(cg, cluster, candidates, table)
            if drift == drift:
                table.to_csv(out / "results.csv", index=False)
                print(f"a step over both workers anchored to the fit set's split rows of these rounds: "
                      f"{drift / 1e3:+.1f} ms")
    summary = error_summary(table)
    write_json(out / "summary.json", summary)
    tracker = None
    if not args.no_mlflow:
        from trinity.track import MLflowTracker

        tracker = MLflowTracker(args.experiment, run_name=f"{g.name}-{workers.n}workers", uri=args.mlflow_uri)
        tracker.log_params({"graph": g.name, "workers": workers.n, "hosts": ",".join(workers.hosts),
                            "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup,
                            "retime_above": args.retime_above, "retries": args.retries,
                            "send_cpu_share": cluster.send_cpu_share, "receive_cpu_share": cluster.receive_cpu_share,
                            "calibration": args.calibration})
        tracker.log_metrics({k: v for k, v in summary.items() if isinstance(v, (int, float)) and v == v}, step=0)
    cols = [c for c in ("strategy", "sim_step_ms", "real_step_ms", "real_spread", "step_error", "sim_comm_MB",
                        "real_crossed_MB", "real_transfers_missing", "comm_error", "sim_peak_memory_GB", "real_peak_memory_GB", "overridden",
                        "retimed", "refused") if c in table]
    print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if summary["strategies"]:
        plot_sim_vs_real(table, out / "sim_vs_real.png", title=f"{g.name} on {workers.n} workers")
    if tracker is not None:
        for name in ("results.csv", "summary.json", "sim_vs_real.png"):
            if (out / name).exists():
                tracker.log_artifact(out / name)
        tracker.close()
    print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
    print(f"results in {out}")


# Upper bounds on CLI numbers where a bigger value would only exhaust memory (or processes)
# before any work is done: a typo, not a request.
MAX_EXPORT_BATCH = 8192  # the model is traced on a real batch
MAX_SEARCH_BATCH = 4096  # [batch, units] samples and one simulation each, per iteration
MAX_THREADS = 1024
MAX_WORKERS = 256  # each local worker is a TensorFlow process


def _int_in(low: int, high: int | None = None):
    """An argparse type: an integer in [low, high], else argparse's one-line usage error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text[:40]}")
    return value


def _share(text: str) -> float:
    """An argparse type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1, got {text[:40]}")
    return value


SEED = _int_in(0, 2**32 - 1)  # numpy and torch refuse negative seeds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trinity", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="summarise a graph file")
    p.add_argument("graph")
    p.set_defaults(fn=cmd_info)

    p = sub.add_parser("convert", help="import a graph (reference JSON, node-link) into the native format")
    p.add_argument("graph")
    p.add_argument("out")
    p.set_defaults(fn=cmd_convert)

    p = sub.add_parser("models", help="list exportable models")
    p.set_defaults(fn=cmd_models)

    p = sub.add_parser("export", help="export a model's training step to an OpGraph")
    p.add_argument("model")
    p.add_argument("--batch", type=_int_in(1, MAX_EXPORT_BATCH),
                   help="batch size (default: the model's, as in the paper)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="model option, repeatable")
    p.add_argument("--out", help="output file (default MODEL.json.gz)")
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("profile", help="run an exported graph here and record per-op costs")
    p.add_argument("graph")
    p.add_argument("--out", help="output file (default: update GRAPH in place)")
    p.add_argument("--steps", type=_int_in(1), default=10)
    p.add_argument("--warmup", type=_int_in(0), default=3)
    p.add_argument("--threads", type=_int_in(1, MAX_THREADS), default=2)
    p.add_argument("--kind-speedup", action="append", metavar="KIND=X",
                   help="also cost ops for device kind KIND, X times faster than this machine (repeatable)")
    p.add_argument("--speed-model", action="append", metavar="KIND", default=None,
                   help="also cost ops for device kind KIND by its roofline (p100, v100, gtx1080ti, h200; repeatable; "
                        "default: p100 and v100)")
    p.set_defaults(fn=cmd_profile)

    p = sub.add_parser("search", help="search a placement with a learned method (trinity: PPO, hierarchical: "
                                      "REINFORCE)")
    p.add_argument("graph")
    p.add_argument("--cluster", default="p100x4")
    p.add_argument("--method", default="trinity", help="a search method (trinity, hierarchical)")
    p.add_argument("--iterations", type=_int_in(1, 1_000_000), default=1000)
    p.add_argument("--batch", type=_int_in(1, MAX_SEARCH_BATCH),
                   help=f"strategies sampled per iteration (default {TRINITY_SCRATCH_BATCH} for trinity from scratch, "
                        f"as conf/method/trinity.yaml; else {BATCH})")
    p.add_argument("--groups", type=_int_in(1), help="k (default: trinity 64 from scratch, 256 after --warm-start; "
                                                      "hierarchical min(256, 20 x devices))")
    p.add_argument("--lr", type=_positive_float, help="Adam's rate (default: trinity 1e-2, 1e-4 after --warm-start; "
                                                      "hierarchical 0.1)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a setting of the method (its agent options: e.g. ppo_epochs=4, entropy_coef=0.01, "
                        "policy.lstm_hidden=64 for trinity, policy.hidden=128 for hierarchical; repeatable)")
    p.add_argument("--sim-threads", type=_int_in(1, MAX_THREADS), help="threads simulating a batch (default: cores)")
    p.add_argument("--racers", type=_int_in(1, 64), default=1,
                   help="searches from seeds SEED, SEED + 100003, ... sharing the budget; the best finishes it")
    p.add_argument("--race-share", type=_positive_float, default=0.8,
                   help="the share of the budget the racers spend taking turns (at most 1)")
    p.add_argument("--race-rounds", type=_int_in(1, 6), default=1,
                   help="the race as rounds of successive halving, the better half going on after each "
                        "(at most ceil(log2(racers)))")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--threads", type=_int_in(1, MAX_THREADS), default=1)
    p.add_argument("--warm-start", help="first imitate this placer's output (e.g. m-etf), or 'best': the best "
                   "placer on this graph and cluster by the search's reward")
    p.add_argument("--warm-start-steps", type=_int_in(0), default=1000, help="supervised imitation steps")
    p.add_argument("--checkpoint-every", type=_int_in(1), default=50)
    p.add_argument("--out", help="run folder (default runs/GRAPH-CLUSTER-METHOD-sSEED); a checkpoint there resumes")
    p.add_argument("--fresh", action="store_true", help="discard a checkpoint in the run folder and start over")
    p.add_argument("--experiment", default="trinity-search", help="MLflow experiment")
    p.add_argument("--mlflow-uri", help="MLflow tracking URI (default sqlite:///mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true")
    p.set_defaults(fn=cmd_search)

    p = sub.add_parser("clusters", help="list cluster presets")
    p.set_defaults(fn=cmd_clusters)

    p = sub.add_parser("place", help="place a graph with one placer and simulate it")
    p.add_argument("graph")
    p.add_argument("--cluster", default="p100x4", help="preset name or YAML file")
    p.add_argument("--placer", default="m-etf")
    p.add_argument("--policy", help="learned-list: a pre-trained policy file (default: the committed one)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--out", help="write the strategy here (JSON)")
    p.set_defaults(fn=cmd_place)

    p = sub.add_parser("simulate", help="simulate a strategy file")
    p.add_argument("graph")
    p.add_argument("strategy")
    p.add_argument("--cluster", default="p100x4")
    p.add_argument("--trace", help="write the per-op trace (device, start, end) as CSV")
    p.add_argument("--gantt", help="draw the per-device timeline to this image (PNG, SVG, PDF)")
    p.set_defaults(fn=cmd_simulate)

    def worker_args(p):
        w = p.add_mutually_exclusive_group()
        w.add_argument("--workers", type=_int_in(1, MAX_WORKERS), default=2, help="local worker processes (default 2)")
        w.add_argument("--cluster-spec", help="YAML/JSON file naming running workers: worker: [host:port, ...]")
        p.add_argument("--threads-per-worker", type=_int_in(1, MAX_THREADS), default=1)
        p.add_argument("--profile-steps", type=_int_in(1), default=10, help="traced steps when calibrating")
        p.add_argument("--anchor-range", nargs=2, type=float, metavar=("LOW", "HIGH"),
                       help="refuse a calibration whose one-worker step moved by a factor outside this (default "
                            "0.5 2; a model whose step is a few ms needs more)")

    def retiming_args(p):  # the fit set's runs (and the validation's) disturbed by others are run again
        p.add_argument("--retime-above", type=_share, default=0.02, metavar="SHARE",
                       help="run a strategy again when others took more than this share of the cores during its run "
                            "(default 0.02)")
        p.add_argument("--retries", type=_int_in(0), default=2, help="at most this many runs again per run (0: never)")

    p = sub.add_parser("calibrate", help="measure workers' link and per-op costs; write the simulator's cluster")
    p.add_argument("graph", help="a TensorFlow export (its GraphDef lies beside it)")
    worker_args(p)
    retiming_args(p)
    p.add_argument("--calibration", default="calibration", help="output folder (cluster.yaml, graph.json.gz)")
    p.set_defaults(fn=cmd_calibrate)

    p = sub.add_parser("validate", help="run strategies on TensorFlow workers and compare with the simulator")
    p.add_argument("graph", help="a TensorFlow export (its GraphDef lies beside it)")
    p.add_argument("strategy", nargs="*", help="strategy files (device i runs on worker i)")
    worker_args(p)
    p.add_argument("--placers", nargs="*", help="also run these placers' strategies")
    p.add_argument("--search-samples", type=_int_in(0), default=0, help="also run N strategies sampled during a search")
    p.add_argument("--calibration", help="calibration folder to reuse or fill (default OUT/calibration)")
    p.add_argument("--recalibrate", action="store_true", help="measure again even if --calibration has one")
    p.add_argument("--refit-to-rounds", action="store_true",
                   help="simulate on the transfer model fitted again to the fit set's rows of these rounds (with 3 or "
                        "more of its placers among the strategies), not the calibration's")
    p.add_argument("--sync-to-rounds", action="store_true",
                   help="simulate a step over both workers with the fit set's split rows' median gap of these rounds "
                        "added (3 or more of its placers among the strategies), not the calibration's synchronisation "
                        "alone")
    p.add_argument("--rounds", type=_int_in(1), default=3, help="interleaved rounds over all strategies")
    p.add_argument("--steps", type=_int_in(1), default=3, help="timed steps per strategy per round")
    p.add_argument("--warmup", type=_int_in(0), default=2)
    retiming_args(p)
    p.add_argument("--timeout", type=_positive_float, default=300.0, help="seconds any one run may take")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--out", default="validation", help="output folder (results.csv, sim_vs_real.png)")
    p.add_argument("--experiment", default="trinity-validation", help="MLflow experiment")
    p.add_argument("--mlflow-uri", help="MLflow tracking URI (default sqlite:///mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("bound", help="a lower bound on any placement's step time that counts communication")
    p.add_argument("graph")
    p.add_argument("--cluster", default="p100x4", help="preset name or YAML file")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds of MILP solver time in all (default 60)")
    p.add_argument("--nodes", type=int, default=40, help="ops per segment MILP (default 40)")
    p.set_defaults(fn=cmd_bound)

    p = sub.add_parser("compare", help="compare every placer on a graph")
    p.add_argument("graph")
    p.add_argument("--cluster", nargs="+", default=["p100x2", "p100x4"])
    p.add_argument("--placers", nargs="+", help="default: all")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--csv", help="also write the table as CSV")
    p.add_argument("--plot", help="also draw the table to this image (PNG, SVG, PDF)")
    p.set_defaults(fn=cmd_compare)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.fn(args)
    except TrinityError as exc:
        message = " ".join(str(exc).splitlines())  # one line, even if a message quotes a multi-line value
        print(f"trinity: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("trinity: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `trinity simulate ... | head`: the reader left; stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141  # 128 + SIGPIPE, the shell's status for a tool the pipe stopped
    return 0


if __name__ == "__main__":
    sys.exit(main())
