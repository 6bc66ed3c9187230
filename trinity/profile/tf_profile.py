"""Per-op profiling of a TensorFlow training step on this machine.

`profile_tf` imports the GraphDef that `trinity.export.tf_graph.export_tf`
returned, initialises it, runs warm-up steps, then alternates untraced steps
(timed as a whole: FULL_TRACE slows a step down) with traced ones
(``RunOptions(trace_level=FULL_TRACE)``) and reads per-node times, output
sizes and memory statistics from ``step_stats``.

Traced names are those after Grappler and oneDNN rewrites. A traced node maps
back to a graph op by its exact name, else by undoing Grappler's naming
(``ConstantFolding/<op>-folded-1``, ``<scope>/ArithmeticOptimizer/<Rule>_<name>``),
else to the nearest enclosing name that is an op (``<op>/_12``,
``<op>/tmp_var_accum_0``). Fused kernels keep the name of one
of the ops they replace, so the others never appear in the trace: they get
0 us, their time being inside the fused op. Both counts are reported.

The returned OpGraph has the same ops and edges, with ``compute_us`` = median
traced time per op, measured output sizes where the trace has them (static
ones otherwise), and the largest temporary/persistent memory the trace
records for an op when it records any.

Reading the numbers: per-op times are wall times, and with ``threads``
inter-op threads up to that many ops run at once, so the sum of per-op times
lies between about 1x and ``threads``x the traced step time. TensorFlow makes
its intra-op thread pool once per process, at the first session: ``threads``
changes it only in a fresh process.

Before running, the step's memory is estimated (`estimate_memory_bytes`) and
compared with the memory available; a step that cannot fit is refused with a
`TrinityError` suggesting a smaller batch, as is one that runs out of memory.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import replace

import numpy as np

from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph
from trinity.progress import progress as progress_bar

#: Grappler names new nodes "<scope>/<Optimizer>/<Rule>_<op base name>" or "<Optimizer>/<op name>-folded-1".
_OPTIMIZER_SCOPE = re.compile(r"(?:^|/)(?:ConstantFolding|ArithmeticOptimizer|LayoutOptimizer|Remapper|"
                              r"DependencyOptimizer|LoopOptimizer|AutoMixedPrecision|MemoryOptimizer)/")
_OPTIMIZER_SUFFIX = re.compile(r"(?:-[A-Za-z]+)+-\d+$|-[A-Za-z]+$")
#: Executor bookkeeping nodes (graph entry/exit, fetched values, feeds), not graph ops.
_RUNTIME_NODE = re.compile(r"^(?:_SOURCE|_SINK|_retval_.*|_arg_.*)$")


def map_trace_name(name: str, ops: dict[str, int] | set[str]) -> tuple[str | None, bool]:
    """(graph op, exact) for a traced node name; (None, False) when it maps to nothing."""
    if name in ops:
        return name, True
    m = _OPTIMIZER_SCOPE.search(name)
    if m:
        scope, rest = name[:m.start()], _OPTIMIZER_SUFFIX.sub("", name[m.end():])
        parts = rest.split("_")
        for k in range(len(parts)):  # drop the rule name, one "_" token at a time
            candidate = "/".join(p for p in (scope, "_".join(parts[k:])) if p)
            if candidate in ops:
                return candidate, False
        name = "/".join(p for p in (scope, rest) if p)
    while name:  # else the nearest enclosing name: "<op>/_12", "<op>/tmp_var_accum_0"
        if name in ops:
            return name, False
        name = name.rpartition("/")[0]
    return None, False


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (free + reclaimable cache); free pages where it is absent."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def estimate_memory_bytes(graph: OpGraph) -> int:
    """Persistent bytes plus the peak of live outputs when ops run one by one in topological order.

    A tensor lives from its producer until its last consumer ran; forward
    activations thus stay until their gradients, as in a real training step.
    """
    a = graph.arrays
    order = graph.topological_order()
    pos = np.empty(graph.n_ops, np.int64)
    pos[order] = np.arange(graph.n_ops)
    n_tensors = len(a.tensor_bytes)
    born = pos[a.tensor_owner]
    dies = born.copy()
    data = a.edge_tensor >= 0
    np.maximum.at(dies, a.edge_tensor[data], pos[a.dst[data]])
    delta = np.zeros(graph.n_ops + 1, np.int64)
    np.add.at(delta, born, a.tensor_bytes)
    np.add.at(delta, dies + 1, -a.tensor_bytes)
    peak = int(np.cumsum(delta).max()) if n_tensors else 0
    return int(a.persistent_bytes.sum()) + peak


def _too_big(graph: OpGraph, detail: str) -> TrinityError:
    batch = graph.meta.get("batch_size")
    hint = f"; try a smaller batch size (e.g. {max(1, batch // 2)})" if isinstance(batch, int) else \
        "; try a smaller batch size"
    return TrinityError(f"model {graph.meta.get('model', graph.name)!r} at batch {batch} does not fit in memory: "
                        f"{detail}{hint}", field="batch_size")


def _node_us(ns) -> float:
    return ns.all_end_rel_nanos / 1000.0 if ns.all_end_rel_nanos else float(ns.all_end_rel_micros)


class _Trace:
    """Per-op measurements accumulated over traced steps."""

    def __init__(self, graph: OpGraph, non_data: set[int]):
        self.graph = graph
        self.non_data = non_data  # dtype enums whose allocations are not data (resource handles...)
        self.times: dict[str, list[float]] = defaultdict(list)  # op -> us per step (summed over its nodes)
        self.out_bytes: dict[str, dict[int, int]] = defaultdict(dict)
        self.temp: dict[str, int] = {}
        self.persistent: dict[str, int] = {}
        self.counts: Counter = Counter()
        self.unmapped_names: Counter = Counter()
        self.unmapped_us: list[float] = []

    def add_step(self, step_stats) -> None:
        step_times: dict[str, float] = defaultdict(float)
        lost = 0.0
        for dev in step_stats.dev_stats:
            for ns in dev.node_stats:
                if _RUNTIME_NODE.match(ns.node_name):
                    continue
                op, exact = map_trace_name(ns.node_name, self.graph.index)
                self.counts["traced"] += 1
                if op is None:
                    self.counts["unmapped"] += 1
                    self.unmapped_names[ns.node_name] += 1
                    lost += _node_us(ns)
                    continue
                self.counts["exact" if exact else "rewritten"] += 1
                step_times[op] += _node_us(ns)
                if exact:  # a rewritten node's outputs need not be the op's
                    self._record_memory(ns, op)
        for op, us in step_times.items():
            self.times[op].append(us)
        self.unmapped_us.append(lost)

    def _record_memory(self, ns, op: str) -> None:
        for out in ns.output:
            desc = out.tensor_description
            requested = desc.allocation_description.requested_bytes
            if requested > 0 and desc.dtype not in self.non_data:
                self.out_bytes[op][out.slot] = int(requested)
        stats = ns.memory_stats
        if stats.temp_memory_size > 0:
            self.temp[op] = max(self.temp.get(op, 0), int(stats.temp_memory_size))
        if stats.persistent_memory_size > 0:
            self.persistent[op] = max(self.persistent.get(op, 0), int(stats.persistent_memory_size))

    def profiled_graph(self, steps: int, meta: dict) -> OpGraph:
        """The traced graph's ops with median times and measured sizes, under ``meta`` (copied)."""
        ops = []
        for op in self.graph.ops:
            samples = self.times.get(op.name, [])
            # An op missing from some steps' traces ran 0 us in them.
            compute = float(np.median(samples + [0.0] * (steps - len(samples)))) if samples else 0.0
            measured = self.out_bytes.get(op.name, {})
            ops.append(replace(op, compute_us=compute,
                               output_bytes=tuple(measured.get(k, b) for k, b in enumerate(op.output_bytes)),
                               temporary_bytes=self.temp.get(op.name, op.temporary_bytes),
                               persistent_bytes=self.persistent.get(op.name, op.persistent_bytes)))
        g = self.graph
        return OpGraph(ops, g.edges, name=g.name, meta=meta, source=g.source)


