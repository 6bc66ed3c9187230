"""The data-parallel worker program (``python -m trinity.data_parallel.train``) and its launcher.

The worker knows no method by name: the method is a synchronisation strategy
(`trinity.data_parallel.strategies`) it hands each step's gradients to.

`train(method, seed=..., config=..., out_dir=..., timeout_s=...)` runs one training on local processes
through `trinity.runtime.ranks.run_ranks` (ranks pinned to cores, nodes in namespaces whose link the
kernel shapes) and returns the merged result: method, seed, data set,
wall time to the target validation loss, final validation loss and accuracy, bytes sent (per rank and
in total, counted by `Comm`), and the validation loss against wall time (one point per epoch).

Every method trains the same model (the config's: an MLP on digits, or a registered PyTorch model on its
example batch, for step times) on the same batches for the same number of epochs; a step is one global
batch of ``global_batch`` samples split over the workers (equally, or by speed for H-PS). The
wall clock starts after a barrier once every rank is set up and leaves out rank 0's evaluation and
checkpoint writing. Rank 0 writes ``checkpoint.pt`` (model, optimizer or server state, schedule,
curve) atomically after every epoch; ``resume=True`` continues from it.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import time
from pathlib import Path

import torch

from trinity.data_parallel.config import DataParallelError, TrainConfig
from trinity.data_parallel.strategies import METHODS, strategy_class
from trinity.fileio import atomic_write_bytes, read_json, write_json

MODULE = "trinity.data_parallel.train"
CHECKPOINT = "checkpoint.pt"


# ====================================================================== inside a worker
@torch.no_grad()
def _evaluate(task, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float | None]:
    out = task.model(x)
    return float(task.loss(out, y)), float((out.argmax(1) == y).float().mean()) if task.classifies else None


def _save(path: Path, state: dict) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def worker(method: str, seed: int, cfg: TrainConfig, out_dir: Path, *, resume: bool = False,
           max_steps: int | None = None, die_rank: int | None = None, die_step: int | None = None,
           dump_params: bool = False) -> dict:
    """One rank's training; rank 0's result carries the curve and the model's final scores."""
    import torch.distributed as dist
    from torch.nn.utils import parameters_to_vector

    from trinity.data_parallel.comm import Comm
    from trinity.data_parallel.data import task as make_task
    from trinity.data_parallel.strategies import strategy_class
    from trinity.runtime.torchrun import init_worker, throttle

    rank, world = init_worker()
    if world != cfg.nproc:
        raise DataParallelError(f"launched on {world} ranks, config says {cfg.nproc}", field="nproc")
    comm = Comm(rank, world, cfg.procs_per_node)
    task = make_task(cfg, seed)
    data, model = task.data, task.model
    strategy = strategy_class(method)(model, comm, cfg)
    G = cfg.global_batch
    steps = len(data.x_train) // G if max_steps is None else max_steps
    epoch_losses: list[float] = []
    curve: list[dict] = []
    history: list[dict] = []  # per epoch, what the strategy planned (DASO's B, local skip, S; H-PS's shares)
    start_epoch, elapsed_before = 0, 0.0
    ckpt = out_dir / CHECKPOINT
    if resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        strategy.load_state_dict(state["strategy"])
        epoch_losses, curve, history = state["epoch_losses"], state["curve"], state["history"]
        start_epoch, elapsed_before = state["epoch"] + 1, state["elapsed_s"]
    slowdown = cfg.slowdown if rank in cfg.slow_ranks else 1.0
    compute_s, overhead_s, global_step = 0.0, 0.0, 0
    if start_epoch:  # the counters of the epochs before, so a resumed run reports the whole run's
        if "sent_bytes_per_rank" not in state:
            raise DataParallelError(f"{ckpt} holds no byte counters (an older checkpoint): delete it to train "
                                    f"afresh", field="checkpoint")
        comm.sent_bytes, compute_s = state["sent_bytes_per_rank"][rank], state["compute_s_per_rank"][rank]
    dist.barrier()
    t0 = time.perf_counter() - elapsed_before

    def clock() -> float:
        return time.perf_counter() - t0 - overhead_s

    for epoch in range(start_epoch, cfg.epochs):
        perm = torch.randperm(len(data.x_train), generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        planned = strategy.start_epoch(epoch, steps, epoch_losses)
        if planned is not None:
            history.append({"epoch": epoch, **planned})
        loss_sum = 0.0
        for step in range(steps):
            if rank == die_rank and global_step == die_step:
                os.kill(os.getpid(), signal.SIGKILL)  # fault injection for the tests
            idx = perm[(step * G) % len(perm):][:G]
            shares = strategy.shares
            first = sum(shares[:rank])
            mine = idx[first:first + shares[rank]]
            tc, cpu = time.perf_counter(), time.thread_time()
            with throttle(slowdown):
                model.zero_grad(set_to_none=False)
                loss = task.loss(strategy.module(data.x_train[mine]), data.y_train[mine]) * len(mine)  # share's sum
                (loss / G).backward()  # the sum over workers of these is the global batch's mean gradient
            compute_s += time.perf_counter() - tc
            loss_sum += float(loss)
            # the strategy sees CPU time, the clock `throttle` emulates a slower device in: a sub-millisecond
            # step's wall time is mostly the scheduler's (one preemption is a few ms), not the device's speed
            strategy.step(step, len(mine), time.thread_time() - cpu)
            global_step += 1
        strategy.finish_epoch()
        total_loss, total_n = comm.world_sum([loss_sum, float(steps * G) / world])
        train_loss = total_loss / total_n
        epoch_losses.append(train_loss)
        strategy.end_epoch(train_loss)
        now = clock()
        # every rank's counters into the checkpoint (bookkeeping, not the method's traffic: not counted)
        counters = comm.world_sum([comm.sent_bytes if r == rank else 0.0 for r in range(world)]
                                  + [compute_s if r == rank else 0.0 for r in range(world)], count=False)
        if rank == 0:
            te = time.perf_counter()
            val_loss, val_acc = _evaluate(task, data.x_val, data.y_val)
            curve.append({"epoch": epoch, "time_s": now, "train_loss": train_loss, "val_loss": val_loss,
                          "val_acc": val_acc})
            _save(ckpt, {"epoch": epoch, "elapsed_s": now, "model": model.state_dict(),
                         "strategy": strategy.state_dict(), "epoch_losses": epoch_losses, "curve": curve,
                         "history": history, "sent_bytes_per_rank": counters[:world],
                         "compute_s_per_rank": counters[world:]})
            overhead_s += time.perf_counter() - te
    result: dict = {"rank": rank, "sent_bytes": comm.sent_bytes, "compute_s": compute_s}
    if dump_params:
        result["params"] = parameters_to_vector(model.parameters()).tolist()
    if rank == 0:
        result.update(train_time_s=clock(), curve=curve, history=history, data=data.name,
                      resumed_from_epoch=start_epoch if start_epoch else None, shares=strategy.shares)
    comm.close()
    dist.barrier()
    return result


def main(argv: list[str] | None = None) -> None:
    from trinity.runtime.torchrun import write_rank_result
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", required=True, choices=METHODS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", required=True, help="JSON file of a TrainConfig")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--max-steps", type=int, default=None, help="steps per epoch (default: the whole train set)")
    p.add_argument("--die-rank", type=int, default=None, help="fault injection: this rank kills itself ...")
    p.add_argument("--die-step", type=int, default=None, help="... at this step")
    p.add_argument("--dump-params", action="store_true")
    a = p.parse_args(argv)
    cfg = TrainConfig.from_dict(read_json(a.config))
    write_rank_result(worker(a.method, a.seed, cfg, Path(a.out_dir), resume=a.resume, max_steps=a.max_steps,
                             die_rank=a.die_rank, die_step=a.die_step, dump_params=a.dump_params))


