"""Collectives of the data-parallel workers: bytes counted per rank, and a slow link between nodes made real.

Ranks are grouped into nodes of ``procs_per_node`` consecutive ranks. Every collective whose group
spans more than one node crosses the inter-node link; before it starts, each participant sleeps
``latency + cross_bytes / bandwidth`` (`LinkConfig`), where ``cross_bytes`` is what one direction
of the link carries for that collective (the same formulas as `trinity.data_parallel.cost`):

* all-reduce of n bytes over k ranks (ring): 2 (k - 1) / k * n;
* reduce to / broadcast from one rank: n for every member on another node than that rank.

Those sleeps and the collectives that cross nodes run on one "link" thread per rank, in order, like a
network card: a blocking call waits for its job, a non-blocking one (`async_=True`) returns a handle
whose ``wait()`` is called later (DASO's global sum, H-PS's overlapped exchange) while the main thread
computes. Each process group is used from one thread only, so the order of collectives on it is the
same on every rank. Node-local collectives run on the calling thread without delay.

Bytes sent are counted per rank as the payload this rank puts on the wire: 2 (k - 1) / k * n for a ring
all-reduce, n for a non-root in a reduce, (k - 1) * n for the root of a broadcast (a parameter server
sends each worker its copy).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from trinity.data_parallel.config import LinkConfig


def ring_allreduce_bytes(nbytes: float, k: int) -> float:
    """Bytes each of k ranks sends in a ring all-reduce of nbytes (also what one link direction carries)."""
    return 2.0 * (k - 1) / k * nbytes if k > 1 else 0.0


@dataclass
class Handle:
    """A started collective: ``wait()`` blocks until it is done (and re-raises its error)."""

    future: Future | None = None
    work: object | None = None

    def wait(self) -> None:
        if self.future is not None:
            self.future.result()
        elif self.work is not None:
            self.work.wait()


class Comm:
    """This rank's view of the nodes, the process groups, the slow link and the byte counter."""

    def __init__(self, rank: int, world: int, procs_per_node: int, link: LinkConfig | None):
        self.rank, self.world, self.k = rank, world, procs_per_node
        self.n_nodes = world // procs_per_node
        self.link = link
        self.sent_bytes = 0.0
        self.link_wait_s = 0.0  # time the link thread slept (the emulated slow link)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="link")
        self._groups: dict[tuple[int, ...], object] = {}
        # Every rank creates every group in the same order (new_group is collective over the world).
        wanted = [tuple(range(world))]  # the parameter server's own copy of the world
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

    def _crosses(self, ranks: tuple[int, ...]) -> bool:
        return len({self.node_of(r) for r in ranks}) > 1

    # ---------------------------------------------------------------- running
    def _run(self, ranks: tuple[int, ...], cross_bytes: float, fn: Callable[[], None], async_: bool) -> Handle:
        if len(ranks) <= 1:
            return Handle()
        if not self._crosses(ranks):
            if async_:
                return Handle(work=fn())
            fn()
            return Handle()

        def job() -> None:
            if self.link is not None:
                delay = self.link.delay_s(cross_bytes)
                self.link_wait_s += delay
                time.sleep(delay)
            work = fn()
            if work is not None:
                work.wait()

        future = self._pool.submit(job)
        handle = Handle(future=future)
        if not async_:
            handle.wait()
        return handle

    def group(self, ranks: tuple[int, ...]):
        return self._groups[ranks]

    def all_reduce(self, t: torch.Tensor, ranks: tuple[int, ...], *, async_: bool = False) -> Handle:
        """Sum ``t`` in place over ``ranks`` (this rank must be one of them)."""
        n = t.numel() * t.element_size()
        k = len(ranks)
        self.sent_bytes += ring_allreduce_bytes(n, k)
        crosses = self._crosses(ranks)
        group = self.group(ranks) if k > 1 else None
        return self._run(ranks, ring_allreduce_bytes(n, k),
                         lambda: dist.all_reduce(t, group=group, async_op=async_ and not crosses), async_)

    def broadcast(self, t: torch.Tensor, src: int, ranks: tuple[int, ...], *, async_: bool = False) -> Handle:
        n = t.numel() * t.element_size()
        if self.rank == src:
            self.sent_bytes += (len(ranks) - 1) * n
        remote = sum(self.node_of(r) != self.node_of(src) for r in ranks)
        crosses = self._crosses(ranks)
        group = self.group(ranks) if len(ranks) > 1 else None
        return self._run(ranks, remote * n,
                         lambda: dist.broadcast(t, src=src, group=group, async_op=async_ and not crosses), async_)

    def reduce(self, t: torch.Tensor, dst: int, ranks: tuple[int, ...]) -> None:
        """Sum ``t`` over ``ranks`` into ``dst``'s copy (blocking; call it on the link thread's side via `submit`)."""
        n = t.numel() * t.element_size()
        if self.rank != dst:
            self.sent_bytes += n
        remote = sum(self.node_of(r) != self.node_of(dst) for r in ranks)
        group = self.group(ranks) if len(ranks) > 1 else None
        self._run_inline(ranks, remote * n, lambda: dist.reduce(t, dst=dst, group=group))

    def _run_inline(self, ranks: tuple[int, ...], cross_bytes: float, fn: Callable[[], None]) -> None:
        """Run on the current thread (already the link thread), with the link's delay when it crosses nodes."""
        if len(ranks) <= 1:
            return
        if self._crosses(ranks) and self.link is not None:
            delay = self.link.delay_s(cross_bytes)
            self.link_wait_s += delay
            time.sleep(delay)
        fn()

    def broadcast_inline(self, t: torch.Tensor, src: int, ranks: tuple[int, ...]) -> None:
        n = t.numel() * t.element_size()
        if self.rank == src:
            self.sent_bytes += (len(ranks) - 1) * n
        remote = sum(self.node_of(r) != self.node_of(src) for r in ranks)
        group = self.group(ranks) if len(ranks) > 1 else None
        self._run_inline(ranks, remote * n, lambda: dist.broadcast(t, src=src, group=group))

    def submit(self, fn: Callable[[], object]) -> Future:
        """Run ``fn`` on the link thread (a parameter-server exchange: reduce, update, broadcast)."""
        return self._pool.submit(fn)

    def world_sum(self, values: list[float]) -> list[float]:
        """Sum small float vectors over all ranks (metrics, speeds), through the link like any other traffic."""
        t = torch.tensor(values, dtype=torch.float64)
        if self.world > 1:
            n = t.numel() * t.element_size()
            self.sent_bytes += ring_allreduce_bytes(n, self.world)
            ranks = tuple(range(self.world))
            self._pool.submit(self._run_inline, ranks, ring_allreduce_bytes(n, self.world),
                              lambda: dist.all_reduce(t, group=self._world_group)).result()
        return t.tolist()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
