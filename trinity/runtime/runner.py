"""Run a placed training step on TensorFlow workers and measure it.

`placed_graph_def` writes a placement into the exported GraphDef: every op of
the OpGraph gets its device; nodes outside the step (initialisers) follow a
placed consumer, else a placed producer, else task 0. TensorFlow keeps
``_class: loc:@`` groups together itself; `check_placement` has already
refused strategies that would split one.

`Runner.measure` opens one session on the workers, initialises the
variables, runs warm-up steps, then timed steps (wall time of
``session.run``), then one traced step (``FULL_TRACE`` with partition
graphs) that gives:

* bytes that crossed devices: the sum of the ``RecvTensor`` records, one per
  tensor per receiving device, as the simulator counts them; the partition
  graphs' ``_Recv`` nodes say which tensors should have one (`trace_transfers`);
* per-device peak memory: the largest ``allocator_bytes_in_use`` the trace
  records on that device (each worker is its own process, so its allocator
  holds only its own tensors and variables);
* overridden placements: ops of the OpGraph that a partition graph put on a
  device other than the one asked for.

`measure_interleaved` measures several strategies in rounds (each round runs
every strategy once), because step times here drift by tens of percent over
minutes: interleaving spreads the drift evenly instead of charging it to
whichever strategy ran last. It traces a step in each of the first two
rounds, and in each later round while some tensor that crossed has no record
yet: a traced step loses every ``RecvTensor`` record of one worker now and
then (1 of 36 traced steps in `make trace-completeness`'s committed run), so
the records of all traced steps are pooled (`Measurement.add_trace`). Every
wait has a timeout: a run that does not finish raises `WorkerError` instead
of hanging. The machine's 1-minute load
average is recorded before and after every run, and the shares of the
cores' time that other processes and other virtual machines took during it
(`trinity.machine`: the workers are pinned to cores, but nothing stops other
jobs from using them). Asked to (``retime_above``), it runs a strategy again
when others took more than that share of the cores during its run: on this
host, the other virtual machines' steal reached 5-9% in three of four parts of
one validation, and a strategy's steal ranked with its error there.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from trinity.cluster import Cluster, cluster_from_dict
from trinity.errors import PlacementError, TrinityError
from trinity.graph.ir import OpGraph
from trinity.machine import cpu_sample, interference, machine_load
from trinity.placement import check_placement
from trinity.profile.tf_profile import available_memory_bytes
from trinity.progress import progress as progress_bar
from trinity.runtime.workers import WorkerError, Workers

RUN_TIMEOUT_S = 300.0


@dataclass
class Measurement:
    """One strategy measured on the workers. Times in microseconds, sizes in bytes."""

    name: str
    step_us: list[float] = field(default_factory=list)  # every timed step, all rounds
    round_median_us: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)  # loss of every step run (warm-up included)
    # the tensors that cross between workers, by edge name, as the partition graphs receive them, and the bytes of
    # each that a traced step recorded (all traced steps pooled: `add_trace`)
    expected_transfers: set[str] = field(default_factory=set)
    recorded_bytes: dict[str, int] = field(default_factory=dict)
    traces: int = 0  # traced steps run
    peak_memory_bytes: list[int] = field(default_factory=list)  # per device, the largest any traced step recorded
    overridden: list[tuple[str, str, str]] = field(default_factory=list)  # (op, asked, ran)
    setup_s: float = 0.0  # session creation, initialisation and warm-up, summed over rounds
    load: list[float] = field(default_factory=list)  # the machine's 1-minute load before and after each run
    # per run, the shares of the cores' time other processes and other virtual machines took (`trinity.machine`)
    other_cpu: list[float] = field(default_factory=list)
    steal: list[float] = field(default_factory=list)
    # the last traced step's ops (task, node, start from the step's first op, duration), with `measure`'s keep_ops
    op_trace: list[tuple[int, str, float, float]] = field(default_factory=list)
    # and its tensors that crossed (`transfer_records`: producer, output, source task, destination task, bytes,
    # start, end)
    transfer_trace: list[tuple[str, int, int, int, int, float, float]] = field(default_factory=list)
    # runs whose times were dropped because others took too much of the cores (`measure_interleaved`'s
    # retime_above): the share others took in each, and its median step over the kept run's of that round
    retimed_disturbance: list[float] = field(default_factory=list)
    retimed_ratio: list[float] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return float(statistics.median(self.step_us)) if self.step_us else float("nan")

    @property
    def spread(self) -> float:
        """Interquartile range of the timed steps over their median."""
        if len(self.step_us) < 2:
            return 0.0
        q1, q3 = np.percentile(self.step_us, [25, 75])
        return float((q3 - q1) / self.median_us)

    def quartiles_us(self) -> tuple[float, float]:
        """First and third quartile of the timed steps (the median's spread on the scatter)."""
        if not self.step_us:
            return float("nan"), float("nan")
        q1, q3 = np.percentile(self.step_us, [25, 75])
        return float(q1), float(q3)

    @property
    def crossed_bytes(self) -> int:
        """Bytes that crossed between the workers in a step: every recorded tensor once."""
        return sum(self.recorded_bytes.values())

    @property
    def transfers(self) -> int:
        """Tensors with data that crossed (control tensors, 0 bytes, excluded)."""
        return sum(b > 0 for b in self.recorded_bytes.values())

    @property
    def transfers_missing(self) -> int:
        """Tensors the partition graphs send between workers that no traced step recorded: while above 0,
        `crossed_bytes` is short of what crossed."""
        return len(self.expected_transfers - self.recorded_bytes.keys())

    def add_trace(self, expected: set[str], recorded: dict[str, int], peak_memory_bytes: list[int],
                  overridden: list[tuple[str, str, str]]) -> None:
        """Pool a traced step's records (`trace_transfers`) with those of the traced steps before it. A
        traced step loses records (all of one worker's, now and then) but never invents them, and every step
        sends the same tensors, so the union of the records is the most complete count."""
        self.expected_transfers |= expected
        for edge, nbytes in recorded.items():
            self.recorded_bytes[edge] = max(self.recorded_bytes.get(edge, 0), nbytes)
        before = self.peak_memory_bytes
        self.peak_memory_bytes = [max(a, b) for a, b in zip(before, peak_memory_bytes)] if before else \
            list(peak_memory_bytes)
        self.overridden = overridden
        self.traces += 1

    @property
    def disturbance(self) -> float:
        """The largest share of the cores' time that other processes and other virtual machines took
        together during one of its runs (NaN where the machine cannot tell)."""
        shares = [a + b for a, b in zip(self.other_cpu, self.steal) if a == a and b == b]
        return max(shares, default=float("nan"))

    def absorb(self, run: Measurement, kept: Measurement | None = None) -> None:
        """Add a later run of the same strategy. Its traces, losses and setup time always count (bytes and
        memory do not depend on the machine's load); its times and the machine's records only where it is
        the ``kept`` run of its round (None: itself), else it counts as retimed, with the share others took
        during it and its median step over the kept run's."""
        if run.traces:
            self.add_trace(run.expected_transfers, run.recorded_bytes, run.peak_memory_bytes, run.overridden)
            self.traces += run.traces - 1
        self.loss += run.loss
        self.setup_s += run.setup_s
        if run.op_trace or run.transfer_trace:
            self.op_trace, self.transfer_trace = run.op_trace, run.transfer_trace
        self.retimed_disturbance += run.retimed_disturbance
        self.retimed_ratio += run.retimed_ratio
        if kept is None or kept is run:
            self.step_us += run.step_us
            self.round_median_us += run.round_median_us
            self.load += run.load
            self.other_cpu += run.other_cpu
            self.steal += run.steal
        else:
            self.retimed_disturbance.append(run.disturbance)
            self.retimed_ratio.append(run.median_us / kept.median_us if kept.step_us else float("nan"))

    def summary(self) -> dict:
        q1, q3 = self.quartiles_us()
        return {"strategy": self.name, "real_step_ms": self.median_us / 1e3, "real_spread": self.spread,
                "real_q1_ms": q1 / 1e3, "real_q3_ms": q3 / 1e3,
                "load_min": min(self.load, default=float("nan")), "load_max": max(self.load, default=float("nan")),
                "other_cpu_max": max(self.other_cpu, default=float("nan")),
                "steal_max": max(self.steal, default=float("nan")),
                "retimed": len(self.retimed_disturbance),
                # did the runs dropped run slower? (NaN: none dropped)
                "retimed_ratio_median": float(np.median(self.retimed_ratio)) if self.retimed_ratio else float("nan"),
                "real_steps": len(self.step_us), "real_crossed_MB": self.crossed_bytes / 1e6,
                "real_transfers": self.transfers, "real_transfers_missing": self.transfers_missing,
                "real_peak_memory_GB": max(self.peak_memory_bytes, default=0) / 1e9,
                "overridden": len(self.overridden), "setup_s": self.setup_s}


def seeded_graph_def(graph_def, seed: int = 0):
    """A copy of ``graph_def`` in which every random op without a seed gets one from ``seed`` and
    its name, so every placement of the step computes the same numbers (up to float summation order)."""
    import zlib

    import tensorflow as tf

    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    for node in out.node:
        if "seed" in node.attr and "seed2" in node.attr and node.attr["seed"].i == 0 and node.attr["seed2"].i == 0:
            node.attr["seed"].i = seed + 1  # (0, 0) means "seed me at random"
            node.attr["seed2"].i = zlib.crc32(node.name.encode()) & 0x7FFFFFFF
    return out


def placed_graph_def(graph_def, graph: OpGraph, placement: np.ndarray, devices: list[str]):
    """A copy of ``graph_def`` with every node's device set from ``placement``."""
    import tensorflow as tf

    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    device = {op.name: devices[int(d)] for op, d in zip(graph.ops, placement)}
    consumers: dict[str, list[str]] = {}
    producers: dict[str, list[str]] = {}
    for node in out.node:
        for inp in node.input:
            src = inp.lstrip("^").split(":")[0]
            consumers.setdefault(src, []).append(node.name)
            producers.setdefault(node.name, []).append(src)
    unplaced = [n.name for n in out.node if n.name not in device]
    for neighbours in (consumers, producers):  # initialisers run where what they initialise lives
        changed = True
        while changed:
            changed = False
            for name in unplaced:
                if name not in device:
                    near = next((device[m] for m in neighbours.get(name, ()) if m in device), None)
                    if near is not None:
                        device[name] = near
                        changed = True
    for node in out.node:
        node.device = device.get(node.name, devices[0])
    return out


def worker_cluster(workers: Workers, name: str = "workers") -> Cluster:
    """The workers as a Cluster (names worker0.., kind cpu); the link is a placeholder
    until `trinity.runtime.calibrate` measures it."""
    memory = workers.memory_bytes or available_memory_bytes() // workers.n
    return cluster_from_dict({
        "name": name,
        "devices": [{"name": f"worker{i}", "kind": "cpu", "memory_GB": memory / 1e9} for i in range(workers.n)],
        "default_link": {"bandwidth_GBps": 2.0, "latency_us": 100.0}}, name)


#: a RecvTensor record's label: "[bytes] [rate] edge_<id>_<tensor> from <device> to <device>"
_RECV_LABEL = re.compile(r"\[[^]]*\] \[[^]]*\] (edge_\d+_(\S+)) from (\S+) to (\S+)$")


def placed_on_two_workers(graph_path, cluster_name: str, placers) -> tuple[OpGraph, bytes, dict[str, np.ndarray]]:
    """(graph, GraphDef, {placer: placement}) of a TensorFlow export for 2 local workers: each placer places the
    graph on ``cluster_name``, a 2-device cluster whose device i runs on worker i (refused in one line
    otherwise). What the measurement benchmarks start from."""
    from trinity.cluster import load_cluster
    from trinity.export import load_exported
    from trinity.placers import place

    graph, graph_def = load_exported(graph_path, "--graph")
    cluster = load_cluster(cluster_name)
    if cluster.n_devices != 2:
        raise PlacementError(f"has {cluster.n_devices} devices for 2 workers", source=cluster_name, field="--cluster")
    return graph, graph_def, {name: place(name, graph, cluster, seed=0).placement for name in placers}


def _tensor_bytes(node_stats) -> int:
    """The bytes a ``RecvTensor`` record moved (0: an empty tensor, a control edge's)."""
    return sum(int(o.tensor_description.allocation_description.requested_bytes) for o in node_stats.output)


def _trace_figures(run_metadata, graph: OpGraph, asked: dict[str, str], devices: list[str]):
    """(tensors that should cross, the bytes of those recorded (`trace_transfers`), peak memory per device,
    overridden ops) of one traced step."""
    in_use: dict[str, dict[str, int]] = {d: {} for d in devices}
    for dev in run_metadata.step_stats.dev_stats:
        for ns in dev.node_stats:
            for m in ns.memory:
                per = in_use.setdefault(dev.device, {})
                per[m.allocator_name] = max(per.get(m.allocator_name, 0), int(m.allocator_bytes_in_use))
    peak = [sum(in_use.get(d, {}).values()) for d in devices]
    overridden = []
    for pg in run_metadata.partition_graphs:
        for node in pg.node:
            want = asked.get(node.name)
            if want is not None and node.device != want:
                overridden.append((node.name, want, node.device))
    return (*trace_transfers(run_metadata, devices), peak, overridden)


def crossing_receives(run_metadata, devices: list[str]) -> list[tuple[str, str]]:
    """(edge name, receiving device) of every tensor the step's partition graphs receive on one of ``devices``
    from another (their ``_Recv`` and ``_HostRecv`` nodes; ``_HostRecv``: a tensor kept in host memory, such as
    a shape)."""
    out = []
    for pg in run_metadata.partition_graphs:
        for node in pg.node:
            if node.op in ("_Recv", "_HostRecv"):
                src, dst = node.attr["send_device"].s.decode(), node.attr["recv_device"].s.decode()
                if src != dst and src in devices and dst in devices:
                    out.append((node.attr["tensor_name"].s.decode(), dst))
    return out


def trace_transfers(run_metadata, devices: list[str]) -> tuple[set[str], dict[str, int]]:
    """(the edge name of every tensor the step's partition graphs receive on one of ``devices`` from another
    (their ``_Recv`` and ``_HostRecv`` nodes), {edge name: bytes} of those the trace has a ``RecvTensor``
    record of). Edge names (``edge_<id>_<node>``) are the same in every session of one placed graph, so the
    records of several traced steps pool by them."""
    expected = {edge for edge, _ in crossing_receives(run_metadata, devices)}
    recorded = {}
    for dev in run_metadata.step_stats.dev_stats:
        for ns in dev.node_stats:
            match = _RECV_LABEL.match(ns.timeline_label) if ns.node_name == "RecvTensor" else None
            if match is not None and match[3] in devices and match[4] in devices:
                recorded[match[1]] = _tensor_bytes(ns)
    return expected, recorded


def _worker_stats(run_metadata, devices: list[str]):
    """(task, node stats) of every node a traced step ran on ``devices`` (their index is the task), in trace
    order, and the step's first op's start (us)."""
    task = {d: i for i, d in enumerate(devices)}
    stats = [(task[dev.device], ns) for dev in run_metadata.step_stats.dev_stats if dev.device in task
             for ns in dev.node_stats]
    return stats, min((ns.all_start_micros + ns.op_start_rel_micros for _, ns in stats), default=0)


def op_records(run_metadata, devices: list[str]) -> list[tuple[int, str, float, float]]:
    """(task, node name, start us after the step's first op, the op's own duration us) of every node a traced
    step ran on ``devices`` (their index is the task), in trace order."""
    stats, first = _worker_stats(run_metadata, devices)
    return [(t, ns.node_name, float(ns.all_start_micros + ns.op_start_rel_micros - first),
             float(ns.op_end_rel_micros - ns.op_start_rel_micros)) for t, ns in stats]


def transfer_records(run_metadata, devices: list[str]) -> list[tuple[str, int, int, int, int, float, float]]:
    """(producer, output, source task, destination task, bytes, start, end) of every tensor a traced step moved
    between ``devices``, times in us after the step's first op (as `op_records`). A ``RecvTensor`` record starts
    when the sender began to send the tensor (the later of the call's start and the response's send start) and
    ends when it arrived; an empty tensor (a control edge's) has 0 bytes. The record names the edge, not the
    output (``edge_<id>_<producer>``): the partition graph's ``_Send`` of that edge reads it (``producer:k``)."""
    task = {d: i for i, d in enumerate(devices)}
    stats, first = _worker_stats(run_metadata, devices)
    sent = {}  # edge name -> (producer, output), from the sends' inputs
    for pg in run_metadata.partition_graphs:
        for node in pg.node:
            if node.op in ("_Send", "_HostSend") and node.input:
                producer, _, output = node.input[0].partition(":")
                sent[node.attr["tensor_name"].s.decode()] = (producer, int(output or 0))
    records = []
    for _, ns in stats:
        match = _RECV_LABEL.match(ns.timeline_label) if ns.node_name == "RecvTensor" else None
        if match is None or match[3] not in task or match[4] not in task:
            continue
        name, _, output = match[2].partition(":")  # a label without its partition graphs: the name's own
        producer, output = sent.get(match[1], (name, int(output or 0)))
        start = float(ns.all_start_micros + ns.op_start_rel_micros - first)
        records.append((producer, output, task[match[3]], task[match[4]], _tensor_bytes(ns), start,
                        start + float(ns.op_end_rel_micros - ns.op_start_rel_micros)))
    return records


class Runner:
    """Runs placements of one exported TensorFlow graph on a set of workers."""

    def __init__(self, graph: OpGraph, graph_def: bytes, workers: Workers, *, timeout_s: float = RUN_TIMEOUT_S,
                 cluster: Cluster | None = None, seed: int = 0):
        """``cluster`` describes the workers for the simulator's memory check (device i = task i);
        by default each worker gets its memory budget with this machine's memory shared evenly."""
        import tensorflow as tf

        for key in ("train_op", "init_op"):
            if not graph.meta.get(key):
                raise PlacementError(f"graph meta has no {key}: only graphs exported from TensorFlow can run",
                                     source=graph.source, field=f"meta.{key}")
        self.graph, self.workers, self.timeout_s = graph, workers, timeout_s
        self.cluster = cluster or worker_cluster(workers)
        if self.cluster.n_devices != workers.n:
            raise PlacementError(f"cluster {self.cluster.name!r} has {self.cluster.n_devices} devices for "
                                 f"{workers.n} workers", field="cluster")
        self._simulator = None
        self.graph_def = seeded_graph_def(tf.compat.v1.GraphDef.FromString(graph_def), seed)
        self.fetches = [graph.meta["train_op"]] + ([graph.meta["loss"]] if graph.meta.get("loss") else [])

    @property
    def simulator(self):
        """The simulator of this graph on ``cluster`` (built on first use: compiling costs time)."""
        from trinity.sim import Simulator

        if self._simulator is None:
            self._simulator = Simulator(self.graph, self.cluster)
        return self._simulator

    def check(self, placement, name: str = "strategy") -> np.ndarray:
        """The placement as device indices, refused if it splits a colocation group or if the
        simulator's memory estimate exceeds a worker's budget."""
        from trinity.placers.base import format_bytes

        p = check_placement(self.graph, self.cluster, placement, source=name)
        res = self.simulator.simulate(p, check=False)
        if not res.fits:
            d = int(np.argmax(res.peak_memory_bytes / self.cluster.memory))
            raise PlacementError(
                f"would exhaust worker {d}'s memory: the simulator estimates "
                f"{format_bytes(res.peak_memory_bytes[d])} there, its budget is {format_bytes(self.cluster.memory[d])}",
                source=name, field="placement")
        return p

    def session_config(self):
        """Sessions keep their own variables, never move ops, and time out. Two Grappler passes
        are off because they change what crosses devices: the remapper fuses producer and
        consumer into one kernel even when the placement puts them on different devices
        (MatMul on task 1 + BiasAdd on task 0 -> one op on task 1), and the dependency
        optimizer removes Identity ops, so the tensor crosses from the Identity's producer."""
        import tensorflow as tf
        from tensorflow.core.protobuf import rewriter_config_pb2

        config = tf.compat.v1.ConfigProto(allow_soft_placement=False, isolate_session_state=True,
                                          operation_timeout_in_ms=int(self.timeout_s * 1000))
        rewrites = config.graph_options.rewrite_options
        rewrites.remapping = rewriter_config_pb2.RewriterConfig.OFF
        rewrites.dependency_optimization = rewriter_config_pb2.RewriterConfig.OFF
        return config

    def _run_options(self, trace: bool = False):
        import tensorflow as tf

        opts = tf.compat.v1.RunOptions(timeout_in_ms=int(self.timeout_s * 1000))
        if trace:
            opts.trace_level = tf.compat.v1.RunOptions.FULL_TRACE
            opts.output_partition_graphs = True
        return opts

    def session_run(self, sess, fetches, what: str, trace: bool = False):
        """(``sess.run(fetches)``'s result, its run metadata with ``trace``) within the runner's timeout; a
        worker that died or a step past the timeout is a `WorkerError` naming ``what`` (and the dead worker)."""
        import tensorflow as tf

        run_metadata = tf.compat.v1.RunMetadata() if trace else None
        try:
            out = sess.run(fetches, options=self._run_options(trace), run_metadata=run_metadata)
        except tf.errors.DeadlineExceededError:
            self.workers.check()
            raise WorkerError(f"{what} did not finish within {self.timeout_s:g} s", field="timeout") from None
        except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                tf.errors.InternalError, tf.errors.UnknownError) as exc:
            self.workers.check()  # names the dead worker when it is one of ours
            raise WorkerError(f"{what} failed on the workers: {str(exc).splitlines()[0]}",
                              field="workers") from None
        return out, run_metadata

    def measure(self, placement, name: str = "strategy", *, steps: int = 5, warmup: int = 2, trace: bool = True,
                into: Measurement | None = None, keep_ops: bool = False) -> Measurement:
        """Run ``warmup`` + ``steps`` steps (+ one traced) of ``placement``; add them to ``into`` (with
        ``keep_ops``, the traced step's ops and transfers too: `Measurement.op_trace` and ``transfer_trace``)."""
        import tensorflow as tf

        placement = self.check(placement, name)
        self.workers.check()
        m = into or Measurement(name)
        m.load.append(machine_load())
        sample = cpu_sample()
        asked = {op.name: self.workers.devices[int(d)] for op, d in zip(self.graph.ops, placement)}
        tf_graph = tf.Graph()
        with tf_graph.as_default():
            tf.compat.v1.import_graph_def(placed_graph_def(self.graph_def, self.graph, placement,
                                                           self.workers.devices), name="")
        start = time.perf_counter()
        with tf.compat.v1.Session(self.workers.target, graph=tf_graph, config=self.session_config()) as sess:
            self.session_run(sess, self.graph.meta["init_op"], f"initialising {name}")
            for _ in range(warmup):
                m.loss.append(self._loss(self.session_run(sess, self.fetches, f"a step of {name}")[0]))
            m.setup_s += time.perf_counter() - start
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                out, _ = self.session_run(sess, self.fetches, f"a step of {name}")
                times.append((time.perf_counter() - t0) * 1e6)
                m.loss.append(self._loss(out))
            m.step_us += times
            if times:
                m.round_median_us.append(float(statistics.median(times)))
            if trace:
                out, md = self.session_run(sess, self.fetches, f"a traced step of {name}", trace=True)
                m.loss.append(self._loss(out))
                m.add_trace(*_trace_figures(md, self.graph, asked, self.workers.devices))
                if keep_ops:
                    m.op_trace = op_records(md, self.workers.devices)
                    m.transfer_trace = transfer_records(md, self.workers.devices)
        m.load.append(machine_load())
        shares = interference(sample, cpu_sample())
        m.other_cpu.append(shares["other_cpu"])
        m.steal.append(shares["steal"])
        return m

    @staticmethod
    def _loss(out) -> float:
        return float(out[1]) if len(out) > 1 else float("nan")

    def measure_interleaved(self, placements: dict[str, np.ndarray], *, rounds: int = 3, steps: int = 5,
                            warmup: int = 2, progress: bool = True, retime_above: float | None = None,
                            retries: int = 2,
                            on_result: Callable[[Measurement], None] | None = None) -> dict[str, Measurement]:
        """Measure every placement ``rounds`` times, one after another in each round.

        With ``retime_above``, a run during which other processes and other virtual machines took more than
        this share of the cores (`Measurement.disturbance`) is run again, at most ``retries`` times; the
        least disturbed of its runs gives the round's times, and the others are counted
        (`Measurement.retimed_disturbance`). ``on_result`` sees each strategy's measurement after every
        round, so a caller can save what was measured before a later failure.
        """
        check_retiming(retime_above, retries)
        results: dict[str, Measurement] = {}
        again = 0  # runs timed again so far, shown beside the strategy-rounds the bar counts
        with progress_bar(total=rounds * len(placements), desc="measure", unit="run", disable=not progress) as bar:
            for r in range(rounds):
                for name, p in _round_order(placements, r):
                    # traced in the first two rounds and then while some crossing has no record (module doc)
                    m = results.setdefault(name, Measurement(name))
                    trace = r < 2 or m.transfers_missing > 0
                    runs = [self.measure(p, name, steps=steps, warmup=warmup, trace=trace)]
                    while (retime_above is not None and len(runs) <= retries
                           and runs[-1].disturbance > retime_above):
                        runs.append(self.measure(p, name, steps=steps, warmup=warmup, trace=trace))
                    kept = min(runs, key=_calmness)
                    for run in runs:
                        m.absorb(run, kept)
                    if on_result is not None:
                        on_result(m)
                    if len(runs) > 1:
                        again += len(runs) - 1
                        bar.set_postfix(timed_again=again, refresh=False)
                    bar.update()
        return results


def check_retiming(retime_above, retries, prefix: str = "") -> dict:
    """``retime_above`` and ``retries`` as `Runner.measure_interleaved` takes them, refused in one line naming the
    field (after ``prefix``) unless a share of the cores in [0, 1] (or None: never) and a whole number >= 0."""
    if retime_above is not None and (isinstance(retime_above, bool) or not isinstance(retime_above, (int, float))
                                     or not 0 <= retime_above <= 1):
        raise TrinityError(f"must be a share of the cores between 0 and 1 or null, got {retime_above!r}",
                           field=f"{prefix}retime_above")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise TrinityError(f"must be a whole number of at least 0, got {retries!r}", field=f"{prefix}retries")
    return {"retime_above": None if retime_above is None else float(retime_above), "retries": retries}


def _calmness(run: Measurement) -> float:
    """Sort key of a strategy's runs: the share others took of the cores, an unknown share as none."""
    d = run.disturbance
    return d if d == d else 0.0


def _round_order(placements: dict, r: int) -> Iterable:
    """Odd rounds run in reverse, so no strategy always follows the same one."""
    items = list(placements.items())
    return items if r % 2 == 0 else items[::-1]
