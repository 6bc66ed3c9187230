"""The placement search loop: sample strategies, simulate, reward, update; checkpoint and resume.

Read top to bottom like CleanRL's ppo.py. One iteration samples a batch of
strategies from the policy, scores each with the simulator and the reward,
and updates the policy:

* ``trinity``: MDPE reward, PPO (several epochs of the clipped objective on
  R - b over the batch), Adam, gradient-norm clip, logit noise that decays
  to zero over the first ``noise_steps`` iterations;
* ``hierarchical`` (Mirhoseini et al. 2018): the published Grouper and
  seq2seq Placer (trinity/rl/hierarchical.py) over features of the graph
  itself, reward -sqrt(runtime), one REINFORCE step per batch,
  k = min(256, 20 * devices) groups, the release's logit noise and
  learning-rate decay.

Trinity overlaps sampling with learning (``overlap_sampling``): while
iteration t's PPO update runs, a second thread samples and simulates
iteration t+1's batch from a snapshot of the policy before that update.
PPO's ratio is taken against the log-probabilities of the policy that
sampled, so the one-update lag is corrected for exactly as PPO corrects for
its own epochs; on two cores it cuts an iteration by a third. REINFORCE has
no such correction, so Hierarchical samples on-policy, in turn.

Everything random draws from generators stored in the checkpoint (with the
batch sampled ahead), so a search killed and resumed ends exactly where an
uninterrupted one does.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trinity.cluster import Cluster, interchangeable_devices
from trinity.errors import PlacementError, TrinityError
from trinity.features import OpFeatures, op_features
from trinity.fileio import atomic_write_bytes
from trinity.graph.ir import OpGraph
from trinity.placement import Strategy as StrategyFile
from trinity.progress import progress as progress_bar
from trinity.reward import MDPEConfig, hierarchical_reward, mdpe_reward
from trinity.rl.algorithms import EMABaseline, ppo_loss, reinforce_loss
from trinity.rl.hierarchical import GrouperInputs, HierarchicalConfig, HierarchicalPolicy
from trinity.rl.policy import PlacementPolicy, PolicyConfig, Strategy, UnitGraph
from trinity.sim import SimResult, Simulator
from trinity.track import NullTracker

METHODS = ("trinity", "hierarchical")
WARM_START_PLACERS = ("single", "expert", "metis", "m-topo", "m-etf", "m-sct")


@dataclass
class SearchConfig:
    method: str = "trinity"
    iterations: int = 1000
    batch: int = 8  #: strategies sampled per iteration
    num_groups: int | None = None  #: k; None = 256 (trinity) or min(256, 20 * devices) (hierarchical), at least
    #: one per device and at most one per placement unit
    #: Adam; None = 1e-3 (trinity; the paper's 0.1 collapses the policy, see README) or the published 0.1
    #: (hierarchical), and 1e-4 after a warm start (fine-tuning: a larger rate walks a trained policy
    #: away from its placer within tens of iterations)
    lr: float | None = None
    ppo_epochs: int = 2
    clip: float = 0.2
    entropy_coef: float = 0.0
    baseline_decay: float = 0.9
    noise_max: float = 0.1  #: logit noise at iteration 0, decaying linearly ...
    noise_steps: int = 500  #: ... to zero here
    grad_clip: float = 1.0
    #: trinity: sample the next batch on a second thread during the update (see module docstring)
    overlap_sampling: bool = True
    seed: int = 0
    threads: int = 1
    checkpoint_every: int = 50
    embedding_dim: int = 16
    #: placer whose output the policy first imitates; "best" = the best by this search's reward of
    #: WARM_START_PLACERS on this graph and cluster
    warm_start: str | None = None
    warm_start_steps: int = 1000
    warm_start_lr: float = 1e-2
    warm_start_fine_tune_lr: float = 1e-4
    reward: MDPEConfig = field(default_factory=MDPEConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)  #: trinity's network
    hierarchical: HierarchicalConfig = field(default_factory=HierarchicalConfig)  #: hierarchical's network

    def __post_init__(self):
        if self.method not in METHODS:
            raise TrinityError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}", field="method")
        if isinstance(self.reward, dict):
            self.reward = MDPEConfig(**self.reward)
        if isinstance(self.policy, dict):
            self.policy = PolicyConfig(**self.policy)
        if isinstance(self.hierarchical, dict):
            self.hierarchical = HierarchicalConfig(**self.hierarchical)


@dataclass
class Best:
    reward: float = -np.inf
    step_time_us: float = np.inf
    peak_comm_bytes: float = np.inf
    peak_memory_bytes: float = np.inf
    iteration: int = -1
    placement: np.ndarray | None = None


@dataclass
class Batch:
    """One iteration's sampled strategies and their simulations."""

    strategy: Strategy
    placements: np.ndarray  # int64[B, N]
    results: list[SimResult]
    noise: float


