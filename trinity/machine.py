"""What this machine did beside a measurement: its load, and CPU time that others took from it.

Every real measurement (validation rounds, calibration, the measure and train stages) records it, so a
reader can tell a slow run from a disturbed one. The 1-minute load average (`machine_load`) counts the
measurement's own processes and lags a minute. `cpu_sample` reads, for the cores this process may use,
the kernel's per-core time (``/proc/stat``) and the CPU time of this process and every process it started
(reaped ones included, through their parents' ``cutime``); between two samples, `interference` gives

* ``other_cpu``: time the cores spent busy (user, nice, system) that no process of this job spent, as a
  share of the cores' time: another job on the machine;
* ``steal``: time the hypervisor gave the cores to other virtual machines, as a share: a busy host.

Interrupt time is in neither (the workers' own loopback traffic is handled there). Linux only: elsewhere a
sample is None and both shares NaN.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def machine_load() -> float:
    """This machine's 1-minute load average: recorded beside every real measurement."""
    return float(os.getloadavg()[0])


@dataclass(frozen=True)
class CpuSample:
    """Cumulative clock ticks at one moment: over the cores, and of this job's processes."""

    busy: int  # user + nice + system, summed over the cores
    steal: int
    total: int  # every state but guest time (counted in user already)
    job: int  # utime + stime + cutime + cstime of this process and its descendants


def _core_ticks(stat_text: str, cores: set[int]) -> tuple[int, int, int]:
    """(busy, steal, total) ticks summed over ``cores`` from ``/proc/stat``'s per-core lines."""
    busy = steal = total = 0
    for line in stat_text.splitlines():
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores):
            continue
        user, nice, system, idle, iowait, irq, softirq, stolen = (int(f) for f in (fields + ["0"] * 8)[:8])
        busy += user + nice + system
        steal += stolen
        total += user + nice + system + idle + iowait + irq + softirq + stolen
    return busy, steal, total


def _process_table(proc: Path) -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, utime + stime + cutime + cstime)} of every process ``proc`` lists now."""
    table = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            rest = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
            table[int(entry.name)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
        except (OSError, ValueError, IndexError):  # gone since the listing, or read as it went
            continue
    return table


def job_ticks(table: dict[int, tuple[int, int]], root: int) -> int:
    """CPU ticks of ``root`` and every descendant in ``table`` (a `_process_table`)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    ticks, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            ticks += table[pid][1]
        todo += children.get(pid, [])
    return ticks


def cpu_sample(proc: Path = PROC) -> CpuSample | None:
    """The cores' and this job's ticks now (None where ``proc`` has no kernel statistics)."""
    try:
        stat = (proc / "stat").read_text()
        table = _process_table(proc)
    except OSError:
        return None
    busy, steal, total = _core_ticks(stat, set(os.sched_getaffinity(0)))
    return CpuSample(busy, steal, total, job_ticks(table, os.getpid()))


def interference(before: CpuSample | None, after: CpuSample | None) -> dict[str, float]:
    """Shares of the cores' time between two samples that other processes (``other_cpu``) and other virtual
    machines (``steal``) took; NaN without both samples or without time between them."""
    if before is None or after is None or after.total <= before.total:
        return {"other_cpu": math.nan, "steal": math.nan}
    total = after.total - before.total
    other = (after.busy - before.busy) - (after.job - before.job)
    return {"other_cpu": max(other, 0) / total, "steal": (after.steal - before.steal) / total}


class MachineWatch:
    """The machine's load and interference from its creation to `metrics`: what a stage records."""

    def __init__(self):
        self.load_before, self.sample = machine_load(), cpu_sample()

    def metrics(self) -> dict[str, float]:
        return {"load_before": self.load_before, "load_after": machine_load(),
                **interference(self.sample, cpu_sample())}