def profile_tf(graph: OpGraph, graph_def, *, steps: int = 10, warmup: int = 3, threads: int = 2,
               progress: bool = True, target: str = "", session_config=None) -> tuple[OpGraph, dict]:
    """Run the training step for real; return (graph with measured costs, report). See the module doc.

    ``graph_def`` is serialized or a GraphDef. By default the step runs in this process with
    ``threads`` threads; with ``target`` (a worker's gRPC address) and ``session_config`` it
    runs there, as placed in ``graph_def``, with the worker's own threads.
    """
    import tensorflow as tf

    if steps < 1 or warmup < 0 or threads < 1:
        raise TrinityError(f"need steps >= 1, warmup >= 0, threads >= 1; got {steps}, {warmup}, {threads}",
                           field="profile")
    train_op, init_op = graph.meta.get("train_op"), graph.meta.get("init_op")
    if not train_op or not init_op:
        raise TrinityError("graph meta has no train_op/init_op: profile a graph made by export_tf",
                           source=graph.source, field="meta")
    fetches = [train_op] + ([graph.meta["loss"]] if graph.meta.get("loss") else [])
    need, have = estimate_memory_bytes(graph), available_memory_bytes()
    if need > have:
        raise _too_big(graph, f"needs about {need / 2**30:.1f} GiB (weights, optimizer state and live "
                              f"activations), {have / 2**30:.1f} GiB available")

    tf_graph = tf.Graph()
    with tf_graph.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(graph_def) if isinstance(graph_def, bytes)
                                      else graph_def, name="")
    config = session_config or tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                                        inter_op_parallelism_threads=threads)
    full_trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    trace = _Trace(graph, {t.as_datatype_enum for t in (tf.resource, tf.variant, tf.string)})
    untraced_us, traced_us = [], []
    start = time.perf_counter()
    try:
        with tf.compat.v1.Session(target, graph=tf_graph, config=config) as sess, \
                progress_bar(total=warmup + 2 * steps, desc=f"profile {graph.name}", unit="run",
                             disable=not progress) as bar:
            sess.run(init_op)
            for _ in range(warmup):
                sess.run(fetches)
                bar.update()
            for _ in range(steps):
                # Interleaved, so drift on this machine hits traced and untraced runs alike.
                t0 = time.perf_counter()
                sess.run(fetches)
                untraced_us.append((time.perf_counter() - t0) * 1e6)
                run_metadata = tf.compat.v1.RunMetadata()
                t0 = time.perf_counter()
                sess.run(fetches, options=full_trace, run_metadata=run_metadata)
                traced_us.append((time.perf_counter() - t0) * 1e6)
                trace.add_step(run_metadata.step_stats)
                bar.update(2)
    except (tf.errors.ResourceExhaustedError, MemoryError) as exc:
        raise _too_big(graph, f"TensorFlow ran out of memory ({type(exc).__name__})") from None

    never = Counter(op.type for op in graph.ops if op.name not in trace.times)
    step_us, traced_step_us = statistics.median(untraced_us), statistics.median(traced_us)
    profiled = trace.profiled_graph(steps, graph.meta)
    sum_op_us = float(sum(op.compute_us for op in profiled.ops))
    counts = trace.counts
    report = {
        "steps": steps,
        "warmup": warmup,
        "threads": threads,
        "step_us_median": step_us,
        "step_us": untraced_us,
        "traced_step_us_median": traced_step_us,
        "sum_op_us": sum_op_us,
        "sum_op_over_step": sum_op_us / step_us,
        "sum_op_over_traced_step": sum_op_us / traced_step_us,
        "traced_nodes_per_step": counts["traced"] / steps,
        "mapped_exact_per_step": counts["exact"] / steps,
        "mapped_rewritten_per_step": counts["rewritten"] / steps,
        "unmapped_per_step": counts["unmapped"] / steps,
        "unmapped_us_median": statistics.median(trace.unmapped_us),
        "unmapped_examples": [n for n, _ in trace.unmapped_names.most_common(5)],
        "graph_ops_never_traced": sum(never.values()),
        "never_traced_by_type": dict(never.most_common(10)),
        "ops_with_measured_outputs": len(trace.out_bytes),
        "ops_with_temporary_bytes": len(trace.temp),
        "estimated_memory_bytes": need,
        "available_memory_bytes": have,
        "wall_s": round(time.perf_counter() - start, 3),
    }
    profiled.meta["profile"] = {k: v for k, v in report.items() if k != "step_us"}
    # Ops never traced were pruned or fused by Grappler: 0 us for the simulator, but not a
    # measurement the cost model should fit (a fused Relu's time is in its fused kernel).
    return profiled, {**report, "observed_ops": sorted(trace.times)}
