"""A learned list scheduler (after DOPPLER, Yao et al. 2026): search method ``learned-list``.

Every episode decodes a whole placement by list scheduling (`trinity.rl.list_decoder`): a select
policy picks the next ready op, a place policy its device. Both are linear in a few dynamic
features of the schedule (start and finish gaps, where the inputs are, device load, m-ETF's own
choice), with coefficients per op from a graph encoder: a few rounds of message passing over the
op graph (plain torch, scatter-add over edges) on graph-independent op features, run once per
episode batch, so the decode itself is compiled and calls no network per step (one episode of 2.5k
ops in ~30 ms). A colocation group's device is chosen at its first op; its other ops follow it.

Training: the search's warm start (``warm_start: m-etf`` or ``best``) imitates a placer through
`imitation_loss` (select = m-ETF's order, place = the placer's device), then PPO on the search's
reward (MDPE as configured), every decision of an episode sharing its advantage; advantages are
the batch's rewards standardised (scale-free across graphs). Imitation leaves the policy sure of
every choice, so episodes are sampled at a temperature (never below 1) that keeps ``explore``
decisions per episode off the most likely choice. ``pretrained`` starts from a policy file (the
committed one, trained on the project's synthetic graphs: `benchmarks/learned_list_train.py`).
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from trinity.cluster import Cluster
from trinity.costs import op_times
from trinity.errors import FormatError, TrinityError
from trinity.features import op_features
from trinity.fileio import atomic_write_bytes
from trinity.graph.ir import OpGraph
from trinity.reward import mdpe_reward
from trinity.rl import list_decoder as dec
from trinity.rl.agent import Agent, AgentContext, Samples, check_range, register
from trinity.rl.algorithms import ppo_loss, temperature_for_exploration

#: the committed pre-trained policy (`make learned-list-policy` regenerates it)
DEFAULT_POLICY = Path(__file__).parent / "pretrained" / "learned-list.pt"
POLICY_FORMAT = "trinity-learned-list/1"


@dataclass
class LearnedListOptions:
    """The ``agent:`` block of conf/method/learned-list.yaml."""

    hidden: int = 32  #: encoder width
    rounds: int = 3  #: message-passing rounds
    type_dim: int = 8  #: op-type embedding width
    embedding_dim: int = 0  #: node2vec columns added to the features (0: graph-independent features only)
    select: str = "learned"  #: "learned", or "etf": keep m-ETF's select order, learn only the device
    candidates: int = 16  #: ready ops the select policy chooses among: the ones m-ETF would take first
    lr: float = 3e-3
    ppo_epochs: int = 2
    clip: float = 0.2
    entropy_coef: float = 0.0
    grad_clip: float = 1.0
    #: expected decisions per sampled episode off the policy's most likely choice: the sampling temperature
    #: (never below 1) is set after the imitation (bisection) and nudged after every update to keep it there,
    #: so a policy that imitation made sure of itself still tries a few other choices
    explore: float = 4.0
    #: expected uniform decisions per episode (each decision uniform over its candidates with probability
    #: uniform / decisions): exploration the policy cannot train away
    uniform: float = 0.0
    #: start from a policy file; "default" = the committed one; None = fresh weights (uniform choices)
    pretrained: str | None = None

    def __post_init__(self):
        check_range("learned-list", "hidden", self.hidden, 1, 1024)
        check_range("learned-list", "rounds", self.rounds, 0, 32)
        check_range("learned-list", "type_dim", self.type_dim, 1, 256)
        check_range("learned-list", "embedding_dim", self.embedding_dim, 0, 1024)
        check_range("learned-list", "candidates", self.candidates, 2, 1_000_000)
        check_range("learned-list", "lr", self.lr, 0, 1.0, low_open=True)
        check_range("learned-list", "ppo_epochs", self.ppo_epochs, 1, 100)
        check_range("learned-list", "clip", self.clip, 0, 1.0, low_open=True)
        check_range("learned-list", "entropy_coef", self.entropy_coef, 0, 10.0)
        check_range("learned-list", "grad_clip", self.grad_clip, 0, low_open=True)
        check_range("learned-list", "explore", self.explore, 0, 1e6)
        check_range("learned-list", "uniform", self.uniform, 0, 1e6)
        if self.select not in ("learned", "etf"):
            raise TrinityError(f"must be 'learned' or 'etf', got {self.select!r}", field="select")


# ----------------------------------------------------------------------------- graph and features
class ListGraph:
    """What the decoder and the encoder read of one graph on one cluster."""

    def __init__(self, graph: OpGraph, cluster: Cluster, *, embedding_dim: int = 0, seed: int = 0,
                 features=None, feature_cache=None):
        a = graph.arrays
        self.n_ops, self.n_devices = graph.n_ops, cluster.n_devices
        self.unit_of_op = a.group
        times = op_times(graph, cluster)
        pos = np.empty(graph.n_ops, np.int64)
        pos[graph.topological_order()] = np.arange(graph.n_ops)
        self.decode_args = (
            np.ascontiguousarray(times), pos, a.in_ptr, a.src[a.in_edges], a.edge_tensor[a.in_edges],
            a.edge_bytes[a.in_edges].astype(np.float64), a.out_ptr, a.dst[a.out_edges], a.tensor_offset,
            int(a.tensor_owner.shape[0]), a.group, graph.group_static_memory().astype(np.float64),
            cluster.memory.astype(np.float64), np.ascontiguousarray(cluster.latency),
            np.ascontiguousarray(cluster.bandwidth))
        self.scale = float(max(times.mean(), 1e-3))  # the features' time unit: the mean op time
        if features is None or features.numeric.shape[1] != 3 + embedding_dim:
            features = op_features(graph, embedding_dim=embedding_dim, seed=seed, cache_dir=feature_cache)
        self.type_ids = torch.from_numpy(np.asarray(features.type_ids, np.int64))
        self.vocabulary = features.vocabulary_size
        self.numeric = torch.from_numpy(np.hstack([features.numeric, structure(graph, times[:, 0])]).astype(np.float32))
        src, dst = a.src, a.dst
        self.src, self.dst = torch.from_numpy(src), torch.from_numpy(dst)
        n = graph.n_ops
        self.in_deg = torch.from_numpy(np.maximum(np.bincount(dst, minlength=n), 1).astype(np.float32))[:, None]
        self.out_deg = torch.from_numpy(np.maximum(np.bincount(src, minlength=n), 1).astype(np.float32))[:, None]

    @property
    def feature_width(self) -> int:
        return int(self.numeric.shape[1])


def structure(graph: OpGraph, times: np.ndarray) -> np.ndarray:
    """float32[N, 6]: top and bottom level (longest compute path from the start / to the end, as a
    share of the critical path), log in- and out-degree, log colocation-group size, and the group's
    static memory as a share of the graph's."""
    a, n = graph.arrays, graph.n_ops
    order = graph.topological_order()
    top, bottom = np.zeros(n), np.zeros(n)
    out_nbrs = np.split(a.dst[a.out_edges], a.out_ptr[1:-1])
    for v in order:
        for w in out_nbrs[v]:
            top[w] = max(top[w], top[v] + times[v])
    for v in order[::-1]:
        nbrs = out_nbrs[v]
        bottom[v] = times[v] + (bottom[nbrs].max() if len(nbrs) else 0.0)
    critical = max(float((top + times).max()), 1e-9)
    group_size = np.bincount(a.group, minlength=a.n_groups)[a.group]
    static = graph.group_static_memory()
    memory = static[a.group] / max(float(static.sum()), 1.0)
    return np.column_stack([top / critical, bottom / critical, np.log1p(np.bincount(a.dst, minlength=n)),
                            np.log1p(np.bincount(a.src, minlength=n)), np.log1p(group_size), memory]).astype(np.float32)


