"""Hierarchical (Mirhoseini et al. 2018): the published Grouper and seq2seq Placer, REINFORCE.

Read top to bottom:

* the policy (`trinity/rl/hierarchical.py`) reads the graph itself (op types, output sizes,
  adjacency), groups ops into k = min(256, 20 x devices) groups and places groups with a seq2seq
  LSTM; exploration is the release's Gaussian logit noise (``logits_noise`` times the logits' RMS)
  for the first ``noise_steps`` iterations;
* each strategy's reward is -sqrt(runtime in seconds) (a failing placement gets a failing runtime);
* one REINFORCE step per batch on the advantage R - b (b an exponential moving average), Adam at
  the release's staircase-decayed rate, gradient-norm clip.

REINFORCE has no importance ratio, so every batch is sampled on-policy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.reward import hierarchical_reward
from trinity.rl.agent import AgentContext, Samples, TwoLevelAgent, check_range, register
from trinity.rl.algorithms import EMABaseline, reinforce_loss
from trinity.rl.hierarchical import GrouperInputs, HierarchicalConfig, HierarchicalPolicy


@dataclass
class HierarchicalOptions:
    """Hierarchical's settings (the ``agent:`` block of conf/method/hierarchical*.yaml)."""

    num_groups: int | None = None  #: k; None = min(256, 20 x devices), capped at the placement units
    lr: float | None = None  #: Adam; None = the published 0.1, or ``fine_tune_lr`` after a warm start
    fine_tune_lr: float = 1e-4
    entropy_coef: float = 0.0
    baseline_decay: float = 0.9
    grad_clip: float = 1.0
    policy: HierarchicalConfig = field(default_factory=HierarchicalConfig)

    def __post_init__(self):
        if isinstance(self.policy, dict):
            self.policy = HierarchicalConfig(**self.policy)
        check_range("hierarchical", "num_groups", self.num_groups, 1, allow_none=True)
        check_range("hierarchical", "lr", self.lr, 0, 10.0, low_open=True, allow_none=True)
        check_range("hierarchical", "fine_tune_lr", self.fine_tune_lr, 0, 10.0, low_open=True)
        check_range("hierarchical", "entropy_coef", self.entropy_coef, 0, 10.0)
        check_range("hierarchical", "baseline_decay", self.baseline_decay, 0, 1.0)
        check_range("hierarchical", "grad_clip", self.grad_clip, 0, low_open=True)
        h = self.policy
        check_range("hierarchical", "policy.hidden", h.hidden, 2, 4096)
        if h.hidden % 2:
            raise ValueError(f"policy.hidden must be even (a bidirectional encoder), got {h.hidden}")
        check_range("hierarchical", "policy.logits_noise", h.logits_noise, 0, 10.0)
        check_range("hierarchical", "policy.lr_decay", h.lr_decay, 0, 1.0, low_open=True)
        check_range("hierarchical", "policy.lr_decay_every", h.lr_decay_every, 1)


@register("hierarchical")
class HierarchicalAgent(TwoLevelAgent):
    Options = HierarchicalOptions

    def __init__(self, graph: OpGraph, cluster: Cluster, options: HierarchicalOptions, ctx: AgentContext):
        self.ctx = ctx
        n_dev = cluster.n_devices
        k = options.num_groups or min(max(min(256, 20 * n_dev), n_dev), graph.arrays.n_groups)
        policy_cfg = HierarchicalConfig(**{**asdict(options.policy), "num_groups": k})
        lr = options.lr if options.lr is not None else options.fine_tune_lr if ctx.warm_start else 0.1
        self.options = HierarchicalOptions(**{**asdict(options), "num_groups": k, "lr": lr, "policy": policy_cfg})
        self.num_groups = k
        self.units = GrouperInputs(graph, policy_cfg.max_outputs, policy_cfg.adjacency)
        self.unit_of_op = self.units.unit_of_op
        with torch.random.fork_rng(devices=[]):  # the agent's own stream of torch's global generator
            torch.manual_seed(ctx.seed)
            self.policy = HierarchicalPolicy(self.units, n_dev, policy_cfg)
            self.torch_rng = torch.get_rng_state()
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr, foreach=True)
        self.baseline = EMABaseline(options.baseline_decay)

    def reward(self, result) -> float:
        return hierarchical_reward(result, self.ctx.reward.fail_runtime_ratio)

    def noise(self, iteration: int | None) -> float:
        """The release: a constant relative noise, then none."""
        h = self.options.policy
        return h.logits_noise if iteration is not None and iteration < h.noise_steps else 0.0

    def lr(self, iteration: int) -> float:
        """The release's staircase decay of Adam's rate."""
        h, lr = self.options.policy, self.options.lr
        return lr if iteration < h.lr_decay_start else lr * h.lr_decay ** ((iteration - h.lr_decay_start)
                                                                         // h.lr_decay_every)

    def sample(self, batch: int, generator: torch.Generator, iteration: int | None) -> Samples:
        strategy = self.policy.sample(batch, generator, self.noise(iteration))
        return Samples(strategy.placements(self.unit_of_op), strategy)

    def update(self, samples: Samples, rewards: torch.Tensor, iteration: int) -> dict[str, float]:
        o, strategy = self.options, samples.data
        advantages = self.baseline.advantages(rewards)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr(iteration)
        self.policy.train()
        logp, entropy = self.policy.log_prob(strategy)
        loss = reinforce_loss(logp.sum(dim=1), advantages)
        self.optimizer.zero_grad()
        (loss - o.entropy_coef * entropy).backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), o.grad_clip)
        self.optimizer.step()
        return {"losses/policy_loss": float(loss.detach()), "losses/entropy": float(entropy.detach()),
                "losses/grad_norm": float(grad_norm), "charts/lr": self.optimizer.param_groups[0]["lr"],
                "charts/baseline": float(self.baseline.value), "charts/noise": strategy.noise}
