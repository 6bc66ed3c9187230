"""A PyTorch model's whole training step timed on its own, at several sample counts: data parallelism's
computation term (`trinity.data_parallel.DataParallelWork`).

The layer profile (`trinity.profile.layers`) times each layer alone at the whole batch and is scaled
linearly to a share of it. A rank's step is more than that sum: ``zero_grad``, the loss, autograd's
bookkeeping between layers, and per-call overheads that do not shrink with the share (measured here: a
whole step of 2 samples of transformer_lm12 is 1.32x, of 4 samples of resnet_small 1.60x, the layer
profile's sum scaled to them). So this times what a data-parallel rank computes per step: ``zero_grad``,
forward, loss and backward of ``s`` samples, for s in 1, 2, 4, ... and the batch itself, one process,
``threads`` torch threads, median of ``steps`` after ``warmup`` untimed. Between two counts the time is
interpolated linearly; above the last, it grows in proportion to the samples.

Beside it, the CPU time of one parameter-server exchange besides its communication, as the server and
as a worker (`trinity.data_parallel.ps.exchange_cpu_us`, at ``exchange_bits``): H-PS runs that exchange on
a background thread of each rank, so it lands on the core the rank computes on.
"""

from __future__ import annotations

import bisect
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trinity.errors import FormatError, TrinityError
from trinity.fileio import check_format, read_json, write_json

FORMAT = "trinity-whole-step-profile"
VERSION = 1


@dataclass(frozen=True)
class WholeStepProfile:
    """Median wall microseconds of one forward and backward of ``samples[i]`` samples: ``step_us[i]``."""

    model: str
    batch: int
    samples: tuple[int, ...]
    step_us: tuple[float, ...]
    options: dict = field(default_factory=dict)
    threads: int = 1
    steps: int = 0
    server_exchange_us: float = 0.0  # one exchange's own CPU on the server (its optimizer step, quantizing)
    worker_exchange_us: float = 0.0  # and on a worker (dequantizing)
    exchange_bits: int = 8

    def __post_init__(self):
        ok = (len(self.samples) == len(self.step_us) > 0 and all(s >= 1 for s in self.samples)
              and all(a < b for a, b in zip(self.samples, self.samples[1:])) and all(t > 0 for t in self.step_us))
        if not ok:
            raise TrinityError(f"need increasing sample counts >= 1 with one time > 0 each, got {self.samples} and "
                               f"{self.step_us}", field="samples")

    def us(self, samples: float) -> float:
        """One step of ``samples`` samples: linear between measured counts, proportional beyond the last
        (and below the first)."""
        if samples <= 0:
            return 0.0
        xs, ys = self.samples, self.step_us
        if samples <= xs[0]:
            return ys[0] * samples / xs[0]
        if samples >= xs[-1]:
            return ys[-1] * samples / xs[-1]
        i = bisect.bisect_right(xs, samples)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (samples - x0) / (x1 - x0)

    def to_dict(self) -> dict:
        return {"format": f"{FORMAT}/{VERSION}", "model": self.model, "batch": self.batch, "options": self.options,
                "threads": self.threads, "steps": self.steps, "samples": list(self.samples),
                "step_us": list(self.step_us), "server_exchange_us": self.server_exchange_us,
                "worker_exchange_us": self.worker_exchange_us, "exchange_bits": self.exchange_bits}

    @classmethod
    def from_dict(cls, doc: Any, source: str = "<whole-step profile>") -> "WholeStepProfile":
        check_format(doc, FORMAT, VERSION, source)
        if not isinstance(doc.get("model"), str):
            raise FormatError("must be a string", source=source, field="model")
        for key in ("samples", "step_us"):
            values = doc.get(key)
            if not isinstance(values, list) or not values or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
                raise FormatError("must be a non-empty list of numbers > 0", source=source, field=key)
        if len(doc["samples"]) != len(doc["step_us"]):
            raise FormatError(f"must have one time per sample count ({len(doc['samples'])})", source=source,
                              field="step_us")
        samples = doc["samples"]
        if not all(float(s).is_integer() for s in samples) or sorted(set(samples)) != samples:
            raise FormatError("must be increasing whole numbers", source=source, field="samples")
        for key in ("server_exchange_us", "worker_exchange_us"):
            v = doc.get(key, 0.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise FormatError(f"must be a number >= 0, got {v!r}"[:120], source=source, field=key)
        batch = doc.get("batch")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise FormatError(f"must be an integer >= 1, got {batch!r}", source=source, field="batch")
        return cls(model=doc["model"], batch=batch, samples=tuple(int(s) for s in samples),
                   step_us=tuple(float(t) for t in doc["step_us"]), options=dict(doc.get("options") or {}),
                   threads=int(doc.get("threads", 1)), steps=int(doc.get("steps", 0)),
                   server_exchange_us=float(doc.get("server_exchange_us", 0.0)),
                   worker_exchange_us=float(doc.get("worker_exchange_us", 0.0)),
                   exchange_bits=int(doc.get("exchange_bits", 8)))

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "WholeStepProfile":
        return cls.from_dict(read_json(path), str(path))


def sample_counts(batch: int) -> list[int]:
    """1, 2, 4, ... below ``batch``, and ``batch``."""
    counts, s = [], 1
    while s < batch:
        counts.append(s)
        s *= 2
    return counts + [batch]


def time_whole_step(built, samples: int, steps: int, warmup: int) -> float:
    """Median wall microseconds of ``zero_grad``, forward, loss and backward of the first ``samples`` samples
    of a built model (`trinity.export.torch_graph.build_torch_model`), in this process as it is set up."""
    module, x, y = built.module, built.example_inputs[0][:samples], built.targets[:samples]
    wall = []
    for i in range(warmup + steps):
        t = time.perf_counter()
        module.zero_grad(set_to_none=False)
        built.loss_fn(module(x), y).backward()
        if i >= warmup:
            wall.append(time.perf_counter() - t)
    return statistics.median(wall) * 1e6


def profile_whole_step(model_name: str, batch: int | None = None, *, steps: int = 30, warmup: int = 3,
                       threads: int = 1, exchange_bits: int = 8, **options) -> WholeStepProfile:
    """Time ``model_name``'s whole step at `sample_counts` of its batch, and one exchange's CPU; see the
    module docstring."""
    import torch

    from trinity.data_parallel.ps import exchange_cpu_us
    from trinity.data_parallel.quantize import check_bits
    from trinity.export.torch_graph import build_torch_model

    check_bits(exchange_bits, "exchange_bits")

    for name, value, least in (("steps", steps, 1), ("warmup", warmup, 0), ("threads", threads, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise TrinityError(f"must be an integer >= {least}, got {value!r}", field=name)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        built, batch, options = build_torch_model(model_name, batch, **options)
        counts = sample_counts(batch)
        times = tuple(time_whole_step(built, s, steps, warmup) for s in counts)
        server_us, worker_us = exchange_cpu_us(built.module, exchange_bits, steps=steps, warmup=warmup)
    finally:
        torch.set_num_threads(previous_threads)
    return WholeStepProfile(model=model_name, batch=batch, samples=tuple(counts), step_us=times,
                            options=dict(options), threads=threads, steps=steps, server_exchange_us=server_us,
                            worker_exchange_us=worker_us, exchange_bits=exchange_bits)
