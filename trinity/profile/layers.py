"""Per-layer profile of a PyTorch model, for pipeline partitioning (`trinity.pipeline_parallel`).

The model is taken as its layer sequence (`trinity.models.torch_models.layer_sequence`) and each
layer is run for real on its true input (the previous layers' output at this batch size):

* ``forward_us``: its forward pass (the last layer's includes the loss);
* ``backward_us``: its backward pass, given a gradient for its output (the last layer: from the loss),
  computing the gradients of its parameters and of its input (not for the first layer's integer tokens);
* ``update_us``: one SGD-with-momentum step of its parameters (the optimizer the real runs use);
* ``param_bytes``: its parameters; ``output_bytes``: its output, what crosses a stage boundary after it
  (activations forward, the same size of gradients backward); ``saved_bytes``: the tensors autograd keeps
  for its backward (counted once per storage, through ``saved_tensors_hooks``), excluding its parameters.

Times are medians over ``steps`` timed repetitions after ``warmup`` untimed ones, with ``threads`` torch
threads. Sizes are for the whole ``batch``; the cost model scales times and activations linearly
to a micro-batch.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trinity.errors import FormatError, TrinityError
from trinity.fileio import check_format, read_json, write_json

FORMAT = "trinity-layer-profile"
VERSION = 1


@dataclass(frozen=True)
class Layer:
    """One layer's measured cost at the profile's batch size. Times in microseconds, sizes in bytes."""

    name: str
    forward_us: float
    backward_us: float
    param_bytes: int
    output_bytes: int
    saved_bytes: int
    update_us: float = 0.0

    @property
    def compute_us(self) -> float:
        return self.forward_us + self.backward_us


_LAYER_FIELDS = {"name": str, "forward_us": float, "backward_us": float, "param_bytes": int,
                 "output_bytes": int, "saved_bytes": int, "update_us": float}


@dataclass(frozen=True)
class LayerProfile:
    """A model as a sequence of profiled layers (``input_bytes``: the first layer's input)."""

    model: str
    batch: int
    layers: tuple[Layer, ...]
    input_bytes: int = 0
    options: dict = field(default_factory=dict)
    threads: int = 1
    steps: int = 0

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def param_bytes(self) -> int:
        return sum(l.param_bytes for l in self.layers)

    @property
    def compute_us(self) -> float:
        return sum(l.compute_us for l in self.layers)

    def to_dict(self) -> dict:
        return {"format": f"{FORMAT}/{VERSION}", "model": self.model, "batch": self.batch,
                "options": self.options, "threads": self.threads, "steps": self.steps,
                "input_bytes": self.input_bytes, "layers": [asdict(l) for l in self.layers]}

    @classmethod
    def from_dict(cls, doc: Any, source: str = "<layer profile>") -> "LayerProfile":
        check_format(doc, FORMAT, VERSION, source)
        if not isinstance(doc.get("model"), str):
            raise FormatError("must be a string", source=source, field="model")
        batch = _number(doc.get("batch"), int, source, "batch")
        if batch < 1:
            raise FormatError(f"must be >= 1, got {batch}", source=source, field="batch")
        raw = doc.get("layers")
        if not isinstance(raw, list) or not raw:
            raise FormatError("must be a non-empty list", source=source, field="layers")
        layers = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict):
                raise FormatError("must be an object", source=source, field=f"layers[{i}]")
            values = {}
            for key, kind in _LAYER_FIELDS.items():
                where = f"layers[{i}].{key}"
                if key not in item:
                    if key == "update_us":
                        continue
                    raise FormatError("missing", source=source, field=where)
                if kind is str:
                    if not isinstance(item[key], str):
                        raise FormatError("must be a string", source=source, field=where)
                    values[key] = item[key]
                else:
                    values[key] = _number(item[key], kind, source, where)
            layers.append(Layer(**values))
        options = doc.get("options", {})
        if not isinstance(options, dict):
            raise FormatError("must be an object", source=source, field="options")
        return cls(model=doc["model"], batch=batch, layers=tuple(layers),
                   input_bytes=_number(doc.get("input_bytes", 0), int, source, "input_bytes"),
                   options=options, threads=_number(doc.get("threads", 1), int, source, "threads"),
                   steps=_number(doc.get("steps", 0), int, source, "steps"))

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "LayerProfile":
        return cls.from_dict(read_json(path), str(path))