class Search:
    """One search of one graph on one cluster, writing into ``out_dir``."""

    def __init__(self, graph: OpGraph, cluster: Cluster, cfg: SearchConfig, out_dir: str | Path, *,
                 tracker=None, feature_cache: str | Path | None = None, features: OpFeatures | None = None,
                 fresh: bool = False, progress: bool = True):
        self.graph, self.cluster, self.cfg = graph, cluster, cfg
        self.out_dir = Path(out_dir)
        self.tracker = tracker or NullTracker()
        self.progress = progress
        trinity = cfg.method == "trinity"
        # the default k: at least one group per device (1,024 devices get 1,024 groups, not 256), never more
        # groups than placement units (a 12-op graph gets 12, not 256)
        k = cfg.num_groups or min(max(256 if trinity else min(256, 20 * cluster.n_devices), cluster.n_devices),
                                  graph.arrays.n_groups)
        self.num_groups = k
        if trinity:  # per-unit logits by default only when warm-starting: they let the imitation be exact
            unit_logits = bool(cfg.warm_start) if cfg.policy.unit_logits is None else cfg.policy.unit_logits
            self.cfg.policy = PolicyConfig(**{**asdict(cfg.policy), "num_groups": k, "unit_logits": unit_logits})
        else:
            self.cfg.hierarchical = HierarchicalConfig(**{**asdict(cfg.hierarchical), "num_groups": k})
        if cfg.lr is None:
            cfg.lr = cfg.warm_start_fine_tune_lr if cfg.warm_start else 1e-3 if trinity else 0.1
        self._check_inputs()
        torch.set_num_threads(cfg.threads)
        if trinity:  # features from the pipeline's embed stage, or computed here (cached in ``feature_cache``)
            feats = features or op_features(graph, embedding_dim=cfg.embedding_dim, seed=cfg.seed,
                                            cache_dir=feature_cache)
            self.units = UnitGraph(graph, feats)
        else:  # Hierarchical reads the graph itself: op types, output sizes, adjacency
            h = self.cfg.hierarchical
            self.units = GrouperInputs(graph, h.max_outputs, h.adjacency)
        # Initialisation and dropout draw from torch's global generator; this search keeps its own
        # state of it (see _own_rng), so other code, or another search, cannot shift its stream.
        self.overlap = cfg.overlap_sampling and trinity
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            if trinity:
                self.policy = PlacementPolicy(self.units, cluster.n_devices, feats.vocabulary_size, self.cfg.policy)
                # the sampler's copy of the policy (its weights are loaded before each use)
                self._sampler = (PlacementPolicy(self.units, cluster.n_devices, feats.vocabulary_size,
                                                 self.cfg.policy) if self.overlap else None)
            else:
                self.policy = HierarchicalPolicy(self.units, cluster.n_devices, self.cfg.hierarchical)
                self._sampler = None
            self._torch_rng = torch.get_rng_state()
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.lr, foreach=True)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.baseline = EMABaseline(cfg.baseline_decay)
        self.simulator = Simulator(graph, cluster)
        self.reward_fn: Callable[[SimResult], float] = (
            (lambda r: mdpe_reward(r, cfg.reward)) if cfg.method == "trinity"
            else (lambda r: hierarchical_reward(r, cfg.reward.fail_runtime_ratio)))
        self._executor: ThreadPoolExecutor | None = None
        self._next: Future | Batch | None = None  # the next iteration's batch, when sampled ahead
        self.iteration = 0
        self.warm_start_agreement: float | None = None  #: share of ops a sample puts where the placer did
        self.warm_start_placer: str | None = None  #: the placer imitated (resolves "best")
        self.last_placements: np.ndarray | None = None
        self.best = Best()
        self.history: list[dict] = []
        self.seconds = 0.0
        self.checkpoint_path = self.out_dir / "checkpoint.pt"
        if self.checkpoint_path.exists():
            if fresh:
                self.checkpoint_path.unlink()
            else:
                self._load_checkpoint()
        if self.iteration == 0 and cfg.warm_start:
            self._warm_start(cfg.warm_start)

    # ----------------------------------------------------------------- inputs
    def _check_inputs(self) -> None:
        g, c, k = self.graph, self.cluster, self.num_groups
        if c.n_devices > g.n_ops:
            raise TrinityError(f"cluster {c.name!r} has {c.n_devices} devices but graph {g.name!r} only "
                               f"{g.n_ops} ops", field="cluster")
        units = g.arrays.n_groups
        if units < k:
            raise TrinityError(f"graph {g.name!r} has {units} placement units (ops, with colocation groups merged) "
                               f"but the policy has {k} groups; use num_groups <= {units}", field="num_groups")
        if k < c.n_devices:
            raise TrinityError(f"{k} groups cannot use {c.n_devices} devices; use num_groups >= {c.n_devices}",
                               field="num_groups")
        static = g.group_static_memory()
        if static.max() > c.memory.max():
            raise TrinityError(f"a colocation group needs {static.max() / 1e9:.2f} GB but the largest device of "
                               f"{c.name!r} has {c.memory.max() / 1e9:.2f} GB: no placement fits", field="cluster")
        if static.sum() > c.memory.sum():
            raise TrinityError(f"graph {g.name!r} needs {static.sum() / 1e9:.2f} GB but cluster {c.name!r} has "
                               f"{c.memory.sum() / 1e9:.2f} GB in all: no placement fits", field="cluster")

    # ----------------------------------------------------------------- loop
    def run(self) -> Best:
        cfg = self.cfg
        self.tracker.log_params({"method": cfg.method, "graph": self.graph.name, "cluster": self.cluster.name,
                                 **{k: v for k, v in asdict(cfg).items() if k not in ("reward", "policy")},
                                 **{f"reward.{k}": v for k, v in asdict(cfg.reward).items()},
                                 **{f"{self._network}.{k}": v for k, v in asdict(getattr(cfg, self._network)).items()},
                                 "warm_start_placer": self.warm_start_placer})
        bar = progress_bar(total=cfg.iterations, initial=self.iteration, desc=f"{cfg.method} search",
                   disable=not self.progress, dynamic_ncols=True)
        with _deferred_interrupts() as interrupted:
            self._loop(bar, interrupted)
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
        cfg = self.cfg
        batch = self._take_next() or self._draw(self.policy, self.iteration)
        results, placements = batch.results, batch.placements
        self.last_placements = placements  # for callers that want the samples (validation)
        rewards = torch.tensor([self.reward_fn(r) for r in results], dtype=torch.float32)
        self._track_best(results, rewards, placements)
        advantages = self.baseline.advantages(rewards)
        if self.overlap:  # the next batch, from the policy as it is before this update
            self._sampler.load_state_dict(self.policy.state_dict())
            self._executor = self._executor or ThreadPoolExecutor(1, thread_name_prefix="trinity-sampler")
            self._next = self._executor.submit(self._draw, self._sampler, self.iteration + 1)
        losses = self._update(batch.strategy, advantages)
        fits = [r for r in results if r.fits]
        return {
            "charts/reward_mean": float(rewards.mean()), "charts/reward_max": float(rewards.max()),
            "charts/baseline": float(self.baseline.value),
            "charts/step_time_ms_mean": float(np.mean([r.step_time_us for r in fits])) / 1e3 if fits else float("nan"),
            "charts/valid_fraction": len(fits) / len(results),
            "charts/best_step_time_ms": self.best.step_time_us / 1e3,
            "charts/best_peak_comm_MB": self.best.peak_comm_bytes / 1e6,
            "charts/best_peak_memory_GB": self.best.peak_memory_bytes / 1e9,
            "charts/peak_comm_MB_mean": float(np.mean([r.peak_comm_bytes for r in results])) / 1e6,
            "charts/peak_memory_GB_mean": float(np.mean([r.max_memory_bytes for r in results])) / 1e9,
            "charts/noise": batch.noise, "charts/simulations": float(cfg.batch * (self.iteration + 1)),
            **losses,
        }

    @property
    def _network(self) -> str:
        """The config section of this method's network (the other one shapes nothing here)."""
        return "policy" if self.cfg.method == "trinity" else "hierarchical"

    def _noise(self, iteration: int) -> float:
        cfg = self.cfg
        if cfg.method == "hierarchical":  # the release: a constant relative noise, then none
            return cfg.hierarchical.logits_noise if iteration < cfg.hierarchical.noise_steps else 0.0
        return cfg.noise_max * max(0.0, 1.0 - iteration / cfg.noise_steps) if cfg.noise_steps else 0.0

    def _lr(self, iteration: int) -> float:
        """Adam's rate: constant (trinity); the release's staircase decay (hierarchical)."""
        h = self.cfg.hierarchical
        if self.cfg.method == "trinity" or iteration < h.lr_decay_start:
            return self.cfg.lr
        return self.cfg.lr * h.lr_decay ** ((iteration - h.lr_decay_start) // h.lr_decay_every)

    def _draw(self, policy: PlacementPolicy, iteration: int) -> Batch:
        """Sample a batch from ``policy`` and simulate it (runs on the sampler thread when overlapping)."""
        noise = self._noise(iteration)
        strategy = policy.sample(self.cfg.batch, self.generator, noise)
        with torch.no_grad():  # PPO's old log-probabilities, computed exactly as the update computes the new ones
            strategy.logp = policy.log_prob(strategy)[0]
        return self._simulated(strategy, noise)

    def _simulated(self, strategy: Strategy, noise: float) -> Batch:
        placements = strategy.placements(self.units.unit_of_op)
        return Batch(strategy, placements, [self.simulator.simulate(p, check=False) for p in placements], noise)

    @contextmanager
    def _own_rng(self):
        """Run with this search's state of torch's global generator, leaving the caller's as it was."""
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._torch_rng)
            yield
            self._torch_rng = torch.get_rng_state()

    def _take_next(self) -> Batch | None:
        """The batch sampled ahead for this iteration, if any (waiting for it if need be)."""
        batch, self._next = self._next, None
        return batch.result() if isinstance(batch, Future) else batch

    def _update(self, strategy: Strategy, advantages: torch.Tensor) -> dict[str, float]:
        cfg = self.cfg
        logp_old = strategy.logp  # of the distribution sampled: its dropout mask and noise (see Strategy)
        self.policy.train()
        epochs = cfg.ppo_epochs if cfg.method == "trinity" else 1
        for group in self.optimizer.param_groups:
            group["lr"] = self._lr(self.iteration)
        stats: dict[str, float] = {}
        for _ in range(epochs):
            logp, entropy = self.policy.log_prob(strategy)
            if cfg.method == "trinity":  # every decision is an action sharing its strategy's advantage
                loss, stats = ppo_loss(logp, logp_old, advantages[:, None].expand_as(logp), cfg.clip)
            else:
                loss = reinforce_loss(logp.sum(dim=1), advantages)
            total = loss - cfg.entropy_coef * entropy
            self.optimizer.zero_grad()
            total.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
            self.optimizer.step()
        return {"losses/policy_loss": float(loss.detach()), "losses/entropy": float(entropy.detach()),
                "charts/lr": self.optimizer.param_groups[0]["lr"],
                "losses/grad_norm": float(grad_norm), **{f"losses/{k}": v for k, v in stats.items()}}

    def _track_best(self, results: list[SimResult], rewards: torch.Tensor, placements: np.ndarray,
                    iteration: int | None = None, label: str | None = None) -> None:
        """Keep (and save) the best strategy; iteration -1 is the warm start's placer output."""
        iteration = self.iteration if iteration is None else iteration
        i = int(torch.argmax(rewards))
        if float(rewards[i]) > self.best.reward:
            r = results[i]
            self.best = Best(float(rewards[i]), r.step_time_us, r.peak_comm_bytes, r.max_memory_bytes,
                             iteration, placements[i].copy())
            StrategyFile.from_array(self.graph, self.cluster, self.best.placement, method=label or self.cfg.method,
                                    iteration=iteration, reward=self.best.reward,
                                    simulated_step_time_us=r.step_time_us).save(self.out_dir / "best_strategy.json")

    # ----------------------------------------------------------------- warm start
    def _warm_start(self, placer: str) -> None:
        """Imitate a placer, then count its placement as the search's first candidate.

        The targets are ones the policy can represent: group g goes to device g mod D (the
        decoder only has to learn "the device after the one before"), and a unit the placer
        put on device d may join any group of that class, so the partition network raises the
        class's total probability rather than one arbitrary group's.
        """
        placer, placement = self._warm_start_target(placer)
        self.warm_start_placer = placer
        k, n_dev, units = self.num_groups, self.cluster.n_devices, self.units
        unit_device = np.zeros(units.n_units, np.int64)
        unit_device[units.unit_of_op] = placement
        group_device = np.arange(k) % n_dev
        groups = np.zeros(units.n_units, np.int64)  # a partition that reproduces the placement, ...
        for d in range(n_dev):  # ... each device's units spread evenly over its class of groups
            mine, mine_groups = np.flatnonzero(unit_device == d), np.flatnonzero(group_device == d)
            groups[mine] = mine_groups[(np.arange(len(mine)) * len(mine_groups)) // max(len(mine), 1)]
        target = Strategy(torch.from_numpy(groups)[None], torch.from_numpy(group_device)[None])
        outside_class = torch.from_numpy(group_device[None, :] != unit_device[:, None])  # [U, k]
        # Its own optimizer: supervised steps want a larger rate, and should leave no Adam state behind.
        optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.cfg.warm_start_lr, foreach=True)
        self.policy.train()
        for _ in progress_bar(range(self.cfg.warm_start_steps), desc=f"imitating {placer}", disable=not self.progress):
            with self._own_rng():  # the dropout mask's seed
                dropout_seed = int(torch.randint(0, 2 ** 62, (1,)))
            logp_groups = torch.log_softmax(self.policy.partition_logits(dropout_seed), dim=1)
            schedule = self.policy.schedule_logits(self.policy.group_embeddings(target.groups), target.devices)
            logp_device = logp_groups.masked_fill(outside_class, -torch.inf).logsumexp(dim=1)  # [U]
            logp_schedule = torch.log_softmax(schedule, dim=2)[0].gather(1, target.devices[0, :, None])[:, 0]
            loss = -torch.cat([logp_device, logp_schedule]).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.grad_clip)
            optimizer.step()
        samples = self.policy.sample(self.cfg.batch, torch.Generator().manual_seed(self.cfg.seed))
        sampled = samples.placements(units.unit_of_op)
        self.warm_start_agreement = agreement(sampled, placement, relabel=interchangeable_devices(self.cluster))
        self.tracker.log_metrics({"warm_start/agreement": self.warm_start_agreement,
                                  "warm_start/agreement_same_labels": agreement(sampled, placement, relabel=False)},
                                 step=0)
        result = self.simulator.simulate(placement, check=False)
        self._track_best([result], torch.tensor([self.reward_fn(result)]), placement[None], iteration=-1,
                         label=f"{placer} (warm start)")

    def _warm_start_target(self, placer: str) -> tuple[str, np.ndarray]:
        from trinity.placers import best_by_reward, place

        if placer != "best":
            return placer, place(placer, self.graph, self.cluster).placement
        try:
            return best_by_reward(WARM_START_PLACERS, self.graph, self.cluster, self.reward_fn, seed=self.cfg.seed,
                                  simulator=self.simulator)
        except PlacementError:
            raise TrinityError("no placer could place the graph, so there is nothing to warm-start from",
                               field="warm_start") from None

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> None:
        ahead = self._take_next()  # completes the sampler's draw, so the generator state is after it
        self._next = ahead
        state = {
            "iteration": self.iteration, "policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(), "torch_rng": self._torch_rng,
            "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
            "baseline": self.baseline.value, "best": asdict(self.best), "history": self.history,
            "seconds": self.seconds, "run_id": self.tracker.run_id, "config": asdict(self.cfg),
            "graph_digest": self.graph.digest(), "cluster": self.cluster.name, "shaping": self._shaping(),
            "warm_start": {"placer": self.warm_start_placer, "agreement": self.warm_start_agreement},
            "next_batch": None if ahead is None else {
                "groups": ahead.strategy.groups, "devices": ahead.strategy.devices,
                "logp": ahead.strategy.logp, "noise": ahead.noise, "dropout_seed": ahead.strategy.dropout_seed,
                "noise_seed": ahead.strategy.noise_seed},
        }
        buf = io.BytesIO()
        torch.save(state, buf)
        atomic_write_bytes(self.checkpoint_path, buf.getvalue())

    #: settings a search may change when resumed: they do not shape its state
    RESUMABLE_CHANGES = ("iterations", "checkpoint_every", "threads")

    def _shaping(self) -> dict:
        """Everything that shapes the search's state, flattened: a resume must match it."""
        c = self.cluster
        h = hashlib.sha256(json.dumps([c.device_names, [d.kind for d in c.devices], c.send_cpu_share]).encode())
        for a in (c.bandwidth, c.latency, c.memory, np.array([d.speed for d in c.devices])):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        flat = {"cluster": h.hexdigest()[:16]}  # devices, links, memory, speeds (a digest: 1,024 devices are 1M links)
        other_network = {"policy", "hierarchical"} - {self._network}
        for key, value in asdict(self.cfg).items():
            if key in self.RESUMABLE_CHANGES or key in other_network:
                continue
            items = value.items() if isinstance(value, dict) else [("", value)]
            flat.update({f"{key}.{k}" if k else key: v for k, v in items})
        return flat

    def _check_shaping(self, saved: dict, source: str) -> None:
        now = self._shaping()
        differ = [k for k in sorted(set(saved) | set(now)) if _normal(saved.get(k)) != _normal(now.get(k))]
        if differ:
            shown = "; ".join(f"{k}: {saved.get(k)!r} then, {now.get(k)!r} now" for k in differ[:4])
            more = f" (and {len(differ) - 4} more)" if len(differ) > 4 else ""
            raise TrinityError(f"was made with other settings ({shown}{more}); resume with the same ones, or "
                               "use --fresh or another output folder", source=source, field=differ[0])

    def _load_checkpoint(self) -> None:
        path = self.checkpoint_path
        try:
            state = torch.load(path, weights_only=False)
            if state["graph_digest"] != self.graph.digest() or state["cluster"] != self.cluster.name:
                raise TrinityError(f"belongs to another search ({state['cluster']}, graph {state['graph_digest']}); "
                                   "use another output folder or --fresh", source=str(path))
            self._check_shaping(state.get("shaping") or {}, str(path))
            self.policy.load_state_dict(state["policy"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.generator.set_state(state["generator"])
            self._torch_rng = state["torch_rng"]
            np.random.set_state(state["numpy_rng"])
            random.setstate(state["python_rng"])
        except TrinityError:
            raise
        except Exception as exc:  # any unpickling or shape problem means the file is unusable
            raise TrinityError(f"checkpoint is corrupt ({type(exc).__name__}: {str(exc)[:200]}); "
                               "pass --fresh to discard it and start over", source=str(path)) from None
        self.iteration = state["iteration"]
        self.baseline.value = state["baseline"]
        self.best = Best(**state["best"])
        self.history = state["history"]
        self.seconds = state["seconds"]
        warm = state.get("warm_start") or {}
        self.warm_start_placer, self.warm_start_agreement = warm.get("placer"), warm.get("agreement")
        ahead = state.get("next_batch")
        if ahead is not None:  # simulation is deterministic: re-simulating gives the same results
            strategy = Strategy(ahead["groups"], ahead["devices"], ahead["logp"], ahead.get("dropout_seed"),
                                ahead.get("noise_seed", 0), ahead["noise"])
            self._next = self._simulated(strategy, ahead["noise"])


def agreement(samples: np.ndarray, placement: np.ndarray, *, relabel: bool) -> float:
    """Share of ops that samples [B, N] put where ``placement`` [N] does, averaged over samples.

    With ``relabel`` (devices interchangeable), each sample is first relabelled by the device
    permutation that agrees most (an assignment problem on its confusion matrix with the
    placement): the warm start imitates the placement as the simulator sees it, and there a
    strategy that only swaps the names of interchangeable devices is the same strategy.
    """
    from scipy.optimize import linear_sum_assignment

    samples = np.atleast_2d(samples)
    if not relabel:
        return float((samples == placement).mean())
    n_dev = int(max(samples.max(), placement.max())) + 1
    shares = []
    for sample in samples:
        confusion = np.zeros((n_dev, n_dev), np.int64)  # [placer's device, sample's device]
        np.add.at(confusion, (placement, sample), 1)
        rows, cols = linear_sum_assignment(confusion, maximize=True)
        shares.append(confusion[rows, cols].sum() / len(placement))
    return float(np.mean(shares))


def _normal(value):
    """Values as a checkpoint stores them and as configs give them compare equal (tuples, lists)."""
    return list(value) if isinstance(value, tuple) else value


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


def checkpoint_run_id(out_dir: str | Path) -> str | None:
    """The MLflow run a checkpointed search logged to, so a resumed search continues it."""
    path = Path(out_dir) / "checkpoint.pt"
    if not path.exists():
        return None
    try:
        return torch.load(path, weights_only=False).get("run_id")
    except Exception:  # a corrupt checkpoint is reported by Search itself
        return None
