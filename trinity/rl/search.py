"""The search loop: sample a batch, simulate it, reward, update, track, checkpoint; resume exactly.

It knows no method by name. A method is an `Agent` (`trinity/rl/agent.py`) looked up by
``cfg.method``; what it samples is scored by the simulator (the batch simulated on
``sim_threads`` threads: the compiled simulator releases the GIL) and by the agent's own reward.
Warm start (`trinity/rl/warm_start.py`) and checkpoint I/O (`trinity/rl/checkpoint.py`) are
modules of their own.

Everything random draws from generators stored in the checkpoint, so a search killed and resumed
ends exactly where an uninterrupted one does.
"""

from __future__ import annotations

import math
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from trinity.cluster import Cluster
from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph
from trinity.placement import Strategy
from trinity.progress import progress as progress_bar
from trinity.reward import MDPEConfig
from trinity.rl import checkpoint, defaults
from trinity.rl.agent import (DEFAULT_METHOD, Agent, AgentContext, agent_class, agent_options, check_range,
                              typed_options)
from trinity.rl.checkpoint import checkpoint_run_id  # noqa: F401  (re-exported for the CLI and stages)
from trinity.rl.racing import RacingAgent
from trinity.rl.warm_start import WARM_START_PLACERS, warm_start  # noqa: F401  (re-exported)
from trinity.sim import SimResult, Simulator
from trinity.track import NullTracker

#: the largest search budget (iterations) taken: more is a typo, not a run
MAX_ITERATIONS = 1_000_000
#: float32 results below 1.2e-38 are computed as zero while a policy samples and learns. Such denormal
#: numbers are the softmax of logits far below the row's top, as the locality prior gives a unit's groups 29-34
#: parts from its own (exp(-90)); x86 multiplies them 50-150x slower than normal ones, so without this Trinity
#: spent most of an iteration on them (on the CPU measured; others pay less). They are far below any
#: probability a search can tell from zero: the same strategies, bit for bit (`make bench`, which turns it off
#: to measure what it buys).
FLUSH_DENORMALS = True
#: seconds between writes of a new best strategy to best_strategy.json during the loop: a search improves
#: its best up to once an iteration, and each write serialises the whole placement (thousands of ops, written
#: every iteration early on); every checkpoint, the loop's end and an interrupt write the latest best whatever the time
BEST_SAVE_EVERY_S = 1.0


