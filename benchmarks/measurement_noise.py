"""Where a validation's measured step times vary: between a strategy's steps, or between its sessions.

The validation measures every strategy in interleaved rounds, each round a fresh TensorFlow session of the
strategy on the same workers (`Runner.measure_interleaved`). This measures a sample of a committed
validation's held-out split strategies again, on fresh local workers, with many rounds, and splits the
variation of their step times into its parts: the steps of one session, the sessions of one strategy (after
the first round), the first round's excess over the later ones (fresh workers), the first timed step's excess
over the rest of its session, what a round's sessions share (the machine's speed at the time, which an
interleaved round lays on every strategy alike), and the spread between strategies that a validation has to
rank. It also gives the rank correlation between the strategies' medians over even and over odd rounds (two
half-measurements). Each ``--warmups`` value is one setting, measured in turn: the untimed steps per session.

    make measurement-noise    # -> reports/measurement_noise.csv, measurement_noise_steps.csv (~10 min)
    python benchmarks/measurement_noise.py --from-steps reports/measurement_noise_steps.csv   # figures only

``--rank-rounds K ...`` also asks whether more rounds would rank the strategies as the simulator does: the
rank correlation between the validation's simulated step times (its results.csv) and the medians over each
strategy's first K rounds, and between two disjoint sets of K rounds (the measurement's own retest at K
rounds), into ``<csv>_rank.csv``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from trinity.errors import TrinityError, run_main
from trinity.runtime.validate import rank_correlation


def noise_figures(steps_ms: np.ndarray) -> dict:
    """The parts of the variation of ``steps_ms`` (strategies x rounds x steps, at least 2 each): standard
    deviations in ms, each averaged over strategies (and rounds). A round's shared part (the median over
    strategies of their sessions' medians: the machine then) is its own figure, taken out of the sessions'.
    The first round is left out of all but its own excess, as is the first step of every session out of
    the within-session figure."""
    s = np.asarray(steps_ms, float)
    if s.ndim != 3 or min(s.shape) < 2:
        raise TrinityError(f"need strategies x rounds x steps, at least 2 each, got shape {s.shape}", field="steps")
    later = s[:, 1:]
    sessions = np.median(later, axis=2)  # strategies x later rounds
    shared = np.median(sessions, axis=0)  # what a round's sessions share: the machine's speed then
    medians = np.median(sessions, axis=1)
    rounds = np.median(s, axis=2)
    several = sessions.shape[1] > 1
    return {
        "strategies": s.shape[0], "rounds": s.shape[1], "steps": s.shape[2],
        "step_sd_ms": float(later[:, :, 1:].std(axis=2, ddof=1).mean()) if s.shape[2] > 2 else float("nan"),
        "round_sd_ms": float(shared.std(ddof=1)) if several else float("nan"),
        "session_sd_ms": float((sessions - shared).std(axis=1, ddof=1).mean()) if several else float("nan"),
        "strategy_sd_ms": float(medians.std(ddof=1)),
        "first_round_excess_ms": float((np.median(s[:, 0], axis=1) - medians).mean()),
        "first_step_excess_ms": float((s[:, :, 0] - np.median(s[:, :, 1:], axis=2)).mean()),
        "split_half_rank": rank_correlation(np.median(rounds[:, ::2], axis=1), np.median(rounds[:, 1::2], axis=1)),
    }


def rank_by_rounds(steps_ms: np.ndarray, simulated: np.ndarray, ks: list[int]) -> pd.DataFrame:
    """For each K in ``ks`` (at most the rounds): the rank correlation between ``simulated`` (one per
    strategy) and the strategies' median steps over their first K rounds (``sim_rank``), and between their
    medians over rounds 1..K and K+1..2K (``retest_rank``, NaN where 2K exceeds the rounds)."""
    s = np.asarray(steps_ms, float)
    rows = []
    for k in ks:
        if not 1 <= k <= s.shape[1]:
            raise TrinityError(f"{k} rounds asked for, {s.shape[1]} measured", field="--rank-rounds")
        first = np.median(s[:, :k].reshape(len(s), -1), axis=1)
        second = np.median(s[:, k:2 * k].reshape(len(s), -1), axis=1) if 2 * k <= s.shape[1] else None
        rows.append({"rounds": k, "strategies": len(s), "sim_rank": rank_correlation(simulated, first),
                     "retest_rank": rank_correlation(first, second) if second is not None else float("nan")})
    return pd.DataFrame(rows)


def sample(results: pd.DataFrame, n: int) -> list[str]:
    """``n`` of the held-out split strategies, evenly spaced in measured step time (all if fewer)."""
    from trinity.runtime.validate import held_out_split_rows

    rows = results[held_out_split_rows(results)].sort_values("real_step_ms")
    if len(rows) < 2:
        raise TrinityError("fewer than 2 held-out split strategies measured", field="--validation")
    keep = np.unique(np.linspace(0, len(rows) - 1, min(n, len(rows))).round().astype(int))
    return rows["strategy"].iloc[keep].tolist()


def measure(validation: Path, graph_path: Path, names: list[str], *, rounds: int, steps: int,
            warmup: int) -> np.ndarray:
    """The strategies' step times, ms, strategies x rounds x steps, on two fresh local workers."""
    from trinity.cluster import load_cluster
    from trinity.export import read_graph_def
    from trinity.graph.io import load_graph
    from trinity.placement import Strategy
    from trinity.runtime.runner import Runner
    from trinity.runtime.workers import open_workers

    graph = load_graph(graph_path)
    graph_def = read_graph_def(graph_path, graph)
    cluster = load_cluster(validation / "calibration" / "cluster.yaml")
    placements = {n: Strategy.load(validation / "strategies" / f"{n}.json").to_indices(graph) for n in names}
    with open_workers(2, None, threads=1) as workers:
        measured = Runner(graph, graph_def, workers, cluster=cluster).measure_interleaved(
            placements, rounds=rounds, steps=steps, warmup=warmup, progress=True)
    return np.array([measured[n].step_us for n in names]).reshape(len(names), rounds, steps) / 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--validation", default="results/validate/inception_v3",
                   help="a validation folder (results.csv, strategies/, calibration/cluster.yaml)")
    p.add_argument("--graph", default="data/inception_v3/profile/graph.json.gz", help="the model's profiled graph")
    p.add_argument("--strategies", type=int, default=10, help="held-out split strategies measured")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmups", type=int, nargs="+", default=[1, 2], help="untimed steps per session, a setting each")
    p.add_argument("--csv", default="reports/measurement_noise.csv",
                   help="one row per setting (and beside it, *_steps.csv: every timed step)")
    p.add_argument("--from-steps", help="a *_steps.csv written before: its figures again, nothing measured")
    p.add_argument("--rank-rounds", type=int, nargs="*", default=[],
                   help="rounds K: rank against the validation's simulated step times over the first K rounds")
    args = p.parse_args()
    for name, low in (("strategies", 2), ("rounds", 2), ("steps", 3)):
        if getattr(args, name) < low:
            p.error(f"--{name} must be at least {low}, got {getattr(args, name)}")
    if min(args.warmups) < 0:
        p.error(f"--warmups must be 0 or more, got {min(args.warmups)}")
    out = Path(args.csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.from_steps:
        every_step = steps_table(Path(args.from_steps))
    else:
        every_step = measure_settings(Path(args.validation), Path(args.graph), args)
        every_step.to_csv(out.with_name(f"{out.stem}_steps.csv"), index=False)
    figures = pd.DataFrame([{"warmup": warmup, **noise_figures(as_array(g))}
                            for warmup, g in every_step.groupby("warmup", sort=False)])
    print(figures.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    figures.to_csv(out, index=False)
    print(f"-> {out}" + ("" if args.from_steps else f", {out.with_name(f'{out.stem}_steps.csv')}"))
    if args.rank_rounds:
        simulated = pd.read_csv(Path(args.validation) / "results.csv").set_index("strategy")["sim_step_ms"]
        ranks = []
        for warmup, g in every_step.groupby("warmup", sort=False):
            names = g["strategy"].drop_duplicates()
            ranks.append(rank_by_rounds(as_array(g), simulated.loc[names].to_numpy(), args.rank_rounds)
                         .assign(warmup=warmup))
        ranks = pd.concat(ranks, ignore_index=True)
        print(ranks.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        ranks.to_csv(out.with_name(f"{out.stem}_rank.csv"), index=False)


def measure_settings(validation: Path, graph: Path, args) -> pd.DataFrame:
    """Every timed step of every ``--warmups`` setting, one row each."""
    for path, field in ((validation / "results.csv", "--validation"), (graph, "--graph")):
        if not path.is_file():
            raise TrinityError(f"{path} not found", field=field)
    names = sample(pd.read_csv(validation / "results.csv"), args.strategies)
    tables = []
    for warmup in args.warmups:
        s = measure(validation, graph, names, rounds=args.rounds, steps=args.steps, warmup=warmup)
        idx = np.indices(s.shape).reshape(3, -1)
        tables.append(pd.DataFrame({"warmup": warmup, "strategy": np.array(names)[idx[0]], "round": idx[1],
                                    "step": idx[2], "step_ms": s.ravel()}))
        print(f"warmup {warmup}: " + ", ".join(f"{k} {v:.3f}" for k, v in noise_figures(s).items()), flush=True)
    return pd.concat(tables, ignore_index=True)


def steps_table(path: Path) -> pd.DataFrame:
    """A steps CSV this script wrote, checked."""
    if not path.is_file():
        raise TrinityError(f"{path} not found", field="--from-steps")
    table = pd.read_csv(path)
    missing = {"warmup", "strategy", "round", "step", "step_ms"} - set(table.columns)
    if missing:
        raise TrinityError(f"{path} lacks column(s) {sorted(missing)}", field="--from-steps")
    return table


def as_array(steps: pd.DataFrame) -> np.ndarray:
    """One setting's rows -> strategies x rounds x steps (strategies in the order they first appear)."""
    cube = steps.pivot_table(index=["strategy", "round"], columns="step", values="step_ms")  # sorted
    return np.stack([cube.loc[n].to_numpy() for n in steps["strategy"].drop_duplicates()])


if __name__ == "__main__":
    run_main(main)
