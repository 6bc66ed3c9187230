"""The worker program of real pipeline and data-parallel runs: ``python -m trinity.pipeline_parallel.run``.

Started by `trinity.runtime.ranks.run_ranks` locally (ranks pinned to cores, nodes joined by
kernel-shaped links) or ``torchrun --nnodes ...`` across machines, one process per rank. Every rank
builds the model from the same seed, so the weights agree without a broadcast, and trains on the
model's fixed example batch with SGD (momentum 0.9).

* ``--mode pipeline --plan plan.json``: rank s runs stage s of the plan (its layers as an
  ``nn.Sequential``) as a ``torch.distributed.pipelining.PipelineStage`` under ``ScheduleGPipe`` or
  ``Schedule1F1B`` with the plan's micro-batches. ``--replicas K`` (a PipeDream plan whose every stage
  has K replicas): rank s K + k runs stage s in lane k; each lane is a pipeline of its own over batch / K
  samples and m / K micro-batches (PipeDream hands micro-batches to replicas round-robin), and after
  the schedule each stage's replicas all-reduce and average their gradients before the update.
* ``--mode dp``: BSP data parallelism, as the cost model has it: rank r computes forward and backward of
  its batch / world samples, then the gradients (one flat buffer) are all-reduced and averaged, then
  every rank steps.
* ``--mode ddp``: PyTorch's DistributedDataParallel (its buckets overlap the all-reduce with backward).

Heterogeneity is a measured slowdown: rank r's computation (each forward and backward chunk, the
loss, the optimizer step) runs inside ``throttle(slowdown[r])``, which busy-computes (factor - 1) x the
block's CPU time after it, holding the rank's core, so a factor-2 rank is a device of half speed.

Each rank writes (``write_rank_result``): its step times (barrier to barrier, microseconds) after
``--warmup`` untimed steps and their median, its compute intervals per step (to find the time during
which no rank computes), the loss (last stage / every data-parallel rank), peak memory as the
process's maximum resident set size (``resource.getrusage``, bytes) and the resident size before the
model was built. ``--check`` runs one step without updating and compares the loss and this rank's
gradients with the unsplit model's on the whole batch. ``--fail-rank r`` makes rank r exit at once
(status 3) after joining: for tests of a worker that dies.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from contextlib import contextmanager


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class _Clock:
    """Throttles and records the compute blocks of this rank (monotonic clock, shared by local processes)."""

    def __init__(self, factor: float):
        self.factor = factor
        self.intervals: list[tuple[float, float]] = []

    @contextmanager
    def compute(self):
        from trinity.runtime.torchrun import throttle
        start = time.monotonic()
        with throttle(self.factor):
            yield
        self.intervals.append((start, time.monotonic()))


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m trinity.pipeline_parallel.run")
    ap.add_argument("--mode", choices=("pipeline", "dp", "ddp"), default="pipeline")
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--options", default="{}", help="model options as JSON")
    ap.add_argument("--plan", help="pipeline plan JSON (mode pipeline)")
    ap.add_argument("--replicas", type=int, default=1,
                    help="every stage on this many ranks: as many pipelines (lanes), gradients all-reduced per stage")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--slowdown", default="", help="throttle factor per rank, comma-separated (default 1)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--check", action="store_true", help="compare loss and gradients with the unsplit model")
    ap.add_argument("--fail-rank", type=int, default=-1)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    rss_start = _rss_bytes()
    import torch
    import torch.distributed as dist

    from trinity.runtime.torchrun import init_worker, write_rank_result

    rank, world = init_worker()
    if rank == args.fail_rank:
        print(f"rank {rank}: exiting on purpose (--fail-rank)", file=sys.stderr, flush=True)
        os._exit(3)
    factors = [float(f) for f in args.slowdown.split(",")] if args.slowdown else [1.0]
    clock = _Clock(factors[min(rank, len(factors) - 1)])
    rss_before_model = _rss_bytes()
    if args.mode == "pipeline":
        result = _pipeline(args, rank, world, clock)
    else:
        result = _data_parallel(args, rank, world, clock)
    result.update(rank=rank, world=world, mode=args.mode, slowdown=clock.factor, threads=torch.get_num_threads(),
                  max_rss_bytes=_max_rss_bytes(), rss_start_bytes=rss_start, rss_before_model_bytes=rss_before_model)
    write_rank_result(result)
    dist.barrier()
    dist.destroy_process_group()


def _build(args):
    from trinity.export.torch_graph import build_torch_model
    model, batch, _ = build_torch_model(args.model, args.batch, **json.loads(args.options))
    return model


def _timed_steps(args, clock: _Clock, step) -> dict:
    """Run ``step()`` warmup + steps times between barriers; times and compute intervals of the timed ones."""
    import torch.distributed as dist
    times, windows, intervals, losses = [], [], [], []
    for i in range(args.warmup + args.steps):
        clock.intervals = []
        dist.barrier()
        t0 = time.monotonic()
        loss = step()
        dist.barrier()
        t1 = time.monotonic()
        if i >= args.warmup:
            times.append((t1 - t0) * 1e6)
            windows.append((t0, t1))
            intervals.append(clock.intervals)
        if loss is not None:
            losses.append(loss)
    return {"step_us": times, "median_step_us": statistics.median(times) if times else 0.0,
            "windows": windows, "compute_intervals": intervals,
            "busy_us": statistics.median([sum(b - a for a, b in iv) * 1e6 for iv in intervals]) if intervals else 0.0,
            "loss": losses[-1] if losses else None, "losses": losses}


def _stage_module(model, plan, s: int):
    from torch import nn

    from trinity.models.torch_models import layer_sequence
    layers = layer_sequence(model.module)
    return nn.Sequential(*[layer for _, layer in layers[plan.bounds[s]:plan.bounds[s + 1]]])


def _pipeline(args, rank: int, world: int, clock: _Clock) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from trinity.pipeline_parallel.plan import PipelinePlan

    plan = PipelinePlan.load(args.plan)
    K, S = args.replicas, plan.n_stages
    if S * K != world:
        raise SystemExit(f"the plan has {S} stages x {K} replicas but {world} ranks were started")
    if plan.micro_batches % K or args.batch % K:
        raise SystemExit(f"{K} replicas must divide the {plan.micro_batches} micro-batches and the batch {args.batch}")
    s_rank, lane = divmod(rank, K)  # rank = stage x K + lane
    model = _build(args)
    plan.check(batch=args.batch)
    module = _stage_module(model, plan, s_rank)
    share = args.batch // K  # each lane a pipeline of its own over batch / K samples, m / K micro-batches
    inputs = model.example_inputs[0][lane * share:(lane + 1) * share]
    targets, loss_fn = model.targets[lane * share:(lane + 1) * share], model.loss_fn
    lanes = [dist.new_group([s * K + k for s in range(S)]) for k in range(K)] if K > 1 else [None]
    replicas = [dist.new_group([s * K + k for k in range(K)]) for s in range(S)] if K > 1 else [None] * S
    reference = model.module if args.check else None
    del model  # the other stages' layers go with it (unless --check keeps the whole model)

    class Stage(PipelineStage):
        """A stage whose forward and backward chunks run throttled and are timed."""

        def forward_one_chunk(self, *a, **k):
            with clock.compute():
                return super().forward_one_chunk(*a, **k)

        def backward_one_chunk(self, *a, **k):
            with clock.compute():
                return super().backward_one_chunk(*a, **k)

    def timed_loss(output, target):
        with clock.compute():
            return loss_fn(output, target)

    n_micro = plan.micro_batches // K
    first, last = s_rank == 0, s_rank == S - 1
    if S > 1:
        stage = Stage(module, s_rank, S, torch.device("cpu"), group=lanes[lane])
        schedule_cls = ScheduleGPipe if plan.schedule == "gpipe" else Schedule1F1B
        schedule = schedule_cls(stage, n_microbatches=n_micro, loss_fn=timed_loss)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.0 if args.check else args.lr, momentum=0.9)

    def run_lane(losses: list) -> None:
        if S == 1:  # one stage: the lane's micro-batches in turn, gradients accumulated (their mean)
            for x, y in zip(inputs.chunk(n_micro), targets.chunk(n_micro)):
                with clock.compute():
                    loss = loss_fn(module(x), y)
                    (loss / n_micro).backward()
                losses.append(loss.detach())
            return
        kwargs = {"target": targets, "losses": losses} if last else {}
        if first:
            schedule.step(inputs, **kwargs)
        else:
            schedule.step(**kwargs)

    def step():
        optimizer.zero_grad()
        losses: list = []
        run_lane(losses)
        if K > 1:  # the stage's replicas average their gradients (PipeDream's weight synchronisation)
            flat = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
            dist.all_reduce(flat, group=replicas[s_rank])
            flat /= K
            offset = 0
            for p in module.parameters():
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        with clock.compute():
            optimizer.step()
        return float(torch.stack(losses).mean()) if last else None

    if args.check:
        return _check(step, module, reference, inputs, targets, loss_fn, last)
    out = _timed_steps(args, clock, step)
    out["stage"], out["lane"] = s_rank, lane
    out["layers"] = [plan.bounds[s_rank], plan.bounds[s_rank + 1]]
    out["param_bytes"] = sum(p.numel() * p.element_size() for p in module.parameters())
    return out


def _check(step, module, reference, inputs, targets, loss_fn, last: bool) -> dict:
    """One pipeline step against the unsplit model on the whole batch: loss and this stage's gradients."""
    import torch
    loss = step()
    grads = [p.grad.detach().clone() for p in module.parameters()]
    ids = {id(p) for p in module.parameters()}
    for p in reference.parameters():
        p.grad = None
    ref_loss = loss_fn(reference(inputs), targets)
    ref_loss.backward()  # the stage's parameters are the reference's own: compare by identity
    ref = [p.grad for p in reference.parameters() if id(p) in ids]
    abs_err = max(float((g - r).abs().max()) for g, r in zip(grads, ref))
    scale = max(float(r.abs().max()) for r in ref)
    return {"check": True, "loss": loss, "reference_loss": float(ref_loss) if last else None,
            "n_grads": len(grads), "max_abs_grad_error": abs_err, "max_abs_grad": scale}


