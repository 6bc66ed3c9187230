"""Links shaped by the kernel (network namespaces, veth, tc) and the rank launcher that uses them."""

from __future__ import annotations

import json
import signal
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trinity.runtime.links import LinkError, LinkSpec, ShapedNodes, namespaces_of, sweep_stale
from trinity.runtime.ranks import core_of, cores, run_ranks
from trinity.runtime.workers import WorkerError

WORKERS = Path(__file__).parent / "workers"
can_shape = os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None
needs_netns = pytest.mark.skipif(not can_shape, reason="needs root, ip and tc (network namespaces)")


def test_link_spec_refuses_bad_values_naming_the_field():
    assert LinkSpec.from_dict({"bandwidth_MBps": 50, "latency_ms": 2}).transfer_s(1e6) == pytest.approx(0.022)
    for doc, field in (({"bandwidth_MBps": 0}, "link.bandwidth_MBps"), ({"bandwidth_MBps": float("inf")},
                       "link.bandwidth_MBps"), ({"latency_ms": -1}, "link.latency_ms"), ({"rate": 1}, "link.rate")):
        with pytest.raises(LinkError, match=field):
            LinkSpec.from_dict(doc)
    for n in (0, 251, 2.0):
        with pytest.raises(LinkError, match="nodes"):
            ShapedNodes(n, LinkSpec())


def _transfers(net: ShapedNodes, nbytes: int, k: int) -> list[float]:
    """Seconds of each of ``k`` concurrent transfers of ``nbytes`` from node 0 to node 1."""
    xfer = str(WORKERS / "xfer.py")
    server = subprocess.Popen(net.command(1, [sys.executable, xfer, "serve", "5000", str(k)]),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        sent = subprocess.run(net.command(0, [sys.executable, xfer, "send", net.address(1), "5000", str(nbytes),
                                              str(k)]), capture_output=True, text=True, timeout=60, check=True)
        server.wait(30)
    finally:
        server.kill()
        server.wait()
    return json.loads(sent.stdout)


@needs_netns
def test_two_concurrent_transfers_share_the_shaped_bandwidth():
    """20 MB/s: 3 MB alone takes 0.15 s; two at once move 6 MB through the same port, so the pair takes 0.3 s."""
    with ShapedNodes(2, LinkSpec(bandwidth_MBps=20.0)) as net:
        assert len(namespaces_of(os.getpid())) == 3
        (alone,) = _transfers(net, 3_000_000, 1)
        both = _transfers(net, 3_000_000, 2)
    assert 0.12 <= alone <= 0.2  # the shaped rate, not loopback's GB/s
    # they contend: the pair's 6 MB go through one 20 MB/s port (0.3 s), longer than one alone can take (read
    # against the shaped times, not the measured alone, which a loaded machine stretches: 0.166 s beside 0.288)
    assert max(both) >= 0.24
    assert 6e6 / max(both) == pytest.approx(20e6, rel=0.2)
    assert namespaces_of(os.getpid()) == []


@needs_netns
def test_a_node_reaches_the_other_nodes_and_nothing_beyond():
    """No route out of the star: a packet to an outside address (the resolver's, for the name lookup torch
    makes of the master's address) fails at once instead of waiting for an answer that cannot come."""
    probe = ("import errno, socket, sys\n"
             "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "try:\n    s.connect((sys.argv[1], 53))\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\n"
             "else:\n    print('connected')\n")
    with ShapedNodes(3, LinkSpec()) as net:
        routes = subprocess.run(["ip", "-n", net.namespace(1), "route", "show"], capture_output=True, text=True,
                                check=True).stdout
        outside = subprocess.run(net.command(1, [sys.executable, "-c", probe, "192.0.2.1"]), capture_output=True,
                                 text=True, timeout=30, check=True).stdout.strip()
        inside = subprocess.run(net.command(1, [sys.executable, "-c", probe, net.address(2)]), capture_output=True,
                                text=True, timeout=30, check=True).stdout.strip()
    assert "default" not in routes and "10.77.0.0/16 via 10.77.1.1" in routes
    assert outside == "ENETUNREACH" and inside == "connected"


@needs_netns
def test_namespaces_go_on_an_error_and_stale_ones_are_swept():
    with pytest.raises(RuntimeError):
        with ShapedNodes(3, LinkSpec()):
            assert len(namespaces_of(os.getpid())) == 4
            raise RuntimeError("boom")
    assert namespaces_of(os.getpid()) == []
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = f"trl{int(dead.stdout)}x0n0"  # a namespace whose owner died without cleaning up (SIGKILL)
    subprocess.run(["ip", "netns", "add", stale], check=True)
    assert stale in sweep_stale() and stale not in namespaces_of()


@needs_netns
def test_a_latency_without_netem_is_one_line_naming_the_field():
    try:
        with ShapedNodes(2, LinkSpec(latency_ms=1.0)):
            pass  # this kernel has netem: nothing to refuse
    except LinkError as e:
        assert "link.latency_ms" in str(e) and "netem" in str(e)
    assert namespaces_of(os.getpid()) == []


# ---------------------------------------------------------------- the rank launcher
def _run(mode, tmp_path, **kw):
    env = {"PYTHONPATH": os.pathsep.join([str(WORKERS), os.environ.get("PYTHONPATH", "")])}
    return run_ranks("allreduce_worker", [mode], 4, out_dir=tmp_path, env=env, **kw)


def _no_leftovers():
    time.sleep(0.3)
    mine = [p for p in psutil.Process().children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]
    assert not mine, [p.cmdline() for p in mine]
    assert namespaces_of(os.getpid()) == []


@needs_netns
def test_ranks_in_shaped_nodes_pinned_to_cores(tmp_path):
    results = _run("ok", tmp_path, timeout_s=120, procs_per_node=2, link=LinkSpec(bandwidth_MBps=50.0))
    assert [r["sum"] for r in results] == [40.0] * 4  # (1 + 2 + 3 + 4) summed twice over 4 ranks
    assert [r["cpus"] for r in results] == [[core_of(r)] for r in range(4)]
    assert core_of(len(cores())) == cores()[0]  # more ranks than cores: they share, round robin
    _no_leftovers()


@needs_netns
def test_a_dead_rank_is_named_and_leaves_no_process_or_namespace(tmp_path):
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"rank 1 failed \(exit code 3\): rank 1 exits on purpose"):
        _run("die", tmp_path, timeout_s=120, collective_timeout_s=60, procs_per_node=2, link=LinkSpec())
    assert time.monotonic() - start < 30  # not the collective timeout: the launcher saw it die
    _no_leftovers()