@dataclass
class SearchConfig:
    """One search: the loop's settings; the method's own are in ``agent`` (typed by its Agent.Options)."""

    method: str = DEFAULT_METHOD
    iterations: int = defaults.ITERATIONS
    batch: int = defaults.BATCH  #: strategies sampled per iteration
    seed: int = 0
    threads: int = 1  #: torch threads
    sim_threads: int | None = None  #: threads simulating a batch; None = the machine's cores
    checkpoint_every: int = 50
    #: placer whose output the policy first imitates; "best" = the best by this search's reward of
    #: WARM_START_PLACERS on this graph and cluster
    warm_start: str | None = None
    warm_start_steps: int = 1000
    warm_start_lr: float = 1e-2
    warm_start_grad_clip: float = 1.0
    #: searches from different seeds sharing the budget (`trinity/rl/racing.py`); 1 = one search
    racers: int = 1
    #: the share of the budget the racers spend taking turns, before the leader runs the rest alone
    race_share: float = 0.8
    #: racer j's agent options over ``agent`` (nested keys merged), for the first len(race_agents) racers: a
    #: portfolio, each racer with its own prior (e.g. ``[{}, {policy: {locality_order: bisection}}]``)
    race_agents: list = field(default_factory=list)
    #: the race in rounds of successive halving (`trinity/rl/racing.py`): the racers' turns split evenly over the
    #: rounds, the better half going on after each; 1 = one round, the leader picked after every racer's
    #: ``race_iterations``; at most ceil(log2(racers)) (the last round races two or more)
    race_rounds: int = 1
    reward: MDPEConfig = field(default_factory=MDPEConfig)
    agent: dict = field(default_factory=dict)  #: the method's settings (its Agent.Options' fields)

    def __post_init__(self):
        agent_class(self.method)  # an unknown method is one line naming the field
        if isinstance(self.reward, dict):
            self.reward = MDPEConfig(**self.reward)
        check_range("search", "iterations", self.iterations, 1, MAX_ITERATIONS)
        check_range("search", "batch", self.batch, 1, 1_000_000)
        check_range("search", "threads", self.threads, 1, 1024)
        check_range("search", "sim_threads", self.sim_threads, 1, 1024, allow_none=True)
        check_range("search", "checkpoint_every", self.checkpoint_every, 1)
        check_range("search", "warm_start_steps", self.warm_start_steps, 0)
        check_range("search", "warm_start_lr", self.warm_start_lr, 0, 10.0, low_open=True)
        check_range("search", "warm_start_grad_clip", self.warm_start_grad_clip, 0, low_open=True)
        check_range("search", "racers", self.racers, 1, 64)
        check_range("search", "race_share", self.race_share, 0, 1, low_open=True)
        if isinstance(self.race_rounds, bool) or not isinstance(self.race_rounds, int):
            raise TrinityError(f"must be a whole number of rounds, got {self.race_rounds!r}", field="race_rounds")
        check_range("search", "race_rounds", self.race_rounds, 1, max(1, math.ceil(math.log2(self.racers))))
        if self.racers > 1 and self.warm_start is not None:
            raise TrinityError("a race starts from scratch: use racers=1 with a warm start", field="racers")
        if self.warm_start is not None:
            from trinity.placers import PLACERS

            if self.warm_start != "best" and self.warm_start not in PLACERS:
                raise TrinityError(f"unknown placer {self.warm_start!r}; choose best or one of "
                                   f"{', '.join(sorted(PLACERS))}", field="warm_start")
        agent_options(self.method, self.agent)  # unknown or bad method options, before any work
        if not isinstance(self.race_agents, (list, tuple)) or len(self.race_agents) > self.racers:
            raise TrinityError(f"must be a list of at most racers={self.racers} option sets, got "
                               f"{self.race_agents!r}", field="race_agents")
        for j, own in enumerate(self.race_agents):
            if not isinstance(own, dict):
                raise TrinityError(f"must be a mapping of agent options, got {own!r}", field=f"race_agents.{j}")
            typed_options(agent_class(self.method).Options, self.racer_agent(j), f"race_agents.{j}")

    @property
    def race_iterations(self) -> int:
        """Each racer's turns before the leader runs the rest alone (`RacingAgent`'s ``race_iterations``)."""
        return max(1, round(self.race_share * self.iterations / self.racers))

    def racer_agent(self, j: int) -> dict:
        """Racer j's agent options: ``race_agents[j]`` merged over ``agent`` (nested keys merged)."""
        return merged(self.agent, self.race_agents[j]) if j < len(self.race_agents) else dict(self.agent)