# ====================================================================== the launcher
def time_to_target(curve: list[dict], target: float) -> float | None:
    """Wall time of the first evaluation at or below ``target`` (None if never reached)."""
    for point in curve:
        if point["val_loss"] <= target:
            return point["time_s"]
    return None


def train(method: str, *, seed: int = 0, config: TrainConfig | None = None, out_dir: Path,
          timeout_s: float = 120.0, resume: bool = False, extra_args: list[str] | None = None) -> dict:
    """Run one training on ``config.nproc`` local processes; the merged result of all ranks.

    Raises `WorkerError` (from run_torchrun) when a rank dies or the run passes ``timeout_s``; every
    process is stopped by then and ``out_dir/checkpoint.pt`` holds the last finished epoch.
    """
    from trinity.runtime.ranks import run_ranks
    strategy_class(method)  # an unknown method is refused before anything starts
    cfg = (config or TrainConfig()).validate()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = out_dir / "train_config.json"
    write_json(cfg_path, cfg.to_dict())
    args = ["--method", method, "--seed", str(seed), "--config", str(cfg_path.resolve()),
            "--out-dir", str(out_dir.resolve()), *(["--resume"] if resume else []), *(extra_args or [])]
    ranks = run_ranks(MODULE, args, cfg.nproc, out_dir=out_dir, timeout_s=timeout_s, threads=cfg.threads,
                      procs_per_node=cfg.procs_per_node, link=cfg.link)
    head = ranks[0]
    curve = head["curve"]
    result = {
        "method": method, "seed": seed, "data": head["data"],
        "time_to_target_s": time_to_target(curve, cfg.target_val_loss),
        "target_val_loss": cfg.target_val_loss,
        "train_time_s": head["train_time_s"],
        "final_val_loss": curve[-1]["val_loss"] if curve else None,
        "final_val_acc": curve[-1]["val_acc"] if curve else None,
        "sent_bytes": float(sum(r["sent_bytes"] for r in ranks)),
        "sent_bytes_per_rank": [r["sent_bytes"] for r in ranks],
        "compute_s_per_rank": [r["compute_s"] for r in ranks],
        "curve": curve, "history": head["history"], "shares": head["shares"],
        "resumed_from_epoch": head["resumed_from_epoch"],
    }
    if "params" in head:
        result["params_per_rank"] = [r["params"] for r in ranks]
    write_json(out_dir / "result.json", result)
    return result


if __name__ == "__main__":
    main()
