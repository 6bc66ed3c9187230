"""DASO (Distributed Asynchronous and Selective Optimization, J. Big Data 2022), after Heat's DASO.

Ranks form nodes (node-local groups) and global groups (one rank per node: the same local index on
every node). Every step each node all-reduces its gradients (unless the local skip leaves that step
out). Every B batches one global group (rotating over the local index) starts a non-blocking sum of
its parameters and goes on training; S batches later it receives the sum and blends

    x = (2 S x_local + sum_p x_p) / (2 S + P)          (P ranks in the global group,

the sum includes this rank's own stale copy), then broadcasts the result inside its node. A blocking
sync (S = 0: warm-up and cool-down epochs, and the last batch of every epoch) averages plainly.

Between warm-up and cool-down the schedule adapts on the epoch's training loss: B = 4, local skip 1,
S = 1 after warm-up; a plateau (no 5% relative improvement for more than 2 epochs) halves B and the
local skip and lowers S by 1 (both kept >= 1); a plateau at B = 1 resets B = 8, local skip = S = 2.

`blend`, `Plateau`, `DasoSchedule` and `epoch_plan` are plain Python (tested against hand-computed
values); the strategy `trinity.data_parallel.strategies.daso` applies them to a model with torch.distributed.

Differences from Heat: parameters travel as float32 (Heat casts blocking syncs to bfloat16); a batch
receives pending sums before it sends (Heat sends first), so what it sends already holds them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from trinity.data_parallel.config import DasoConfig, DataParallelError


def blend(local, summed, wait: int, n_global: int):
    """DASO's merge of a global sum received ``wait`` batches after it was sent (floats or tensors)."""
    if n_global < 1:
        raise DataParallelError(f"must be >= 1, got {n_global}", field="n_global")
    if wait < 0:
        raise DataParallelError(f"must be >= 0, got {wait}", field="wait")
    if wait == 0:
        return summed / n_global
    weight = 2.0 * wait
    return (weight * local + summed) / (weight + n_global)


@dataclass
class Plateau:
    """Heat's plateau test (as torch's ReduceLROnPlateau, mode min, relative threshold).

    A loss improves if it is below best * (1 - threshold); after more than ``patience`` epochs in a row
    without improvement, `update` answers True (a plateau) and starts counting again.
    """

    patience: int = 2
    threshold: float = 0.05
    best: float = float("inf")
    bad_epochs: int = 0

    def update(self, loss: float) -> bool:
        if loss < self.best * (1.0 - self.threshold):
            self.best, self.bad_epochs = float(loss), 0
        else:
            self.bad_epochs += 1
        if self.bad_epochs > self.patience:
            self.bad_epochs = 0
            return True
        return False


@dataclass(frozen=True)
class BatchPlan:
    """What DASO does after the optimizer step of one batch."""

    batch: int
    local_sync: bool  # all-reduce gradients in the node before the step
    receive: tuple[int, ...] = ()  # the batches whose global sums arrive now (blend, then node broadcast)
    send_group: int | None = None  # global group starting a non-blocking sum now
    wait: int = 0  # S of that send: batches until it is received
    blocking_group: int | None = None  # global group averaging now, blocking


def epoch_plan(n_batches: int, global_skip: int, local_skip: int, wait: int, n_local: int) -> list[BatchPlan]:
    """DASO's actions for every batch of an epoch, given the schedule's B, local skip and S.

    B = 0 means blocking: every batch averages globally. Otherwise sends start at the batches that are
    multiples of B (not the last); a send's S is cut so that it is received by the last batch, which
    always averages blocking so that every epoch ends with all ranks equal. The group rotates over the
    local index with every global sync (send or blocking), from 0 in each epoch.
    """
    if n_batches < 1:
        raise DataParallelError(f"an epoch needs at least 1 batch, got {n_batches}", field="n_batches")
    last = n_batches - 1
    plans, syncs, due = [], 0, {}
    for b in range(n_batches):
        receive = tuple(sorted(sb for sb, d in due.items() if d == b))
        for sb in receive:
            del due[sb]
        local = local_skip <= 1 or b % local_skip == 0 or b == last or global_skip == 0
        if global_skip == 0 or b == last:
            plans.append(BatchPlan(b, local, receive, blocking_group=syncs % n_local))
            syncs += 1
        elif b % global_skip == 0:
            w = min(wait, last - b)
            if w == 0:  # nothing to overlap with: average now
                plans.append(BatchPlan(b, local, receive, blocking_group=syncs % n_local))
            else:
                plans.append(BatchPlan(b, local, receive, send_group=syncs % n_local, wait=w))
                due[b] = b + w
            syncs += 1
        else:
            plans.append(BatchPlan(b, local, receive))
    return plans


@dataclass
class DasoSchedule:
    """B (global skip), local skip and S (batches to wait), updated at the end of each epoch."""

    config: DasoConfig = field(default_factory=DasoConfig)
    total_epochs: int = 1
    epoch: int = 0  # epochs finished
    global_skip: int = 0
    local_skip: int = 0
    wait: int = 0
    plateau: Plateau | None = None

    def __post_init__(self) -> None:
        if self.plateau is None:
            self.plateau = Plateau(self.config.patience, self.config.threshold)
        if self.epoch == 0 and self.config.warmup_epochs == 0:
            self.global_skip, self.local_skip, self.wait = 4, 1, 1

    @property
    def blocking(self) -> bool:
        return self.global_skip == 0

    def end_epoch(self, loss: float) -> tuple[int, int, int]:
        """Take the finished epoch's (globally averaged) training loss; the (B, local skip, S) of the next."""
        c = self.config
        self.epoch += 1
        if self.epoch < c.warmup_epochs:
            self.global_skip = self.local_skip = self.wait = 0
            return self.state
        if self.epoch == c.warmup_epochs:
            self.global_skip, self.local_skip, self.wait = 4, 1, 1
        if self.epoch >= self.total_epochs - c.cooldown_epochs:
            self.global_skip = self.local_skip = self.wait = 0
            return self.state
        stable = self.plateau.update(loss)
        if stable and self.global_skip > 1:
            self.global_skip //= c.skip_reduction
            self.local_skip = max(1, self.local_skip // c.skip_reduction)
            self.wait = max(1, self.wait - 1)
        elif stable and self.global_skip == 1:
            self.global_skip = c.max_global_skip
            self.local_skip = self.wait = max(1, c.max_global_skip // c.local_skip_factor)
        return self.state

    @property
    def state(self) -> tuple[int, int, int]:
        return self.global_skip, self.local_skip, self.wait

    def to_dict(self) -> dict:
        return {"epoch": self.epoch, "global_skip": self.global_skip, "local_skip": self.local_skip,
                "wait": self.wait, "plateau": asdict(self.plateau)}

    def load(self, doc: dict) -> None:
        self.epoch, self.global_skip = doc["epoch"], doc["global_skip"]
        self.local_skip, self.wait = doc["local_skip"], doc["wait"]
        self.plateau = Plateau(**doc["plateau"])
