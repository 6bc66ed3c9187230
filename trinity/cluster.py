"""Devices and links: the cluster a strategy is placed on.

A cluster is a YAML file (a Hydra config group: ``trinity/conf/cluster/``)::

    name: p100x4
    devices:
      - {name: gpu0, kind: p100, speed: 1.0, memory_GB: 11, node: host0}
    default_link: {bandwidth_GBps: 5.7, latency_us: 134}
    links:                      # optional, override the default per pair
      - {src: gpu0, dst: gpu1, bandwidth_GBps: 20, latency_us: 10, symmetric: true}

``node`` (optional) names the machine a device is in; data-parallel schemes with
node-local groups (DASO) group devices by it. A device without one is a node of its own.
``speed`` is throughput relative to the device the graph was profiled on
(an op measured at 100 us takes 50 us on a speed-2 device) unless the op has
a time measured or fitted for the device's ``kind``. ``flops_per_s`` costs
ops that only carry FLOPs. GB means 1e9 bytes. A transfer of b bytes from s
to d takes ``latency_us[s, d] + b / bandwidth[s, d]`` microseconds.

``send_cpu_share`` (default 0) is for workers whose processors also move the
data, as CPU workers over gRPC do: that fraction of each transfer's time
occupies the sender's processor (in turn with its ops), the rest is on the
link (see `trinity.sim`). `trinity calibrate` measures it. ``receive_cpu_share``
(default 0) is the receiver's side: that fraction of the transfer's time
occupies the receiver's processor after the tensor arrives (taking the data
off the wire), before its readers can run. ``cpu_share_of`` (default
``transfer``) says what both shares are a share of: the transfer's whole
time, or (``bytes``) only its bytes / bandwidth, the latency then waited out
on the link alone, as a worker's thread spends its time copying and
serialising bytes, not waiting for the network. Calibrated workers set
``bytes``.

Two more terms (default 0) are for workers that share one machine and one
master, as local TensorFlow workers do; `trinity calibrate` measures both:
``corun_slowdown`` c slows every processor while k of them compute at once
to 1 / (1 + c (k - 1)) of its speed (they share caches and memory
bandwidth), and ``step_sync_us`` s adds s (m - 1) to the step of a
placement that uses m devices (the master's step protocol with each extra
worker).

``link_streams`` k (default 1: one transfer at a time) is how many transfers
each sender has on its links at once, as a TensorFlow worker serves several
``RecvTensor`` calls concurrently: each transfer still takes its full
latency + bytes / bandwidth, but up to k of them overlap (see `trinity.sim`).
Only a calibrated cluster should set it.

``latency_overlaps`` (default false) holds a stream for a transfer's bytes
alone: the latency is waited out in flight, so the sender's next transfer
starts while the last one's latency runs, as concurrent RPCs' round trips
overlap. Off, each transfer holds its stream for its latency too, and a
sender's small transfers wait out their latencies one after another. The
calibration sets neither this nor the next (README, *Simulator vs real*:
fitted with the calibration's placers, they do not rank InceptionV3's
held-out splits better).

``transfer_cpu_us`` (default 0) is a fixed cost of each transfer of a
tensor with bytes, beside its bytes' time, in what both CPU shares are a
share of: the sender's processor spends ``send_cpu_share`` of it, the
receiver's ``receive_cpu_share`` (a ``RecvTensor`` call's handling and its
``_Send``/``_Recv`` ops, whatever the tensor's size).

``control_transfers`` (default false: the paper's simulator, where a
control edge between devices is satisfied when its producer ends) makes a
control edge between devices move an empty tensor, as TensorFlow's runtime
does (a ``_Send``/``_Recv`` pair and a ``RecvTensor`` call): it waits for the
link like any transfer and takes its latency. Calibrated workers set it.

``ready_order`` (default ``fifo``: a device runs its runnable ops oldest
first) can be ``lifo``: newest first, as a TensorFlow worker with one
inter-op thread does (the thread pool takes its own last-queued task
first), which follows one branch of the graph deeper before the next; or
``lifo-arrivals-last``: the same stack, but an op made runnable by a
tensor arriving from another device joins its far end, taken after every op
its own device readied. That is how a TensorFlow worker queues them: a
``_Recv`` completes on a gRPC thread, outside the pool, and a task queued
from outside the pool goes to the back of its queue, while the pool's own
thread queues at the front and takes from there. Calibrated workers set it.

``send_on_request`` (default false: a tensor leaves when its producer ends)
makes a tensor cross only once the sender has taken up the receiver's
request for it, as TensorFlow's gRPC runtime does: the receiver's ``_Recv``
issues a ``RecvTensor`` call, and the sender handles the call on its one
inter-op thread, queued from outside the pool, so after all the work the
worker readied itself. Each copy's request waits at the far end of the
receiver's ready list until issued (in the order of the ops that read it),
then at the far end of the sender's until taken up. A tensor done before
its request is taken up is held until then (its CPU share, if any, is
spent then). Issuing a request takes the receiver's processor
``request_cpu_us`` (default 0; only with ``send_on_request``): a ``_Recv``
is an op like any other on the worker's one thread, which creates and
starts a ``RecvTensor`` call (timed stamps put each received tensor at
17-20 us of a worker's step start: README, ``make step-start``). Taking
a request up takes no time.

``sends_last`` (default false: a sender's CPU share of a transfer joins its
ready list where its ready order puts newly readied work) puts the sender's
CPU share of a tensor with bytes at the far end of its ready list: the
worker serialises it after all the work it has ready (an empty tensor's
share, which takes no time, goes as before, and so does a tensor held for
its request, serialised when the request is taken up; without a send CPU
share the term changes nothing). Traced steps show both (README,
*Simulator vs real*: a worker held most tensors it sent until it ran no
op of its own), and calibrated workers set both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from trinity.errors import ClusterError, TrinityError, short_repr
from trinity.fileio import read_yaml


@dataclass(frozen=True)
class Device:
    name: str
    kind: str
    memory_bytes: int
    speed: float = 1.0
    flops_per_s: float = 0.0
    node: str = ""  # the machine (or group of local processes) the device is in; "" = a node of its own

    @property
    def node_name(self) -> str:
        """The node this device belongs to: ``node`` when given, else the device's own name."""
        return self.node or self.name