# ----------------------------------------------------------------------------- network
class ListPolicy(nn.Module):
    """Graph encoder -> per-op coefficients of the select features [N, KS] and place features [N, KP]."""

    def __init__(self, feature_width: int, vocabulary: int, hidden: int, rounds: int, type_dim: int):
        super().__init__()
        self.types = nn.Embedding(vocabulary, type_dim)
        self.inp = nn.Linear(feature_width + type_dim, hidden)
        self.mp = nn.ModuleList(nn.Linear(3 * hidden, hidden) for _ in range(rounds))
        self.select_head = nn.Linear(hidden, dec.KS)
        self.place_head = nn.Linear(hidden, dec.KP)
        for head in (self.select_head, self.place_head):  # fresh weights: every choice uniform
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def forward(self, g: ListGraph) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.inp(torch.cat([g.numeric, self.types(g.type_ids)], 1)))
        for layer in self.mp:
            m_in = torch.zeros_like(h).index_add_(0, g.dst, h[g.src]) / g.in_deg  # from producers
            m_out = torch.zeros_like(h).index_add_(0, g.src, h[g.dst]) / g.out_deg  # from consumers
            h = h + torch.tanh(layer(torch.cat([h, m_in, m_out], 1)))
        return self.select_head(h), self.place_head(h)


