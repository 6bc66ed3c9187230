"""A synchronous parameter server on collectives (the plain baseline; H-PS builds on it).

Rank ``server`` (0) holds the float32 master parameters and the optimizer; every rank, the server's
included, is also a worker. One exchange: the workers' gradients are summed into the server
(``reduce``; each gradient is its loss sum over the global batch size, so the sum is the global mean
gradient), the server takes one optimizer step and sends the new parameters to every worker
(``broadcast``), optionally quantized (`trinity.data_parallel.quantize`).

Collectives rather than ``torch.distributed.rpc``: gloo's reduce and broadcast move exactly a
parameter server's traffic (each worker's gradient in, each worker's copy out), run under the same
launch, the same process groups and the same timeouts as the other methods, and need no RPC agent;
with one server the RPC's asynchronous calls would buy nothing the background thread does not
(`Comm.submit` runs an exchange in the background, which is how H-PS overlaps it).

Against a standard parameter server (Li et al., OSDI 2014; TensorFlow's PS strategy): the same
synchronous protocol (push gradients, the server applies the optimizer, pull parameters) with one
server shard on rank 0, which also works; the server's inbound and outbound traffic all crosses its
own node's port (a standard PS shards the parameters over several servers to spread that load), and
the push is a tree reduce (gloo's), so the server receives partial sums rather than every worker's
gradient: the same bytes on the server's port when every other worker is on another node.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from trinity.data_parallel.comm import Comm
from trinity.data_parallel.quantize import Quantized, check_bits, code_dtype, dequantize, quantize


class ParameterServer:
    """The server's state (on rank ``server`` only) and the exchange every rank takes part in."""

    def __init__(self, model: torch.nn.Module, comm: Comm, *, lr: float, momentum: float, server: int = 0):
        self.comm, self.server = comm, server
        self.ranks = tuple(range(comm.world))
        self.shapes = [p.shape for p in model.parameters()]
        self.sizes = [p.numel() for p in model.parameters()]
        self.master: list[torch.nn.Parameter] = []
        self.optimizer: torch.optim.Optimizer | None = None
        if comm.rank == server:
            self.master = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
            self.optimizer = torch.optim.SGD(self.master, lr=lr, momentum=momentum)

    @property
    def is_server(self) -> bool:
        return self.comm.rank == self.server

    def exchange(self, grad: torch.Tensor, bits: int | None = None) -> torch.Tensor:
        """Send this worker's flat gradient; the new flat parameters every worker computes with next.

        Blocking; H-PS runs it on the background thread (`Comm.submit`) to overlap it with computing.
        """
        grad = grad.clone()
        self.comm.reduce(grad, self.server, self.ranks)
        if self.is_server:
            offset = 0
            for p, n in zip(self.master, self.sizes):
                p.grad = grad[offset:offset + n].view_as(p).clone()
                offset += n
            self.optimizer.step()
        if bits is None:
            flat = parameters_to_vector(self.master) if self.is_server else torch.empty(sum(self.sizes))
            self.comm.broadcast(flat.detach(), self.server, self.ranks)
            return flat.detach()
        return self._broadcast_quantized(check_bits(bits))

    def _broadcast_quantized(self, bits: int) -> torch.Tensor:
        """Per-tensor codes in one buffer, and (lo, scale) of each tensor in another."""
        if self.is_server:
            parts = [quantize(p.detach(), bits) for p in self.master]
            codes = torch.cat([q.codes.reshape(-1) for q in parts])
            meta = torch.tensor([[q.lo, q.scale] for q in parts], dtype=torch.float32)
        else:
            codes = torch.empty(sum(self.sizes), dtype=code_dtype(bits))
            meta = torch.empty(len(self.sizes), 2, dtype=torch.float32)
        # gloo broadcasts no int16: 16-bit codes travel as their bytes (the same number of bytes)
        self.comm.broadcast(codes.view(torch.uint8), self.server, self.ranks)
        self.comm.broadcast(meta, self.server, self.ranks)
        out, offset = [], 0
        for (lo, scale), n in zip(meta.tolist(), self.sizes):
            out.append(dequantize(Quantized(codes[offset:offset + n], lo, scale, bits)))
            offset += n
        return torch.cat(out)

    def load_into(self, model: torch.nn.Module, flat: torch.Tensor) -> None:
        with torch.no_grad():
            vector_to_parameters(flat, model.parameters())

    def state_dict(self) -> dict:
        return {"master": [p.detach() for p in self.master],
                "optimizer": self.optimizer.state_dict() if self.optimizer else None}

    def load_state_dict(self, state: dict) -> None:
        if self.is_server:
            with torch.no_grad():
                for p, saved in zip(self.master, state["master"]):
                    p.copy_(saved)
            self.optimizer.load_state_dict(state["optimizer"])


def exchange_cpu_us(model: torch.nn.Module, bits: int | None = None, *, steps: int = 20,
                    warmup: int = 3) -> tuple[float, float]:
    """One exchange's own CPU time besides communication, median microseconds: (the server's, a worker's).

    Run in this process with a world of one, where every collective is a no-op: as rank 0 it is the
    server's part (copying the gradient into its master copy, the optimizer step, quantizing each tensor,
    dequantizing); as rank 1 a worker's (dequantizing what it receives). H-PS runs this on each rank's
    background thread, beside the next step's computation, on the same core."""
    grad = parameters_to_vector([p.detach() for p in model.parameters()]).clone()
    out = []
    for rank in (0, 1):
        ps = ParameterServer(model, Comm(rank, 1, 1), lr=0.0, momentum=0.0)  # lr 0: the copy stays put
        cpu = []
        for i in range(warmup + steps):
            t = time.thread_time()
            ps.exchange(grad, bits)
            if i >= warmup:
                cpu.append(time.thread_time() - t)
        ps.comm.close()
        out.append(statistics.median(cpu) * 1e6)
    return out[0], out[1]