@dataclass(frozen=True)
class Cluster:
    name: str
    devices: tuple[Device, ...]
    bandwidth: np.ndarray  # float64[D, D] bytes per microsecond; diagonal unused
    latency: np.ndarray  # float64[D, D] microseconds; diagonal unused
    send_cpu_share: float = 0.0  # fraction of a transfer's time the sender's processor spends on it
    receive_cpu_share: float = 0.0  # fraction of its time the receiver's processor spends on a tensor that arrived
    corun_slowdown: float = 0.0  # c: with k processors busy each runs at 1 / (1 + c (k - 1)) of its speed
    step_sync_us: float = 0.0  # s: a step over m devices takes s (m - 1) longer (a file's: >= 0)
    link_streams: int = 1  # k: transfers each sender carries at once (1: one at a time, FIFO)
    control_transfers: bool = False  # a control edge between devices moves an empty tensor
    ready_order: str = "fifo"  # which runnable op a device takes next: the oldest, or the newest (READY_ORDERS)
    cpu_share_of: str = "transfer"  # what the CPU shares are of: the whole transfer, or its bytes (CPU_SHARE_OF)
    latency_overlaps: bool = False  # a link is held for a transfer's bytes only; its latency overlaps the next
    transfer_cpu_us: float = 0.0  # a tensor's transfer costs the processors' shares this much more than its bytes
    send_on_request: bool = False  # a tensor crosses only once the sender has taken up the receiver's request
    sends_last: bool = False  # a sender serialises a tensor with bytes after all the work it has ready
    request_cpu_us: float = 0.0  # a receiver's processor issues each request in this long (send_on_request)

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    @property
    def nodes(self) -> list[str]:
        """Each device's node name (devices that share one talk over intra-node links)."""
        return [d.node_name for d in self.devices]

    @property
    def memory(self) -> np.ndarray:
        return np.array([d.memory_bytes for d in self.devices], dtype=np.int64)

    def index(self, device_name: str) -> int:
        try:
            return self.device_names.index(device_name)
        except ValueError:
            raise ClusterError(f"unknown device {device_name!r}; devices are {self.device_names}",
                               source=self.name) from None

    def subset(self, indices) -> "Cluster":
        """The cluster of these devices only (in this order), with their links."""
        idx = [int(i) for i in indices]
        return replace(self, devices=tuple(self.devices[i] for i in idx), bandwidth=self.bandwidth[np.ix_(idx, idx)],
                       latency=self.latency[np.ix_(idx, idx)])  # every other term kept

    def interchangeable(self) -> np.ndarray:
        """int64[D]: devices with one label can swap places without changing any strategy's cost: the same
        kind, speed, FLOP rate and memory, and links that look the same after the swap. (Swaps that keep the cluster
        compose into any permutation within a label, so the labels are classes.)"""
        n = self.n_devices
        label = np.full(n, -1, np.int64)
        off = ~np.eye(n, dtype=bool)  # the diagonal is unused

        def swappable(i: int, j: int) -> bool:
            a, b = self.devices[i], self.devices[j]
            if (a.kind, a.speed, a.flops_per_s, a.memory_bytes) != (b.kind, b.speed, b.flops_per_s, b.memory_bytes):
                return False
            p = np.arange(n)
            p[[i, j]] = [j, i]
            return all(np.array_equal(m[np.ix_(p, p)][off], m[off]) for m in (self.bandwidth, self.latency))

        for i in range(n):
            if label[i] < 0:
                label[i] = i
                for j in range(i + 1, n):
                    if label[j] < 0 and swappable(i, j):
                        label[j] = i
        return label

    def transfer_us(self, src: int, dst: int, nbytes: float) -> float:
        if src == dst:
            return 0.0
        return float(self.latency[src, dst] + nbytes / self.bandwidth[src, dst])

    def to_dict(self) -> dict:
        """The YAML form (every pair written out), so a loaded cluster round-trips."""
        names = self.device_names
        return {
            "name": self.name,
            **({"send_cpu_share": self.send_cpu_share} if self.send_cpu_share else {}),
            **({"receive_cpu_share": self.receive_cpu_share} if self.receive_cpu_share else {}),
            **({"corun_slowdown": self.corun_slowdown} if self.corun_slowdown else {}),
            **({"step_sync_us": self.step_sync_us} if self.step_sync_us else {}),
            **({"link_streams": self.link_streams} if self.link_streams != 1 else {}),
            **({"control_transfers": True} if self.control_transfers else {}),
            **({"ready_order": self.ready_order} if self.ready_order != "fifo" else {}),
            **({"cpu_share_of": self.cpu_share_of} if self.cpu_share_of != "transfer" else {}),
            **({"latency_overlaps": True} if self.latency_overlaps else {}),
            **({"transfer_cpu_us": self.transfer_cpu_us} if self.transfer_cpu_us else {}),
            **({"send_on_request": True} if self.send_on_request else {}),
            **({"sends_last": True} if self.sends_last else {}),
            **({"request_cpu_us": self.request_cpu_us} if self.request_cpu_us else {}),
            "devices": [{"name": d.name, "kind": d.kind, "speed": d.speed, "memory_GB": d.memory_bytes / 1e9,
                         **({"flops_per_s": d.flops_per_s} if d.flops_per_s else {}),
                         **({"node": d.node} if d.node else {})} for d in self.devices],
            "links": [{"src": names[s], "dst": names[t], "bandwidth_GBps": float(self.bandwidth[s, t]) / 1e3,
                       "latency_us": float(self.latency[s, t]), "symmetric": False}
                      for s in range(len(names)) for t in range(len(names)) if s != t],
        }


