"""Hierarchical's planner as published (Mirhoseini et al. 2018, "A Hierarchical Model for Device Placement").

Followed where the paper is silent by the authors' own release,
TensorFlow's ``tensorflow/python/grappler/hierarchical_controller.py``
(``hierarchical_controller_hparams`` gives the defaults quoted below).

Grouper (per op, then per placement unit): a feed-forward net, one hidden
layer of 64 with no activation (as released), a softmax over k groups. Its
input per op is the concatenation of

* an embedding of the op's type (types numbered in the order they first
  appear in the graph; the release feeds the raw id);
* its output shape: the size of each of its first 5 outputs, -1 padding
  (the release writes 5 dimensions of 5 outputs; this IR keeps bytes per
  output, not dimensions), as log10(1 + bytes) so a 1e9 in a linear layer
  does not saturate the softmax;
* its adjacency: (neighbour, direction) pairs, +1 for an op it feeds and -1
  for one that feeds it, in the release's order, truncated or 0-padded to 20
  values; the neighbour as (topological position + 1) / ops (the release
  feeds the raw position).

A colocation group must stay whole, so a unit's group logits are the mean
of its ops' (an op alone is its own unit, the usual case).

Group embedding (per sampled grouping, computed from the grouping, no
gradient, as released): [edges from the group to each group (k), edges into
it from each group (k), count of each op type (V), per output slot
log10(1 + bytes summed over the group's ops) (5)], divided by (row max + 1).

Placer: a sequence-to-sequence LSTM. A bidirectional encoder (H/2 each way)
over the k group embeddings; a decoder (H) starting from the encoder's last
states, whose input is the embedding of the previous group's device (a
<go> vector first); additive (Bahdanau) attention over the encoder states;
device logits from [decoder state, context], divided by the temperature and
squashed as tanh_constant * tanh(.). Exploration: Gaussian noise on every
logit with std ``noise`` times the logits' RMS (the release's
logits_std_noise = 0.5, until step 750); the RMS is taken without gradient.
The decoder's output does not feed its next input, so the log-probability of
a given strategy is one parallel pass; sampling decodes step by step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trinity.graph.ir import OpGraph
from trinity.rl.policy import SampledStrategies, _gumbel, _sample_categorical


@dataclass
class HierarchicalConfig:
    num_groups: int | None = None  #: k; None = min(256, 20 x devices), capped at the placement units
    grouper_hidden: int = 64  #: as published
    type_embedding: int = 16  #: the release feeds the raw type id; the paper describes an embedding
    max_outputs: int = 5  #: output sizes per op (release: max_num_outputs)
    adjacency: int = 20  #: values of (neighbour, direction) pairs per op (release: adj_embed_dim)
    #: published: 512. 256 here: the placer's cost grows with H^2 per group and step on a CPU (see README)
    hidden: int = 256
    forget_bias: float = 1.0  #: as released
    temperature: float = 1.0  #: as released
    tanh_constant: float = 1.0  #: as released (logits in [-1, 1])
    logits_noise: float = 0.5  #: std of the logit noise relative to the logits' RMS (release: 0.5) ...
    noise_steps: int = 750  #: ... on for the first this many iterations (release: stop_noise_step)
    lr_decay: float = 0.95  #: Adam's rate times lr_decay every lr_decay_every iterations ...
    lr_decay_every: int = 50
    lr_decay_start: int = 400  #: ... from this iteration on (release: staircase exponential decay)


class GrouperInputs:
    """The graph as the Grouper sees it: per-op inputs, units, and what the group embeddings need."""

    def __init__(self, graph: OpGraph, max_outputs: int = 5, adjacency: int = 20):
        a, n = graph.arrays, graph.n_ops
        self.unit_of_op = a.group.astype(np.int64)
        self.n_units = a.n_groups
        first_seen = list(dict.fromkeys(op.type for op in graph.ops))
        self.type_names = first_seen
        self.type_ids = torch.tensor([first_seen.index(op.type) for op in graph.ops], dtype=torch.long)
        # output sizes: log10(1 + bytes) of the first outputs, -1 where an op has fewer (the release's padding)
        sizes = np.full((n, max_outputs), -1.0, np.float32)
        slot_bytes = np.zeros((n, max_outputs), np.float64)  # for the group embeddings (0-padded)
        for i, op in enumerate(graph.ops):
            b = np.asarray(op.output_bytes[:max_outputs], np.float64)
            sizes[i, :len(b)] = np.log10(1.0 + b)
            slot_bytes[i, :len(b)] = b
        self.output_sizes = torch.from_numpy(sizes)
        self.slot_bytes = torch.from_numpy(slot_bytes)
        # adjacency in the release's order: ops in topological order, each appending (consumer, +1) to its own
        # list and (itself, -1) to the consumer's; positions scaled to (0, 1], 0 = padding
        pairs = np.unique(np.stack([a.src, a.dst], axis=1), axis=0) if len(a.src) else np.zeros((0, 2), np.int64)
        topo = graph.topological_order()
        position = np.empty(n, np.int64)
        position[topo] = np.arange(n)
        fanout: list[list[int]] = [[] for _ in range(n)]
        for s, d in pairs:
            fanout[s].append(int(d))
        lists: list[list[float]] = [[] for _ in range(n)]
        for op in topo:
            for consumer in sorted(fanout[op], key=lambda c: position[c]):
                lists[op] += [(position[consumer] + 1) / n, 1.0]
                lists[consumer] += [(position[op] + 1) / n, -1.0]
        adj = np.zeros((n, adjacency), np.float32)
        for i, values in enumerate(lists):
            adj[i, :min(adjacency, len(values))] = values[:adjacency]
        self.adjacency = torch.from_numpy(adj)
        self.edges = torch.from_numpy(pairs.astype(np.int64))  # distinct (producer, consumer) op pairs
        counts = np.bincount(self.unit_of_op, minlength=self.n_units).astype(np.float32)
        self.op_count = torch.from_numpy(counts)

    @property
    def n_types(self) -> int:
        return len(self.type_names)


class HierarchicalPolicy(nn.Module):
    """Grouper + Placer with the interface the search loop uses (`sample`, `log_prob`, and the
    `partition_logits` / `group_embeddings` / `schedule_logits` the warm start trains)."""

    def __init__(self, inputs: GrouperInputs, n_devices: int, cfg: HierarchicalConfig):
        super().__init__()
        self.ug, self.cfg, self.n_devices = inputs, cfg, n_devices
        k, h = cfg.num_groups, cfg.hidden
        if h % 2:
            raise ValueError(f"hierarchical.hidden must be even (a bidirectional encoder), got {h}")
        self.type_embedding = nn.Embedding(inputs.n_types, cfg.type_embedding)
        op_width = cfg.type_embedding + cfg.max_outputs + cfg.adjacency
        self.grouper = nn.Sequential(nn.Linear(op_width, cfg.grouper_hidden, bias=False),
                                     nn.Linear(cfg.grouper_hidden, k, bias=False))
        self.group_width = 2 * k + inputs.n_types + cfg.max_outputs
        self.encoder = nn.LSTM(self.group_width, h // 2, batch_first=True, bidirectional=True)
        self.decoder = nn.LSTM(h, h, batch_first=True)
        self.device_embedding = nn.Embedding(n_devices + 1, h)  # last row: <go>
        self.attn_memory = nn.Linear(h, h, bias=False)  # W1 on encoder states
        self.attn_query = nn.Linear(h, h, bias=False)  # W2 on the decoder state
        self.attn_v = nn.Linear(h, 1, bias=False)
        self.device_softmax = nn.Linear(2 * h, n_devices, bias=False)
        for lstm in (self.encoder, self.decoder):  # forget-gate bias 1 (gates ordered i, f, g, o)
            for name, p in lstm.named_parameters():
                if name.startswith("bias"):
                    with torch.no_grad():
                        p.zero_()
                        if name.startswith("bias_ih"):
                            p[p.shape[0] // 4: p.shape[0] // 2] = cfg.forget_bias

    # ------------------------------------------------------------- grouper
    def op_inputs(self) -> torch.Tensor:
        """[N, type_embedding + max_outputs + adjacency] the Grouper's input per op."""
        return torch.cat([self.type_embedding(self.ug.type_ids), self.ug.output_sizes, self.ug.adjacency], dim=1)

    def partition_logits(self, dropout_seed: int | None = None) -> torch.Tensor:
        """[U, k] group logits per unit (the mean of its ops'); no dropout (release: keep_prob 1)."""
        per_op = self.grouper(self.op_inputs())
        sums = torch.zeros(self.ug.n_units, per_op.shape[1]).index_add(
            0, torch.from_numpy(self.ug.unit_of_op), per_op)
        return sums / self.ug.op_count[:, None]

    # ------------------------------------------------------------- group embeddings
    def group_embeddings(self, groups: torch.Tensor) -> torch.Tensor:
        """[B, k, 2k + V + max_outputs] embeddings of each sampled grouping's groups (no gradient)."""
        b, k = groups.shape[0], self.cfg.num_groups
        op_group = groups[:, torch.from_numpy(self.ug.unit_of_op)]  # [B, N]
        dag = torch.zeros(b, k * k)
        if len(self.ug.edges):
            g_src, g_dst = op_group[:, self.ug.edges[:, 0]], op_group[:, self.ug.edges[:, 1]]
            dag.scatter_add_(1, g_src * k + g_dst, torch.ones(g_src.shape))
        dag = dag.view(b, k, k)
        types = torch.zeros(b, k * self.ug.n_types).scatter_add_(
            1, op_group * self.ug.n_types + self.ug.type_ids[None], torch.ones(op_group.shape)).view(b, k, -1)
        m = self.cfg.max_outputs
        slot = torch.zeros(b, k, m, dtype=torch.float64).scatter_add_(
            1, op_group[:, :, None].expand(-1, -1, m), self.ug.slot_bytes[None].expand(b, -1, -1))
        emb = torch.cat([dag, dag.transpose(1, 2), types, torch.log10(1.0 + slot).float()], dim=2)
        return emb / (emb.amax(dim=2, keepdim=True) + 1.0)

    # ------------------------------------------------------------- placer
    def _encode(self, group_emb: torch.Tensor):
        enc, (h, c) = self.encoder(group_emb)  # enc [B, k, H]; h, c [2, B, H/2]
        state = (torch.cat([h[0], h[1]], 1)[None], torch.cat([c[0], c[1]], 1)[None])
        return self.attn_memory(enc), state

    def _logits(self, dec: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """[B, T, D] squashed device logits for decoder states [B, T, H] over attention memory [B, k, H]."""
        scores = self.attn_v(torch.tanh(self.attn_query(dec)[:, :, None] + memory[:, None]))[..., 0]  # [B, T, k]
        context = torch.bmm(F.softmax(scores, dim=2), memory)
        u = self.device_softmax(torch.cat([dec, context], dim=2)) / self.cfg.temperature
        return self.cfg.tanh_constant * torch.tanh(u)

    def schedule_logits(self, group_emb: torch.Tensor, devices: torch.Tensor) -> torch.Tensor:
        """[B, k, D] device logits of each group given the devices chosen before it (one parallel pass)."""
        memory, state = self._encode(group_emb)
        go = torch.full((devices.shape[0], 1), self.n_devices, dtype=torch.long)
        dec, _ = self.decoder(self.device_embedding(torch.cat([go, devices[:, :-1]], dim=1)), state)
        return self._logits(dec, memory)

    # ------------------------------------------------------------- sampling and scoring
    def _noise(self, strategy: SampledStrategies) -> tuple[torch.Tensor, torch.Tensor]:
        """Standard normal draws for the grouper's [B, U, k] and the placer's [B, k, D] logits."""
        b, u = strategy.groups.shape
        gen = torch.Generator().manual_seed(strategy.noise_seed)
        return (torch.randn((b, u, self.cfg.num_groups), generator=gen),
                torch.randn((b, self.cfg.num_groups, self.n_devices), generator=gen))

    @staticmethod
    def _noisy(logits: torch.Tensor, draws: torch.Tensor, noise: float, dims: tuple[int, ...]) -> torch.Tensor:
        """logits + noise * RMS(logits over ``dims``) * draws; the RMS is a scale, not a path for gradients."""
        if noise <= 0:
            return logits
        rms = logits.detach().pow(2).mean(dim=dims, keepdim=True).sqrt()
        return logits + noise * rms * draws

    @torch.no_grad()
    def sample(self, batch: int, generator: torch.Generator, noise: float = 0.0) -> SampledStrategies:
        k, d = self.cfg.num_groups, self.n_devices
        noise_seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
        strategy = SampledStrategies(torch.zeros(batch, self.ug.n_units, dtype=torch.long),
                                     torch.zeros(batch, k, dtype=torch.long), noise_seed=noise_seed, noise=noise)
        on_groups, on_devices = self._noise(strategy)
        part = self._noisy(self.partition_logits()[None], on_groups, noise, (1, 2)).expand(batch, -1, -1)
        groups = _sample_categorical(part, generator)
        logp_groups = F.log_softmax(part, dim=2).gather(2, groups[:, :, None])[:, :, 0]
        memory, state = self._encode(self.group_embeddings(groups))
        prev = torch.full((batch,), d, dtype=torch.long)
        gumbel = _gumbel((k, batch, d), generator)
        devices, logp_devices = [], []
        for g in range(k):
            dec, state = self.decoder(self.device_embedding(prev)[:, None], state)
            z = self._noisy(self._logits(dec, memory)[:, 0], on_devices[:, g], noise, (1,))
            prev = torch.argmax(z + gumbel[g], dim=1)
            devices.append(prev)
            logp_devices.append(F.log_softmax(z, dim=1).gather(1, prev[:, None])[:, 0])
        strategy.groups, strategy.devices = groups, torch.stack(devices, 1)
        strategy.logp = torch.cat([logp_groups, torch.stack(logp_devices, 1)], dim=1)
        return strategy

    def log_prob(self, strategy: SampledStrategies) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of every decision, [B, U + k], under the (noisy) distribution that sampled it,
        and the mean per-decision entropy."""
        on_groups, on_devices = self._noise(strategy)
        b = strategy.groups.shape[0]
        part = self._noisy(self.partition_logits()[None], on_groups, strategy.noise, (1, 2)).expand(b, -1, -1)
        part = F.log_softmax(part, dim=2)
        logp_part = part.gather(2, strategy.groups[:, :, None])[:, :, 0]
        sched = self.schedule_logits(self.group_embeddings(strategy.groups), strategy.devices)
        sched = F.log_softmax(self._noisy(sched, on_devices, strategy.noise, (2,)), dim=2)
        logp_sched = sched.gather(2, strategy.devices[:, :, None])[:, :, 0]
        entropy = -(part.exp() * part).sum(2).mean() - (sched.exp() * sched).sum(2).mean()
        return torch.cat([logp_part, logp_sched], dim=1), entropy
