"""The TensorFlow workers a strategy runs on: local processes or a given cluster.

`LocalWorkers(n)` starts ``n`` worker processes on this machine (one
`tf.distribute.Server` each, see `worker.py`), each with its own thread
budget, and stops them on exit: terminate, then kill after a grace period.
`ClusterSpecWorkers(path)` connects to servers somebody else started, named
in a cluster spec file (YAML or JSON)::

    worker: [host0:2222, host1:2222]   # task i = device i of a strategy
    memory_GB: 16                      # optional: each worker's budget

which is how a strategy found here runs on a real multi-machine cluster.

Both give the gRPC target of the master (task 0), the TensorFlow device name
of each task and `check()`, which raises `WorkerError` naming a dead or
unreachable worker. Every wait is bounded.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

from trinity.errors import TrinityError
from trinity.fileio import read_yaml

START_TIMEOUT_S = 60.0  # importing TensorFlow and opening the port takes ~5 s here
STOP_GRACE_S = 5.0
PORT_ATTEMPTS = 3  # starts on fresh ports after a port picked here was taken before the workers bound it


class WorkerError(TrinityError):
    """A worker that cannot be started, reached, or died."""


def task_device(task: int) -> str:
    return f"/job:worker/replica:0/task:{task}/device:CPU:0"


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _split(hostport: str, source: str, field: str) -> tuple[str, int]:
    host, _, port = str(hostport).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise WorkerError(f"expected host:port, got {hostport!r}", source=source, field=field)
    return host, int(port)


class Workers:
    """What the runner needs from a set of workers."""

    hosts: list[str]
    memory_bytes: int | None = None  # each worker's budget, when known

    @property
    def n(self) -> int:
        return len(self.hosts)

    @property
    def target(self) -> str:
        return f"grpc://{self.hosts[0]}"

    @property
    def devices(self) -> list[str]:
        return [task_device(i) for i in range(self.n)]

    def check(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        pass


class LocalWorkers(Workers):
    """``n`` worker processes on this machine with ``threads`` threads each."""

    def __init__(self, n: int, threads: int = 1, ports: list[int] | None = None,
                 start_timeout_s: float = START_TIMEOUT_S, pin: bool = True):
        if n < 1 or threads < 1:
            raise WorkerError(f"need at least 1 worker and 1 thread, got {n} and {threads}", field="workers")
        if ports is not None and len(ports) != n:
            raise WorkerError(f"{len(ports)} ports for {n} workers", field="ports")
        cpus = sorted(os.sched_getaffinity(0))
        if pin and n * threads > len(cpus):  # pinned workers would share cores and time each other
            raise WorkerError(f"{n} workers x {threads} threads need {n * threads} cores, this process may use "
                              f"{len(cpus)}", field="workers")
        self.threads = threads
        self.procs: list[subprocess.Popen] = []
        # Ports picked here can be taken by another process between the pick and the workers' bind: then
        # start again on fresh ones (given ports are the caller's, and a taken one is the caller's error).
        for attempt in range(1 if ports else PORT_ATTEMPTS):
            try:
                self._start(ports or [free_port() for _ in range(n)], cpus, pin, start_timeout_s)
                return
            except WorkerError as exc:
                if ports or exc.field != "ports" or attempt == PORT_ATTEMPTS - 1:
                    raise

    def _start(self, ports: list[int], cpus: list[int], pin: bool, start_timeout_s: float) -> None:
        threads = self.threads
        for p in ports:
            if port_open("localhost", p, timeout=0.5):
                raise WorkerError(f"port {p} is already taken on localhost; pick other ports", field="ports")
        self.hosts = [f"localhost:{p}" for p in ports]
        self.procs = []
        # BFC on the CPU too: its allocator counts bytes in use, so traces report each worker's peak
        # memory (the default CPU allocator reports 0 on some builds and CPUs), as a GPU's BFC does.
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
               "TF_CPU_ALLOCATOR_USE_BFC": "true"}
        try:
            for task in range(len(ports)):
                # Pinned to its own cores (round robin) so workers do not trade places mid-step.
                pinned = ["--cpus", ",".join(str(cpus[(task * threads + k) % len(cpus)]) for k in range(threads))]
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "trinity.runtime.worker", "--hosts", ",".join(self.hosts),
                     "--task", str(task), "--threads", str(threads), "--parent", str(os.getpid())]
                    + (pinned if pin else []),
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                    start_new_session=True))  # Ctrl-C reaches the runner, which stops them
            self._wait_ready(start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for task, proc in enumerate(self.procs):
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerError(f"worker {task} ({self.hosts[task]}) not ready after {timeout_s:.0f} s",
                                      field="workers")
                ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
                if ready:
                    line = proc.stdout.readline()
                    if line.startswith("READY"):
                        break
                    if line.startswith("ERROR"):
                        raise WorkerError(f"worker {task}: {line[6:].strip()}", field="ports")
                if proc.poll() is not None:
                    raise WorkerError(f"worker {task} ({self.hosts[task]}) exited with status {proc.returncode} "
                                      "while starting", field="workers")

    def check(self) -> None:
        for task, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise WorkerError(f"worker {task} ({self.hosts[task]}) died (exit status {proc.returncode})",
                                  field="workers")

    def kill(self, task: int) -> None:
        """Kill one worker abruptly (fault injection in tests)."""
        self.procs[task].kill()
        self.procs[task].wait(timeout=STOP_GRACE_S)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_GRACE_S)
            if proc.stdout:
                proc.stdout.close()
        self.procs = []


class ClusterSpecWorkers(Workers):
    """Servers already running elsewhere, named in a cluster spec file."""

    def __init__(self, path: str | os.PathLike, connect_timeout_s: float = 5.0):
        source = str(path)
        doc = read_yaml(path)
        if isinstance(doc, dict) and isinstance(doc.get("cluster"), dict):  # TF_CONFIG's layout
            doc = {**doc["cluster"], **{k: v for k, v in doc.items() if k != "cluster"}}
        hosts = doc.get("worker") if isinstance(doc, dict) else None
        if not isinstance(hosts, list) or not hosts:
            raise WorkerError("must list the workers as host:port strings", source=source, field="worker")
        self.hosts = [str(h) for h in hosts]
        self.addresses = [_split(h, source, f"worker[{i}]") for i, h in enumerate(self.hosts)]
        memory = doc.get("memory_GB")
        if memory is not None:
            if not isinstance(memory, (int, float)) or isinstance(memory, bool) or memory <= 0:
                raise WorkerError(f"must be a positive number, got {memory!r}", source=source, field="memory_GB")
            self.memory_bytes = int(memory * 1e9)
        self.source, self.connect_timeout_s = source, connect_timeout_s
        self.check()

    def check(self) -> None:
        for i, (host, port) in enumerate(self.addresses):
            if not port_open(host, port, self.connect_timeout_s):
                raise WorkerError(f"worker {i} at {host}:{port} is unreachable (no answer within "
                                  f"{self.connect_timeout_s:g} s)", source=self.source, field=f"worker[{i}]")


def open_workers(n: int | None = None, cluster_spec: str | Path | None = None, threads: int = 1) -> Workers:
    """Local workers, or the cluster a spec file names."""
    if cluster_spec is not None:
        return ClusterSpecWorkers(cluster_spec)
    return LocalWorkers(n or 2, threads)