#: Bounds past which a cluster file is corrupt: D x D link matrices, int64 byte counts.
MAX_DEVICES = 4096
MAX_MEMORY_GB = 1e9


def _number(d: Any, key: str, where: str, source: str, *, positive: bool, default=None,
            limit: float = math.inf) -> float:
    if not isinstance(d, Mapping):
        raise ClusterError(f"must be a mapping, got {short_repr(d)}", source=source, field=where)
    if key not in d:
        if default is not None:
            return default
        raise ClusterError("missing", source=source, field=f"{where}.{key}")
    v = d[key]
    try:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    except OverflowError:  # an integer of hundreds of digits
        ok = False
    if not ok:
        raise ClusterError(f"must be a finite number, got {short_repr(v)}", source=source, field=f"{where}.{key}")
    if positive and v <= 0:
        raise ClusterError(f"must be > 0, got {v}", source=source, field=f"{where}.{key}")
    if not positive and v < 0:
        raise ClusterError(f"must be >= 0, got {v}", source=source, field=f"{where}.{key}")
    if v > limit:
        raise ClusterError(f"must be at most {limit:g}, got {v}", source=source, field=f"{where}.{key}")
    return float(v)


def _devices(raw: Any, source: str) -> list[Device]:
    if not isinstance(raw, list) or not raw:
        raise ClusterError("must be a non-empty list", source=source, field="devices")
    if len(raw) > MAX_DEVICES:
        raise ClusterError(f"at most {MAX_DEVICES} devices, got {len(raw)}", source=source, field="devices")
    devices, seen = [], set()
    for i, d in enumerate(raw):
        w = f"devices[{i}]"
        if not isinstance(d, Mapping) or not isinstance(d.get("name"), str) or not d["name"]:
            raise ClusterError("needs a non-empty string name", source=source, field=f"{w}.name")
        if d["name"] in seen:
            raise ClusterError(f"duplicate device name {d['name']!r}", source=source, field=f"{w}.name")
        seen.add(d["name"])
        kind = d.get("kind", "default")
        if not isinstance(kind, (str, int)) or isinstance(kind, bool):  # YAML reads `kind: 100` as a number
            raise ClusterError(f"must be a string, got {short_repr(kind)}", source=source, field=f"{w}.kind")
        node = d.get("node", "")
        if not isinstance(node, (str, int)) or isinstance(node, bool) or (isinstance(node, str) and not node
                                                                          and "node" in d):
            raise ClusterError(f"must be a non-empty string, got {short_repr(node)}", source=source,
                               field=f"{w}.node")
        devices.append(Device(
            name=d["name"], kind=str(kind), node=str(node),
            memory_bytes=int(_number(d, "memory_GB", w, source, positive=True, limit=MAX_MEMORY_GB) * 1e9),
            speed=_number(d, "speed", w, source, positive=True, default=1.0),
            flops_per_s=_number(d, "flops_per_s", w, source, positive=False, default=0.0),
        ))
    return devices


