"""Trinity's two-level placement policy: partition ops into groups, schedule groups on devices.

The unit of placement is a colocation group (an op alone is its own unit),
so a sampled strategy can never split a group TensorFlow would keep
together.

Partition network (per unit): a feed-forward net, hidden 64 and 128 with
30% dropout between, over [mean op-type embedding, mean op features],
ending in a softmax over k groups. Optionally (``unit_logits``, on in
warm-started searches) a free [U, k] table of logits, zero at first, is
added to its output: features alone cannot tell apart every unit a placer
separated, so without it a policy imitating m-ETF on GNMT (9.7k units)
put 13% of them elsewhere and its samples averaged 27% slower than m-ETF.

Group embedding (per sampled partition): mean op-type embedding of the
group's ops, mean Z-scored log output size and compute, the group's share
of all compute, and the k-long 0/1 vector of groups it exchanges data with;
projected linearly to 64 values before the encoder (an addition: it keeps
the recurrent input small).

Schedule network (seq2seq): a 2-layer LSTM encoder (hidden 256) over the k
group embeddings; a 2-layer LSTM decoder whose input at step g is the
trainable embedding of the device chosen for group g-1; Luong attention on
the encoder states; device logits u squashed as C * tanh(u / T) (C = 5,
T = 10) before the softmax. Luong attention without input feeding lets the
log-probability of a given strategy be computed in one parallel pass,
which PPO's repeated epochs need; sampling decodes step by step.

One-pass decoder (``decoder="parallel"``, the default; an addition to the
paper): the schedule network reads groups embedded from the *expected*
partition (soft means, shares and log(1 + expected links) under the
partition network's probabilities, without gradient), encodes them with the
same LSTM, and gives every group's device distribution from the encoder by
attention over all groups; each device's row of the output layer plays the
part of its embedding. One forward pass then scores a whole batch (its
samples differ only in their draws, the exploration noise is one draw per
batch), so an iteration costs about the same at batch 8 or 64. Two fixed
priors can give the samples structure from the first iteration: groups start
as contiguous stretches of a topological order or, from scratch by default, as
the parts of a min-cut partition of the graph (``topo_prior``,
``locality_order``), and blocks of consecutive groups start on the same device
(``block_prior``, off by default, fading over ``block_prior_steps`` or learned: it breaks the symmetry between
interchangeable devices that independent per-group choices cannot, but on
InceptionV3 it held the search far above one device; see the README's
ablation). Free logits per (unit, group) and per (group, device)
(``unit_logits``, ``group_logits``) let the policy settle on any strategy
exactly; a sampling temperature (``explore``) keeps a settled policy
trying a few units on other devices.

Dropout is active only in training passes: strategies are sampled, and
their old log-probabilities evaluated, with the deterministic network.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trinity.features import OpFeatures
from trinity.graph.ir import OpGraph
from trinity.placers.metis import group_graph, metis_parts
from trinity.rl.algorithms import temperature_for_exploration

LOCALITY_ORDERS = ("breadth", "depth", "metis", "bisection")


@dataclass
class PolicyConfig:
    num_groups: int = 256  #: k
    type_embedding: int = 16
    partition_hidden: tuple[int, int] = (64, 128)
    dropout: float = 0.3
    #: The paper's LSTMs have 256 units; 128 is ~3x cheaper per update on a CPU (see README).
    lstm_hidden: int = 128
    lstm_layers: int = 2
    group_projection: int = 64  #: group embeddings are projected to this size before the encoder
    device_embedding: int = 32
    logit_scale: float = 5.0  #: C in C * tanh(u / T)
    logit_temperature: float = 10.0  #: T
    #: add a free logit per (unit, group), zero at first, to the partition network's output;
    #: None = in warm-started searches (a feature network alone imitated 86% of GNMT's units) and from scratch
    #: with the parallel decoder (with ``group_logits``, PPO can then settle exactly on a strategy it found)
    unit_logits: bool | None = None
    #: add a free logit per (group, device), zero at first, to the schedule's squashed output (parallel decoder):
    #: the schedule network alone cannot put every group where a strategy did (89-93% of an elite's 128 groups
    #: on a layered DAG, `make search-dev`'s trace), so without it PPO cannot settle exactly on a strategy it found;
    #: None = only in searches from scratch with the parallel decoder
    group_logits: bool | None = None
    #: "parallel": one pass scores the whole batch (groups embedded from the expected partition, every
    #: group's device distribution from the encoder by attention, exploration noise shared by the batch);
    #: "sequential": the paper's seq2seq decoder fed the previous group's device, per sampled partition
    decoder: str = "parallel"
    #: locality prior added to the partition logits: -topo_prior * |g + 1/2 - k * r(u)| for a unit at
    #: topological rank r(u) in [0, 1) (metis: -topo_prior * |g - part(u)|), so groups start as contiguous
    #: pieces of the graph and a random schedule cuts few edges (0 = the paper's uniform start, every op on a random device); None = 3
    #: in a Trinity search from scratch (`TrinityAgent`), else 1
    topo_prior: float | None = None
    #: the topological order the locality prior's stretches follow: "breadth" (Kahn's queue: a stretch is
    #: a level of the graph, side by side), "depth" (Kahn's stack: a stretch is a chain or branch) or
    #: "metis" (no stretches: group g starts as part g of a k-way min-cut partition of the units balanced by
    #: compute, parts numbered by their mean topological position, so a group is a connected piece that may
    #: span levels and branches: `UnitGraph.parts`) or "bisection" (part g of a recursive min-cut bisection,
    #: numbered by its tree: every run of groups the bisections split off is a balanced min-cut piece, and the
    #: encoder reads the groups in that order); None = metis in a Trinity search from scratch, else breadth
    locality_order: str | None = None
    #: the schedule's counterpart (parallel decoder): -block_prior * |d + 1/2 - D (g + 1/2) / k| on group g's
    #: device logits, so the ordered groups start split into D contiguous blocks, one per device, as a
    #: pipeline would split them. 0 by default: at 3 it broke the symmetry between interchangeable devices
    #: but held InceptionV3's searches 50-160% above one device (README's ablation); tiny graphs need it
    block_prior: float = 0.0
    #: the block prior fades linearly to 0 over this many iterations (0: it stays): samples start on the
    #: blocks, and the policy is free to leave them once it has learned where they serve (README's *The block
    #: prior on bisection groups*)
    block_prior_steps: int = 0
    #: the block prior's strength is a parameter PPO learns, from ``block_prior``: the policy can strengthen
    #: the blocks where they serve the graph and drop them where gathering does
    block_prior_learned: bool = False

    def __post_init__(self):
        if self.decoder not in ("parallel", "sequential"):
            raise ValueError(f"policy.decoder must be parallel or sequential, got {self.decoder!r}")
        if self.locality_order not in (None, *LOCALITY_ORDERS):
            raise ValueError(f"policy.locality_order must be one of {', '.join(LOCALITY_ORDERS)}, "
                             f"got {self.locality_order!r}")
        if self.block_prior_steps < 0:
            raise ValueError(f"policy.block_prior_steps must be >= 0, got {self.block_prior_steps}")
        if self.block_prior_learned and not self.block_prior:
            raise ValueError("policy.block_prior_learned needs a policy.block_prior to start from")
        if self.group_logits and self.decoder != "parallel":
            raise ValueError("policy.group_logits needs policy.decoder=parallel")


@dataclass
class SampledStrategies:
    """A batch of sampled strategies: unit -> group and group -> device.

    The distribution a batch was drawn from is the policy with one dropout mask (from
    ``dropout_seed``) and the exploration noise U(-noise, noise) on every logit (from
    ``noise_seed``); `PlacementPolicy.log_prob` rebuilds both, so PPO's ratio is the true
    importance ratio (exactly 1 before an update).
    """

    groups: torch.Tensor  # int64[B, U]
    devices: torch.Tensor  # int64[B, k]
    #: [B, U + k] log-probability of each decision under the distribution that sampled it
    logp: torch.Tensor | None = None
    dropout_seed: int | None = None  # None: no dropout
    noise_seed: int = 0
    noise: float = 0.0
    #: the sampling temperature: every logit (noise included) is divided by it before the softmax (parallel
    #: decoder; set by the sampling pass, `PlacementPolicy.one_pass`'s ``explore``)
    temperature: float = 1.0
    #: the parallel decoder's distributions as sampled, with their autograd graph (``keep_graph``): the
    #: update's first pass reuses them instead of recomputing the same values
    distributions: tuple[torch.Tensor, torch.Tensor] | None = None
    #: the block prior's weight when sampled (`PolicyConfig.block_prior_steps`; parallel decoder)
    block_scale: float = 1.0

    def placements(self, unit_of_op: np.ndarray) -> np.ndarray:
        """int64[B, N] device of every op."""
        unit_device = torch.gather(self.devices, 1, self.groups).numpy()
        return unit_device[:, unit_of_op]

    def exploration(self, n_groups: int, n_devices: int, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The noise added to the logits when sampling: [B, U, k] on groups and [B, k, D] on devices
        (``shared``: one draw for the whole batch, [1, U, k] and [1, k, D])."""
        b, u = self.groups.shape
        b = 1 if shared else b
        if self.noise <= 0:
            return torch.zeros(1, 1, 1), torch.zeros(1, 1, 1)
        gen = torch.Generator().manual_seed(self.noise_seed)
        on_groups = (torch.rand((b, u, n_groups), generator=gen) * 2 - 1) * self.noise
        on_devices = (torch.rand((b, n_groups, n_devices), generator=gen) * 2 - 1) * self.noise
        return on_groups, on_devices