# ----------------------------------------------------------------------------- episodes
@dataclass
class Decisions:
    """Every candidate of every decision of a batch of episodes (select or place), concatenated."""

    segment: torch.Tensor  # int64[C] decision of each candidate
    op: torch.Tensor  # int64[C]
    features: torch.Tensor  # float32[C, K]
    taken: torch.Tensor  # bool[C], one per decision
    episode: torch.Tensor  # int64[n_decisions]
    n: int

    @classmethod
    def gather(cls, parts) -> "Decisions":
        """From per-episode (step, op, features, taken) arrays."""
        segs, ops, feats, taken, episodes, offset = [], [], [], [], [], 0
        for b, (step, op, feat, tk) in enumerate(parts):
            if len(step):
                new = np.r_[True, step[1:] != step[:-1]]
                seg = np.cumsum(new) - 1
                segs.append(seg + offset)
                episodes.append(np.full(int(new.sum()), b, np.int64))
                offset += int(new.sum())
            ops.append(op), feats.append(feat), taken.append(tk)
        cat = (lambda xs, dtype: torch.from_numpy(np.concatenate(xs).astype(dtype)) if xs else
               torch.zeros(0, dtype=getattr(torch, np.dtype(dtype).name)))
        k = parts[0][2].shape[1] if parts else 0
        return cls(cat(segs, np.int64), cat(ops, np.int64),
                   torch.from_numpy(np.concatenate(feats).astype(np.float32)).reshape(-1, k),
                   cat(taken, np.bool_), cat(episodes, np.int64), offset)

    def off_argmax(self, coef: torch.Tensor, temperature: float) -> float:
        """Expected number of decisions that take a candidate other than the most likely one, when each
        samples from softmax(logits / temperature)."""
        if self.n == 0:
            return 0.0
        logits = (self.features * coef[self.op]).sum(1)
        top = torch.full((self.n,), -torch.inf).scatter_reduce(0, self.segment, logits, "amax")
        z = torch.zeros(self.n).index_add(0, self.segment, ((logits - top[self.segment]) / temperature).exp())
        return float((1.0 - 1.0 / z).sum())

    def log_probs(self, coef: torch.Tensor, uniform: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probability of each decision's taken candidate, each decision's entropy) under ``coef``,
        a decision being uniform over its candidates with probability ``uniform``."""
        if self.n == 0:
            return coef.new_zeros(0), coef.new_zeros(0)
        logits = (self.features * coef[self.op]).sum(1)
        top = torch.full((self.n,), -torch.inf).scatter_reduce(0, self.segment, logits.detach(), "amax")
        z = torch.zeros(self.n).index_add(0, self.segment, (logits - top[self.segment]).exp())
        logp = logits - (top + z.log())[self.segment]
        entropy = torch.zeros(self.n).index_add(0, self.segment, -logp.exp() * logp)
        taken = logp[self.taken]
        if uniform > 0:
            count = torch.zeros(self.n).index_add(0, self.segment, torch.ones_like(logits))
            taken = torch.logaddexp(taken + np.log1p(-uniform), np.log(uniform) - count.log())
        return taken, entropy


@dataclass
class Rollout:
    select: Decisions
    place: Decisions
    logp_old: torch.Tensor | None = None
    uniform: float = 0.0  #: the probability of a uniform decision the episodes were sampled with
    temperature: float = 1.0  #: the logits' divisor the episodes were sampled with
    orders: np.ndarray | None = None  # int64[B, N] the decode order of each episode
    placement: np.ndarray | None = None  # int64[N] the first episode's placement


def run_episodes(graph: ListGraph, cs: np.ndarray, cp: np.ndarray, mode: int, seeds, *, learn_select: bool,
                 candidates: int = 16, target: np.ndarray | None = None, uniform: float = 0.0,
                 temperature: float = 1.0) -> tuple[np.ndarray, Rollout]:
    """Decode one episode per seed (``mode``: list_decoder.SAMPLE, GREEDY or TEACHER)."""
    target = np.zeros(0, np.int64) if target is None else np.asarray(target, np.int64)
    cs = np.ascontiguousarray(cs, np.float64) / temperature
    cp = np.ascontiguousarray(cp, np.float64) / temperature
    placements, orders, sel, plc = [], [], [], []
    for seed in seeds:
        out = dec.decode(*graph.decode_args, cs, cp, mode, learn_select, target, int(seed), graph.scale, uniform,
                         candidates)
        placements.append(out[0]), orders.append(out[1])
        sel.append(out[2:4] + out[4:6])
        plc.append((out[6], out[7], out[9], out[10]))
    return np.stack(placements), Rollout(Decisions.gather(sel), Decisions.gather(plc), orders=np.stack(orders),
                                         placement=placements[0],
                                         uniform=uniform if mode == dec.SAMPLE else 0.0, temperature=temperature)


def rollout_log_probs(rollout: Rollout, cs: torch.Tensor, cp: torch.Tensor):
    """(log-probability of every decision [select then place], each decision's episode, mean entropy),
    under the rollout's temperature."""
    ls, es = rollout.select.log_probs(cs / rollout.temperature, rollout.uniform)
    lp, ep = rollout.place.log_probs(cp / rollout.temperature, rollout.uniform)
    logp = torch.cat([ls, lp])
    entropy = torch.cat([es, ep]).mean() if len(logp) else cs.new_zeros(())
    return logp, torch.cat([rollout.select.episode, rollout.place.episode]), entropy


def imitation_nll(teacher: Rollout, cs: torch.Tensor, cp: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of the teacher's choices."""
    logp, _, _ = rollout_log_probs(teacher, cs, cp)
    return -logp.mean() if len(logp) else cs.sum() * 0.0


def calibrated_temperature(rollout: Rollout, cs: torch.Tensor, cp: torch.Tensor, episodes: int, explore: float,
                           *, steps: int = 12, highest: float = 1e4) -> float:
    """The temperature (>= 1: it never sharpens the policy) at which an episode like ``rollout``'s is
    expected to take ``explore`` decisions other than the most likely one (bisection on its log)."""
    with torch.no_grad():
        def off(t: float) -> float:
            return (rollout.select.off_argmax(cs, t) + rollout.place.off_argmax(cp, t)) / episodes

        return temperature_for_exploration(off, explore, steps=steps, highest=highest)


# ----------------------------------------------------------------------------- policy files
def save_policy(path, policy: ListPolicy, options: LearnedListOptions, *, feature_width: int, vocabulary: int,
                devices: list[int], training_set: list[str]) -> None:
    buf = io.BytesIO()
    torch.save({"format": POLICY_FORMAT, "options": asdict(options), "feature_width": feature_width,
                "vocabulary": vocabulary, "devices": sorted(devices), "training_set": list(training_set),
                "state": {k: v.detach().clone() for k, v in policy.state_dict().items()}}, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_policy_file(path) -> dict:
    """A policy file's contents, or a one-line error naming the file."""
    path = DEFAULT_POLICY if path in (None, "default") else Path(path)
    if not path.is_file():
        raise FormatError("policy file not found", source=str(path), field="policy")
    try:
        doc = torch.load(path, weights_only=True)
        ok = isinstance(doc, dict) and doc.get("format") == POLICY_FORMAT
    except Exception as exc:
        raise FormatError(f"not a learned-list policy ({type(exc).__name__})", source=str(path),
                          field="policy") from None
    if not ok:
        raise FormatError(f"not a learned-list policy (format {POLICY_FORMAT} expected)", source=str(path),
                          field="policy")
    doc["path"] = str(path)
    return doc


def check_policy_fits(doc: dict, graph: ListGraph, n_devices: int) -> None:
    if doc["feature_width"] != graph.feature_width:
        raise TrinityError(f"the graph's features have {graph.feature_width} columns but the policy was trained "
                           f"on {doc['feature_width']}", source=doc["path"], field="feature_width")
    if n_devices not in doc["devices"]:
        raise TrinityError(f"the policy was trained for {', '.join(map(str, doc['devices']))} devices, not "
                           f"{n_devices}", source=doc["path"], field="devices")


def greedy_placement(graph: OpGraph, cluster: Cluster, policy_file=None) -> np.ndarray:
    """Zero-shot: one greedy decode of ``graph`` by a pre-trained policy (the committed one by default)."""
    doc = load_policy_file(policy_file)
    o = LearnedListOptions(**{**doc["options"], "pretrained": None})
    g = ListGraph(graph, cluster, embedding_dim=o.embedding_dim)
    check_policy_fits(doc, g, cluster.n_devices)
    policy = ListPolicy(g.feature_width, doc["vocabulary"], o.hidden, o.rounds, o.type_dim)
    policy.load_state_dict(doc["state"])
    with torch.no_grad():
        cs, cp = policy(g)
    placements, _ = run_episodes(g, cs.numpy(), cp.numpy(), dec.GREEDY, [0], learn_select=o.select == "learned",
                                 candidates=o.candidates)
    return placements[0]


# ----------------------------------------------------------------------------- the agent
@register("learned-list")
class LearnedListAgent(Agent):
    Options = LearnedListOptions

    def __init__(self, graph: OpGraph, cluster: Cluster, options: LearnedListOptions, ctx: AgentContext):
        self.ctx = ctx
        doc = None
        if options.pretrained is not None:
            doc = load_policy_file(options.pretrained)
            keep = {k: v for k, v in asdict(options).items() if k not in ("hidden", "rounds", "type_dim",
                                                                          "embedding_dim")}
            options = LearnedListOptions(**{**doc["options"], **keep})  # the file's network shape
        self.options = options
        self.graph = ListGraph(graph, cluster, embedding_dim=options.embedding_dim, seed=ctx.embedding_seed,
                               features=ctx.features, feature_cache=ctx.feature_cache)
        self.unit_of_op = self.graph.unit_of_op
        self.num_groups = int(graph.arrays.n_groups)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seed)
            vocabulary = doc["vocabulary"] if doc else self.graph.vocabulary
            self.policy = ListPolicy(self.graph.feature_width, vocabulary, options.hidden, options.rounds,
                                     options.type_dim)
        if doc is not None:
            check_policy_fits(doc, self.graph, cluster.n_devices)
            self.policy.load_state_dict(doc["state"])
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=options.lr, foreach=True)
        self._teacher: dict[bytes, Rollout] = {}
        decisions = max(self.teacher(None).select.n + self.teacher(None).place.n, 1)
        self.epsilon = min(0.5, options.uniform / decisions)
        self.temperature = 1.0
        self._imitated: Rollout | None = None
        if doc is not None:
            self._calibrate(self.teacher(None), 1)

    @property
    def learn_select(self) -> bool:
        return self.options.select == "learned"

    def reward(self, result) -> float:
        return mdpe_reward(result, self.ctx.reward)

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(self.graph)

    def sample(self, batch: int, generator: torch.Generator, iteration: int | None) -> Samples:
        seeds = torch.randint(0, 2 ** 31 - 1, (batch,), generator=generator).tolist()
        with torch.no_grad():
            cs, cp = self.coefficients()
            placements, rollout = run_episodes(self.graph, cs.numpy(), cp.numpy(), dec.SAMPLE, seeds,
                                               learn_select=self.learn_select, candidates=self.options.candidates,
                                               uniform=self.epsilon,
                                               temperature=self.temperature)
            rollout.logp_old = rollout_log_probs(rollout, cs, cp)[0]
        return Samples(placements, rollout)

    def greedy(self) -> np.ndarray:
        with torch.no_grad():
            cs, cp = self.coefficients()
        return run_episodes(self.graph, cs.numpy(), cp.numpy(), dec.GREEDY, [0], learn_select=self.learn_select,
                            candidates=self.options.candidates)[0][0]

    def update(self, samples: Samples, rewards: torch.Tensor, iteration: int) -> dict[str, float]:
        o, rollout = self.options, samples.data
        std = rewards.std() if len(rewards) > 1 else torch.tensor(0.0)
        adv = (rewards - rewards.mean()) / (std + 1e-8) if float(std) > 1e-12 else torch.zeros_like(rewards)
        stats, loss, entropy, grad_norm = {}, torch.tensor(0.0), torch.tensor(0.0), torch.tensor(0.0)
        for _ in range(o.ppo_epochs):
            cs, cp = self.coefficients()
            logp, episode, entropy = rollout_log_probs(rollout, cs, cp)
            if not len(logp):
                break
            loss, stats = ppo_loss(logp, rollout.logp_old, adv[episode], o.clip)
            total = loss - o.entropy_coef * entropy
            self.optimizer.zero_grad()
            total.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), o.grad_clip)
            self.optimizer.step()
        self._adjust(rollout, len(rewards))
        return {"losses/policy_loss": float(loss.detach()), "losses/entropy": float(entropy.detach()),
                "losses/grad_norm": float(grad_norm), "charts/temperature": self.temperature,
                **{f"losses/{k}": v for k, v in stats.items()}}

    def _calibrate(self, rollout: Rollout, episodes: int) -> None:
        with torch.no_grad():
            cs, cp = self.coefficients()
        self.temperature = calibrated_temperature(rollout, cs, cp, episodes, self.options.explore)

    def _adjust(self, rollout: Rollout, episodes: int) -> None:
        """One multiplicative step of the temperature towards ``explore`` decisions off the most likely
        choice per episode, judged on the batch just learned from (cheaper than `_calibrate`'s bisection)."""
        with torch.no_grad():
            cs, cp = self.coefficients()
            off = (rollout.select.off_argmax(cs, self.temperature) + rollout.place.off_argmax(cp, self.temperature))
        ratio = (self.options.explore + 0.5) / (off / episodes + 0.5)
        self.temperature = float(np.clip(self.temperature * ratio ** 0.5, 1.0, 1e4))

    def imitation_done(self) -> None:
        if self._imitated is not None:
            self._calibrate(self._imitated, 1)

    def teacher(self, unit_device: np.ndarray | None) -> Rollout:
        """The trajectory that imitation follows: m-ETF's select order, ``unit_device``'s devices
        (m-ETF's own where None or where the unit's device has no room)."""
        key = b"" if unit_device is None else np.asarray(unit_device, np.int64).tobytes()
        if key not in self._teacher:
            shape = np.zeros((self.graph.n_ops, 1))
            _, self._teacher[key] = run_episodes(self.graph, np.repeat(shape, dec.KS, 1), np.repeat(shape, dec.KP, 1),
                                                 dec.TEACHER, [0], learn_select=self.learn_select,
                                                 candidates=self.options.candidates, target=unit_device)
        return self._teacher[key]

    def imitation_loss(self, unit_device: np.ndarray | None) -> torch.Tensor:
        """(None: m-ETF's own devices.)"""
        cs, cp = self.coefficients()
        self._imitated = self.teacher(unit_device)
        return imitation_nll(self._imitated, cs, cp)

    def parameters(self):
        return self.policy.parameters()

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "temperature": self.temperature}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.temperature = state["temperature"]