def _links(doc: Mapping, names: list[str], source: str) -> tuple[np.ndarray, np.ndarray]:
    """(bandwidth, latency) matrices from ``default_link`` and ``links``; every pair must be covered."""
    n = len(names)
    bw = np.full((n, n), np.nan)
    lat = np.full((n, n), np.nan)
    default = doc.get("default_link")
    if default is not None:
        bw[:] = _number(default, "bandwidth_GBps", "default_link", source, positive=True) * 1e3
        lat[:] = _number(default, "latency_us", "default_link", source, positive=False)
    links = doc.get("links") or []
    if not isinstance(links, list):
        raise ClusterError(f"must be a list of links, got {short_repr(links)}", source=source, field="links")
    index = {name: i for i, name in enumerate(names)}
    for j, link in enumerate(links):
        w = f"links[{j}]"
        if not isinstance(link, Mapping):
            raise ClusterError("must be a mapping", source=source, field=w)
        ends = []
        for end in ("src", "dst"):
            if not isinstance(link.get(end), str) or link[end] not in index:
                raise ClusterError(f"unknown device {short_repr(link.get(end))}; devices are {names}",
                                   source=source, field=f"{w}.{end}")
            ends.append(index[link[end]])
        s, t = ends
        if s == t:
            raise ClusterError("a link joins two different devices", source=source, field=w)
        b = _number(link, "bandwidth_GBps", w, source, positive=True) * 1e3
        l_ = _number(link, "latency_us", w, source, positive=False)
        symmetric = link.get("symmetric", True)
        if not isinstance(symmetric, bool):
            raise ClusterError(f"must be true or false, got {short_repr(symmetric)}", source=source,
                               field=f"{w}.symmetric")
        bw[s, t], lat[s, t] = b, l_
        if symmetric:
            bw[t, s], lat[t, s] = b, l_
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    missing = np.argwhere(np.isnan(bw))
    if len(missing):
        s, t = missing[0]
        raise ClusterError(f"no link from {names[s]!r} to {names[t]!r} and no default_link",
                           source=source, field="links")
    return bw, lat


def interchangeable_devices(cluster: Cluster) -> bool:
    """All devices alike and all links alike: relabelling devices changes no simulated result."""
    d = cluster.devices
    if len(d) < 2:
        return True
    alike = len({(x.kind, x.speed, x.memory_bytes, x.flops_per_s) for x in d}) == 1
    off = ~np.eye(cluster.n_devices, dtype=bool)
    return alike and np.ptp(cluster.bandwidth[off]) == 0 and np.ptp(cluster.latency[off]) == 0


