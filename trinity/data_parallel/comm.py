"""Collectives of the data-parallel workers, with the bytes each rank puts on the wire counted.

Ranks are grouped into nodes of ``procs_per_node`` consecutive ranks. The link between nodes is not
emulated here: the launcher (`trinity.runtime.ranks`) runs each node in a network namespace whose port
the kernel shapes (`trinity.runtime.links`), so a collective that crosses nodes is as slow as the
shaped link makes it, concurrent transfers share it, and node-local collectives use the node's loopback.

Non-blocking collectives (``async_=True``: DASO's global sum) return a `Handle` whose ``wait()`` is
called later while this rank computes. A parameter-server exchange (reduce, update, broadcast) runs
on this rank's one background thread (`submit`), which is how H-PS overlaps it with the next step;
every other collective runs on the calling thread. Each process group is used from one thread only,
so the order of collectives on it is the same on every rank.

Bytes sent are counted per rank as the payload this rank puts on the wire: 2 (k - 1) / k * n for a ring
all-reduce, n for a non-root in a reduce, (k - 1) * n for the root of a broadcast (a parameter server
sends each worker its copy).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist


def ring_allreduce_bytes(nbytes: float, k: int) -> float:
    """Bytes each of k ranks sends in a ring all-reduce of nbytes (also what one link direction carries)."""
    return 2.0 * (k - 1) / k * nbytes if k > 1 else 0.0


@dataclass
class Handle:
    """A started collective: ``wait()`` blocks until it is done (and re-raises its error)."""

    work: object | None = None

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()


class Comm:
    """This rank's view of the nodes, the process groups and the byte counter."""

    def __init__(self, rank: int, world: int, procs_per_node: int):
        self.rank, self.world, self.k = rank, world, procs_per_node
        self.n_nodes = world // procs_per_node
        self.sent_bytes = 0.0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exchange")
        # every rank creates every group, in the same order (torch.distributed requires it)
        self._groups: dict[tuple[int, ...], object] = {}
        wanted = [tuple(range(world))]  # the parameter server's copy of the world
        wanted += [self.node_ranks(n) for n in range(self.n_nodes)]
        wanted += [self.global_ranks(i) for i in range(self.k)]
        for ranks in wanted:
            if ranks not in self._groups and len(ranks) > 1:
                self._groups[ranks] = dist.new_group(list(ranks))
        self._world_group = dist.new_group(list(range(world))) if world > 1 else None  # metrics, speeds

    # ---------------------------------------------------------------- topology
    def node_of(self, rank: int) -> int:
        return rank // self.k

    @property
    def node(self) -> int:
        return self.node_of(self.rank)

    @property
    def local_index(self) -> int:
        return self.rank % self.k

    def node_ranks(self, node: int) -> tuple[int, ...]:
        return tuple(range(node * self.k, (node + 1) * self.k))

    def global_ranks(self, local_index: int) -> tuple[int, ...]:
        """DASO's global group number ``local_index``: that local index on every node."""
        return tuple(n * self.k + local_index for n in range(self.n_nodes))

    def group(self, ranks: tuple[int, ...]):
        return self._groups[ranks]

    # ---------------------------------------------------------------- collectives
    def all_reduce(self, t: torch.Tensor, ranks: tuple[int, ...], *, async_: bool = False) -> Handle:
        """Sum ``t`` in place over ``ranks`` (this rank must be one of them)."""
        if len(ranks) <= 1:
            return Handle()
        self.sent_bytes += ring_allreduce_bytes(t.numel() * t.element_size(), len(ranks))
        work = dist.all_reduce(t, group=self.group(ranks), async_op=async_)
        return Handle(work if async_ else None)

    def broadcast(self, t: torch.Tensor, src: int, ranks: tuple[int, ...]) -> None:
        if len(ranks) <= 1:
            return
        if self.rank == src:
            self.sent_bytes += (len(ranks) - 1) * t.numel() * t.element_size()
        dist.broadcast(t, src=src, group=self.group(ranks))

    def reduce(self, t: torch.Tensor, dst: int, ranks: tuple[int, ...]) -> None:
        """Sum ``t`` over ``ranks`` into ``dst``'s copy."""
        if len(ranks) <= 1:
            return
        if self.rank != dst:
            self.sent_bytes += t.numel() * t.element_size()
        dist.reduce(t, dst=dst, group=self.group(ranks))

    def count_all_reduce(self, nbytes: float, k: int) -> None:
        """Bytes of an all-reduce run by someone else (torch's DDP reducer) on this rank's behalf."""
        self.sent_bytes += ring_allreduce_bytes(nbytes, k)

    def submit(self, fn: Callable[[], object]) -> Future:
        """Run ``fn`` on the background thread (a parameter-server exchange: reduce, update, broadcast)."""
        return self._pool.submit(fn)

    def world_sum(self, values: list[float], *, count: bool = True) -> list[float]:
        """Sum small float vectors over all ranks (metrics, speeds); ``count=False`` leaves the bytes out of
        the counter (the counters' own bookkeeping)."""
        t = torch.tensor(values, dtype=torch.float64)
        if self.world > 1:
            if count:
                self.sent_bytes += ring_allreduce_bytes(t.numel() * t.element_size(), self.world)
            dist.all_reduce(t, group=self._world_group)
        return t.tolist()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
