"""A tiny torchrun program for the launcher's tests: all-reduce, then optionally die or hang."""

import os
import sys
import time

import torch
import torch.distributed as dist

from trinity.runtime.torchrun import init_worker, write_rank_result

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
rank, world = init_worker()
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
if mode == "die" and rank == 1:
    print("rank 1 exits on purpose", flush=True)
    os._exit(3)
if mode == "hang" and rank == 1:
    time.sleep(600)
dist.all_reduce(x)  # the dead or hanging rank's peers wait here until the collective times out
write_rank_result({"rank": rank, "world": world, "sum": float(x), "threads": torch.get_num_threads(),
                   "pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0))})
dist.destroy_process_group()