def _number(value: Any, kind: type, source: str, where: str):
    import math
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and kind is int:
        ok = float(value).is_integer()
    if not ok or value < 0:
        raise FormatError(f"must be a finite number >= 0, got {value!r}"[:120], source=source, field=where)
    return kind(value)


def _tensor_bytes(t) -> int:
    return t.numel() * t.element_size()


def _saved_bytes(fn, param_storages: set[int]) -> tuple[Any, int]:
    """Run ``fn()`` and count the bytes autograd saves for backward (each storage once, parameters not)."""
    import torch
    seen: dict[int, int] = {}

    def pack(t):
        try:
            key = t.untyped_storage().data_ptr()
            size = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):  # tensors without storage (rare): count their own size
            key, size = id(t), _tensor_bytes(t)
        if key not in param_storages:  # weights (or views of them) are counted as parameters
            seen.setdefault(key, size)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def profile_layers(model_name: str, batch: int | None = None, *, steps: int = 10, warmup: int = 2,
                   threads: int = 1, **options) -> LayerProfile:
    """Profile ``model_name`` (a registered torch model) layer by layer; see the module docstring."""
    import torch

    from trinity.export.torch_graph import build_torch_model
    from trinity.models.torch_models import layer_sequence

    if steps < 1:
        raise TrinityError(f"must be >= 1, got {steps}", field="steps")
    if warmup < 0:
        raise TrinityError(f"must be >= 0, got {warmup}", field="warmup")
    if threads < 1:
        raise TrinityError(f"must be >= 1, got {threads}", field="threads")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model, batch, options = build_torch_model(model_name, batch, **options)
        seq = layer_sequence(model.module)
        x = model.example_inputs[0]
        input_bytes = _tensor_bytes(x)
        layers = []
        for i, (name, layer) in enumerate(seq):
            last = i == len(seq) - 1
            x = x.detach()
            layers.append(_profile_one(name, layer, x, model, last, steps, warmup))
            with torch.no_grad():
                x = layer(x)
    finally:
        torch.set_num_threads(previous_threads)
    return LayerProfile(model=model_name, batch=batch, layers=tuple(layers), input_bytes=input_bytes,
                        options=dict(options), threads=threads, steps=steps)


def _profile_one(name: str, layer, x, model, last: bool, steps: int, warmup: int) -> Layer:
    import torch

    params = [p for p in layer.parameters() if p.requires_grad]
    param_storages = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    optimizer = torch.optim.SGD(params, lr=0.0, momentum=0.9) if params else None  # lr 0: the model stays put
    needs_input_grad = x.is_floating_point()
    fwd, bwd, upd = [], [], []
    saved = out_bytes = 0
    for rep in range(1 + warmup + steps):  # rep 0 counts saved bytes, untimed
        inp = x.detach().requires_grad_(needs_input_grad)
        for p in params:
            p.grad = None
        t0 = time.perf_counter()

        def forward():
            y = layer(inp)
            return (model.loss_fn(y, model.targets) if last else y), y

        if rep == 0:  # the hooks cost time of their own
            (out, y), saved = _saved_bytes(forward, param_storages)
        else:
            out, y = forward()
        t1 = time.perf_counter()
        grad = None if last else torch.ones_like(out)
        out.backward(grad)
        t2 = time.perf_counter()
        if optimizer is not None:
            optimizer.step()
        t3 = time.perf_counter()
        out_bytes = _tensor_bytes(y)
        if rep > warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            upd.append(t3 - t2)
    for p in params:
        p.grad = None
    return Layer(name=name, forward_us=statistics.median(fwd) * 1e6, backward_us=statistics.median(bwd) * 1e6,
                 param_bytes=sum(_tensor_bytes(p) for p in params), output_bytes=out_bytes, saved_bytes=saved,
                 update_us=statistics.median(upd) * 1e6 if optimizer is not None else 0.0)
