"""The policy-gradient maths, kept apart from networks and loops so it can be checked by hand.

* `EMABaseline`: b <- decay * b + (1 - decay) * mean(R), starting at the first batch's mean.
* `ppo_loss`: PPO's clipped surrogate on advantages A = R - b (Schulman et al. 2017):
  L = -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = exp(logp_new - logp_old),
  with CleanRL's diagnostics approx_kl = mean((r - 1) - log r) and clipfrac.
  The mean runs over whatever is passed: the search passes one entry per
  decision of a strategy (as token-level PPO does for sequences), since the
  ratio of a joint probability over hundreds of decisions leaves [1-eps, 1+eps]
  after the smallest update.
* `reinforce_loss`: L = -mean(A * logp) (Williams 1992), as Hierarchical uses.
* `normalised_advantages`: A = (R - mean(R)) / std(R) within one batch (CleanRL's norm_adv).
* `relabelled_devices`: each sample's devices permuted, within classes of interchangeable devices, to the
  labelling the policy finds likeliest (a linear assignment, as DETR matches predictions to targets): the
  reward cannot tell the labellings apart, so without it the gradients of mirror-image samples cancel.
* `temperature_for_exploration`: the lowest sampling temperature >= 1 that keeps a target number of
  decisions off a policy's likeliest choices (Trinity's ``explore``, learned-list's).
* `block_moved_devices`: a share of a batch's samples with one aligned block of consecutive groups set to
  one device (Trinity's ``block_moves``): a move a policy that samples each group's device on its own
  almost never makes, and the one a balanced split is built from.
* `neighbour_moved_groups`: a share of a batch's samples with one unit, and up to two of its neighbours on
  its side, moved into the group of a neighbour on another device (Trinity's
  ``neighbour_moves``): the move simulated annealing makes, along the graph's edges, which a policy that
  samples each unit's group on its own almost never makes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class EMABaseline:
    decay: float = 0.9
    value: float | None = None

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """R - b against the baseline before this batch, then fold the batch into b."""
        mean = float(rewards.mean())
        if self.value is None:
            self.value = mean
        adv = rewards - self.value
        self.value = self.decay * self.value + (1.0 - self.decay) * mean
        return adv


def ppo_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
             clip: float = 0.2) -> tuple[torch.Tensor, dict[str, float]]:
    log_ratio = logp_new - logp_old
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    loss = -torch.min(unclipped, clipped).mean()
    with torch.no_grad():
        stats = {"approx_kl": float(((ratio - 1) - log_ratio).mean()),
                 "clipfrac": float(((ratio - 1.0).abs() > clip).float().mean())}
    return loss, stats


def reinforce_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    return -(advantages * logp).mean()


def normalised_advantages(rewards: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(R - mean) / (sample std + eps) over the batch; zeros for a batch of one."""
    if len(rewards) < 2:
        return torch.zeros_like(rewards)
    return (rewards - rewards.mean()) / (rewards.std() + eps)


def temperature_for_exploration(off: Callable[[float], float], target: float, *, steps: int = 12,
                                highest: float = 1e4) -> float:
    """The lowest sampling temperature >= 1 (it never sharpens a policy) at which ``off(t)``, the expected
    decisions off the policy's likeliest choices (increasing in t), reaches ``target``: bisection on log t,
    returning its upper end (at least ``target``, up to ``highest``)."""
    if off(1.0) >= target:
        return 1.0
    lo, hi = 0.0, float(np.log(highest))
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if off(float(np.exp(mid))) < target else (lo, mid)
    return float(np.exp(hi))