def _data_parallel(args, rank: int, world: int, clock: _Clock) -> dict:
    import torch
    import torch.distributed as dist

    model = _build(args)
    if args.batch % world:
        raise SystemExit(f"{world} ranks do not divide the batch of {args.batch}")
    share = args.batch // world
    inputs = model.example_inputs[0][rank * share:(rank + 1) * share]
    targets = model.targets[rank * share:(rank + 1) * share]
    module, loss_fn = model.module, model.loss_fn
    params = [p for p in module.parameters() if p.requires_grad]
    comm: list[float] = []
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        module = DistributedDataParallel(module)
    optimizer = torch.optim.SGD(module.parameters(), lr=args.lr, momentum=0.9)

    def step():
        optimizer.zero_grad()
        with clock.compute():
            loss = loss_fn(module(inputs), targets)
        with clock.compute():  # under DDP this includes waiting for its overlapped all-reduce
            loss.backward()
        if args.mode == "dp":
            t = time.monotonic()
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
            comm.append((time.monotonic() - t) * 1e6)
        with clock.compute():
            optimizer.step()
        return float(loss)

    out = _timed_steps(args, clock, step)
    if comm:
        out["allreduce_us"] = statistics.median(comm[args.warmup:] or comm)
    out["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
    return out


if __name__ == "__main__":
    main()
