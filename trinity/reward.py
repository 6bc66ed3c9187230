"""Rewards that turn a simulated step into a scalar for the search.

MDPE (Trinity's multi-objective reward). The paper writes
``R = log(alpha * f(runtime) + beta * q(comm, mem))`` and maximises it, which
would reward slow placements. We implement the reading that makes it a
reward, with each term made dimensionless::

    cost   = alpha * T / T_lb
           + beta  * max(0, C / C_tol - 1)
           + gamma * max(0, M / M_tol - 1)
    reward = -log(cost)

* ``T`` is the simulated step time and ``T_lb`` the graph's placement-free
  lower bound (max of critical path and work / devices), so the runtime
  term is >= alpha and comparable across graphs and clusters.
* ``C`` is peak communication (the busiest device's sent + received bytes)
  and ``M`` peak memory (the fullest device), both against user tolerances
  ``C_tol`` and ``M_tol`` (paper: 8 GB each). Within tolerance they cost
  nothing; past it the penalty grows with the relative excess.
* Weights: paper defaults alpha=0.5, beta=0.3, gamma=0.2.
* A placement that runs out of memory (peak above a device's capacity) or is
  invalid gets the failing signal: cost as if ``T = fail_runtime_ratio * T_lb``
  with both penalties at 1 (worse than any placement that runs).

The log compresses the scale so that PPO's advantages stay well-conditioned
when a few candidates are very slow.

Hierarchical (Mirhoseini et al. 2018): ``reward = -sqrt(T in seconds)``, and
for a failing placement ``-sqrt(fail_runtime_ratio * T_lb in seconds)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trinity.sim.result import SimResult


@dataclass(frozen=True)
class MDPEConfig:
    alpha: float = 0.5  # weight of runtime
    beta: float = 0.3  # weight of the communication penalty
    gamma: float = 0.2  # weight of the memory penalty
    comm_tolerance_GB: float = 8.0  # C_tol: peak per-device sent + received bytes tolerated
    memory_tolerance_GB: float = 8.0  # M_tol: peak per-device memory tolerated
    fail_runtime_ratio: float = 100.0  # runtime charged to OOM/invalid placements, in lower bounds

    def __post_init__(self):
        for name in ("alpha", "beta", "gamma", "comm_tolerance_GB", "memory_tolerance_GB", "fail_runtime_ratio"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"reward.{name} must be a finite number >= 0, got {value!r}")
        if self.alpha <= 0 or self.comm_tolerance_GB <= 0 or self.memory_tolerance_GB <= 0:
            raise ValueError("reward.alpha and both tolerances must be > 0")


def mdpe_terms(result: SimResult, cfg: MDPEConfig = MDPEConfig()) -> dict[str, float]:
    """The three weighted terms of the MDPE cost (already multiplied by their weights)."""
    if not result.fits:
        return {"runtime": cfg.alpha * cfg.fail_runtime_ratio, "comm": cfg.beta, "memory": cfg.gamma}
    lb = result.lower_bound_us if result.lower_bound_us > 0 else 1.0
    return {
        "runtime": cfg.alpha * result.step_time_us / lb,
        "comm": cfg.beta * max(0.0, result.peak_comm_bytes / (cfg.comm_tolerance_GB * 1e9) - 1.0),
        "memory": cfg.gamma * max(0.0, result.max_memory_bytes / (cfg.memory_tolerance_GB * 1e9) - 1.0),
    }


def mdpe_reward(result: SimResult, cfg: MDPEConfig = MDPEConfig()) -> float:
    return -math.log(sum(mdpe_terms(result, cfg).values()))


def hierarchical_reward(result: SimResult, fail_runtime_ratio: float = 100.0) -> float:
    runtime_us = result.step_time_us if result.fits else fail_runtime_ratio * result.lower_bound_us
    return -math.sqrt(runtime_us / 1e6)
