"""TAPP's search (Appl. Sci. 2021, 11, 4785): policy gradient over pipeline plans, in the paper's shape.

1. Layers -> groups, a feed-forward network: per layer, features (its share of the compute, of the
   weights, its output size, its position) -> hidden layers -> logits over k = number of devices groups.
   Stages must be contiguous, so layer i may only join the group of layer i - 1 or open the next one
   (layer 0 opens group 0): the softmax runs over those two groups. A free table of logits per (layer,
   group), zero at first (``layer_logits``), is added to the network's output, so that the policy can
   express any split (features alone cannot tell apart identical transformer blocks).
2. Groups -> devices, an attention network: each used group (its compute, weight and boundary shares,
   its index) is a query, each device (speed, memory, mean link bandwidth and latency) a key;
   logits q.k / sqrt(h), plus a free (group, device) table, over the devices no earlier group took;
   groups are placed in pipeline order.
3. Reward from the predicted batch time: ``-step_time / lower_bound`` (the cost model's `predict`);
   a plan that does not fit in memory gets ``-fail_ratio``. REINFORCE with the EMA baseline of
   `trinity.rl.algorithms` (advantages divided by the batch's standard deviation), an entropy bonus,
   Adam. The best plan seen (and the greedy decode at the end) is kept.
4. Polish (``polish_top``, an addition to the paper): hill climbing from the best distinct plans
   sampled, over the plans one move away (a boundary moved anywhere between its neighbours, two stages' devices swapped,
   a stage moved to an unused device or, with its layer count, to another place in the pipeline, a stage split onto an unused device, two adjacent stages merged),
   until no move lowers the predicted step time. The policy's samples find the region, the polish its
   local optimum; ``polish_top=0`` is the plain agent (reported apart).

Deterministic from ``seed``. ``seed_plans`` (e.g. PipeDream's) are evaluated before the search and can be
the answer; results say whether they were given (``seeded``), so a from-scratch search is reported apart.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import nn

from trinity.cluster import Cluster
from trinity.pipeline_parallel.cost import predict
from trinity.pipeline_parallel.plan import PipelineError, PipelinePlan
from trinity.profile.layers import LayerProfile
from trinity.progress import progress
from trinity.rl.algorithms import EMABaseline, reinforce_loss


@dataclass
class TappConfig:
    """TAPP search settings (a Hydra ``method`` group can hold these fields as they are)."""

    iterations: int = 150  #: policy updates
    batch: int = 32  #: plans sampled per update
    lr: float = 0.01  #: Adam's learning rate
    hidden: tuple[int, int] = (64, 64)  #: the feed-forward (layers -> groups) network's hidden sizes
    attention: int = 32  #: query/key size of the attention (groups -> devices) network
    layer_logits: bool = True  #: add a free (layer, group) and (group, device) logit table
    entropy: float = 0.05  #: entropy bonus weight
    polish_top: int = 16  #: hill-climb from this many of the best distinct plans sampled (0: none)
    baseline_decay: float = 0.9  #: EMA baseline decay
    fail_ratio: float = 10.0  #: reward of a plan that does not fit: -fail_ratio lower bounds
    seed: int = 0

    def __post_init__(self):
        for name in ("iterations", "batch", "attention"):
            if int(getattr(self, name)) < 1:
                raise PipelineError(f"must be >= 1, got {getattr(self, name)}", field=f"tapp.{name}")
        if not self.lr > 0:
            raise PipelineError(f"must be > 0, got {self.lr}", field="tapp.lr")
        self.hidden = tuple(int(h) for h in self.hidden)


@dataclass
class TappResult:
    plan: PipelinePlan
    step_time_us: float
    history: list[float]  # best step time after each iteration
    evaluations: int  # distinct plans the cost model scored
    seconds: float
    seeded: bool  # seed_plans were given
    found_at: int  # iteration that found the answer (-1: a seed plan; iterations + 1: the polish)
    sampled_best_us: float = math.inf  # best step time the agent sampled, before the polish
    config: TappConfig = field(default_factory=TappConfig)


def _layer_features(profile: LayerProfile) -> torch.Tensor:
    n = profile.n_layers
    comp = np.array([l.compute_us for l in profile.layers])
    params = np.array([l.param_bytes for l in profile.layers], float)
    out = np.array([l.output_bytes for l in profile.layers], float)
    pos = np.arange(n) / max(1, n - 1)
    feats = np.stack([comp / comp.sum(), params / max(1.0, params.sum()),
                      np.log1p(out) / max(1.0, np.log1p(out).max()), pos, (np.arange(n) == 0), (np.arange(n) == n - 1)],
                     axis=1)
    return torch.tensor(feats, dtype=torch.float32)


def _device_features(cluster: Cluster) -> torch.Tensor:
    D = cluster.n_devices
    speed = np.array([d.speed for d in cluster.devices])
    mem = cluster.memory.astype(float)
    off = ~np.eye(D, dtype=bool)
    bw = np.array([cluster.bandwidth[i][off[i]].mean() if D > 1 else 1.0 for i in range(D)])
    lat = np.array([cluster.latency[i][off[i]].mean() if D > 1 else 0.0 for i in range(D)])
    feats = np.stack([speed / speed.max(), mem / mem.max(), bw / bw.max(), lat / max(1e-9, lat.max())], axis=1)
    return torch.tensor(feats, dtype=torch.float32)


class TappPolicy(nn.Module):
    """The two networks of TAPP's agent (see the module docstring)."""

    def __init__(self, profile: LayerProfile, cluster: Cluster, cfg: TappConfig):
        super().__init__()
        n, D = profile.n_layers, cluster.n_devices
        self.k = min(n, D)
        self.register_buffer("layer_x", _layer_features(profile))
        self.register_buffer("device_x", _device_features(cluster))
        h1, h2 = cfg.hidden
        self.ffn = nn.Sequential(nn.Linear(self.layer_x.shape[1], h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU(),
                                 nn.Linear(h2, self.k))
        self.query = nn.Linear(5, cfg.attention)
        self.key = nn.Linear(self.device_x.shape[1], cfg.attention)
        self.layer_table = nn.Parameter(torch.zeros(n, self.k), requires_grad=cfg.layer_logits)
        self.device_table = nn.Parameter(torch.zeros(self.k, D), requires_grad=cfg.layer_logits)
        self.scale = 1.0 / math.sqrt(cfg.attention)

    def group_logits(self) -> torch.Tensor:
        """[n, k] logits of each layer's group."""
        return self.ffn(self.layer_x) + self.layer_table

    @staticmethod
    def _group_choice(logits_i: torch.Tensor, prev: torch.Tensor, k: int) -> torch.Tensor:
        """[B, 2] logits of (stay in group prev, open group prev + 1); the latter -inf past k - 1."""
        stay = logits_i[prev]
        nxt = logits_i[(prev + 1).clamp(max=k - 1)].masked_fill(prev + 1 >= k, -math.inf)
        return torch.stack([stay, nxt], dim=1)

    def _group_embedding(self, groups: torch.Tensor) -> torch.Tensor:
        """[B, k, 5]: per group, shares of compute, weights, boundary size, its index, its layer count."""
        B, n = groups.shape
        onehot = torch.nn.functional.one_hot(groups, self.k).float()  # [B, n, k]
        x = self.layer_x
        comp = torch.einsum("bnk,n->bk", onehot, x[:, 0])
        params = torch.einsum("bnk,n->bk", onehot, x[:, 1])
        last = (torch.cat([groups[:, 1:], groups[:, -1:] + 1], 1) != groups).float()  # layer ends its group
        boundary = torch.einsum("bnk,n->bk", onehot * last[:, :, None], x[:, 2])
        count = onehot.sum(1) / n
        index = torch.arange(self.k, dtype=torch.float32).expand(B, -1) / max(1, self.k - 1)
        return torch.stack([comp, params, boundary, index, count], dim=2)

    def device_logits(self, groups: torch.Tensor) -> torch.Tensor:
        """[B, k, D] attention logits of each group's device."""
        q = self.query(self._group_embedding(groups))
        kk = self.key(self.device_x)
        return q @ kk.T * self.scale + self.device_table

    @torch.no_grad()
    def sample(self, B: int, gen: torch.Generator | None, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """B plans: groups [B, n] (contiguous, from 0) and devices [B, k] (-1 for unused groups)."""
        n = self.layer_x.shape[0]
        gl = self.group_logits()
        groups = torch.zeros(B, n, dtype=torch.long)
        for i in range(1, n):
            logits = self._group_choice(gl[i], groups[:, i - 1], self.k)
            step = logits.argmax(1) if greedy else torch.multinomial(logits.softmax(1), 1, generator=gen)[:, 0]
            groups[:, i] = groups[:, i - 1] + step
        dl = self.device_logits(groups)
        used = groups[:, -1] + 1
        devices = torch.full((B, self.k), -1, dtype=torch.long)
        taken = torch.zeros(B, dl.shape[2], dtype=torch.bool)
        for g in range(self.k):
            logits = dl[:, g].masked_fill(taken, -math.inf)
            pick = logits.argmax(1) if greedy else torch.multinomial(logits.softmax(1), 1, generator=gen)[:, 0]
            active = g < used
            devices[:, g] = torch.where(active, pick, torch.full_like(pick, -1))
            taken[torch.arange(B)[active], pick[active]] = True
        return groups, devices

    def log_prob(self, groups: torch.Tensor, devices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per plan: log-probability of its decisions under the current networks, and their entropy."""
        B, n = groups.shape
        gl = self.group_logits()
        logp = torch.zeros(B)
        ent = torch.zeros(B)
        for i in range(1, n):
            dist = torch.distributions.Categorical(logits=self._group_choice(gl[i], groups[:, i - 1], self.k))
            logp = logp + dist.log_prob(groups[:, i] - groups[:, i - 1])
            ent = ent + torch.nan_to_num(dist.entropy())
        dl = self.device_logits(groups)
        taken = torch.zeros(B, dl.shape[2], dtype=torch.bool)
        for g in range(self.k):
            active = devices[:, g] >= 0
            if not active.any():
                break
            logits = dl[:, g].masked_fill(taken, -math.inf)
            dist = torch.distributions.Categorical(logits=logits[active])
            logp[active] = logp[active] + dist.log_prob(devices[active, g])
            ent[active] = ent[active] + torch.nan_to_num(dist.entropy())
            taken = taken.clone()
            taken[torch.arange(B)[active], devices[active, g]] = True
        return logp, ent


def _to_plan(groups: torch.Tensor, devices: torch.Tensor, m: int, schedule: str) -> PipelinePlan:
    g = groups.tolist()
    bounds = [0] + [i for i in range(1, len(g)) if g[i] != g[i - 1]] + [len(g)]
    return PipelinePlan(tuple(bounds), tuple(int(d) for d in devices.tolist() if d >= 0), m, schedule)


def tapp_search(profile: LayerProfile, cluster: Cluster, *, micro_batches: int = 4, schedule: str = "1f1b",
                batch: int | None = None, config: TappConfig | None = None,
                seed_plans: Sequence[PipelinePlan] = (), show_progress: bool = False) -> TappResult:
    """Search a pipeline plan for ``profile`` on ``cluster`` with TAPP's agent; the best plan seen."""
    cfg = config or TappConfig()
    batch = profile.batch if batch is None else int(batch)
    PipelinePlan((0, profile.n_layers), (0,), micro_batches, schedule).check(profile.n_layers, cluster.n_devices, batch)
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    policy = TappPolicy(profile, cluster, cfg)
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr)
    baseline = EMABaseline(cfg.baseline_decay)
    cache: dict[tuple, float] = {}
    best: list = [math.inf, None, -1]

    def evaluate(plan: PipelinePlan, iteration: int) -> float:
        if plan.key not in cache:
            cost = predict(plan, profile, cluster, batch)
            cache[plan.key] = cost.step_time_us if cost.fits else math.inf
            if cache[plan.key] < best[0]:
                best[:] = [cache[plan.key], plan, iteration]
        return cache[plan.key]

    for plan in seed_plans:
        evaluate(PipelinePlan(plan.bounds, plan.devices, micro_batches, schedule), -1)
    # Rewards relative to the placement-free bound, so their scale does not depend on the model.
    from trinity.pipeline_parallel.cost import lower_bound_us
    lb = lower_bound_us(profile, cluster, batch)
    history = []
    bar = progress(range(cfg.iterations), desc="tapp", disable=not show_progress)
    for it in bar:
        groups, devices = policy.sample(cfg.batch, gen)
        times = [evaluate(_to_plan(groups[b], devices[b], micro_batches, schedule), it) for b in range(cfg.batch)]
        rewards = torch.tensor([-t / lb if math.isfinite(t) else -cfg.fail_ratio for t in times])
        adv = baseline.advantages(rewards)
        adv = adv / (rewards.std() + 1e-8) if cfg.batch > 1 else adv
        logp, ent = policy.log_prob(groups, devices)
        loss = reinforce_loss(logp, adv) - cfg.entropy * ent.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(best[0])
        if show_progress:
            bar.set_postfix(best_ms=best[0] / 1e3)
    groups, devices = policy.sample(1, None, greedy=True)
    evaluate(_to_plan(groups[0], devices[0], micro_batches, schedule), cfg.iterations)
    sampled_best = best[0]
    top = sorted((v, k) for k, v in cache.items() if math.isfinite(v))[:cfg.polish_top]
    for _, key in top:
        _polish(PipelinePlan(*key), cluster.n_devices, lambda p: evaluate(p, cfg.iterations + 1))
    if best[1] is None:
        raise PipelineError("no sampled plan fits the devices' memory", field="memory")
    return TappResult(plan=best[1], step_time_us=best[0], history=history, evaluations=len(cache),
                      seconds=time.perf_counter() - start, seeded=bool(seed_plans), found_at=best[2], config=cfg,
                      sampled_best_us=sampled_best)


def neighbours(plan: PipelinePlan, n_devices: int) -> list[PipelinePlan]:
    """Plans one move from ``plan`` (see the module docstring, step 4)."""
    b, d = list(plan.bounds), list(plan.devices)
    S, free = len(d), [e for e in range(n_devices) if e not in plan.devices]
    out = []

    def add(bounds, devices):
        out.append(PipelinePlan(tuple(bounds), tuple(devices), plan.micro_batches, plan.schedule))

    for s in range(1, S):  # move boundary s anywhere between its neighbours
        for cut in range(b[s - 1] + 1, b[s + 1]):
            if cut != b[s]:
                add(b[:s] + [cut] + b[s + 1:], d)
    for s in range(S):
        for t in range(s + 1, S):  # swap two stages' devices
            nd = d.copy()
            nd[s], nd[t] = nd[t], nd[s]
            add(b, nd)
        for e in free:  # move a stage to an unused device, or split it onto one
            add(b, d[:s] + [e] + d[s + 1:])
            for cut in range(b[s] + 1, b[s + 1]):
                add(b[:s + 1] + [cut] + b[s + 1:], d[:s + 1] + [e] + d[s + 1:])
                add(b[:s + 1] + [cut] + b[s + 1:], d[:s] + [e] + d[s:])
        sizes = [b[t + 1] - b[t] for t in range(S)]
        for t in range(S):  # move stage s (its device and layer count) to position t of the pipeline
            if t != s:
                order = list(range(S))
                order.insert(t, order.pop(s))
                add([0, *itertools.accumulate(sizes[i] for i in order)], [d[i] for i in order])
        if s < S - 1:  # merge stages s and s + 1 onto either device
            for keep in (d[s], d[s + 1]):
                add(b[:s + 1] + b[s + 2:], d[:s] + [keep] + d[s + 2:])
    return out


def _polish(plan: PipelinePlan, n_devices: int, evaluate) -> PipelinePlan:
    """Best-improvement hill climbing over `neighbours` under ``evaluate`` (step time, inf if it does not fit)."""
    current, value = plan, evaluate(plan)
    while True:
        scored = [(evaluate(p), p.key, p) for p in neighbours(current, n_devices)]
        v, _, p = min(scored, key=lambda x: (x[0], x[1])) if scored else (math.inf, None, None)
        if not v < value:
            return current
        current, value = p, v
