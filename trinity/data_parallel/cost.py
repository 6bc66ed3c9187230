"""Predicted cost of one training step of DDP, the plain parameter server, DASO and H-PS on a `Cluster`.

The model is given by plain numbers (`DataParallelWork`): compute time per sample on a speed-1 device,
parameter bytes, activation bytes per sample. Device i of speed v_i computes its share s_i in
``us_per_sample * s_i / v_i``, or, where the work carries a `WholeStepProfile` (the whole step timed
on its own at several sample counts), in ``whole_step.us(s_i) / v_i``. A transfer of b bytes from s to d
takes ``latency[s, d] + b / bandwidth[s, d]``.

* ddp: equal shares; a ring all-reduce of the gradients over all devices in index order, after the
  computation: 2 (P - 1) steps, each as slow as the ring's slowest edge, 2 (P - 1) / P * n bytes each.
* ps: equal shares; the push is gloo's reduce (`_reduce_us`: a ring reduce-scatter, then every rank's
  reduced chunk to the server), the server's optimizer step, then the pull: the server sends every copy of
  the parameters through its own links one after the other (one network card; gloo's broadcast is a
  binomial tree, and on two nodes of consecutive ranks all its copies to the other node leave through
  the server's node's port, which costs what the star does).
* daso: equal shares; every step a ring all-reduce of the gradients inside each node; every B steps
  the global group (one device per node) all-reduces the parameters and the node broadcasts them. A
  global sum sent with S batches to wait overlaps S steps of computation, so its exposed part is
  max(0, t_global - S * t_step); each global sum ends in a node broadcast. Cycling phase: B = 4, S = 1.
* hps: shares in proportion to speed (`batch_shares`); the exchange (the push at 32 bits, the server's
  optimizer step, the pull at ``bits``) runs on a background thread beside the next step's computation,
  so a step takes the longer of the two; the server's step is part of the exchange, so hidden with it.
  With a whole-step profile the exchange's own CPU (the server's step and quantizing, the workers'
  dequantizing) is measured: it lengthens the exchange (`_exchange_cpu_us`), and, hidden from the wall
  clock but not from the processor, it is added to its rank's computation (`compute_us`).

Epochs (``epoch_steps``). Left out, DASO and H-PS are costed in their endless steady state: one global
sum per B steps, every exchange hidden behind a computation. Given, a step is the mean over an epoch of
that many steps as the worker runs it, which ends with every rank equal: DASO follows `epoch_plan` (its
sends, and the last batch's blocking average, whose sum nothing hides), and H-PS waits for its last
exchange (`finish_epoch`), so one of an epoch's computations or exchanges is not hidden. The measured runs
time one epoch of 10 steps: DASO syncs globally 4 times in it, not 2.5, and H-PS shows one exchange more.

Memory per device: parameters, gradients and ``optimizer_slots`` optimizer states (the server holds
its master copy and optimizer besides), plus the activations of its share of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trinity.cluster import Cluster
from trinity.data_parallel.config import DataParallelError
from trinity.data_parallel.daso import epoch_plan
from trinity.data_parallel.hps import batch_shares
from trinity.data_parallel.strategies import METHODS
from trinity.profile.whole_step import WholeStepProfile
from trinity.step_cost import StepCost


@dataclass(frozen=True)
class DataParallelWork:
    """What one training step of a model costs, in plain numbers (a `LayerProfile` reduces to these)."""

    us_per_sample: float  # forward + backward per sample on a speed-1 device
    param_bytes: float
    batch: int  # global batch, split over the devices
    activation_bytes_per_sample: float = 0.0
    optimizer_slots: int = 1  # SGD with momentum: 1 buffer per parameter
    update_us: float = 0.0  # the optimizer step on a speed-1 device, once the gradients are in
    # the whole forward and backward timed at several sample counts: the computation term where given
    whole_step: WholeStepProfile | None = None

    @classmethod
    def from_layers(cls, profile, batch: int | None = None,
                    whole_step: WholeStepProfile | None = None) -> "DataParallelWork":
        """A `trinity.profile.layers.LayerProfile` (measured at its own batch) reduced to these numbers,
        with the model's `WholeStepProfile` as its computation term where given."""
        layers = profile.layers
        if whole_step is not None and whole_step.model != profile.model:
            raise DataParallelError(f"is of model {whole_step.model!r}, the layer profile of {profile.model!r}",
                                    field="whole_step")
        return cls(us_per_sample=sum(x.compute_us for x in layers) / profile.batch,
                   param_bytes=float(sum(x.param_bytes for x in layers)),
                   batch=int(profile.batch if batch is None else batch),
                   activation_bytes_per_sample=sum(x.saved_bytes for x in layers) / profile.batch,
                   update_us=float(sum(x.update_us for x in layers)), whole_step=whole_step)

    def forward_backward_us(self, samples: float) -> float:
        """Forward and backward of ``samples`` samples on a speed-1 device."""
        if self.whole_step is not None:
            return self.whole_step.us(samples)
        return self.us_per_sample * samples

    def validate(self) -> "DataParallelWork":
        for name in ("us_per_sample", "param_bytes"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
                raise DataParallelError(f"must be a finite number > 0, got {v!r}", field=name)
        if not isinstance(self.batch, int) or self.batch < 1:
            raise DataParallelError(f"must be an integer >= 1, got {self.batch!r}", field="batch")
        if self.activation_bytes_per_sample < 0 or self.optimizer_slots < 0 or self.update_us < 0:
            raise DataParallelError("must be >= 0", field="activation_bytes_per_sample")
        return self


def _ring_step_us(cluster: Cluster, ranks: list[int], chunk_bytes: float) -> float:
    """One step of a ring over ``ranks`` (each sends ``chunk_bytes`` to the next in the list, the last to the
    first), as slow as the ring's slowest edge."""
    edges = [(ranks[i], ranks[(i + 1) % len(ranks)]) for i in range(len(ranks))]
    lat = max(cluster.latency[s, d] for s, d in edges)
    bw = min(cluster.bandwidth[s, d] for s, d in edges)
    return lat + chunk_bytes / bw


def _ring_allreduce_us(cluster: Cluster, ranks: list[int], nbytes: float) -> float:
    k = len(ranks)
    if k <= 1:
        return 0.0
    return 2 * (k - 1) * _ring_step_us(cluster, ranks, nbytes / k)


def _reduce_us(cluster: Cluster, root: int, nbytes: float) -> float:
    """gloo's reduce (gloo/reduce.cc): a ring reduce-scatter in rank order (each rank sends to rank - 1),
    P - 1 steps of n / P, each as slow as the ring's slowest edge; then each rank's reduced n / P chunk to
    the root, through the root's link one after the other. Not a star of P - 1 whole gradients."""
    P = cluster.n_devices
    if P <= 1:
        return 0.0
    return (P - 1) * _ring_step_us(cluster, list(range(P))[::-1], nbytes / P) + _star_us(cluster, root, nbytes / P,
                                                                                          True)


def _star_us(cluster: Cluster, server: int, nbytes: float, inbound: bool) -> float:
    """All workers to the server (or back): the server's link moves the copies one after the other."""
    others = [w for w in range(cluster.n_devices) if w != server]
    if not others:
        return 0.0
    lat = max((cluster.latency[w, server] if inbound else cluster.latency[server, w]) for w in others)
    return float(lat + sum(nbytes / (cluster.bandwidth[w, server] if inbound else cluster.bandwidth[server, w])
                           for w in others))


def _nodes(cluster: Cluster) -> list[list[int]]:
    names: dict[str, list[int]] = {}
    for i, node in enumerate(cluster.nodes):
        names.setdefault(node, []).append(i)
    return list(names.values())


def _shares(method: str, speeds: np.ndarray, batch: int) -> np.ndarray:
    """Samples per device: in proportion to speed for H-PS, equal for the others."""
    return np.array(batch_shares(list(speeds) if method == "hps" else [1.0] * len(speeds), batch), dtype=float)


def compute_us(method: str, cluster: Cluster, work: DataParallelWork) -> np.ndarray:
    """Each device's computation per step, at its speed: `step_cost`'s computation term (the measure stage
    records it beside the ranks' own compute timers). The forward and backward of its share of the batch;
    for H-PS also the CPU of the exchange that its background thread runs meanwhile on the same core (the
    whole-step profile's, the server's on device 0), which overlapping hides from the wall clock but not
    from the processor."""
    speeds = np.array([d.speed for d in cluster.devices], dtype=float)
    busy = np.array([work.forward_backward_us(s) for s in _shares(method, speeds, work.batch)])
    if method == "hps" and work.whole_step is not None:
        busy[0] += work.whole_step.server_exchange_us
        busy[1:] += work.whole_step.worker_exchange_us
    return busy / speeds


def _exchange_cpu_us(work: DataParallelWork, speeds: np.ndarray, update: float) -> float:
    """The H-PS exchange's own computation, on its critical path after the transfers: the server's step
    (``update``), or with a whole-step profile the server's measured CPU (its step, quantizing, dequantizing)
    and then the slowest worker's (dequantizing what it received)."""
    if work.whole_step is None:
        return update
    workers = work.whole_step.worker_exchange_us / speeds[1:]
    return work.whole_step.server_exchange_us / speeds[0] + (float(workers.max()) if len(workers) else 0.0)


def step_cost(method: str, cluster: Cluster, work: DataParallelWork, *, global_skip: int = 4, wait: int = 1,
              bits: int = 8, epoch_steps: int | None = None) -> StepCost:
    """One step of ``method`` (ddp, ps, daso, hps) on ``cluster``: time, exposed communication, bytes, memory;
    the mean over epochs of ``epoch_steps`` steps where given (module docstring)."""
    if method not in METHODS:
        raise DataParallelError(f"unknown method {method!r}; methods are {', '.join(METHODS)}", field="method")
    if epoch_steps is not None and (isinstance(epoch_steps, bool) or not isinstance(epoch_steps, int)
                                    or epoch_steps < 1):
        raise DataParallelError(f"must be an integer >= 1 or None, got {epoch_steps!r}", field="epoch_steps")
    work.validate()
    P = cluster.n_devices
    if work.batch < P:
        raise DataParallelError(f"must be at least one sample per device ({P}), got {work.batch}", field="batch")
    speeds = np.array([d.speed for d in cluster.devices], dtype=float)
    n = float(work.param_bytes)
    shares = _shares(method, speeds, work.batch)
    t_compute = float(compute_us(method, cluster, work).max())
    sent = np.zeros(P)
    recv = np.zeros(P)
    memory = n * (2 + work.optimizer_slots) + work.activation_bytes_per_sample * shares
    # the optimizer step once the gradients are in: on the server (ps, hps) or on every device (ddp, daso)
    update = work.update_us / (speeds[0] if method in ("ps", "hps") else speeds.min())

    if method == "ddp":
        comm = _ring_allreduce_us(cluster, list(range(P)), n)
        sent[:] = recv[:] = 2 * (P - 1) / P * n if P > 1 else 0.0
        step = t_compute + comm + update
        exposed = comm
    elif method in ("ps", "hps"):
        down = n * (bits / 32 if method == "hps" else 1.0)
        t_up, t_down = _reduce_us(cluster, 0, n), _star_us(cluster, 0, down, False)
        sent[1:], recv[1:] = n, down  # a reduce's bytes: (P - 1) / P n around the ring, n / P to the root
        sent[0], recv[0] = (P - 1) * down, (P - 1) * n
        memory[0] += n * (1 + work.optimizer_slots)  # the master copy and its optimizer
        comm = t_up + t_down
        if method == "hps":  # the exchange, the server's step included, beside the next step's computation
            exchange = comm + _exchange_cpu_us(work, speeds, update)
            step = max(t_compute, exchange)
            if epoch_steps is not None:  # an epoch of E steps takes E longer ones and one shorter one
                step += min(t_compute, exchange) / epoch_steps
            exposed = min(comm, step - t_compute)
        else:
            step = t_compute + comm + update
            exposed = comm
    else:  # daso
        nodes = _nodes(cluster)
        k = len(nodes[0])
        if any(len(g) != k for g in nodes):
            raise DataParallelError(f"DASO needs the same number of devices on every node, got "
                                    f"{[len(g) for g in nodes]}", field="cluster.nodes")
        if global_skip < 1 or not 0 <= wait <= global_skip:
            raise DataParallelError(f"need B >= 1 and 0 <= S <= B, got B={global_skip}, S={wait}",
                                    field="global_skip")
        t_local = max(_ring_allreduce_us(cluster, g, n) for g in nodes)
        global_group = [g[0] for g in nodes]
        t_global = _ring_allreduce_us(cluster, global_group, n)
        t_bcast = max((max(cluster.transfer_us(g[0], d, n) for d in g[1:]) if len(g) > 1 else 0.0)
                      for g in nodes)
        base = t_compute + t_local
        if epoch_steps is None:  # steady cycling: one send per B steps, received S steps later
            waits, period = [wait], global_skip
        else:  # the worker's epoch: its sends, and blocking averages (S = 0) such as the last batch's
            plans = epoch_plan(epoch_steps, global_skip, 1, wait, k)
            waits = [p.wait if p.send_group is not None else 0 for p in plans
                     if p.send_group is not None or p.blocking_group is not None]
            period = epoch_steps
        syncs = len(waits) / period  # global sums per step, each followed by a node broadcast
        exposed_global = sum(max(0.0, t_global - lag * base) for lag in waits) / period
        step = base + exposed_global + syncs * t_bcast + update
        exposed = step - t_compute - update
        m = len(nodes)
        local_bytes = 2 * (k - 1) / k * n if k > 1 else 0.0
        sent[:] = recv[:] = local_bytes
        for g in nodes:  # amortised: a global sum and a node broadcast per sync
            sent[g[0]] += syncs * ((2 * (m - 1) / m * n if m > 1 else 0.0) + (k - 1) * n)
            recv[g[0]] += syncs * (2 * (m - 1) / m * n if m > 1 else 0.0)
            for d in g[1:]:
                recv[d] += syncs * n
    lower = work.us_per_sample * work.batch / float(speeds.sum())
    return StepCost(step_time_us=float(step), comm_us=float(exposed), sent_bytes=sent, received_bytes=recv,
                    memory_bytes=memory, capacity_bytes=cluster.memory.astype(float), lower_bound_us=float(lower))


def compare_methods(cluster: Cluster, work: DataParallelWork, **kw) -> dict[str, StepCost]:
    """Every method's predicted step on ``cluster``, by name."""
    return {m: step_cost(m, cluster, work, **kw) for m in METHODS}
