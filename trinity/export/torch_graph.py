"""Export a PyTorch training step to an OpGraph with make_fx.

One SGD step (forward, loss, ``autograd.grad``, ``p - lr * g``) is traced
with `make_fx` into a single ATen graph; every node of it becomes an Op.

Choices:

* Placeholders are ops: parameters (type ``parameter``, named ``p_<path>``),
  buffers (``buffer``, ``b_<path>``), inputs (``input``) and targets
  (``target``); tensors created in ``forward`` are ``constant`` ops.
  Parameters, buffers and constants hold ``persistent_bytes`` = their size.
* The update ``p - lr * g`` stands for an in-place optimizer write: its output
  takes the old parameter's place, so it holds no persistent bytes of its own
  and is colocated with its parameter. Ops that write a buffer in place
  (batch-norm running stats, ``num_batches_tracked``) are colocated with that
  buffer, as TensorFlow does for variables. A group is named after its first
  op (the parameter or buffer).
* ``operator.getitem`` nodes are folded: a consumer of ``getitem(x, k)``
  gets a data edge from ``x`` with ``src_output=k``.
* Output bytes are numel x element size of each tensor in ``meta['val']``;
  view ops report the bytes of the tensor they present (what a transfer moves).
* FLOPs come from `FlopCounterMode` while the graph runs once on the real
  example data, node by node; tracing and counting run with oneDNN off so
  LSTMs decompose into ops whose FLOPs are counted.
* Tracing uses fake tensors, so data-dependent Python control flow fails;
  the error names the submodule that was executing.
* Dead nodes are removed; compute times are left unset (see
  `trinity.profile.torch_profile`).
"""

from __future__ import annotations

import importlib
import inspect
import operator
import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.flop_counter import FlopCounterMode

from trinity.errors import TrinityError
from trinity.graph.ir import Edge, Op, OpGraph
from trinity.models import model_spec
from trinity.models.torch_models import TorchModel

#: Op types that hold their output for the whole step.
STATE_TYPES = ("parameter", "buffer", "constant")


@dataclass
class TracedStep:
    """A traced training step and the real tensors to run it with."""

    gm: fx.GraphModule
    #: Real values for the placeholders, in order: parameters, buffers, inputs, targets.
    args: tuple[torch.Tensor, ...]
    #: Placeholder name -> (kind, parameter or buffer path, or input position).
    placeholders: dict[str, tuple[str, str]]
    #: Parameter path -> name of the node computing its updated value.
    updates: dict[str, str]


@contextmanager
def onednn_disabled() -> Iterator[None]:
    """oneDNN off: its fused LSTM kernels hide their FLOPs from FlopCounterMode."""
    with warnings.catch_warnings():
        # flags() also re-sets oneDNN TF32, which warns on CPU-only builds.
        warnings.filterwarnings("ignore", message=".*TF32.*")
        with torch.backends.mkldnn.flags(enabled=False):
            yield


@contextmanager
def _module_stack(module: nn.Module) -> Iterator[list[str]]:
    """Track the submodule paths currently executing (innermost last).

    A forward that raises never pops, so after a failure the stack ends at
    the submodule that failed.
    """
    stack: list[str] = []

    def enter(path: str) -> Callable[..., None]:
        return lambda *_: stack.append(path)

    def leave(*_) -> None:  # a forward hook returning a value would replace the output
        stack.pop()

    handles = []
    for path, sub in module.named_modules():
        handles.append(sub.register_forward_pre_hook(enter(path)))
        handles.append(sub.register_forward_hook(leave))
    try:
        yield stack
    finally:
        for h in handles:
            h.remove()


def _safe(path: str) -> str:
    return path.replace(".", "_")