def cluster_from_dict(doc: Any, source: str = "<cluster>") -> Cluster:
    if not isinstance(doc, Mapping):
        raise ClusterError(f"expected a mapping, got {type(doc).__name__}", source=source)
    devices = _devices(doc.get("devices"), source)
    bw, lat = _links(doc, [d.name for d in devices], source)
    share, receive_share = (_cpu_share(doc, key, source) for key in ("send_cpu_share", "receive_cpu_share"))
    corun, sync, per_transfer, per_request = (_number(doc, key, "cluster", source, positive=False, default=0.0)
                                              if doc.get(key) is not None else 0.0
                                              for key in ("corun_slowdown", "step_sync_us", "transfer_cpu_us",
                                                          "request_cpu_us"))
    on_request = _flag(doc, "send_on_request", source)
    if per_request and not on_request:
        raise ClusterError("a request's cost needs send_on_request: true (without it no request is simulated)",
                           source=source, field="request_cpu_us")
    return Cluster(name=str(doc.get("name") or Path(source).stem), devices=tuple(devices), bandwidth=bw, latency=lat,
                   send_cpu_share=share, receive_cpu_share=receive_share, corun_slowdown=corun, step_sync_us=sync,
                   link_streams=_link_streams(1 if doc.get("link_streams") is None else doc["link_streams"], source),
                   control_transfers=_flag(doc, "control_transfers", source),
                   ready_order=_choice(doc, "ready_order", READY_ORDERS, source),
                   cpu_share_of=_choice(doc, "cpu_share_of", CPU_SHARE_OF, source),
                   latency_overlaps=_flag(doc, "latency_overlaps", source), transfer_cpu_us=per_transfer,
                   send_on_request=on_request, sends_last=_flag(doc, "sends_last", source), request_cpu_us=per_request)


def _cpu_share(doc: Mapping, key: str, source: str) -> float:
    share = _number(doc, key, "cluster", source, positive=False, default=0.0) if doc.get(key) is not None else 0.0
    if share > 1:
        raise ClusterError(f"must be between 0 and 1, got {share}", source=source, field=key)
    return share


#: More streams than this per sender is a corrupt file, not a measurement (the simulator keeps a slot each).
MAX_LINK_STREAMS = 1024


def _link_streams(v: Any, source: str) -> int:
    """A whole number of concurrent transfers per sender, 1 (today's FIFO) unless a calibration set it."""
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_LINK_STREAMS:
        raise ClusterError(f"must be a whole number from 1 to {MAX_LINK_STREAMS}, got {short_repr(v)}",
                           source=source, field="link_streams")
    return int(v)


#: Which runnable op a device takes next (see `trinity.sim`).
READY_ORDERS = ("fifo", "lifo", "lifo-arrivals-last")


#: What a CPU share is a share of: the transfer's whole time (latency + bytes / bandwidth), or its bytes'
#: (bytes / bandwidth; the latency is waited out on the wire, not on a processor).
CPU_SHARE_OF = ("transfer", "bytes")


def _choice(doc: Mapping, key: str, choices: tuple[str, ...], source: str) -> str:
    """A term of the cluster file that names one of ``choices``, the first when absent."""
    v = doc.get(key, choices[0])
    if v not in choices:
        raise ClusterError(f"must be one of {', '.join(choices)}, got {short_repr(v)}", source=source, field=key)
    return str(v)


def _flag(doc: Mapping, key: str, source: str) -> bool:
    """A yes/no term of the cluster file, false when absent."""
    v = doc.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise ClusterError(f"must be true or false, got {short_repr(v)}", source=source, field=key)
    return v


def preset_names() -> list[str]:
    folder = resources.files("trinity") / "conf" / "cluster"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_cluster(name_or_path: str | Path) -> Cluster:
    """Load a preset by name (``p100x4``) or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            return cluster_from_dict(read_yaml(path), str(path))
        except TrinityError as exc:
            raise exc.at(str(path))
    if str(name_or_path) not in preset_names():
        raise ClusterError(f"unknown cluster {str(name_or_path)!r}: not a file, and presets are "
                           f"{', '.join(preset_names())}")
    res = resources.files("trinity") / "conf" / "cluster" / f"{name_or_path}.yaml"
    with resources.as_file(res) as p:
        return cluster_from_dict(read_yaml(p), f"preset {name_or_path}")
