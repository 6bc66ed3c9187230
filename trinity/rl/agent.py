"""The interface every search method implements, and the registry the search loop finds it in.

A search method is an `Agent`: it samples a batch of placements, learns from their rewards, and
hands its state to the checkpoint. The loop (`trinity/rl/search.py`) knows nothing else about it,
and never its name. Adding a method is one module that subclasses `Agent` under
``@register("name")`` in `trinity/rl/` (with its settings as a dataclass, ``Options``) and one
file in ``conf/method/`` (listed in ``conf/config.yaml``'s catalogue); the loop, the warm start,
checkpoints, tracking and the CLI need no change.

Settings a method reads live in the ``agent:`` block of its search config and are typed by its
``Options`` dataclass: an unknown key or a value out of range is one line naming the field.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from trinity.errors import TrinityError
from trinity.reward import MDPEConfig
from trinity.sim.result import SimResult

AGENTS: dict[str, type["Agent"]] = {}
DEFAULT_METHOD = "trinity"  #: what a search runs when its config names no method


@dataclass
class Samples:
    """One iteration's sampled strategies: where each puts every op, and what the update needs."""

    placements: np.ndarray  # int64[B, N]
    data: Any = None  # the agent's own record of the draw (e.g. two-level SampledStrategies with its log-probabilities)


@dataclass
class AgentContext:
    """What every agent is built from (each uses what it needs)."""

    seed: int
    reward: MDPEConfig
    warm_start: bool  #: the agent is about to imitate a placer (fine-tuning defaults apply)
    features: Any = None  #: trinity.features.OpFeatures from the pipeline's embed stage, if given
    feature_cache: Any = None  #: a folder for features computed here
    feature_seed: int | None = None  #: the seed of features computed here (node2vec); None = ``seed``

    @property
    def embedding_seed(self) -> int:
        return self.seed if self.feature_seed is None else self.feature_seed


class Agent(ABC):
    """A search method. Subclasses set ``Options`` (a dataclass) and implement the abstract methods."""

    Options: ClassVar[type]
    name: ClassVar[str]

    #: the resolved settings (defaults that depend on the graph or the warm start filled in)
    options: Any
    #: placement units (colocation groups) per op, and the number of groups the policy partitions them into
    unit_of_op: np.ndarray
    num_groups: int

    @abstractmethod
    def reward(self, result: SimResult) -> float:
        """The scalar this method maximises for one simulated strategy."""

    @abstractmethod
    def sample(self, batch: int, generator: torch.Generator, iteration: int | None) -> Samples:
        """``batch`` strategies from the current policy; ``iteration`` None = without exploration noise."""

    @abstractmethod
    def update(self, samples: Samples, rewards: torch.Tensor, iteration: int) -> dict[str, float]:
        """Learn from the batch's rewards; returns metrics (``losses/...``, ``charts/...``)."""

    @abstractmethod
    def imitation_loss(self, unit_device: np.ndarray) -> torch.Tensor:
        """Negative log-likelihood of placing each unit on ``unit_device`` (the warm start minimises it)."""

    @abstractmethod
    def parameters(self):
        """The trainable tensors (the warm start's optimizer steps them)."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Everything the agent needs to continue exactly (networks, optimizer, baseline, random state)."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None: ...

    def imitation_done(self) -> None:
        """Called after a warm start's last step (an agent may reset what imitation disturbed)."""

    def lead(self) -> None:
        """Called once this agent has won a race (`trinity/rl/racing.py`) and runs the rest of the budget alone
        (an agent may search differently once its basin is chosen; it keeps that in its state_dict)."""


class TwoLevelAgent(Agent):
    """An agent over a two-level policy (``self.policy``) trained with its own Adam (``self.optimizer``) on
    advantages against an EMA baseline (``self.baseline``), with its own torch random state
    (``self.torch_rng``): what Trinity's and Hierarchical's agents share."""

    policy: torch.nn.Module
    optimizer: torch.optim.Optimizer
    baseline: Any
    torch_rng: torch.Tensor

    def imitation_loss(self, unit_device: np.ndarray) -> torch.Tensor:
        from trinity.rl.warm_start import two_level_imitation_loss

        with own_rng(self):  # the dropout mask's seed (Hierarchical's Grouper has none; the draw is kept alike)
            dropout_seed = int(torch.randint(0, 2 ** 62, (1,)))
        return two_level_imitation_loss(self.policy, unit_device, dropout_seed)

    def parameters(self):
        return self.policy.parameters()

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "baseline": self.baseline.value, "torch_rng": self.torch_rng}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline.value = state["baseline"]
        self.torch_rng = state["torch_rng"]


def register(name: str):
    """Class decorator: make an `Agent` subclass available as search method ``name``."""

    def add(cls: type[Agent]) -> type[Agent]:
        cls.name = name
        AGENTS[name] = cls
        return cls

    return add


def agent_class(method: str) -> type[Agent]:
    _load_builtin()
    if method not in AGENTS:
        raise TrinityError(f"unknown method {method!r}; choose one of {', '.join(sorted(AGENTS))}", field="method")
    return AGENTS[method]


def agent_options(method: str, options: dict | Any) -> Any:
    """``options`` (a dict, or already the method's ``Options``) typed by the method's ``Options``;
    an unknown key or a bad value is a `TrinityError` naming ``agent.<key>``."""
    cls = agent_class(method).Options
    if isinstance(options, cls):
        return options
    return typed_options(cls, dict(options or {}), "agent")


def typed_options(cls: type, values: dict, where: str):
    """Build dataclass ``cls`` from ``values``, nested dataclasses included, naming a bad key's path."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise TrinityError(f"unknown option {unknown[0]!r} of {cls.__module__}.{cls.__name__}; known: "
                           f"{', '.join(sorted(known))}", field=f"{where}.{unknown[0]}")
    kwargs = {}
    for key, value in values.items():
        default = known[key].default_factory() if known[key].default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default) and isinstance(value, dict):
            value = typed_options(type(default), value, f"{where}.{key}")
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except TrinityError as exc:
        raise TrinityError(exc.message, field=f"{where}.{exc.field}" if exc.field else where) from None
    except (ValueError, TypeError) as exc:
        raise TrinityError(str(exc), field=where) from None


def check_range(owner: str, name: str, value, low=None, high=None, *, low_open=False, allow_none=False) -> None:
    """A setting in [low, high] (or (low, high] with ``low_open``); a `TrinityError` naming it otherwise."""
    if value is None and allow_none:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low}"
        hi = "" if high is None else f"<= {high}"
        raise TrinityError(f"must be a number {' and '.join(x for x in (lo, hi) if x)}, got {value!r}", field=name)


@contextmanager
def own_rng(agent):
    """Run with ``agent.torch_rng``, the agent's own state of torch's global generator, leaving the
    caller's as it was (other code, or another search, cannot shift the agent's stream)."""
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(agent.torch_rng)
        yield
        agent.torch_rng = torch.get_rng_state()


def _load_builtin() -> None:
    """Import every module of this package, so each method registers itself (a new one needs no line here)."""
    import importlib
    import pkgutil

    import trinity.rl

    for module in pkgutil.iter_modules(trinity.rl.__path__):
        importlib.import_module(f"trinity.rl.{module.name}")
