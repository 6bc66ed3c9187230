"""Measure per-op times of an exported PyTorch graph by running it for real.

The model named in ``graph.meta`` is re-traced (same seed, batch and options,
so node names match) and the traced graph is executed node by node with a
timer around each ATen call. Steps alternate with untimed whole-step runs, so
drift on this noisy machine hits both alike; medians are reported. Times
are taken with the default backends (oneDNN on, as a user would run), on the
graph traced with oneDNN off.

On a GPU (``device="cuda"``) kernels run asynchronously, so times come from
CUDA events recorded around each op and around the whole step: an op's time
is what the GPU's stream spends from its start event to its end event,
including a launch it waits for when the host runs behind.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from typing import Any

import torch
from torch import fx

from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph
from trinity.export.torch_graph import build_torch_model, op_nodes, op_type, trace_training_step
from trinity.progress import progress as progress_bar


class _Clock:
    """Marks on the host's clock (CPU) or CUDA events (GPU); ``elapsed_ns`` waits for the GPU to pass both."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter_ns()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_ns(self, start: Any, end: Any) -> float:
        if not self.cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) * 1e6  # ms -> ns


class _Timer(fx.Interpreter):
    """Runs the graph node by node, marking each ATen call's start and end; ``collect`` adds their times (ns)."""

    def __init__(self, gm: fx.GraphModule, names: set[str], clock: _Clock):
        super().__init__(gm)
        self.names = names
        self.clock = clock
        self.marks: list[tuple[str, Any, Any]] = []
        self.times: dict[str, list[float]] = {name: [] for name in names}

    def run_node(self, n: fx.Node) -> Any:
        if n.name not in self.names or n.op != "call_function":
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        start = self.clock.mark()
        out = n.target(*args, **kwargs)
        self.marks.append((n.name, start, self.clock.mark()))
        return out

    def collect(self) -> None:
        for name, start, end in self.marks:
            self.times[name].append(self.clock.elapsed_ns(start, end))
        self.marks = []


def profile_torch(graph: OpGraph, name: str | None = None, *, steps: int = 10, warmup: int = 3, threads: int = 2,
                  progress: bool = True, device: str = "cpu") -> tuple[OpGraph, dict]:
    """Time every op of ``graph`` (exported by `export_torch_model`); ``name`` overrides ``graph.meta['model']``.

    ``device`` runs it there (``cuda``: on a GPU, timed with CUDA events); the graph must have been
    exported on the same kind of device.

    Returns the graph with ``compute_us`` = median time per op (placeholders 0)
    and a report: median step time without per-op timers, the sum of per-op
    medians, their ratio and the number of ops timed.
    """
    model_name = name or graph.meta.get("model")
    if graph.meta.get("framework") != "torch" or not model_name:
        raise TrinityError("not a graph exported from a registered PyTorch model (meta.framework/model)",
                           source=graph.name, field="meta")
    if steps < 1 or warmup < 0 or threads < 1:
        raise TrinityError(f"need steps >= 1, warmup >= 0, threads >= 1; got {steps}, {warmup}, {threads}",
                           source=graph.name, field="profile")
    where = torch.device(device)
    if where.type == "cuda" and not torch.cuda.is_available():
        raise TrinityError("no CUDA device on this machine", source=graph.name, field="device")
    model, batch, options = build_torch_model(model_name, graph.meta.get("batch_size"),
                                              **graph.meta.get("options", {}))
    model = model.to(where)
    traced = trace_training_step(model.module, model.example_inputs, model.targets, model.loss_fn,
                                 name=model_name, lr=graph.meta.get("lr", 0.01))
    nodes = op_nodes(traced.gm)
    fresh = [(n.name, op_type(n, traced.placeholders)) for n in nodes]
    if fresh != [(op.name, op.type) for op in graph.ops]:
        differ = next((f"{a} vs {b}" for a, b in zip(fresh, ((o.name, o.type) for o in graph.ops)) if a != b),
                      f"{len(fresh)} ops vs {graph.n_ops}")
        raise TrinityError(f"re-traced {model_name!r} does not match the graph (first difference: {differ}); "
                           "export it again with this torch version", source=graph.name, field="ops")

    clock = _Clock(where)
    timer = _Timer(traced.gm, {n.name for n in nodes if n.op == "call_function"}, clock)
    args = [a.detach().clone() for a in traced.args]
    step_ns: list[float] = []
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            for i in progress_bar(range(warmup + steps), desc=f"profile {model_name}", disable=not progress):
                timer.run(*args)
                timer.collect()
                if i == warmup - 1:
                    timer.times = {k: [] for k in timer.times}
                start = clock.mark()
                traced.gm(*args)
                end = clock.mark()
                if i >= warmup:
                    step_ns.append(clock.elapsed_ns(start, end))
    finally:
        torch.set_num_threads(old_threads)

    median_us = {k: statistics.median(v) / 1e3 for k, v in timer.times.items()}
    ops = [replace(op, compute_us=median_us.get(op.name, 0.0)) for op in graph.ops]
    step_us = statistics.median(step_ns) / 1e3
    q1, _, q3 = statistics.quantiles(step_ns, n=4) if len(step_ns) > 1 else (step_ns[0],) * 3
    sum_us = sum(median_us.values())
    report = {
        "model": model_name,
        "batch_size": batch,
        "options": options,
        "steps": steps,
        "warmup": warmup,
        "threads": threads,
        "device": str(where),
        "step_us_median": step_us,
        "step_us_q1": q1 / 1e3,
        "step_us_q3": q3 / 1e3,
        "sum_op_us_median": sum_us,
        "ratio_sum_to_step": sum_us / step_us,
        "ops_timed": len(median_us),
    }
    meta = {**graph.meta, "profile": report}
    # Placeholders never run: their 0 us is not a measurement (the cost model fits only timed ops).
    return OpGraph(ops, graph.edges, name=graph.name, meta=meta), {**report, "observed_ops": sorted(median_us)}