def trace_training_step(module: nn.Module, example_inputs: tuple[torch.Tensor, ...], targets: torch.Tensor,
                        loss_fn: Callable[[Any, torch.Tensor], torch.Tensor], *, name: str,
                        lr: float = 0.01) -> TracedStep:
    """Trace one SGD step into an ATen graph with readable, deterministic placeholder names."""
    module.train()
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    n_p, n_b, n_in = len(params), len(buffers), len(example_inputs)

    def step(*flat: torch.Tensor):
        ps, bs = flat[:n_p], flat[n_p:n_p + n_b]
        inputs, target = flat[n_p + n_b:n_p + n_b + n_in], flat[-1]
        out = torch.func.functional_call(module, {**dict(zip(params, ps)), **dict(zip(buffers, bs))}, inputs)
        loss = loss_fn(out, target)
        grads = torch.autograd.grad(loss, ps, allow_unused=True)
        return (*(p if g is None else p - lr * g for p, g in zip(ps, grads)), loss)

    args = (*(p.detach().clone().requires_grad_(True) for p in params.values()),
            *(b.detach().clone() for b in buffers.values()), *example_inputs, targets)
    with _module_stack(module) as stack, onednn_disabled():
        try:
            gm = make_fx(step, tracing_mode="fake")(*args)
        except Exception as exc:
            where = (f"submodule {stack[-1] or '<root>'!r} ({type(module.get_submodule(stack[-1])).__name__})"
                     if stack else "the loss or the step outside the module")
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TrinityError(f"cannot trace {where} (data-dependent control flow?): {first}",
                               source=name, field="model") from exc

    kinds = ([("parameter", p, "p_" + _safe(p)) for p in params] + [("buffer", b, "b_" + _safe(b)) for b in buffers]
             + [("input", str(i), f"input_{i}") for i in range(n_in)] + [("target", "", "target")])
    placeholders: dict[str, tuple[str, str]] = {}
    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, (kind, path, readable) in zip(nodes, kinds):
        node._rename(readable)
        placeholders[node.name] = (kind, path)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    updates = {path: outputs[i].name for i, path in enumerate(params) if outputs[i].op != "placeholder"}
    return TracedStep(gm, args, placeholders, updates)


def op_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The nodes that become ops: everything but folded getitems and the output."""
    return [n for n in gm.graph.nodes if n.op != "output" and not _is_getitem(n)]


def op_type(node: fx.Node, placeholders: dict[str, tuple[str, str]]) -> str:
    if node.op == "placeholder":
        return placeholders[node.name][0]
    return "constant" if node.op == "get_attr" else str(node.target)


def _is_getitem(node: fx.Node) -> bool:
    return (node.op == "call_function" and node.target is operator.getitem
            and isinstance(node.args[0].meta.get("val"), (tuple, list)))


def _nbytes(value: Any) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def _output_bytes(node: fx.Node) -> tuple[int, ...]:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return tuple(_nbytes(v) for v in val)
    return (_nbytes(val),)


class _Counter(fx.Interpreter):
    """Runs the graph once on real tensors: FLOPs per node and which nodes write a buffer.

    One FlopCounterMode for the whole run (entering one per node costs about
    a millisecond); each node's FLOPs are the increase of the running total.
    batch_norm writes its running stats without saying so in its schema, so
    buffer writes are found by comparing values around each node.
    """

    def __init__(self, gm: fx.GraphModule, buffers: set[str]):
        super().__init__(gm)
        self.buffers = buffers
        self.flops: dict[str, int] = {}
        self.writes: dict[str, list[str]] = {}
        self.counter = FlopCounterMode(display=False)

    def run_node(self, n: fx.Node) -> Any:
        if n.op != "call_function":
            return super().run_node(n)
        state = [(a.name, self.env[a], self.env[a].clone()) for a in n.all_input_nodes if a.name in self.buffers]
        before = self.counter.get_total_flops()
        out = super().run_node(n)
        self.flops[n.name] = self.counter.get_total_flops() - before
        self.writes[n.name] = [b for b, now, old in state if not torch.equal(now, old)]
        return out


def _count(traced: TracedStep) -> _Counter:
    buffers = {name for name, (kind, _) in traced.placeholders.items() if kind == "buffer"}
    counter = _Counter(traced.gm, buffers)
    # Run on copies so the caller's buffers are not updated.
    args = [a.detach().clone() for a in traced.args]
    with torch.no_grad(), onednn_disabled(), counter.counter:
        counter.run(*args)
    return counter


def _edges(nodes: list[fx.Node]) -> list[Edge]:
    edges: list[Edge] = []
    for node in nodes:
        seen: set[tuple[str, int]] = set()
        for arg in node.all_input_nodes:
            src, k = (arg.args[0], arg.args[1]) if _is_getitem(arg) else (arg, 0)
            if (src.name, k) not in seen:
                seen.add((src.name, k))
                edges.append(Edge(src.name, node.name, k))
    return edges


def _colocation(pairs: list[tuple[str, str]], order: dict[str, int]) -> dict[str, str]:
    """Join pairs into groups (one op may write several buffers); a group is named after its first op."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    members: dict[str, list[str]] = {}
    for x in parent:
        members.setdefault(find(x), []).append(x)
    return {x: min(group, key=order.__getitem__) for group in members.values() for x in group}


