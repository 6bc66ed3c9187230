"""Links between emulated nodes shaped by the kernel: a network namespace per node, veth pairs, tc.

`ShapedNodes(n_nodes, link)` builds, for one run, a star network of namespaces:

* node i is namespace ``<tag>n<i>`` with one interface ``eth0`` (10.77.i.2/24, a route to the other nodes'
  10.77.0.0/16 via the hub and none beyond: a name lookup, which torch makes of the master's address, then
  fails at once where a default route would wait out the resolver's 5 s timeout on a query nobody answers);
* the hub is namespace ``<tag>hub`` holding every veth peer ``n<i>`` (10.77.i.1/24) and routing between
  them (``ip_forward``), as a switch would;
* both ends of every veth are shaped on egress: ``tbf`` at the link's bandwidth (so concurrent transfers
  through one node's port share it, and a node receiving from two others is limited by its port too),
  and, for a latency > 0, ``netem`` with half the latency on each end (node -> hub -> node is one way).

Ranks of one node bind to that node's address, so their node-local traffic goes through the node's
loopback, unshaped; traffic between nodes crosses two shaped egresses. The namespaces (and the veths
in them) are deleted when the context exits, on any path: an error, Ctrl-C, SIGTERM turned into an
exception by the stage runner. A run killed outright (SIGKILL) leaves them behind, so `sweep_stale`
(called before every new setup) removes namespaces of this module whose owning process has died.

Needs root (CAP_NET_ADMIN), iproute2's ``ip`` and ``tc``, and the kernel's tbf (and netem for a latency);
each missing piece is one `LinkError` naming it.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from itertools import count
from typing import Any, Mapping

from trinity.errors import TrinityError, short_repr

PREFIX = "trl"  # every namespace of this module: trl<owner pid>x<run>n<i> / ...hub
MAX_NODES = 250  # one /24 per node under 10.77.0.0/16
_runs = count()


class LinkError(TrinityError):
    """A shaped-link setting that cannot be built (bad spec, no privileges, a missing kernel feature)."""


@dataclass(frozen=True)
class LinkSpec:
    """One inter-node link: bandwidth per direction of each node's port, one-way latency between nodes."""

    bandwidth_MBps: float = 100.0  # MB = 1e6 bytes
    latency_ms: float = 0.0

    def validate(self, prefix: str = "link") -> "LinkSpec":
        bw, lat = self.bandwidth_MBps, self.latency_ms
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not math.isfinite(bw) or bw <= 0:
            raise LinkError(f"must be a finite number > 0, got {short_repr(bw)}", field=f"{prefix}.bandwidth_MBps")
        if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not math.isfinite(lat) or lat < 0:
            raise LinkError(f"must be a finite number >= 0, got {short_repr(lat)}", field=f"{prefix}.latency_ms")
        return self

    def transfer_s(self, nbytes: float) -> float:
        """What one transfer of ``nbytes`` alone on the link takes, ideally."""
        return self.latency_ms / 1e3 + nbytes / (self.bandwidth_MBps * 1e6)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], prefix: str = "link") -> "LinkSpec":
        if not isinstance(doc, Mapping):
            raise LinkError(f"must be a mapping, got {short_repr(doc)}", field=prefix)
        known = {"bandwidth_MBps", "latency_ms"}
        for key in doc:
            if key not in known:
                raise LinkError(f"unknown field; fields are {sorted(known)}", field=f"{prefix}.{key}")
        return cls(**doc).validate(prefix)


def _sh(*cmd: str) -> str:
    """Run one ip/tc command; its failure is one LinkError with the command and the kernel's answer."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise LinkError(f"{cmd[0]} is not installed (iproute2)", field="link") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise LinkError(f"`{' '.join(cmd)}` failed: {said[-1] if said else done.returncode}", field="link")
    return done.stdout


def _netns_list() -> list[str]:
    return [line.split()[0] for line in _sh("ip", "netns", "list").splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Delete namespaces of this module whose owning process is gone (a run killed by SIGKILL)."""
    removed = []
    for name in _netns_list():
        m = re.fullmatch(rf"{PREFIX}(\d+)x\d+(?:n\d+|hub)", name)
        if m and not _alive(int(m.group(1))):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            removed.append(name)
    return removed


def namespaces_of(pid: int | None = None) -> list[str]:
    """This module's namespaces now present (of process ``pid`` if given): for tests and checks."""
    owner = str(pid) if pid is not None else r"\d+"
    pat = rf"{PREFIX}{owner}x\d+(?:n\d+|hub)"
    return [n for n in _netns_list() if re.fullmatch(pat, n)]