def merged(base: dict, over: dict) -> dict:
    """``over`` merged over ``base``, nested mappings key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@dataclass
class Best:
    reward: float = -np.inf
    step_time_us: float = np.inf
    peak_comm_bytes: float = np.inf
    peak_memory_bytes: float = np.inf
    iteration: int = -1
    placement: np.ndarray | None = None


class Search:
    """One search of one graph on one cluster, writing into ``out_dir``."""

    def __init__(self, graph: OpGraph, cluster: Cluster, cfg: SearchConfig, out_dir: str | Path, *,
                 tracker=None, feature_cache: str | Path | None = None, features=None,
                 fresh: bool = False, progress: bool = True):
        self.graph, self.cluster, self.cfg = graph, cluster, cfg
        self.out_dir = Path(out_dir)
        self.tracker = tracker or NullTracker()
        self.progress = progress
        _check_inputs(graph, cluster)
        torch.set_num_threads(cfg.threads)
        ctx = AgentContext(seed=cfg.seed, feature_seed=cfg.seed, reward=cfg.reward, warm_start=bool(cfg.warm_start),
                           features=features, feature_cache=feature_cache)

        def make_agent(seed: int, racer: int = 0) -> Agent:  # every racer embeds the graph as the search's seed does
            options = agent_options(cfg.method, cfg.racer_agent(racer))
            return agent_class(cfg.method)(graph, cluster, options, replace(ctx, seed=seed))

        self.agent: Agent = make_agent(cfg.seed) if cfg.racers == 1 else RacingAgent(
            make_agent, cfg.seed, cfg.racers, cfg.race_iterations, cfg.race_rounds)
        self.num_groups = self.agent.num_groups
        _check_groups(graph, cluster, self.num_groups)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.simulator = Simulator(graph, cluster)
        self.sim_threads = cfg.sim_threads or len(os.sched_getaffinity(0))
        self._pool = ThreadPoolExecutor(self.sim_threads, thread_name_prefix="simulate") if self.sim_threads > 1 else None
        self.iteration = 0
        self.warm_start_agreement: float | None = None  #: share of ops a sample puts where the placer did
        self.warm_start_placer: str | None = None  #: the placer imitated (resolves "best")
        self.last_placements: np.ndarray | None = None
        self.best = Best()
        self._unsaved_best: dict | None = None  #: best_strategy.json's meta for a best not yet written
        self._best_saved_at = -np.inf
        self.history: list[dict] = []
        self.seconds = 0.0
        self.sim_seconds = 0.0  #: wall time spent simulating batches
        self.checkpoint_path = self.out_dir / checkpoint.FILE
        if self.checkpoint_path.exists():
            if fresh:
                self.checkpoint_path.unlink()
            else:
                self._load_checkpoint()
        if self.iteration == 0 and cfg.warm_start:
            self._warm_start()

    @property
    def resolved(self) -> dict:
        """This search's settings with the method's defaults filled in (what the checkpoint matches)."""
        resolved = {**asdict(self.cfg), "agent": asdict(self.agent.options)}
        if not resolved["race_agents"]:  # one agent's options for all: as before portfolios (old checkpoints hold)
            del resolved["race_agents"]
        if resolved["race_rounds"] == 1:  # one round: as before rounds
            del resolved["race_rounds"]
        return resolved

    # ----------------------------------------------------------------- loop
    def run(self) -> Best:
        cfg = self.cfg
        flat = checkpoint.shaping(self.resolved, self.cluster)
        flat.pop("cluster")
        self.tracker.log_params({"graph": self.graph.name, "cluster": self.cluster.name, **flat,
                                 "warm_start_placer": self.warm_start_placer})
        bar = progress_bar(total=cfg.iterations, initial=self.iteration, desc=f"{cfg.method} search",
                           disable=not self.progress, dynamic_ncols=True)
        try:
            with _deferred_interrupts() as interrupted:
                self._loop(bar, interrupted)
        finally:
            self._save_best()  # whatever ended the loop, the best strategy found is on disk
            bar.close()
            self.tracker.flush()
        return self.best

    def _loop(self, bar, interrupted: threading.Event) -> None:
        """Iterate; an interrupt (Ctrl-C, SIGTERM) ends the loop after a whole iteration and a checkpoint."""
        cfg = self.cfg
        while self.iteration < cfg.iterations:
            t0 = time.perf_counter()
            metrics = self.step()
            self.seconds += time.perf_counter() - t0
            metrics["charts/seconds"] = self.seconds
            metrics["charts/sim_seconds"] = self.sim_seconds
            self.history.append({"iteration": self.iteration, **metrics})
            self.tracker.log_metrics(metrics, step=self.iteration)
            self.iteration += 1
            bar.update(1)
            bar.set_postfix(best_ms=f"{self.best.step_time_us / 1e3:.2f}",
                            reward=f"{metrics['charts/reward_mean']:.3f}")
            if self.iteration % cfg.checkpoint_every == 0 or self.iteration == cfg.iterations or interrupted.is_set():
                self.save_checkpoint()
            if interrupted.is_set():
                self.tracker.flush()
                raise KeyboardInterrupt

    def step(self) -> dict[str, float]:
        """One iteration: sample, simulate, reward, update."""
        with denormals_flushed():
            samples = self.agent.sample(self.cfg.batch, self.generator, self.iteration)
        self.last_placements = samples.placements  # for callers that want the samples (validation)
        results = self.simulate(samples.placements)
        rewards = torch.tensor([self.agent.reward(r) for r in results], dtype=torch.float32)
        self._track_best(results, rewards, samples.placements)
        with denormals_flushed():
            losses = self.agent.update(samples, rewards, self.iteration)
        fits = [r for r in results if r.fits]
        return {
            "charts/reward_mean": float(rewards.mean()), "charts/reward_max": float(rewards.max()),
            "charts/step_time_ms_mean": float(np.mean([r.step_time_us for r in fits])) / 1e3 if fits else float("nan"),
            "charts/valid_fraction": len(fits) / len(results),
            "charts/best_step_time_ms": self.best.step_time_us / 1e3,
            "charts/best_peak_comm_MB": self.best.peak_comm_bytes / 1e6,
            "charts/best_peak_memory_GB": self.best.peak_memory_bytes / 1e9,
            "charts/peak_comm_MB_mean": float(np.mean([r.peak_comm_bytes for r in results])) / 1e6,
            "charts/peak_memory_GB_mean": float(np.mean([r.max_memory_bytes for r in results])) / 1e9,
            "charts/busiest_share_mean": float(np.mean([r.busiest_share for r in results])),
            "charts/simulations": float(self.cfg.batch * (self.iteration + 1)),
            **losses,
        }

    def simulate(self, placements: np.ndarray) -> list[SimResult]:
        """Every placement of a batch, on ``sim_threads`` threads; the results in the batch's order."""
        t0 = time.perf_counter()
        if self._pool is None or len(placements) < 2:
            results = [self.simulator.simulate(p, check=False) for p in placements]
        else:
            results = list(self._pool.map(lambda p: self.simulator.simulate(p, check=False), placements))
        self.sim_seconds += time.perf_counter() - t0
        return results

    def close(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown()
            self._pool = None

    def __del__(self):
        self.close()

    def _track_best(self, results: list[SimResult], rewards: torch.Tensor, placements: np.ndarray,
                    iteration: int | None = None, label: str | None = None) -> None:
        """Keep (and save) the best strategy; iteration -1 is the warm start's placer output."""
        iteration = self.iteration if iteration is None else iteration
        i = int(torch.argmax(rewards))
        if float(rewards[i]) > self.best.reward:
            r = results[i]
            self.best = Best(float(rewards[i]), r.step_time_us, r.peak_comm_bytes, r.max_memory_bytes,
                             iteration, placements[i].copy())
            self._unsaved_best = {"method": label or self.cfg.method, "iteration": iteration,
                                  "reward": self.best.reward, "simulated_step_time_us": r.step_time_us}
            if iteration < 0 or time.perf_counter() - self._best_saved_at >= BEST_SAVE_EVERY_S:
                self._save_best()

    def _save_best(self) -> None:
        """Write the best strategy found so far to best_strategy.json, if it is not written yet."""
        if self._unsaved_best is not None:
            Strategy.from_array(self.graph, self.cluster, self.best.placement, **self._unsaved_best).save(
                self.out_dir / "best_strategy.json")
            self._unsaved_best = None
            self._best_saved_at = time.perf_counter()

    def _warm_start(self) -> None:
        cfg = self.cfg
        with denormals_flushed():
            ws = warm_start(self.agent, self.graph, self.cluster, self.simulator, cfg.warm_start,
                            steps=cfg.warm_start_steps, lr=cfg.warm_start_lr, grad_clip=cfg.warm_start_grad_clip,
                            batch=cfg.batch, seed=cfg.seed, progress=self.progress)
        self.warm_start_placer, self.warm_start_agreement = ws.placer, ws.agreement
        self.tracker.log_metrics({"warm_start/agreement": ws.agreement,
                                  "warm_start/agreement_same_labels": ws.agreement_same_labels}, step=0)
        self._track_best([ws.result], torch.tensor([self.agent.reward(ws.result)]), ws.placement[None],
                         iteration=-1, label=f"{ws.placer} (warm start)")

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> None:
        self._save_best()
        checkpoint.save(self.checkpoint_path, {
            "iteration": self.iteration, "agent": self.agent.state_dict(),
            "generator": self.generator.get_state(), "numpy_rng": np.random.get_state(),
            "python_rng": random.getstate(), "best": asdict(self.best), "history": self.history,
            "seconds": self.seconds, "sim_seconds": self.sim_seconds, "run_id": self.tracker.run_id,
            "config": self.resolved, "graph_digest": self.graph.digest(), "cluster": self.cluster.name,
            "shaping": checkpoint.shaping(self.resolved, self.cluster),
            "warm_start": {"placer": self.warm_start_placer, "agreement": self.warm_start_agreement}})

    def _load_checkpoint(self) -> None:
        path = self.checkpoint_path
        state = checkpoint.load(path)
        try:
            if state["graph_digest"] != self.graph.digest() or state["cluster"] != self.cluster.name:
                raise TrinityError(f"belongs to another search ({state['cluster']}, graph {state['graph_digest']}); "
                                   "use another output folder or --fresh", source=str(path))
            checkpoint.check_shaping(state.get("shaping") or {}, checkpoint.shaping(self.resolved, self.cluster),
                                     str(path))
            self.agent.load_state_dict(state["agent"])
            self.generator.set_state(state["generator"])
            np.random.set_state(state["numpy_rng"])
            random.setstate(state["python_rng"])
        except TrinityError:
            raise
        except Exception as exc:  # a checkpoint of an older layout, or of other shapes
            raise TrinityError(f"checkpoint is unusable ({type(exc).__name__}: {str(exc)[:200]}); "
                               "pass --fresh to discard it and start over", source=str(path)) from None
        self.iteration = state["iteration"]
        self.best = Best(**state["best"])
        self.history = state["history"]
        self.seconds = state["seconds"]
        self.sim_seconds = state.get("sim_seconds", 0.0)
        warm = state.get("warm_start") or {}
        self.warm_start_placer, self.warm_start_agreement = warm.get("placer"), warm.get("agreement")


def _check_inputs(graph: OpGraph, cluster: Cluster) -> None:
    g, c = graph, cluster
    if c.n_devices > g.n_ops:
        raise TrinityError(f"cluster {c.name!r} has {c.n_devices} devices but graph {g.name!r} only "
                           f"{g.n_ops} ops", field="cluster")
    static = g.group_static_memory()
    if static.max() > c.memory.max():
        raise TrinityError(f"a colocation group needs {static.max() / 1e9:.2f} GB but the largest device of "
                           f"{c.name!r} has {c.memory.max() / 1e9:.2f} GB: no placement fits", field="cluster")
    if static.sum() > c.memory.sum():
        raise TrinityError(f"graph {g.name!r} needs {static.sum() / 1e9:.2f} GB but cluster {c.name!r} has "
                           f"{c.memory.sum() / 1e9:.2f} GB in all: no placement fits", field="cluster")


def _check_groups(graph: OpGraph, cluster: Cluster, k: int) -> None:
    units = graph.arrays.n_groups
    if units < k:
        raise TrinityError(f"graph {graph.name!r} has {units} placement units (ops, with colocation groups merged) "
                           f"but the policy has {k} groups; use num_groups <= {units}", field="agent.num_groups")
    if k < cluster.n_devices:
        raise TrinityError(f"{k} groups cannot use {cluster.n_devices} devices; use num_groups >= "
                           f"{cluster.n_devices}", field="agent.num_groups")


def denormals_are_flushed() -> bool:
    """Whether this thread computes float32 results below 1.2e-38 as zero (1e-20 squared is 1e-40)."""
    tiny = torch.tensor([1e-20], dtype=torch.float32)
    return float(tiny * tiny) == 0.0


@contextmanager
def denormals_flushed():
    """This thread computes float32 denormals as zero inside (``FLUSH_DENORMALS``), and as before after it.

    The simulator's threads are not touched: the flag is a thread's (x86's MXCSR)."""
    if not FLUSH_DENORMALS:
        yield
        return
    before = denormals_are_flushed()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


@contextmanager
def _deferred_interrupts():
    """Turn SIGINT/SIGTERM into a flag checked between iterations (main thread only)."""
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: flag.set())
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