def graph_from_trace(traced: TracedStep, *, name: str, meta: dict | None = None) -> OpGraph:
    """Build the OpGraph of a traced step (runs it once to count FLOPs)."""
    counter = _count(traced)
    nodes = op_nodes(traced.gm)
    param_node = {path: node for node, (kind, path) in traced.placeholders.items() if kind == "parameter"}
    pairs = [(param_node[path], update) for path, update in traced.updates.items()]
    pairs += [(b, writer) for writer, written in counter.writes.items() for b in written]
    group = _colocation(pairs, {node.name: i for i, node in enumerate(nodes)})
    ops = []
    for node in nodes:
        out, kind = _output_bytes(node), op_type(node, traced.placeholders)
        ops.append(Op(name=node.name, type=kind, flops=float(counter.flops.get(node.name, 0)), output_bytes=out,
                      persistent_bytes=sum(out) if kind in STATE_TYPES else 0, colocation_group=group.get(node.name)))
    edges = _edges(nodes)
    params = [a for a, (kind, _) in zip(traced.args, traced.placeholders.values()) if kind == "parameter"]
    info = {
        "framework": "torch",
        "torch_version": torch.__version__,
        "parameters": sum(p.numel() for p in params),
        "parameter_bytes": sum(_nbytes(p) for p in params),
        "ops": len(ops),
        "edges": len(edges),
        "flops": sum(op.flops for op in ops),
        "op_types": dict(Counter(op.type for op in ops).most_common()),
        **(meta or {}),
    }
    return OpGraph(ops, edges, name=name, meta=info)


def export_torch(module: nn.Module, example_inputs: tuple[torch.Tensor, ...], targets: torch.Tensor,
                 loss_fn: Callable[[Any, torch.Tensor], torch.Tensor], *, name: str, lr: float = 0.01,
                 meta: dict | None = None) -> OpGraph:
    """The OpGraph of one SGD training step of ``module`` on one batch."""
    traced = trace_training_step(module, tuple(example_inputs), targets, loss_fn, name=name, lr=lr)
    return graph_from_trace(traced, name=name, meta={"lr": lr, **(meta or {})})


def build_torch_model(name: str, batch_size: int | None = None, **options) -> tuple[TorchModel, int, dict]:
    """Build a registered PyTorch model; returns it with the batch size and options used."""
    spec = model_spec(name)
    if spec.framework != "torch":
        raise TrinityError(f"{name!r} is a {spec.framework} model, not a torch one", field="model")
    module_name, func_name = spec.builder.split(":")
    builder = getattr(importlib.import_module(module_name), func_name)
    accepted = [p for p in inspect.signature(builder).parameters if p != "batch_size"]
    for key in options:
        if key not in accepted:
            raise TrinityError(f"unknown option for {name!r}; known: {', '.join(accepted)}", field=f"options.{key}")
    batch = spec.default_batch if batch_size is None else int(batch_size)
    if batch < 1:
        raise TrinityError(f"must be >= 1, got {batch}", field="batch_size")
    options = {**spec.options, **options}
    return builder(batch, **options), batch, options


def export_torch_model(name: str, batch_size: int | None = None, *, lr: float = 0.01, device: str = "cpu",
                       **options) -> OpGraph:
    """Export a registered PyTorch model (`trinity.models`) at ``batch_size`` (default: the spec's).

    ``device`` is where it is traced and its FLOPs counted; a few ATen ops differ by device (batch norm
    is ``cudnn_batch_norm`` on a GPU), so a graph is profiled on the device it was exported on.
    """
    model, batch, options = build_torch_model(name, batch_size, **options)
    model = model.to(device)
    where = {} if str(device) == "cpu" else {"device": str(device)}  # CPU graphs keep the meta they always had
    return export_torch(model.module, model.example_inputs, model.targets, model.loss_fn, name=name, lr=lr,
                        meta={"model": name, "batch_size": batch, "options": options, **where})