class UnitGraph:
    """The graph as the policy sees it: units (colocation groups), their features and links."""

    def __init__(self, graph: OpGraph, features: OpFeatures, times_us: np.ndarray | None = None):
        """``times_us``: per-op compute times the units' compute shares (and the METIS parts they balance)
        are taken from; None = the profile's (``op.time_us``)."""
        a = graph.arrays
        self.unit_of_op = a.group.astype(np.int64)
        self.n_units = a.n_groups
        counts = np.bincount(self.unit_of_op, minlength=self.n_units).astype(np.float32)
        numeric = np.zeros((self.n_units, features.numeric.shape[1]), np.float32)
        np.add.at(numeric, self.unit_of_op, features.numeric)
        self.numeric = torch.from_numpy(numeric / counts[:, None])
        self.op_count = torch.from_numpy(counts)
        times = np.array([op.time_us for op in graph.ops]) if times_us is None else np.asarray(times_us, np.float64)
        share = np.bincount(self.unit_of_op, weights=times, minlength=self.n_units)
        self.compute_share = torch.from_numpy((share / max(share.sum(), 1e-12)).astype(np.float32))
        # Op types as an EmbeddingBag input: ops sorted by unit, with offsets.
        order = np.argsort(self.unit_of_op, kind="stable")
        self.type_ids = torch.from_numpy(features.type_ids[order])
        self.type_offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64))
        # Unit pairs joined by a data edge (for the group adjacency vector).
        su, du = self.unit_of_op[a.src], self.unit_of_op[a.dst]
        cross = su != du
        pairs = np.unique(np.stack([su[cross], du[cross]], axis=1), axis=0) if cross.any() else np.zeros((0, 2))
        self.links = torch.from_numpy(pairs.astype(np.int64))
        self._graph, self._counts = graph, counts

    def rank(self, order: str = "breadth") -> torch.Tensor:
        """Each unit's rank in [0, 1) in a topological order of the graph (its ops' mean): ``breadth`` first
        (levels of the graph together) or ``depth`` first (chains and branches together)."""
        ops = self._graph.topological_order() if order == "breadth" else self._graph.depth_first_order()
        position = np.empty(len(ops))
        position[ops] = np.arange(len(ops))
        mean = np.bincount(self.unit_of_op, weights=position, minlength=self.n_units) / self._counts
        return torch.from_numpy((np.argsort(np.argsort(mean, kind="stable")) / self.n_units).astype(np.float32))

    def parts(self, k: int, bisection: bool = False) -> torch.Tensor:
        """Each unit's part in a k-way min-cut partition of the unit graph (METIS: edges weigh the bytes
        between two units, units their compute), parts renumbered by their units' mean topological position
        so that nearby parts hold nearby stretches of the graph; deterministic. k >= the units: one part each.
        ``bisection``: METIS's recursive bisection instead, parts numbered as its tree numbers them (parts
        [0, k/2) one side of the first cut, [k/2, k) the other, and so on down), so that a run of parts is a
        piece the bisections cut off: the 2- or 4-way split of the graph is a union of runs of parts, where
        the k-way partition's parts straddle it (InceptionV3 on 2 devices: 48% of the 64 k-way parts hold
        units of both sides of METIS's split; `make groups-hold-split`)."""
        if k >= self.n_units:
            return torch.argsort(torch.argsort(self.rank("breadth"))).clamp(max=k - 1)
        part = metis_parts(group_graph(self._graph), self.compute_share.numpy().astype(np.float64), k,
                           recursive=bisection)
        if bisection:
            return torch.from_numpy(part.astype(np.int64))
        position = self.rank("breadth").numpy().astype(np.float64)
        mean = np.bincount(part, weights=position, minlength=k) / np.maximum(np.bincount(part, minlength=k), 1)
        renumber = np.empty(k, np.int64)
        renumber[np.argsort(mean, kind="stable")] = np.arange(k)
        return torch.from_numpy(renumber[part])


