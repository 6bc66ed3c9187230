"""Trinity (Zeng et al. 2022): PPO over the two-level placement policy, MDPE reward.

Read top to bottom, as CleanRL's ppo.py:

* the policy (`trinity/rl/policy.py`) partitions units (colocation groups) into k groups and
  schedules groups on devices; one batch of strategies is sampled per iteration, with logit noise
  U(-noise, noise) that decays linearly to zero over ``noise_steps`` iterations;
* each strategy's reward is MDPE (`trinity/reward.py`); advantages are R - b, b an exponential
  moving average of the batch means (``baseline_decay``);
* the update runs ``ppo_epochs`` epochs of PPO's clipped objective in which every decision of a
  strategy (each unit's group, each group's device) is an action sharing its strategy's advantage,
  minus ``entropy_coef`` times the mean per-decision entropy, plus ``self_imitation`` times the
  mean negative log-likelihood of the best strategy sampled so far, once the policy agrees with it
  (``self_imitation_agreement``); Adam, gradient-norm clip;
* from scratch, advantages are normalised within each batch instead (``normalize_advantages``),
  self-imitation opens once the policy has settled on its own likeliest devices
  (``self_imitation_gate``), free logit tables let the policy hold any strategy, at their own
  rate (``policy.unit_logits``, ``policy.group_logits``, ``table_lr``), and each batch is sampled
  at the lowest temperature >= 1 that puts ``explore`` units per sample off the policy's likeliest
  devices, PPO's ratio under the same (a settled policy still tries a few moves). After a warm
  start none of these is on by default but the per-unit logits (the imitation is then exact).
Off by default, ``relabel`` first permutes each sample's interchangeable devices to the labelling the
policy finds likeliest, so mirror images of a strategy push the policy the same way; ``leader_explore``
gives a race's winner its own units to explore once it runs alone; ``adapt_explore`` lets the units
explored follow how often an iteration improves on the best (README's *The leader's moves*);
``neighbour_moves`` gives a share of each batch one of simulated annealing's moves along the graph's edges
(``leader_neighbour_moves``: once a race's winner runs alone).

PPO's old log-probabilities are those of the distribution that sampled (its dropout mask, noise
and temperature), computed exactly as the update computes the new ones, so the ratio before the
first step is exactly 1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from trinity.cluster import Cluster
from trinity.costs import op_times
from trinity.errors import TrinityError
from trinity.features import OpFeatures, op_features, zscore
from trinity.graph.ir import OpGraph
from trinity.reward import mdpe_reward
from trinity.rl.agent import AgentContext, Samples, TwoLevelAgent, check_range, register
from trinity.rl.algorithms import (EMABaseline, block_moved_devices, neighbour_moved_groups, normalised_advantages,
                                   ppo_loss, relabelled_devices)
from trinity.rl.policy import PlacementPolicy, PolicyConfig, UnitGraph, likeliest_device_probability

#: where the policy's op costs come from (TrinityOptions.op_costs)
OP_COSTS = ("profile", "cluster")


@dataclass
class TrinityOptions:
    """Trinity's settings (the ``agent:`` block of conf/method/trinity*.yaml)."""

    #: k, at least one per device and at most one per placement unit; None = 64 from scratch with the one-pass
    #: decoder (groups that start as min-cut parts, `policy.locality_order`; fewer encoder steps: see the
    #: README's ablation), else the paper's 256
    num_groups: int | None = None
    #: Adam; None = 1e-2 (the paper's 0.1 collapses the policy, 1e-3 leaves it near uniform for the default
    #: budget: see the README's ablation), or ``fine_tune_lr`` after a warm start
    lr: float | None = None
    fine_tune_lr: float = 1e-4  #: a larger rate walks a warm-started policy away from its placer within tens of iterations
    ppo_epochs: int = 2
    clip: float = 0.2
    entropy_coef: float = 0.0
    baseline_decay: float = 0.9
    noise_max: float = 0.1  #: logit noise at iteration 0, decaying linearly ...
    noise_steps: int = 500  #: ... to zero here
    grad_clip: float = 1.0
    #: advantages (R - mean R) / std R within each batch (CleanRL's norm_adv) instead of R - b: the update's
    #: size then follows neither the reward's scale nor the baseline's lag. None = on from scratch with the
    #: one-pass decoder, off after a warm start or with the sequential decoder (see the README's ablation)
    normalize_advantages: bool | None = None
    #: self-imitation (Oh et al. 2018): weight of the negative log-likelihood of the best strategy sampled so
    #: far, added to PPO's loss each epoch; 0 = off. None = 10 where normalize_advantages' default is on, else 0
    self_imitation: float | None = None
    #: the self-imitation term starts once a sample of the policy would put at least this share of the units
    #: where the elite does (in expectation): then the elite is where PPO alone has already taken the policy,
    #: not an early lucky split far from it; None = from the first update
    self_imitation_agreement: float | None = 0.97
    #: whose placement that share is measured against: "elite" (the best strategy's) or "mode" (the policy's
    #: own likeliest device for each unit: the gate opens once PPO has settled in a basin, even where the
    #: elite lies outside it, as an early spread split better than the one device PPO settled on);
    #: None = "mode" where normalize_advantages' default is on, else "elite"
    self_imitation_gate: str | None = None
    #: Adam's rate for the free logit tables (policy.unit_logits, policy.group_logits): at the network's
    #: 1e-2 a logit moves ~0.02 per iteration, too slow to follow a new best strategy. None = 0.1 where
    #: normalize_advantages' default is on, else ``lr`` (one parameter group)
    table_lr: float | None = None
    #: units a sample is expected to put off their likeliest device, at least: each iteration samples at the
    #: lowest temperature (>= 1) that does (PPO's ratio under the same), so a policy that has settled, on one
    #: device or on its best strategy, still tries a few other units and can climb from there; at most one
    #: unit in 12; 0 = off. None = 8 where normalize_advantages' default is on, else 0
    explore: float | None = None
    #: units a sample is expected to put off their likeliest device once this agent leads a race (runs the rest
    #: of the budget alone, `trinity/rl/racing.py`): the race has chosen the basin, and in it a sample that moves
    #: fewer units improves on the best strategy more often (README's *The leader's moves*). None = ``explore``
    leader_explore: float | None = None
    #: the units explored follow the search's success, as an evolution strategy adapts its step (Rechenberg's 1/5
    #: rule): after an iteration in which no sample beats the best this agent sampled before it, the target shrinks
    #: by 2^-0.1 (ten such halve it); after one in which a sample does, it grows by 2^0.4; so it settles where one
    #: iteration in five improves, between 1 unit and ``explore`` (``leader_explore`` once leading). Off: fixed
    adapt_explore: bool = False
    #: before each update, relabel every sample's devices, within classes of interchangeable devices, to the
    #: labelling the policy finds likeliest (`relabelled_devices`): mirror images of a strategy then push the
    #: policy the same way instead of cancelling (parallel decoder only; off: it trades the paper's regime
    #: against the layered DAGs, README's *Relabelling mirror images*)
    relabel: bool = False
    #: the share of each iteration's samples in which one block of consecutive groups (a sixteenth, an eighth
    #: or a quarter of them, aligned) is put on one device drawn at random (`block_moved_devices`), their
    #: log-probabilities taken under the distribution that sampled the batch: a policy that samples each
    #: group's device on its own almost never moves neighbouring groups together, and a balanced split is
    #: built of such moves (README's *Block moves*). Blocks follow the groups' order, so they are parts of
    #: the graph where the order is the bisection's (`policy.locality_order: bisection`). 0 = off
    block_moves: float = 0.0
    #: the share of each iteration's samples given one neighbour move (`neighbour_moved_groups`): a unit, with up to
    #: two of its neighbours on its side, put into the group of a neighbour on another device, their
    #: log-probabilities taken under the distribution that sampled the batch: the move simulated annealing makes,
    #: along the graph's edges, where the policy's own exploration moves units it is unsure of to any device
    #: (README's *Neighbour moves*). 0 = off
    neighbour_moves: float = 0.0
    #: ``neighbour_moves`` once this agent leads a race (runs the rest of the budget alone): the race picks a basin
    #: with the policy's own exploration, the leader searches it with annealing's moves too. None = ``neighbour_moves``
    leader_neighbour_moves: float | None = None
    embedding_dim: int = 16  #: node2vec width when the features are computed here (not given by the embed stage)
    #: where the op costs the policy reads come from (the compute-time feature, each group's compute share,
    #: the METIS parts' balance): "profile", the times the profile measured (the embed stage's features), or
    #: "cluster", the cost model of the devices searched (`trinity.costs.op_times`, mean over devices): what
    #: the simulator charges, and the same on every machine that exports the model
    op_costs: str = "profile"
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    def __post_init__(self):
        if isinstance(self.policy, dict):
            self.policy = PolicyConfig(**self.policy)
        self.policy.partition_hidden = tuple(self.policy.partition_hidden)
        check_range("trinity", "num_groups", self.num_groups, 1, allow_none=True)
        check_range("trinity", "lr", self.lr, 0, 1.0, low_open=True, allow_none=True)
        check_range("trinity", "fine_tune_lr", self.fine_tune_lr, 0, 1.0, low_open=True)
        check_range("trinity", "ppo_epochs", self.ppo_epochs, 1, 100)
        check_range("trinity", "clip", self.clip, 0, 1.0, low_open=True)
        check_range("trinity", "entropy_coef", self.entropy_coef, 0, 10.0)
        check_range("trinity", "baseline_decay", self.baseline_decay, 0, 1.0)
        check_range("trinity", "noise_max", self.noise_max, 0, 10.0)
        check_range("trinity", "noise_steps", self.noise_steps, 0)
        check_range("trinity", "grad_clip", self.grad_clip, 0, low_open=True)
        check_range("trinity", "table_lr", self.table_lr, 0, 1.0, low_open=True, allow_none=True)
        check_range("trinity", "explore", self.explore, 0, allow_none=True)
        check_range("trinity", "leader_explore", self.leader_explore, 0, allow_none=True)
        if self.explore and self.policy.decoder != "parallel":
            raise TrinityError("needs policy.decoder=parallel (the sequential decoder samples group by group)",
                               field="explore")
        check_range("trinity", "self_imitation", self.self_imitation, 0, 100.0, allow_none=True)
        check_range("trinity", "self_imitation_agreement", self.self_imitation_agreement, 0, 1.0, allow_none=True)
        if self.relabel and self.policy.decoder != "parallel":
            raise TrinityError("needs policy.decoder=parallel (the sequential decoder's devices condition on the "
                               "previous group's)", field="relabel")
        if self.self_imitation and self.policy.decoder != "parallel":
            raise TrinityError("needs policy.decoder=parallel (the sequential decoder's noise is drawn per sample)",
                               field="self_imitation")
        if self.self_imitation_gate not in (None, "elite", "mode"):
            raise TrinityError(f"must be elite or mode, got {self.self_imitation_gate!r}", field="self_imitation_gate")
        check_range("trinity", "block_moves", self.block_moves, 0, 1.0)
        if self.block_moves and self.policy.decoder != "parallel":
            raise TrinityError("needs policy.decoder=parallel (the sequential decoder's devices condition on the "
                               "previous group's)", field="block_moves")
        check_range("trinity", "neighbour_moves", self.neighbour_moves, 0, 1.0)
        check_range("trinity", "leader_neighbour_moves", self.leader_neighbour_moves, 0, 1.0, allow_none=True)
        if (self.neighbour_moves or self.leader_neighbour_moves) and self.policy.decoder != "parallel":
            raise TrinityError("needs policy.decoder=parallel (the sequential decoder's devices condition on the "
                               "sampled groups)", field="neighbour_moves" if self.neighbour_moves else "leader_neighbour_moves")
        check_range("trinity", "embedding_dim", self.embedding_dim, 1, 1024)
        if self.op_costs not in OP_COSTS:
            raise TrinityError(f"must be one of {', '.join(OP_COSTS)}, got {self.op_costs!r}", field="op_costs")
        check_range("trinity", "policy.lstm_hidden", self.policy.lstm_hidden, 1, 4096)


