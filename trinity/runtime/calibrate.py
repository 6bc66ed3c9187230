"""Calibrate the simulator to a set of workers: measure the link and every op's cost there.

`measure_link` times a tensor of each size going from task 0 to task 1 and
back as 4 bytes, against the same computation on task 0 alone, in interleaved
repeats; the extra time is two transfers, so a least-squares line through
(size, median extra time), on relative residuals, gives ``2 x latency`` as
its intercept and ``1 / bandwidth`` as its slope.

`profile_on_worker` runs the whole step on task 0 with the runner's session
settings (the worker's own thread budget, Grappler's remapper off) and
traces every op; the step's ops keep these measured times (scaled so that
they add up to the untraced step), and ops the trace never shows (pruned or
folded away) cost 0 and send nothing.

On CPU workers gRPC's copies and serialisation run on the same cores as the
ops, so part of a transfer's bytes' time is taken from the sender's
processor (the cluster's ``send_cpu_share``) and part from the receiver's
(``receive_cpu_share``), the latency waited out on the wire alone
(``cpu_share_of: bytes``), and a sender carries several transfers at once.
`calibrate` fits both shares and those transfers (the cluster's
``link_streams``), with the latency as the lone round trip measured it
(`LATENCY_SCALES`: a fitted scale stood in for the share), to the real
step times of a few placers' strategies (`fit_transfer_model`), leaving
every other strategy to judge it; `measure_send_cpu_share` is a direct
micro-benchmark of the share (matmuls on the sender alone, sends alone,
both at once), reported by `make bench`: it reads 1.0 here, above the
fitted value, because it charges the sender's whole slowdown (cache and
memory traffic included) to the transfers.

The fit set is timed as a validation times every strategy (interleaved
rounds of steps, medians), with the whole step on one worker in the same
rounds: the machine drifts between the profile and those rounds (a whole
step ran 9.9% faster minutes later in one validation), so the op times are
first scaled by that step's drift (`anchored`).

A control edge between workers is a ``_Send``/``_Recv`` pair of an empty
tensor in TensorFlow's runtime, a ``RecvTensor`` call like any other: the
calibrated cluster sets ``control_transfers`` (see `trinity.cluster`), which
the simulator had treated as free. And a worker's one inter-op thread runs
the runnable op it queued last first (its thread pool's own queue is a
stack), but an op readied by a received tensor is queued from a gRPC
thread, at the queue's back: the calibrated cluster sets ``ready_order:
lifo-arrivals-last``. Without the first two (control edges and the stack),
strategies annealed for InceptionV3 were simulated at 0.85-1.06x the whole
step on one worker and ran at 1.08-1.54x it (``make worker-semantics``);
the arrivals' place lifted the rank correlation of InceptionV3's held-out
splits at batch 64 from 0.48 / 0.64 to 0.68 / 0.66 on the committed
validation, each order with its own fit (``make validation-fit-rules``).

That thread also serves the other worker's ``RecvTensor`` calls, so a worker
holds a tensor it made until it has taken up the request for it, and
serialises it after the work it has ready (traced steps held 38-109 of a
split's 79-139 sends): the calibrated cluster sets ``send_on_request`` and
``sends_last``, and the shares are fitted under them. On stop 75's
validation, InceptionV3's held-out ranks were 0.43, 0.76, 0.81 and 0.85;
the rule before, refitted to the same measurements, gives 0.36, 0.33, 0.48
and 0.61, and NMT's within 0.03 of today's (``make validation-sends``).

Workers that share one machine and one master cost a step more than its ops
and transfers: `measure_shared_machine` times the master's step protocol
with a second worker (the cluster's ``step_sync_us``) and the model's step
on each worker alone against a copy on each at once (``corun_slowdown``:
the workers share caches and memory bandwidth). Both are measured at the
calibration's batch and kept wherever the calibration is used, but the
slowdown is then fitted with the transfer model (`CORUN_SLOWDOWNS`, the
measured value winning ties): inside a split step the workers' gRPC threads
run beside both computing, which two whole steps at once do not show.

`calibrate` returns the calibrated cluster (devices
``worker0..``, kind ``worker``, the measured link and send CPU share, each
worker's memory budget) and the calibrated graph: what `trinity validate`
simulates.
"""

from __future__ import annotations

import itertools
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from trinity.cluster import Cluster, cluster_from_dict
from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph
from trinity.progress import progress as progress_bar
from trinity.machine import MachineWatch
from trinity.runtime.runner import Runner, placed_graph_def
from trinity.runtime.workers import WorkerError, Workers

DEFAULT_SIZES = (4_096, 65_536, 524_288, 2_097_152, 8_388_608, 33_554_432)
WORKER_KIND = "worker"