def relabelled_devices(devices: torch.Tensor, log_sched: torch.Tensor, classes: np.ndarray) -> torch.Tensor:
    """int64[B, k]: each row of ``devices`` (group -> device) relabelled by the permutation p of devices that
    maximises sum over groups g of log_sched[g, p(devices[g])], among the permutations that keep every device
    within its class of ``classes`` (int[D], `Cluster.interchangeable`); a tie keeps the row's own labels."""
    from scipy.optimize import linear_sum_assignment

    d = log_sched.shape[1]
    same = torch.from_numpy(classes[:, None] == classes[None, :])
    # score[b, i, j]: the log-probability of moving every group of row b on device i to device j
    score = torch.nn.functional.one_hot(devices, d).to(log_sched.dtype).transpose(1, 2) @ log_sched.detach()
    score = torch.where(same, score, torch.full_like(score, -1e30)).double().numpy() + 1e-9 * np.eye(d)
    perm = np.empty((len(devices), d), np.int64)
    for b, s in enumerate(score):
        rows, cols = linear_sum_assignment(s, maximize=True)
        perm[b, rows] = cols
    return torch.from_numpy(perm).gather(1, devices)


def block_sizes(n_groups: int) -> list[int]:
    """The block sizes `block_moved_devices` draws from: a sixteenth, an eighth and a quarter of the groups."""
    return sorted({max(1, n_groups // f) for f in (16, 8, 4)})


def block_moved_devices(devices: torch.Tensor, n_devices: int, share: float,
                        generator: torch.Generator) -> torch.Tensor:
    """int64[B, k]: ``devices`` (group -> device per sample) with round(share * B) rows, drawn without
    replacement, each given one block move: a size from `block_sizes`, a block of that many consecutive
    groups starting at a multiple of the size, all of them on one device drawn uniformly. Every draw comes
    from ``generator``, and none is taken when no row is moved."""
    batch, k = devices.shape
    moved = int(round(share * batch))
    if moved == 0:
        return devices
    out = devices.clone()
    sizes = block_sizes(k)
    for row in torch.randperm(batch, generator=generator)[:moved].tolist():
        size = sizes[int(torch.randint(len(sizes), (1,), generator=generator))]
        start = int(torch.randint(k // size, (1,), generator=generator)) * size
        out[row, start:start + size] = int(torch.randint(n_devices, (1,), generator=generator))
    return out


def neighbour_moved_groups(groups: torch.Tensor, devices: torch.Tensor, neighbours: tuple[np.ndarray, np.ndarray],
                           share: float, generator: torch.Generator, max_moved: int = 3) -> torch.Tensor:
    """int64[B, U]: ``groups`` (unit -> group per sample, its groups on ``devices`` [B, k]) with round(share * B)
    rows, drawn without replacement, each given one neighbour move: a unit u drawn uniformly, a neighbour v of u on
    another device drawn uniformly, and u with up to ``max_moved`` - 1 of its neighbours on u's device (how many
    drawn uniformly from 0 to that, which ones without replacement) put into v's group, as simulated annealing moves
    a unit. Where u has no neighbour on another device the row is left as sampled, so the rows that move follow
    the cut's share of the units. ``neighbours`` = (ptr, nbr): the unit graph's adjacency, both directions, as CSR
    (u's neighbours are nbr[ptr[u]:ptr[u + 1]]). Every draw comes from ``generator``, and none is taken when no
    row is moved."""
    batch = groups.shape[0]
    moved = int(round(share * batch))
    if moved == 0:
        return groups
    ptr, nbr = neighbours
    out = groups.clone()

    def draw(n: int) -> int:
        return int(torch.randint(n, (1,), generator=generator))

    for row in torch.randperm(batch, generator=generator)[:moved].tolist():
        g = out[row].numpy()
        unit_device = devices[row].numpy()[g]
        u = draw(groups.shape[1])
        around = nbr[ptr[u]:ptr[u + 1]]
        away, home = around[unit_device[around] != unit_device[u]], around[unit_device[around] == unit_device[u]]
        if not len(away):
            continue
        target = g[away[draw(len(away))]]
        extra = min(draw(max_moved), len(home))
        follow = home[torch.randperm(len(home), generator=generator)[:extra].numpy()] if extra else home[:0]
        g[np.concatenate([[u], follow])] = target  # out[row]'s memory: the row is changed in place
    return out