class ShapedNodes:
    """The namespaces of one run (module docstring); a context manager that always cleans up."""

    def __init__(self, n_nodes: int, link: LinkSpec):
        if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or not 1 <= n_nodes <= MAX_NODES:
            raise LinkError(f"a shaped network takes 1 to {MAX_NODES} nodes, got {short_repr(n_nodes)}",
                            field="nodes")
        self.n_nodes, self.link = n_nodes, link.validate()
        self.tag = f"{PREFIX}{os.getpid()}x{next(_runs)}"
        self.hub = f"{self.tag}hub"
        self._made: list[str] = []

    def namespace(self, node: int) -> str:
        return f"{self.tag}n{node}"

    @staticmethod
    def address(node: int) -> str:
        return f"10.77.{node}.2"

    interface = "eth0"  # every node's one interface, in its own namespace

    def command(self, node: int, argv: list[str]) -> list[str]:
        """``argv`` run inside ``node``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    # ------------------------------------------------------------ building and removing
    def __enter__(self) -> "ShapedNodes":
        if os.geteuid() != 0:
            raise LinkError("shaped links need root (network namespaces, tc); run as root or set link: null",
                            field="link")
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                raise LinkError(f"{tool} is not installed (iproute2)", field="link")
        sweep_stale()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        self._made.clear()

    def _add_ns(self, name: str) -> None:
        _sh("ip", "netns", "add", name)
        self._made.append(name)
        _sh("ip", "-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        self._add_ns(self.hub)
        _sh("ip", "netns", "exec", self.hub, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for i in range(self.n_nodes):
            ns, port = self.namespace(i), f"n{i}"
            self._add_ns(ns)
            _sh("ip", "link", "add", self.interface, "netns", ns, "type", "veth", "peer", "name", port,
                "netns", self.hub)
            _sh("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", self.interface)
            _sh("ip", "-n", self.hub, "addr", "add", f"10.77.{i}.1/24", "dev", port)
            _sh("ip", "-n", ns, "link", "set", self.interface, "up")
            _sh("ip", "-n", self.hub, "link", "set", port, "up")
            _sh("ip", "-n", ns, "route", "add", "10.77.0.0/16", "via", f"10.77.{i}.1")
            self._shape(ns, self.interface)
            self._shape(self.hub, port)

    def _shape(self, ns: str, dev: str) -> None:
        rate_bit = int(self.link.bandwidth_MBps * 8e6)
        # the bucket: 1 ms of traffic (what the kernel timer needs), at least one frame; tbf splits larger
        # GSO packets, so a small bucket does not stall them and small transfers get no free burst
        burst = max(1600, int(self.link.bandwidth_MBps * 1e6 / 1000))
        tbf = ["tbf", "rate", f"{rate_bit}bit", "burst", str(burst), "latency", "200ms"]
        if self.link.latency_ms > 0:
            try:
                _sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay",
                    f"{self.link.latency_ms / 2 * 1e3:.0f}us", "limit", "100000")
            except LinkError as e:
                if "unknown" in str(e).lower():
                    raise LinkError("this kernel has no netem (CONFIG_NET_SCH_NETEM), so a latency cannot be "
                                    "shaped; set latency_ms: 0", field="link.latency_ms") from None
                raise
            _sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *tbf)
        else:
            _sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", *tbf)


#: the one-way latency of a small gloo transfer between local processes with no shaping (DESIGN.md:
#: ~0.1 ms): a cluster's inter-node latency above it is what netem must add
LOOPBACK_LATENCY_US = 100.0


def cluster_network(cluster) -> tuple[list[int], LinkSpec | None]:
    """What a `Cluster` of local ranks asks of the network: each device's node index (in order of first
    appearance of its ``node``) and the link between nodes (None for one node).

    Every pair of devices on different nodes must have the same link (one shaped port per node);
    bandwidth is the link's, latency what it has above `LOOPBACK_LATENCY_US`. Links inside a node are
    the node's loopback, whatever the cluster says of them (the cost model uses its figures).
    """
    names = cluster.nodes
    order = list(dict.fromkeys(names))
    node = [order.index(n) for n in names]
    if len(order) == 1:
        return node, None
    pairs = {(float(cluster.bandwidth[i, j]), float(cluster.latency[i, j]))
             for i in range(cluster.n_devices) for j in range(cluster.n_devices) if node[i] != node[j]}
    if len(pairs) != 1:
        raise LinkError(f"kernel-shaped links take one link between every two nodes, {cluster.name} has "
                        f"{len(pairs)}", field="links")
    (bandwidth, latency), = pairs  # bytes per microsecond = MB/s; microseconds
    return node, LinkSpec(bandwidth_MBps=bandwidth,
                          latency_ms=max(0.0, latency - LOOPBACK_LATENCY_US) / 1e3).validate("links")