@register("trinity")
class TrinityAgent(TwoLevelAgent):
    Options = TrinityOptions

    def __init__(self, graph: OpGraph, cluster: Cluster, options: TrinityOptions, ctx: AgentContext):
        self.ctx = ctx
        units = graph.arrays.n_groups
        # from scratch (one-pass decoder): PPO finds a basin, then self-imitation searches around its best point
        scratch = not ctx.warm_start and options.policy.decoder == "parallel"
        k = options.num_groups or min(max(64 if scratch else 256, cluster.n_devices), units)
        # the free tables by default from scratch (PPO can then settle exactly on a strategy it found) and the
        # per-unit one after a warm start (the imitation is then exact)
        p = options.policy
        unit_logits = (ctx.warm_start or scratch) if p.unit_logits is None else p.unit_logits
        group_logits = scratch if p.group_logits is None else p.group_logits
        # from scratch, groups start as min-cut parts, sharply: a random schedule of connected pieces cuts
        # little, so the policy need not first collapse onto one device (README's held-out table)
        order = ("metis" if scratch else "breadth") if p.locality_order is None else p.locality_order
        prior = (3.0 if scratch else 1.0) if p.topo_prior is None else p.topo_prior
        policy_cfg = PolicyConfig(**{**asdict(p), "num_groups": k, "unit_logits": unit_logits,
                                     "group_logits": group_logits, "locality_order": order, "topo_prior": prior})
        lr = options.lr if options.lr is not None else options.fine_tune_lr if ctx.warm_start else 1e-2
        normalize = scratch if options.normalize_advantages is None else options.normalize_advantages
        imitation = (10.0 if scratch else 0.0) if options.self_imitation is None else options.self_imitation
        gate = ("mode" if scratch else "elite") if options.self_imitation_gate is None else options.self_imitation_gate
        table_lr = (0.1 if scratch else None) if options.table_lr is None else options.table_lr
        explore = (8.0 if scratch else 0.0) if options.explore is None else options.explore
        self.options = TrinityOptions(**{**asdict(options), "num_groups": k, "lr": lr, "policy": policy_cfg,
                                         "normalize_advantages": normalize, "self_imitation": imitation,
                                         "self_imitation_gate": gate, "table_lr": table_lr, "explore": explore})
        self.num_groups = k
        # features from the pipeline's embed stage, or computed here (cached in ``feature_cache``)
        feats = ctx.features or op_features(graph, embedding_dim=options.embedding_dim, seed=ctx.embedding_seed,
                                            cache_dir=ctx.feature_cache)
        times = None
        if options.op_costs == "cluster":  # the compute-time column (0) from the devices' cost model
            times = op_times(graph, cluster).mean(axis=1)
            numeric = feats.numeric.copy()
            numeric[:, 0] = zscore(np.log1p(times))
            feats = OpFeatures(feats.type_ids, numeric)
        self.units = UnitGraph(graph, feats, times)
        self.unit_of_op = self.units.unit_of_op
        # Initialisation and dropout draw from torch's global generator; the agent keeps its own state
        # of it (trinity.rl.agent.own_rng), so other code, or another search, cannot shift its stream.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seed)
            self.policy = PlacementPolicy(self.units, cluster.n_devices, feats.vocabulary_size, policy_cfg)
            self.torch_rng = torch.get_rng_state()
        # the free logit tables take their own rate: at the network's, Adam moves a logit ~0.02 per iteration,
        # so following a new best strategy takes the policy hundreds of iterations
        tables = [] if table_lr is None else \
            [p for p in (self.policy.unit_logits, self.policy.group_logits) if p is not None]
        rest = [p for p in self.policy.parameters() if all(p is not t for t in tables)]
        groups = [{"params": rest}] + ([{"params": tables, "lr": table_lr}] if tables else [])
        self.optimizer = torch.optim.Adam(groups, lr=lr, foreach=True)
        self.baseline = EMABaseline(options.baseline_decay)
        self.elite: tuple[torch.Tensor, torch.Tensor, float] | None = None  #: self-imitation's target
        #: the devices' classes for ``relabel``; None where it is off or no two devices are interchangeable
        self.classes: np.ndarray | None = None
        if options.relabel:
            classes = cluster.interchangeable()
            self.classes = classes if len(np.unique(classes)) < len(classes) else None
        #: the units' adjacency (CSR), where neighbour moves are on
        self.neighbours = graph.group_neighbours() if options.neighbour_moves or options.leader_neighbour_moves else None
        self.imitating = False  #: the self-imitation term is on (see TrinityOptions.self_imitation_agreement)
        self.leading = False  #: this agent won a race and runs the rest alone (TrinityOptions.leader_explore)
        self.explore_log2 = 0.0  #: log2 of the share of the units to explore taken (TrinityOptions.adapt_explore)
        self.best_sampled = -np.inf  #: the best reward this agent has sampled (adapt_explore's success)

    def reward(self, result) -> float:
        return mdpe_reward(result, self.ctx.reward)

    def noise(self, iteration: int | None) -> float:
        o = self.options
        if iteration is None or not o.noise_steps:
            return 0.0
        return o.noise_max * max(0.0, 1.0 - iteration / o.noise_steps)

    def sample(self, batch: int, generator: torch.Generator, iteration: int | None) -> Samples:
        noise = self.noise(iteration)
        parallel = self.options.policy.decoder == "parallel"
        # the parallel decoder's sampling pass is the update's first (same weights, same values); the
        # sequential one recomputes PPO's old log-probabilities exactly as the update computes the new ones
        # at most one unit in 12: 8 units of layered12's 12 would leave most of its graph random in every sample
        explore = min(self.explore_units(), self.units.n_units / 12) if iteration is not None else 0.0
        steps = self.options.policy.block_prior_steps
        # the policy's own choice (no iteration) reads it faded
        block_scale = 1.0 if not steps else 0.0 if iteration is None else max(0.0, 1.0 - iteration / steps)
        strategy = self.policy.sample(batch, generator, noise, keep_graph=parallel and iteration is not None,
                                      explore=explore, block_scale=block_scale)
        if iteration is not None and not parallel:
            with torch.no_grad():
                strategy.logp = self.policy.log_prob(strategy)[0]
        if iteration is not None and self.options.block_moves:
            strategy = self._block_moved(strategy, generator)
        if iteration is not None and self.neighbour_share():
            strategy = self._neighbour_moved(strategy, generator)
        return Samples(strategy.placements(self.unit_of_op), strategy)

    def _units(self) -> float:
        """``explore``, or ``leader_explore`` once this agent leads a race."""
        o = self.options
        return o.leader_explore if self.leading and o.leader_explore is not None else o.explore

    def neighbour_share(self) -> float:
        """``neighbour_moves``, or ``leader_neighbour_moves`` once this agent leads a race."""
        o = self.options
        return o.leader_neighbour_moves if self.leading and o.leader_neighbour_moves is not None else o.neighbour_moves

    def explore_units(self) -> float:
        """The units a sample is to put off their likeliest devices now (`_units`, scaled by ``adapt_explore``'s
        share, never below 1)."""
        units = self._units()
        return max(1.0, units * 2.0 ** self.explore_log2) if self.options.adapt_explore and units > 0 else units

    def _adapt_explore(self, rewards: torch.Tensor) -> None:
        """``adapt_explore``: 2^0.4 more units after an iteration that beat the best sampled before it, 2^-0.1 fewer
        after one that did not, within [1, `_units`] units."""
        best = float(rewards.max())
        if self.options.adapt_explore:
            lowest = -float(np.log2(max(self._units(), 1.0)))
            self.explore_log2 = float(np.clip(self.explore_log2 + (0.4 if best > self.best_sampled else -0.1),
                                              lowest, 0.0))
        self.best_sampled = max(self.best_sampled, best)

    def _block_moved(self, strategy, generator: torch.Generator):
        """The batch with ``block_moves`` of its samples block-moved, and every sample's devices' log-probabilities
        under the distribution that sampled them (the parallel decoder's, shared by the batch)."""
        log_sched = strategy.distributions[1]
        devices = block_moved_devices(strategy.devices, log_sched.shape[1], self.options.block_moves, generator)
        return _with_devices(strategy, devices, log_sched)

    def _neighbour_moved(self, strategy, generator: torch.Generator):
        """The batch with `neighbour_share` of its samples neighbour-moved, and every sample's units' groups'
        log-probabilities under the distribution that sampled them (the parallel decoder's, shared by the batch)."""
        groups = neighbour_moved_groups(strategy.groups, strategy.devices, self.neighbours, self.neighbour_share(),
                                        generator)
        log_part = strategy.distributions[0].detach()
        logp = strategy.logp.clone()
        logp[:, :groups.shape[1]] = log_part[torch.arange(groups.shape[1]), groups]
        return replace(strategy, groups=groups, logp=logp)

    def update(self, samples: Samples, rewards: torch.Tensor, iteration: int) -> dict[str, float]:
        o, strategy = self.options, samples.data
        explored = self.explore_units()  # the target this batch was sampled with
        self._adapt_explore(rewards)
        advantages = self.baseline.advantages(rewards)
        if o.normalize_advantages:
            advantages = normalised_advantages(rewards)
        if self.classes is not None:
            strategy = self._relabelled(strategy)
        logp_old = strategy.logp  # of the distribution sampled: its dropout mask and noise (see SampledStrategies)
        b = len(rewards)
        if o.self_imitation:
            self._keep_elite(strategy, rewards)
            need = o.self_imitation_agreement
            self.imitating = self.imitating or need is None or self._agreement(strategy) >= need
            # the elite rides along as one more row: the parallel decoder's distributions are the batch's
            strategy = replace(strategy, groups=torch.cat([strategy.groups, self.elite[0][None]]),
                               devices=torch.cat([strategy.devices, self.elite[1][None]]))
        self.policy.train()
        imitation = torch.zeros(())
        for _ in range(o.ppo_epochs):
            logp, entropy = self.policy.log_prob(strategy)
            # every decision is an action sharing its strategy's advantage
            loss, stats = ppo_loss(logp[:b], logp_old, advantages[:, None].expand_as(logp_old), o.clip)
            total = loss - o.entropy_coef * entropy
            if self.imitating:
                imitation = -logp[b].mean()
                total = total + o.self_imitation * imitation
            self.optimizer.zero_grad()
            total.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), o.grad_clip)
            self.optimizer.step()
        return {"losses/policy_loss": float(loss.detach()), "losses/entropy": float(entropy.detach()),
                "losses/grad_norm": float(grad_norm), **{f"losses/{k}": v for k, v in stats.items()},
                "charts/lr": self.optimizer.param_groups[0]["lr"], "charts/baseline": float(self.baseline.value),
                "charts/noise": strategy.noise, "charts/temperature": float(strategy.temperature),
                "charts/explore": float(explored),
                "losses/self_imitation": float(imitation.detach()),
                **({"charts/block_strength": float(self.policy.block_strength.detach())}
                   if self.policy.cfg.block_prior_learned else {})}

    def _relabelled(self, strategy):
        """The batch with its devices relabelled (``relabel``), and their log-probabilities under the
        distribution that sampled them (the parallel decoder's, shared by the batch)."""
        with torch.no_grad():
            log_sched = (strategy.distributions or self.policy.one_pass(strategy))[1]
        return _with_devices(strategy, relabelled_devices(strategy.devices, log_sched, self.classes), log_sched)

    def _keep_elite(self, strategy, rewards: torch.Tensor) -> None:
        """The best (groups, devices, reward) sampled so far."""
        i = int(torch.argmax(rewards))
        if self.elite is None or float(rewards[i]) > self.elite[2]:
            self.elite = (strategy.groups[i].clone(), strategy.devices[i].clone(), float(rewards[i]))

    def _agreement(self, strategy) -> float:
        """Expected share of units a sample of the batch's distribution puts on the elite's device (gate
        "elite"): sum over groups g of P(unit -> g) P(g -> elite's device of the unit), averaged over units;
        or on the unit's likeliest device (gate "mode"): max over devices d of that sum."""
        with torch.no_grad():
            log_part, log_sched = strategy.distributions or self.policy.one_pass(strategy)
            if self.options.self_imitation_gate == "mode":
                return float(likeliest_device_probability(log_part.exp(), log_sched.exp()).mean())
            # the elite's sum as it always was (not a gather from the [U, D] product above): the same floats,
            # so a search's gate opens on the same update as in the committed runs
            groups, devices, _ = self.elite
            unit_device = devices[groups]  # [U]
            return float((log_part.exp() * log_sched.exp()[:, unit_device].T).sum(1).mean())

    def lead(self) -> None:
        self.leading = True

    def state_dict(self) -> dict:
        return {**super().state_dict(), "elite": self.elite, "imitating": self.imitating, "leading": self.leading,
                "explore_log2": self.explore_log2, "best_sampled": self.best_sampled}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.elite, self.imitating = state.get("elite"), state.get("imitating", False)
        self.leading = state.get("leading", False)
        self.explore_log2, self.best_sampled = state.get("explore_log2", 0.0), state.get("best_sampled", -np.inf)


def _with_devices(strategy, devices: torch.Tensor, log_sched: torch.Tensor):
    """``strategy`` with its groups' devices replaced by ``devices`` [B, k], and their log-probabilities under
    ``log_sched`` [k, D], the distribution that sampled the batch."""
    k = devices.shape[1]
    logp = strategy.logp.clone()
    logp[:, -k:] = log_sched.detach()[torch.arange(k), devices]
    return replace(strategy, devices=devices, logp=logp)