def test_loopback_ranks_and_a_hang_times_out(tmp_path):
    assert [r["sum"] for r in _run("ok", tmp_path / "ok", timeout_s=120)] == [40.0] * 4
    with pytest.raises(WorkerError, match="no result within 5 s"):
        _run("hang", tmp_path / "hang", timeout_s=5, collective_timeout_s=60)
    _no_leftovers()


def test_cluster_network_reads_nodes_and_the_one_inter_node_link():
    from trinity.cluster import cluster_from_dict, load_cluster
    from trinity.runtime.links import cluster_network
    assert cluster_network(load_cluster("local4h")) == ([0, 0, 1, 1], LinkSpec(bandwidth_MBps=100.0, latency_ms=0.0))
    assert cluster_network(load_cluster("hetero8"))[1] == LinkSpec(bandwidth_MBps=1250.0, latency_ms=0.0)
    uneven = cluster_from_dict({"devices": [{"name": n, "node": n, "memory_GB": 8} for n in "abc"],
                                "default_link": {"bandwidth_GBps": 0.1, "latency_us": 100},
                                "links": [{"src": "a", "dst": "b", "bandwidth_GBps": 1.0, "latency_us": 100}]})
    with pytest.raises(LinkError, match="links: kernel-shaped links take one link between every two nodes"):
        cluster_network(uneven)


@needs_netns
def test_sigterm_to_a_stage_mid_run_leaves_no_rank_and_no_namespace(tmp_path):
    """As DVC or a scheduler stops a stage: SIGTERM becomes an exception, and run_ranks' cleanup runs."""
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(WORKERS)!r})
from trinity.stages import _sigterm_as_interrupt
from trinity.runtime.links import LinkSpec
from trinity.runtime.ranks import run_ranks
signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
env = {{"PYTHONPATH": os.pathsep.join([{str(WORKERS)!r}, os.environ.get("PYTHONPATH", "")])}}
run_ranks("allreduce_worker", ["hang"], 4, out_dir={str(tmp_path)!r}, timeout_s=300, procs_per_node=2,
          link=LinkSpec(), env=env, collective_timeout_s=300)
"""
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("rank*.log"))) < 4 or len(namespaces_of(proc.pid)) < 3:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    time.sleep(2)  # the ranks are up, rank 1 hangs
    assert len(_ranks_of(tmp_path)) == 4
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) != 0
    assert namespaces_of(proc.pid) == []
    assert _ranks_of(tmp_path) == []


def _ranks_of(out_dir) -> list:
    """Processes started as ranks writing into ``out_dir`` (their environment names it)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("TRINITY_RANK_OUT") == str(out_dir.resolve()):
                found.append(p)
        except psutil.Error:
            pass
    return found