@dataclass
class LinkFit:
    latency_us: float
    bandwidth_GBps: float
    sizes: list[int]
    extra_us: list[float]  # median extra time of the round trip per size
    r2: float

    def predict_us(self, nbytes: float) -> float:
        return self.latency_us + nbytes / (self.bandwidth_GBps * 1e3)

    def to_dict(self) -> dict:
        return {"latency_us": self.latency_us, "bandwidth_GBps": self.bandwidth_GBps, "sizes": self.sizes,
                "round_trip_extra_us": self.extra_us, "r2": self.r2}


@contextmanager
def _worker_session(workers: Workers, graph, timeout_s: float, what: str):
    """(session on ``workers``, run options), every op and run bounded by ``timeout_s``; a timeout
    or a lost worker becomes a WorkerError naming the dead worker, or else ``what``."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(isolate_session_state=True, operation_timeout_in_ms=int(timeout_s * 1000))
    options = tf.compat.v1.RunOptions(timeout_in_ms=int(timeout_s * 1000))
    with tf.compat.v1.Session(workers.target, graph=graph, config=config) as sess:
        try:
            yield sess, options
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.AbortedError) as exc:
            workers.check()
            raise WorkerError(f"{what} failed: {str(exc).splitlines()[0]}", field="workers") from None


def fit_link(sizes, extra_us) -> LinkFit:
    """Latency and bandwidth from round-trip extra times: extra = 2 * latency + size / bandwidth."""
    x, y = np.asarray(sizes, float), np.asarray(extra_us, float)
    # relative residuals: unweighted, the 32 MB round trip set the intercept (92 us of latency where the
    # 4 KB round trip took 449 us), and the calibration uses that latency as measured
    slope, intercept = np.polyfit(x, y, 1, w=1 / np.maximum(np.abs(y), 1e-9))
    if slope * np.ptp(x) <= 1e-9 * np.abs(y).max():  # no rise beyond rounding (a flat series fits +1e-22)
        raise TrinityError(f"transfer time does not grow with size (slope {slope:.3g} us/B): the link "
                           "measurement is noise; rerun with more repeats on a quieter machine", field="link")
    fitted = intercept + slope * x
    r2 = 1 - float(((y - fitted) ** 2).sum() / max(((y - y.mean()) ** 2).sum(), 1e-12))
    return LinkFit(float(max(intercept / 2, 0.0)), float(1e-3 / slope), [int(s) for s in sizes],
                   [float(v) for v in y], float(r2))


def measure_link(workers: Workers, sizes=DEFAULT_SIZES, repeats: int = 20, *, src: int = 0, dst: int = 1,
                 timeout_s: float = 60.0, progress: bool = True) -> LinkFit:
    """Fit the link from task ``src`` to task ``dst`` (see the module doc)."""
    import tensorflow as tf

    if workers.n < 2:
        raise WorkerError("measuring a link needs at least 2 workers", field="workers")
    devices = workers.devices
    graph = tf.Graph()
    pairs = []
    with graph.as_default():
        for size in sizes:
            with tf.device(devices[src]):
                v = tf.Variable(tf.zeros([size // 4]), name=f"payload_{size}")
                value = v.read_value()
            legs = []
            for where in (src, dst):  # same computation, first local then across the link
                with tf.device(devices[where]):
                    total = tf.reduce_sum(value)
                with tf.device(devices[src]):
                    legs.append(tf.identity(total))
            pairs.append(legs)
        init = tf.compat.v1.global_variables_initializer()
    extra = {s: [] for s in sizes}
    with _worker_session(workers, graph, timeout_s, "link measurement") as (sess, options):
        sess.run(init, options=options)
        for local, remote in pairs:  # warm both paths
            sess.run([local, remote], options=options)
        for _ in progress_bar(range(repeats), desc="link", unit="round", disable=not progress):
            for size, (local, remote) in zip(sizes, pairs):
                t = []
                for fetch in (local, remote, remote, local):  # ABBA: drift cancels
                    t0 = time.perf_counter()
                    sess.run(fetch, options=options)
                    t.append(time.perf_counter() - t0)
                extra[size].append((t[1] + t[2] - t[0] - t[3]) / 2 * 1e6)
    return fit_link(sizes, [statistics.median(extra[s]) for s in sizes])


def measure_send_cpu_share(workers: Workers, link: LinkFit, *, size: int = 8_388_608, transfers: int = 8,
                           matmuls: int = 40, repeats: int = 10, timeout_s: float = 120.0,
                           progress: bool = True) -> dict:
    """How much of a transfer's time the sender's processor spends on it.

    Task 0 runs a chain of matmuls (C alone) and sends ``transfers`` tensors
    to task 1 (S alone), then both at once. If sending took none of task 0's
    processor the pair would take max(C, S); if it took a share f of each
    transfer's time, C + f * sum(transfer times). ``f`` is read off the
    median times of interleaved repeats, with the transfer times from ``link``.
    """
    import tensorflow as tf

    devices = workers.devices
    graph = tf.Graph()
    with graph.as_default():
        with tf.device(devices[0]):
            w = tf.Variable(tf.fill([512, 512], 1.0 / 512), name="w")
            y = w.read_value()
            for _ in range(matmuls):
                y = tf.tanh(tf.matmul(y, w))
            compute = tf.reduce_sum(y)
        sends = []
        for i in range(transfers):
            with tf.device(devices[0]):
                v = tf.Variable(tf.zeros([size // 4]), name=f"payload_{i}")
            with tf.device(devices[1]):
                total = tf.reduce_sum(v.read_value())
            with tf.device(devices[0]):
                sends.append(tf.identity(total))
        send = tf.add_n(sends)
        init = tf.compat.v1.global_variables_initializer()
    times = {"compute": [], "send": [], "both": []}
    fetches = {"compute": compute, "send": send, "both": [compute, send]}
    with _worker_session(workers, graph, timeout_s, "send CPU share measurement") as (sess, options):
        sess.run(init, options=options)
        for f in fetches.values():
            sess.run(f, options=options)
        for r in progress_bar(range(repeats), desc="send CPU share", unit="round", disable=not progress):
            order = ["compute", "send", "both"]
            for key in (order if r % 2 == 0 else order[::-1]):
                t0 = time.perf_counter()
                sess.run(fetches[key], options=options)
                times[key].append((time.perf_counter() - t0) * 1e6)
    med = {k: float(statistics.median(v)) for k, v in times.items()}
    wire = transfers * link.predict_us(size)
    share = float(np.clip((med["both"] - med["compute"]) / wire, 0.0, 1.0))
    return {"send_cpu_share": share, "compute_us": med["compute"], "send_us": med["send"], "both_us": med["both"],
            "transfers_us": wire, "size": size, "transfers": transfers}


def measure_shared_machine(graph: OpGraph, graph_def: bytes, workers: Workers, *, repeats: int = 5,
                           sync_repeats: int = 60, timeout_s: float = 300.0, progress: bool = True) -> dict:
    """The cluster's shared-machine terms (see `trinity.cluster`), from tasks 0 and 1.

    * ``step_sync_us`` s: a no-op on task 0 alone against a no-op on task 0 that waits (a control
      edge, no data) on a no-op on task 1; the difference is what a second worker adds to a step.
    * ``corun_slowdown`` c: the model's whole step on task 0 alone (A), on task 1 alone (B), and a
      copy on each at once (AB), the runner's session settings. One thread per worker is busy all
      step long, so under the simulator's term AB = max(A, B) + c min(A, B) + s.

    Interleaved repeats in rotating order; medians. The machine's 1-minute load before and after, and
    the shares of the cores' time other processes and other virtual machines took meanwhile
    (`trinity.machine`), are part of the answer (other work on the machine reads as co-run slowdown)."""
    import tensorflow as tf

    if workers.n < 2:
        raise WorkerError("measuring co-running workers needs at least 2 workers", field="workers")
    watch = MachineWatch()
    runner = Runner(graph, graph_def, workers, timeout_s=timeout_s)
    devices = workers.devices
    tf_graph = tf.Graph()
    with tf_graph.as_default():
        for task, prefix in ((0, "a"), (1, "b")):
            placed = placed_graph_def(runner.graph_def, graph, np.full(graph.n_ops, task, np.int64), devices)
            tf.compat.v1.import_graph_def(placed, name=prefix)
        with tf.device(devices[1]):
            remote = tf.no_op(name="sync_remote")
        with tf.device(devices[0]):
            local = tf.no_op(name="sync_local")
            with tf.control_dependencies([remote]):
                both = tf.no_op(name="sync_both")
    fetches = {"A": [f"a/{f}" for f in runner.fetches], "B": [f"b/{f}" for f in runner.fetches]}
    fetches["AB"] = fetches["A"] + fetches["B"]
    times: dict[str, list[float]] = {k: [] for k in ("A", "B", "AB", "local", "both")}

    def timed(sess, key, fetch):
        t0 = time.perf_counter()
        runner.session_run(sess, fetch, f"the shared-machine measurement ({key})")
        times[key].append((time.perf_counter() - t0) * 1e6)

    with tf.compat.v1.Session(workers.target, graph=tf_graph, config=runner.session_config()) as sess:
        runner.session_run(sess, [f"a/{graph.meta['init_op']}", f"b/{graph.meta['init_op']}"], "initialising both copies")
        for key in ("A", "B", "AB"):  # warm-up
            runner.session_run(sess, fetches[key], "a warm-up step")
        for _ in range(3):
            runner.session_run(sess, [local, both], "a warm-up no-op")
        for r in range(sync_repeats):
            for key, fetch in ((("local", local), ("both", both)) if r % 2 == 0 else (("both", both), ("local", local))):
                timed(sess, key, fetch)
        order = ["A", "B", "AB"]
        for r in progress_bar(range(repeats), desc="co-run", unit="round", disable=not progress):
            for key in order[r % 3:] + order[:r % 3]:
                timed(sess, key, fetches[key])
    med = {k: float(statistics.median(v)) for k, v in times.items()}
    sync = max(med["both"] - med["local"], 0.0)
    alone_max, alone_min = max(med["A"], med["B"]), min(med["A"], med["B"])
    corun = max((med["AB"] - sync - alone_max) / alone_min, 0.0)
    return {"corun_slowdown": corun, "step_sync_us": sync, "median_us": med,
            "iqr_us": {k: [float(q) for q in np.percentile(v, [25, 75])] for k, v in times.items()},
            "repeats": repeats, "sync_repeats": sync_repeats,
            **watch.metrics()}


FIT_PLACERS = ("metis", "m-etf", "m-topo", "expert", "round-robin")
#: timed with the fit set: how far its step drifted since the profile scales the op times (`anchored`)
ANCHOR_PLACER = "single"
#: a profile and its re-reading further apart than this mean the machine changed under the calibration
#: (`validation.anchor_range`; a model whose step is a few ms sits further out: the runtime's fixed cost
#: per step, not drift, sets its ratio)
ANCHOR_RANGE = (0.5, 2.0)
#: the latency scales earlier calibrations fitted with the share (`resimulate.FIT_RULES` keeps them): above
#: 1 because on NMT's single-thread workers a transfer in a busy step cost more than a lone round trip
FITTED_LATENCY_SCALES = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
#: today's: the lone round trip's latency as measured. Fitted, the scale traded against the send CPU share
#: on five placers (0.9 with x0.3 in one run, 0.4 with x0.75 in the next), and a batch fitted at one
#: extreme missed the other batch by 14-16%; with the latency measured, two runs fit the same share.
LATENCY_SCALES = (1.0,)
#: the sender's CPU shares of a transfer the fit tries
SEND_SHARES = tuple(np.linspace(0.0, 1.0, 11))
#: transfers a sender carries at once (the cluster's ``link_streams``): TensorFlow's workers serve
#: several RecvTensor calls concurrently, how many overlap in a step is fitted with the rest
LINK_STREAMS = (1, 2, 4, 8)


#: co-running slowdowns the transfer fit may choose instead of the one measured (`measure_shared_machine`:
#: two whole steps at once, 0-5% here), for what both workers computing at once costs inside a split step
FITTED_CORUN_SLOWDOWNS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5)
#: today's: fitted with the share and the streams. On fresh validations InceptionV3's fit chose 0.2 and 0.1
#: (measured 0.03 and 0.02) and its held-out rank rose (0.67 to 0.73, 0.45 to 0.62 at batch 64, 0.94 to 0.97 at
#: 8); NMT's kept the measured one (README, `make validation-corun`). None: the measured one alone, as before.
CORUN_SLOWDOWNS = FITTED_CORUN_SLOWDOWNS

#: the receiver's CPU share of a transfer's bytes (`trinity.cluster`), fitted with the rest: what taking a
#: tensor off the wire costs the receiving worker's one thread. Without it, shares of the bytes alone took NMT's
#: held-out rank to 0.77 on a fresh validation (README, `make validation-share-of-bytes-fresh`)
RECEIVE_SHARES = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)

#: what issuing one request (a `_Recv`'s `RecvTensor` call) costs the receiving worker's one thread
#: (`trinity.cluster`'s ``request_cpu_us``), fitted with the rest: timed stamps put a split's later worker
#: 17-20 us per received tensor into its step (README, `make step-start`). Today's: none (0 alone): fitted on a
#: fresh InceptionV3 validation the fit set did not pin it down (40 us in one run, 0 in the other, fit errors equal
#: to three places) and no held-out rank rose (README, `make validation-requests-fresh`).
REQUEST_CPU_US = (0.0,)
#: the costs `make validation-requests` lets the fit choose from
FITTED_REQUEST_CPU_US = (0.0, 5.0, 10.0, 20.0, 40.0)

#: how `fit_transfer_model` sums up the fit set's |relative errors|
OBJECTIVES = {"mean": np.mean, "median": np.median}


@dataclass(frozen=True)
class TransferFit:
    """The transfer model `fit_transfer_model` chose and its error over the fit set (the fit's objective)."""

    send_cpu_share: float
    latency_scale: float
    link_streams: int
    error: float  # the objective at the chosen point
    corun_slowdown: float | None = None  # None: the cluster's own (measured) was kept
    receive_cpu_share: float = 0.0
    request_cpu_us: float = 0.0  # kept 0 where the cluster issues no requests (no ``send_on_request``)

    def apply(self, cluster: Cluster) -> Cluster:
        """``cluster`` (its latency the lone round trip's) with this fit's terms."""
        corun = cluster.corun_slowdown if self.corun_slowdown is None else self.corun_slowdown
        return replace(cluster, send_cpu_share=self.send_cpu_share, latency=cluster.latency * self.latency_scale,
                       link_streams=self.link_streams, corun_slowdown=corun, receive_cpu_share=self.receive_cpu_share,
                       request_cpu_us=self.request_cpu_us if cluster.send_on_request else 0.0)


def fit_transfer_model(graph: OpGraph, cluster: Cluster, placements: list[np.ndarray], measured_us: list[float],
                       shares=SEND_SHARES, latency_scales=LATENCY_SCALES,
                       link_streams=LINK_STREAMS, objective: str = "mean",
                       corun_slowdowns=CORUN_SLOWDOWNS, receive_shares=RECEIVE_SHARES,
                       request_costs=REQUEST_CPU_US) -> TransferFit:
    """The grid point (send CPU share, latency scale, link streams, co-running slowdown, receive CPU share,
    request cost) whose simulated step times are closest to ``measured_us``: the smallest mean |relative
    error| (ties: the smaller share, then the smaller scale, then fewer streams, then the measured slowdown,
    then the smaller, then the smaller receive share, then the smaller request cost; a cluster without
    ``send_on_request`` issues no requests, and tries 0 alone).
    The mean, not the median (``objective="median"``, the rule before streams): with five placers a
    median lets two of them stay 2x off (NMT's expert and m-TOPO did). ``corun_slowdowns``: values
    tried besides the cluster's own (None: the cluster's alone).

    The latency scale multiplies the isolated-transfer latency `measure_link` found: in a busy
    step many RecvTensor calls are in flight at once, so a transfer can cost its sender less than
    a lone round trip's latency, or more where the workers' one thread also serves the RPCs. Only 1
    is tried by default (`LATENCY_SCALES`): on five placers a fitted scale and the share stand in
    for each other."""
    from trinity.placement import check_placement
    from trinity.sim import Simulator

    if objective not in OBJECTIVES:
        raise TrinityError(f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}", field="objective")
    coruns = [None, *sorted(float(c) for c in corun_slowdowns or ())]  # None first: the measured one wins ties
    best = (np.inf,)
    # the grid changes transfer terms only: op times, bound and placements are checked and computed once
    base = Simulator(graph, cluster)
    placements = [check_placement(graph, cluster, p) for p in placements]
    requests = sorted(float(c) for c in request_costs) if cluster.send_on_request else [0.0]
    grid = itertools.product(shares, latency_scales, link_streams, enumerate(coruns), receive_shares, requests)
    for share, scale, streams, (rank, corun), receive, request in grid:
        fit = TransferFit(float(share), float(scale), int(streams), 0.0, corun, float(receive), request)
        sim = base.on(fit.apply(cluster))
        errors = [abs(sim.simulate(p, check=False).step_time_us - m) / m for p, m in zip(placements, measured_us)]
        # the key's order after the error is the tie rule above
        best = min(best, (float(OBJECTIVES[objective](errors)), float(share), float(scale), int(streams), rank,
                          float(receive), request))
    return TransferFit(send_cpu_share=best[1], latency_scale=best[2], link_streams=best[3], error=best[0],
                       corun_slowdown=coruns[best[4]], receive_cpu_share=best[5], request_cpu_us=best[6])


def profile_on_worker(graph: OpGraph, graph_def: bytes, workers: Workers, *, steps: int = 10, warmup: int = 3,
                      task: int = 0, progress: bool = True) -> tuple[OpGraph, dict]:
    """Every op's time on worker ``task`` with the whole step there (see the module doc)."""
    from trinity.profile.tf_profile import profile_tf

    runner = Runner(graph, graph_def, workers)
    placement = np.full(graph.n_ops, task, np.int64)
    placed = placed_graph_def(runner.graph_def, graph, placement, workers.devices)
    profiled, report = profile_tf(graph, placed, steps=steps, warmup=warmup, progress=progress,
                                  target=workers.target, session_config=runner.session_config())
    observed = set(report.pop("observed_ops"))
    # One thread runs the ops one by one, so their times should add up to the untraced step;
    # tracing adds a little to each op (9% on NMT's 13k small ops): scale that back out.
    report["trace_scale"] = min(1.0, report["step_us_median"] / max(report["sum_op_us"], 1e-9))
    # The worker's time is the op's time: drop other kinds' predictions so nothing masks it.
    # Ops the runtime never ran (constant-folded, pruned) take no time and send nothing: their
    # consumers get a folded constant on their own device.
    ops = []
    for op in profiled.ops:
        by_kind = {k: v for k, v in op.compute_us_by_kind.items() if k != WORKER_KIND}
        ops.append(replace(op, compute_us=op.compute_us * report["trace_scale"], compute_us_by_kind=by_kind)
                   if op.name in observed else
                   replace(op, compute_us=0.0, output_bytes=tuple(0 for _ in op.output_bytes),
                           compute_us_by_kind=by_kind))
    meta = {**graph.meta, "calibration_profile": {k: v for k, v in report.items() if k != "step_us"}}
    return OpGraph(ops, profiled.edges, name=graph.name, meta=meta, source=graph.source), report


def worker_cluster_yaml(workers: Workers, link: LinkFit, memory_bytes: int, fit: TransferFit | None = None,
                        name: str = "calibrated", shared: dict | None = None) -> dict:
    """The calibrated cluster's YAML document; ``fit``: `fit_transfer_model`'s answer (none: the lone
    round trip's latency, one stream); ``shared``: `measure_shared_machine`'s answer."""
    fit = fit or TransferFit(0.0, 1.0, 1, 0.0)
    corun = fit.corun_slowdown  # None: the measured one (``shared``'s)
    return {
        "name": name,
        "send_cpu_share": round(fit.send_cpu_share, 3),
        **({"receive_cpu_share": round(fit.receive_cpu_share, 3)} if fit.receive_cpu_share else {}),
        "cpu_share_of": "bytes",  # a worker's thread copies and serialises bytes; the latency is the network's
        **({"link_streams": fit.link_streams} if fit.link_streams != 1 else {}),
        "control_transfers": True,  # TensorFlow sends a control edge between workers as an empty tensor
        # a worker's one inter-op thread takes the newest op it readied first, a received tensor's readers last
        "ready_order": "lifo-arrivals-last",
        # a worker holds a tensor until it takes up the receiver's request, and serialises it after the work
        # it has ready: its one thread serves the RecvTensor calls (traced steps, README *Simulator vs real*)
        "send_on_request": True,
        "sends_last": True,
        **({"request_cpu_us": round(fit.request_cpu_us, 2)} if fit.request_cpu_us else {}),
        **({"corun_slowdown": round(shared["corun_slowdown"] if corun is None else corun, 4),
            "step_sync_us": round(shared["step_sync_us"], 1)} if shared else {}),
        "devices": [{"name": f"worker{i}", "kind": WORKER_KIND, "speed": 1.0, "memory_GB": memory_bytes / 1e9}
                    for i in range(workers.n)],
        "default_link": {"bandwidth_GBps": round(link.bandwidth_GBps, 4),
                         "latency_us": round(link.latency_us * fit.latency_scale, 2)},
        "calibration": {**link.to_dict(), "hosts": list(workers.hosts), **machine_of(workers)},
    }


def machine_of(workers: Workers) -> dict:
    """What a calibration is only valid for besides its graph: the machine and the workers' threads."""
    import socket

    threads = getattr(workers, "threads", None)
    return {"machine": socket.gethostname(), "threads_per_worker": threads} if threads else {}


def check_anchor_range(value, field: str = "validation.anchor_range") -> tuple[float, float]:
    """``value`` as the (low, high) bounds of an anchor's scale, refused in one line naming ``field``
    unless two finite numbers 0 < low <= 1 <= high."""
    try:
        low, high = (float(x) for x in value)
    except (TypeError, ValueError):
        raise TrinityError(f"must be two numbers [low, high], got {value!r}", field=field) from None
    if not 0 < low <= 1 <= high < np.inf:
        raise TrinityError(f"must have 0 < low <= 1 <= high (finite), got [{low:g}, {high:g}]", field=field)
    return low, high


def anchored(graph: OpGraph, profiled_us: float, measured_us: float, *, measured: str = "beside the fit set",
             profiled: str = "when profiled", allowed: tuple[float, float] = ANCHOR_RANGE) -> tuple[OpGraph, float]:
    """(``graph`` with every measured op time scaled by one factor, the factor): how much slower the whole
    step on one worker ran beside the fit set (``measured_us``) than when its ops were profiled
    (``profiled_us``, the profile's untraced step), the machine's drift in between. ``measured`` and
    ``profiled`` say when each was taken, for the error a factor outside ``allowed`` (too large to be
    drift) gets."""
    factor = measured_us / profiled_us
    if not allowed[0] <= factor <= allowed[1]:
        raise TrinityError(f"the whole step on one worker ran at {measured_us / 1e3:.1f} ms {measured} and "
                           f"at {profiled_us / 1e3:.1f} ms {profiled} (x{factor:.2f}, outside "
                           f"[{allowed[0]:g}, {allowed[1]:g}]): the machine changed under the calibration; "
                           "rerun it on a quieter machine", field="calibration")
    return times_scaled(graph, factor), float(factor)


def times_scaled(graph: OpGraph, factor: float) -> OpGraph:
    """``graph`` with every measured op time times ``factor`` (unmeasured ops stay unmeasured)."""
    ops = [op if op.compute_us is None else replace(op, compute_us=op.compute_us * factor) for op in graph.ops]
    return OpGraph(ops, graph.edges, name=graph.name, meta=graph.meta, source=graph.source)


def calibrate(graph: OpGraph, graph_def: bytes, workers: Workers, *, steps: int = 10, warmup: int = 3,
              link_repeats: int = 20, fit_placers=FIT_PLACERS, fit_rounds: int = 3, fit_steps: int = 3,
              fit_warmup: int = 2, progress: bool = True,
              anchor_range: tuple[float, float] = ANCHOR_RANGE, retime_above: float | None = None,
              retries: int = 2) -> tuple[Cluster, dict, OpGraph, dict]:
    """(cluster, its YAML document, calibrated graph, report) for ``workers``. The fit set is timed as
    ``trinity validate`` times every strategy (``fit_rounds`` interleaved rounds of ``fit_steps``);
    ``anchor_range``: the range of the op times' anchor (`anchored`); ``retime_above``, ``retries``: the fit
    set's runs disturbed by others are run again (`Runner.measure_interleaved`)."""
    from trinity.placers import place_each
    from trinity.runtime.runner import worker_cluster

    watch = MachineWatch()
    link = measure_link(workers, repeats=link_repeats, progress=progress)
    costed, profile = profile_on_worker(graph, graph_def, workers, steps=steps, warmup=warmup, progress=progress)
    trace_scale = profile["trace_scale"]
    memory = int(worker_cluster(workers).memory[0])
    # as many rounds as traced profile steps (a handful of model steps each): the smoke test's 2 stay quick
    shared = measure_shared_machine(graph, graph_def, workers, repeats=max(steps, 2), sync_repeats=12 * max(steps, 2),
                                    progress=progress)
    cluster = cluster_from_dict(worker_cluster_yaml(workers, link, memory, shared=shared), "calibration")
    # The send CPU share and latency scale are fitted to real steps of a few placers' strategies
    # (a validation should judge the simulator on other strategies: `trinity validate` marks them).
    runner = Runner(costed, graph_def, workers, cluster=cluster)
    names = list(dict.fromkeys([ANCHOR_PLACER, *fit_placers]))
    placed, _ = place_each(names, costed, cluster)  # a placer that cannot place the graph leaves the fit
    fit_set = {name: placed[name].placement for name in fit_placers if name in placed}
    if not fit_set:
        raise TrinityError("no placer could place the graph on these workers to fit the transfer model",
                           field="calibration")
    timed = {name: placed[name].placement for name in names if name in placed}
    measured = runner.measure_interleaved(timed, rounds=fit_rounds, steps=fit_steps, warmup=fit_warmup,
                                          progress=progress, retime_above=retime_above, retries=retries)
    # The machine drifts between the profile and the fit set's rounds (9.9% in one validation): the
    # whole step on one worker, timed in the same rounds, says by how much, and the op times follow.
    anchor = {"placer": ANCHOR_PLACER, "scale": 1.0}
    if ANCHOR_PLACER in timed:
        anchor["measured_step_us"] = measured[ANCHOR_PLACER].median_us
        costed, anchor["scale"] = anchored(costed, profile["step_us_median"], anchor["measured_step_us"],
                                           allowed=anchor_range)
    fit = fit_transfer_model(costed, cluster, list(fit_set.values()), [measured[n].median_us for n in fit_set])
    doc = worker_cluster_yaml(workers, link, memory, fit, shared=shared)
    cluster = cluster_from_dict(doc, "calibration")
    report = {"link": link.to_dict(), "shared_machine": shared,
              "machine": watch.metrics(),
              "transfer_fit": {"send_cpu_share": fit.send_cpu_share, "latency_scale": fit.latency_scale,
                               "receive_cpu_share": fit.receive_cpu_share,
                               "request_cpu_us": fit.request_cpu_us,
                               "link_streams": fit.link_streams, "mean_error": fit.error,
                               "corun_slowdown": fit.corun_slowdown,  # None: the measured one kept
                               "placers": list(fit_set), "rounds": fit_rounds, "steps": fit_steps,
                               "retimed_runs": sum(len(measured[n].retimed_disturbance) for n in timed),
                               "measured_step_us": {n: measured[n].median_us for n in fit_set}},
              "anchor": anchor,
              "profile": {k: v for k, v in profile.items() if k != "step_us"},
              "trace_scale": trace_scale,
              "worker_step_us_median": profile["step_us_median"]}
    doc["calibration"]["transfer_fit"] = {"placers": list(fit_set), "latency_scale": fit.latency_scale,
                                          "mean_error": round(fit.error, 4)}
    doc["calibration"]["anchor_scale"] = round(anchor["scale"], 4)
    return cluster, doc, costed, report


def check_calibration(folder, calibrated: OpGraph, cluster: Cluster, recorded: dict, graph: OpGraph,
                      workers: Workers) -> None:
    """Refuse a calibration made for another graph, worker count, machine or thread budget: one
    error naming what differs."""
    differs = []
    if calibrated.digest() != graph.digest():
        differs.append(("graph", f"graph {calibrated.digest()}, not {graph.digest()}"))
    if cluster.n_devices != workers.n:
        differs.append(("workers", f"{cluster.n_devices} workers, not {workers.n}"))
    for key, value in machine_of(workers).items():
        if key in recorded and recorded[key] != value:
            differs.append((key, f"{key} {recorded[key]!r}, not {value!r}"))
    if differs:
        key, what = differs[0]
        raise TrinityError(f"calibration in {folder} was made for {what}; use --recalibrate or another "
                           "--calibration folder", source=str(Path(folder) / "cluster.yaml"), field=f"calibration.{key}")


def calibration_for(graph: OpGraph, graph_def: bytes, workers: Workers, folder, *, reuse: bool = True,
                    steps: int = 10, fit_rounds: int = 3, fit_steps: int = 3, fit_warmup: int = 2,
                    progress: bool = True, anchor_range: tuple[float, float] = ANCHOR_RANGE,
                    retime_above: float | None = None, retries: int = 2) -> tuple[Cluster, OpGraph, dict | None]:
    """The calibrated (cluster, graph) for these workers, read from ``folder`` when ``reuse`` and it
    holds one for this graph and worker count, else measured and written there (cluster.yaml,
    graph.json.gz, calibration.json). The report is None when reused."""

    from trinity.cluster import load_cluster
    from trinity.fileio import read_yaml, write_json, write_yaml
    from trinity.graph import load_graph, save_graph

    folder = Path(folder)
    cluster_file, graph_file = folder / "cluster.yaml", folder / "graph.json.gz"
    if reuse and cluster_file.exists() and graph_file.exists():
        cg, cluster = load_graph(graph_file), load_cluster(cluster_file)
        check_calibration(folder, cg, cluster, read_yaml(cluster_file).get("calibration") or {}, graph, workers)
        return cluster, cg, None
    cluster, doc, cg, report = calibrate(graph, graph_def, workers, steps=steps, fit_rounds=fit_rounds,
                                         fit_steps=fit_steps, fit_warmup=fit_warmup, progress=progress,
                                         anchor_range=anchor_range, retime_above=retime_above, retries=retries)
    write_yaml(cluster_file, doc)
    save_graph(cg, graph_file)
    write_json(folder / "calibration.json", report)
    return cluster, cg, report


def calibration_at_batch(graph: OpGraph, graph_def: bytes, workers: Workers, cluster: Cluster, folder, *,
                         steps: int = 10, progress: bool = True) -> OpGraph:
    """``graph`` (the model exported at another batch size) with its op times measured on the workers,
    the link and transfer model of ``cluster`` (fitted at the model's own batch) kept: nothing is fitted
    at this batch. Read from ``folder/graph.json.gz`` when it holds this graph, else measured there."""

    from trinity.fileio import write_json
    from trinity.graph import load_graph, save_graph

    graph_file = Path(folder) / "graph.json.gz"
    if graph_file.exists():
        cg = load_graph(graph_file)
        if cg.meta.get("exported_digest") == graph.digest():
            return cg
    cg, report = profile_on_worker(graph, graph_def, workers, steps=steps, progress=progress)
    cg = OpGraph(cg.ops, cg.edges, name=cg.name, meta={**cg.meta, "exported_digest": graph.digest()},
                 source=cg.source)
    save_graph(cg, graph_file)
    write_json(Path(folder) / "calibration.json",
               {"profile": {k: v for k, v in report.items() if k != "step_us"}, "cluster": cluster.name,
                "note": "link and transfer model kept from the model's own batch; only op times measured here"})
    return cg