class PlacementPolicy(nn.Module):
    def __init__(self, unit_graph: UnitGraph, n_devices: int, vocabulary_size: int, cfg: PolicyConfig):
        super().__init__()
        self.ug, self.cfg, self.n_devices = unit_graph, cfg, n_devices
        k = cfg.num_groups
        self.type_embedding = nn.EmbeddingBag(vocabulary_size, cfg.type_embedding, mode="mean")
        h1, h2 = cfg.partition_hidden
        self.partition = nn.Sequential(
            nn.Linear(cfg.type_embedding + unit_graph.numeric.shape[1], h1), nn.ReLU(), nn.Identity(),
            nn.Linear(h1, h2), nn.ReLU(), nn.Linear(h2, k))  # dropout: in partition_logits, from a seed
        # An addition to the paper: lets a warm start reproduce a placer exactly (see PolicyConfig).
        self.unit_logits = nn.Parameter(torch.zeros(unit_graph.n_units, k)) if cfg.unit_logits else None
        self.group_logits = nn.Parameter(torch.zeros(k, n_devices)) if cfg.group_logits else None
        order = cfg.locality_order or "breadth"
        topo_prior = 1.0 if cfg.topo_prior is None else cfg.topo_prior
        if order in ("metis", "bisection"):  # group g centred on part g
            parts = unit_graph.parts(k, bisection=order == "bisection")
            centre = torch.arange(k, dtype=torch.float32)[None] - parts[:, None].float()
        else:
            centre = torch.arange(k, dtype=torch.float32)[None] + 0.5 - k * unit_graph.rank(order)[:, None]
        self._prior = -topo_prior * centre.abs() if topo_prior else None  # [U, k], fixed
        block = torch.arange(n_devices)[None] + 0.5 - n_devices * (torch.arange(k)[:, None] + 0.5) / k
        self._block_shape = -block.abs()  # [k, D]; the prior is strength x shape
        # a float, or a parameter PPO moves (``block_prior_learned``); 0: no prior
        self.block_strength = (nn.Parameter(torch.tensor(float(cfg.block_prior))) if cfg.block_prior_learned
                               else cfg.block_prior)
        group_features = cfg.type_embedding + unit_graph.numeric.shape[1] + 1 + k
        # The k-long adjacency dominates the group embedding; a linear projection keeps the
        # encoder's recurrent input small (the LSTM is the cost of every update on a CPU).
        self.project = nn.Linear(group_features, cfg.group_projection)
        self.encoder = nn.LSTM(cfg.group_projection, cfg.lstm_hidden, cfg.lstm_layers, batch_first=True)
        if cfg.decoder == "sequential":  # the one-pass decoder reads the encoder alone
            self.decoder = nn.LSTM(cfg.device_embedding, cfg.lstm_hidden, cfg.lstm_layers, batch_first=True)
            self.device_embedding = nn.Embedding(n_devices + 1, cfg.device_embedding)  # last row: <go>
        self.attention = nn.Linear(cfg.lstm_hidden, cfg.lstm_hidden, bias=False)
        self.combine = nn.Linear(2 * cfg.lstm_hidden, cfg.lstm_hidden)
        self.device_logits = nn.Linear(cfg.lstm_hidden, n_devices)
        if cfg.decoder == "parallel":  # the units' links as a symmetric sparse matrix, built once
            u, links = unit_graph.n_units, unit_graph.links
            both = torch.cat([links, links.flip(1)]) if len(links) else torch.zeros((0, 2), dtype=torch.long)
            self._adjacency = torch.sparse_coo_tensor(both.T, torch.ones(len(both)), (u, u),
                                                     check_invariants=True).coalesce()

    # ------------------------------------------------------------- partition
    def unit_inputs(self) -> torch.Tensor:
        types = self.type_embedding(self.ug.type_ids, self.ug.type_offsets)
        return torch.cat([types, self.ug.numeric], dim=1)

    def partition_logits(self, dropout_seed: int | None = None) -> torch.Tensor:
        """[U, k]; in training mode with a seed, after the hidden layer's dropout mask drawn from that seed
        (its own generator, not torch's global one, so a sampler thread and an update can share a process)."""
        first, relu, _, second, relu2, out = self.partition
        hidden = relu(first(self.unit_inputs()))
        p = self.cfg.dropout
        if self.training and dropout_seed is not None and p > 0:
            keep = torch.rand(hidden.shape, generator=torch.Generator().manual_seed(dropout_seed)) >= p
            hidden = hidden * keep / (1 - p)
        logits = out(relu2(second(hidden)))
        if self._prior is not None:
            logits = logits + self._prior
        return logits if self.unit_logits is None else logits + self.unit_logits

    # ------------------------------------------------------------- groups
    def group_embeddings(self, groups: torch.Tensor) -> torch.Tensor:
        """[B, k, F] embeddings of the groups of each sampled partition."""
        b, k = groups.shape[0], self.cfg.num_groups
        inputs = self.unit_inputs()  # [U, F0]
        weight = self.ug.op_count  # units weigh by their op count in group means
        f0 = inputs.shape[1]
        weighted = (inputs * weight[:, None])[None].expand(b, -1, -1)
        sums = torch.zeros(b, k, f0).scatter_add(1, groups[:, :, None].expand(-1, -1, f0), weighted)
        counts = torch.zeros(b, k).scatter_add(1, groups, weight[None].expand(b, -1))
        means = sums / counts.clamp(min=1)[:, :, None]
        share = torch.zeros(b, k).scatter_add(1, groups, self.ug.compute_share[None].expand(b, -1))
        adjacency = torch.zeros(b, k * k)
        if len(self.ug.links):
            g_src, g_dst = groups[:, self.ug.links[:, 0]], groups[:, self.ug.links[:, 1]]
            adjacency.scatter_(1, g_src * k + g_dst, 1.0)
            adjacency.scatter_(1, g_dst * k + g_src, 1.0)
        adjacency = adjacency.view(b, k, k) * (1 - torch.eye(k))
        return torch.cat([means, share[:, :, None], adjacency], dim=2)

    def expected_group_embeddings(self, probs: torch.Tensor) -> torch.Tensor:
        """[1, k, F] the group embeddings of `group_embeddings` under the expected partition ``probs``
        [U, k] (soft means, compute shares, and log(1 + expected links) to each other group): one
        input to the schedule network for every sample of a batch."""
        inputs = self.unit_inputs()
        weighted = probs * self.ug.op_count[:, None]  # [U, k]
        counts = weighted.sum(0)
        means = (weighted.T @ inputs) / counts.clamp(min=1e-6)[:, None]
        share = probs.T @ self.ug.compute_share
        links = probs.T @ torch.sparse.mm(self._adjacency, probs)  # [k, k] expected unit links between groups
        links = torch.log1p(links * (1 - torch.eye(self.cfg.num_groups)))
        return torch.cat([means, share[:, None], links], dim=1)[None]

    def one_pass(self, strategy: SampledStrategies, explore: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """The parallel decoder's distributions for a whole batch: log-probabilities of each unit's group
        [U, k] and of each group's device [k, D], under the batch's dropout mask, shared noise and temperature;
        ``explore`` > 0 (the sampling pass) first sets that temperature (`exploring_temperature`)."""
        on_groups, on_devices = strategy.exploration(self.cfg.num_groups, self.n_devices, shared=True)
        part = self.partition_logits(strategy.dropout_seed) + on_groups[0]
        log_part = F.log_softmax(part, dim=1)
        # the partition is an input to the schedule network, not a path for its gradient (as a sampled one)
        enc, _ = self.encoder(self.project(self.expected_group_embeddings(log_part.detach().exp())))
        sched = self._squash(self._attend(enc, enc))[0] + on_devices[0]
        if self.group_logits is not None:
            sched = sched + self.group_logits
        if self.cfg.block_prior and strategy.block_scale > 0:
            sched = sched + strategy.block_scale * (self.block_strength * self._block_shape)
        if explore > 0:
            strategy.temperature = exploring_temperature(part.detach(), sched.detach(), explore)
        t = strategy.temperature
        if t == 1.0:  # the same floats as before exploration existed: committed runs reproduce bit for bit
            return log_part, F.log_softmax(sched, dim=1)
        return F.log_softmax(part / t, dim=1), F.log_softmax(sched / t, dim=1)

    # ------------------------------------------------------------- schedule
    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.cfg.logit_scale * torch.tanh(u / self.cfg.logit_temperature)

    def _attend(self, dec: torch.Tensor, enc: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(self.attention(dec), enc.transpose(1, 2))  # [B, T, k]
        context = torch.bmm(F.softmax(scores, dim=2), enc)
        return self.device_logits(torch.tanh(self.combine(torch.cat([context, dec], dim=2))))

    def schedule_logits(self, group_emb: torch.Tensor, devices: torch.Tensor) -> torch.Tensor:
        """[B, k, D] squashed logits of each group's device given the devices chosen before it."""
        enc, state = self.encoder(self.project(group_emb))
        go = torch.full((devices.shape[0], 1), self.n_devices, dtype=torch.long)
        dec, _ = self.decoder(self.device_embedding(torch.cat([go, devices[:, :-1]], dim=1)), state)
        return self._squash(self._attend(dec, enc))

    # ------------------------------------------------------------- sampling
    @torch.no_grad()
    def sample(self, batch: int, generator: torch.Generator, noise: float = 0.0, keep_graph: bool = False,
               explore: float = 0.0, block_scale: float = 1.0) -> SampledStrategies:
        """Sample ``batch`` strategies; ``noise`` adds U(-noise, noise) to every logit (exploration);
        ``explore`` (parallel decoder) raises the temperature until a sample is expected to put that many
        units off their likeliest device.

        Every random draw is taken up front from ``generator``: the dropout and noise seeds, units'
        groups by inverse-CDF sampling, devices by Gumbel-max inside the compiled decoder (sequential)
        or by inverse CDF (parallel). ``keep_graph`` (parallel decoder): keep the distributions' autograd
        graph in the strategy for the update's first pass.
        """
        k, d = self.cfg.num_groups, self.n_devices
        dropout_seed, noise_seed = (int(x) for x in torch.randint(0, 2 ** 62, (2,), generator=generator))
        strategy = SampledStrategies(torch.zeros(batch, self.ug.n_units, dtype=torch.long),
                                     torch.zeros(batch, k, dtype=torch.long),
                                     dropout_seed=dropout_seed if self.training else None, noise_seed=noise_seed,
                                     noise=noise, block_scale=block_scale)
        if self.cfg.decoder == "parallel":
            with torch.set_grad_enabled(keep_graph):
                log_part, log_sched = self.one_pass(strategy, explore)
            strategy.groups = _draw_rows(log_part, batch, generator)
            strategy.devices = _draw_rows(log_sched, batch, generator)
            strategy.logp = self._gather(log_part, log_sched, strategy).detach()
            strategy.distributions = (log_part, log_sched) if keep_graph else None
            return strategy
        on_groups, on_devices = strategy.exploration(k, d)
        logits = self.partition_logits(strategy.dropout_seed)[None] + on_groups  # [B or 1, U, k]
        groups = _sample_categorical(logits.expand(batch, -1, -1), generator)
        logp_groups = F.log_softmax(logits, dim=2).expand(batch, -1, -1).gather(2, groups[:, :, None])[:, :, 0]
        enc, (h, c) = self.encoder(self.project(self.group_embeddings(groups)))
        dec = self.decoder
        layers = range(dec.num_layers)
        devices, logp_devices = _decode(
            enc, torch.matmul(enc, self.attention.weight), list(h.unbind(0)), list(c.unbind(0)),
            self.device_embedding.weight, [getattr(dec, f"weight_ih_l{i}") for i in layers],
            [getattr(dec, f"weight_hh_l{i}") for i in layers], [getattr(dec, f"bias_ih_l{i}") for i in layers],
            [getattr(dec, f"bias_hh_l{i}") for i in layers], self.combine.weight, self.combine.bias,
            self.device_logits.weight, self.device_logits.bias, self.cfg.logit_scale, self.cfg.logit_temperature,
            on_devices.expand(batch, k, d).transpose(0, 1), _gumbel((k, batch, d), generator), d)
        strategy.groups, strategy.devices = groups, devices
        strategy.logp = torch.cat([logp_groups, logp_devices], dim=1)
        return strategy

    def log_prob(self, strategy: SampledStrategies) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of every decision, [B, U + k] (units' groups, then groups' devices), under
        the distribution that sampled it (its dropout mask and noise), and the mean per-decision entropy."""
        if self.cfg.decoder == "parallel":
            log_part, log_sched = strategy.distributions or self.one_pass(strategy)
            strategy.distributions = None  # used once: after an optimizer step they are stale
            entropy = -(log_part.exp() * log_part).sum(1).mean() - (log_sched.exp() * log_sched).sum(1).mean()
            return self._gather(log_part, log_sched, strategy), entropy
        b = strategy.groups.shape[0]
        on_groups, on_devices = strategy.exploration(self.cfg.num_groups, self.n_devices)
        part = F.log_softmax(self.partition_logits(strategy.dropout_seed)[None] + on_groups, dim=2)  # [B|1, U, k]
        logp_part = part.expand(b, -1, -1).gather(2, strategy.groups[:, :, None])
        sched = F.log_softmax(self.schedule_logits(self.group_embeddings(strategy.groups), strategy.devices)
                              + on_devices, dim=2)
        logp_sched = sched.gather(2, strategy.devices[:, :, None])
        entropy = -(part.exp() * part).sum(2).mean() - (sched.exp() * sched).sum(2).mean()
        return torch.cat([logp_part[:, :, 0], logp_sched[:, :, 0]], dim=1), entropy

    @staticmethod
    def _gather(log_part: torch.Tensor, log_sched: torch.Tensor, strategy: SampledStrategies) -> torch.Tensor:
        """[B, U + k] log-probabilities of a batch's decisions under one pass's distributions."""
        u, k = log_part.shape[0], log_sched.shape[0]
        return torch.cat([log_part[torch.arange(u), strategy.groups], log_sched[torch.arange(k), strategy.devices]], 1)


def likeliest_device_probability(part: torch.Tensor, sched: torch.Tensor) -> torch.Tensor:
    """[U] each unit's probability of its likeliest device, max over d of sum over g of P(unit -> g) P(g -> d),
    from the two levels' probabilities ``part`` [U, k] and ``sched`` [k, D]."""
    return (part @ sched).max(1).values


def exploring_temperature(part: torch.Tensor, sched: torch.Tensor, explore: float) -> float:
    """The temperature (>= 1: it never sharpens the policy) at which a sample of the two levels' logits
    ``part`` [U, k] and ``sched`` [k, D] is expected to put ``explore`` units off their likeliest device."""
    def off(t: float) -> float:
        return float((1 - likeliest_device_probability(F.softmax(part / t, dim=1), F.softmax(sched / t, dim=1))).sum())

    return temperature_for_exploration(off, explore, steps=14)


def _draw_rows(log_probs: torch.Tensor, batch: int, generator: torch.Generator) -> torch.Tensor:
    """[B, R] draws from each row of the distributions ``log_probs`` [R, C] (inverse CDF, a sorted search
    within each row: no [B, R, C] tensor).

    Row r's CDF and uniforms are both offset by r, as when the rows were searched laid end to end (before
    stop 69): the same floats compared, so the same draws, bit for bit, each a search over C entries instead
    of R x C (README's *Draws searched within each row*)."""
    rows, cols = log_probs.shape
    cdf = log_probs.detach().double().exp().cumsum(dim=1)  # float64: offset rows stay distinct
    cdf = cdf / cdf[:, -1:]  # exactly 1 at each row's end
    offset = torch.arange(rows, dtype=cdf.dtype)
    u = torch.rand((batch, rows), generator=generator, dtype=cdf.dtype) + offset
    index = torch.searchsorted((cdf + offset[:, None]).contiguous(), u.T.contiguous())  # [R, B]
    return index.T.clamp(0, cols - 1).contiguous()


def _sample_categorical(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """[B, U] draws from softmax(logits) for logits [B, U, k] (inverse CDF)."""
    cdf = torch.softmax(logits, dim=-1).cumsum(dim=-1).contiguous()
    u = torch.rand((*logits.shape[:2], 1), generator=generator) * cdf[..., -1:]
    return torch.searchsorted(cdf, u).squeeze(-1).clamp(max=logits.shape[-1] - 1)


def _gumbel(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Gumbel noise: the argmax of logits + it samples the softmax."""
    return -torch.log(-torch.log(torch.rand(shape, generator=generator).clamp(1e-20, 1.0 - 1e-7)))


@torch.jit.script
def _decode(enc: torch.Tensor, keys: torch.Tensor, h: list[torch.Tensor], c: list[torch.Tensor],
            embedding: torch.Tensor, w_ih: list[torch.Tensor], w_hh: list[torch.Tensor], b_ih: list[torch.Tensor],
            b_hh: list[torch.Tensor], combine_w: torch.Tensor, combine_b: torch.Tensor, out_w: torch.Tensor,
            out_b: torch.Tensor, scale: float, temperature: float, exploration: torch.Tensor, gumbel: torch.Tensor,
            go: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The schedule decoder, one group per step (same maths as `PlacementPolicy.schedule_logits`);
    ``exploration`` [k, B, D] is part of the sampled distribution, ``gumbel`` does the sampling."""
    prev = torch.full([enc.size(0)], go, dtype=torch.long)
    devices = []
    logps = []
    for g in range(gumbel.size(0)):
        x = embedding[prev]
        for layer in range(len(w_ih)):
            state = torch.lstm_cell(x, [h[layer], c[layer]], w_ih[layer], w_hh[layer], b_ih[layer], b_hh[layer])
            h[layer] = state[0]
            c[layer] = state[1]
            x = state[0]
        # Matrix-vector products as multiply-and-sum: batched gemm is slow at this size on a CPU.
        weights = torch.softmax((keys * x.unsqueeze(1)).sum(2), 1)
        context = (weights.unsqueeze(2) * enc).sum(1)
        u = F.linear(torch.tanh(F.linear(torch.cat([context, x], 1), combine_w, combine_b)), out_w, out_b)
        z = scale * torch.tanh(u / temperature) + exploration[g]
        prev = torch.argmax(z + gumbel[g], 1)
        devices.append(prev)
        logps.append(torch.log_softmax(z, 1).gather(1, prev.unsqueeze(1)).squeeze(1))
    return torch.stack(devices, 1), torch.stack(logps, 1)
