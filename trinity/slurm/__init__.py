"""SLURM sweeps: what a sweep through Hydra's submitit launcher needs, checked before it submits anything.

A SLURM job runs on whichever node the scheduler picks, so it must log to a tracking server every node
reaches (a local SQLite file is one node's), and the partition it asks for must exist. `check_launcher`
refuses either in one line; `trinity.stages.multirun` calls it before the launcher starts any job.
`local.py` runs a single-node SLURM on this machine (tests, and sweeps here through the cluster's path).
"""

from __future__ import annotations

import shutil
import subprocess

from trinity.errors import TrinityError


def is_slurm_launcher(launcher) -> bool:
    """Whether Hydra's launcher config (``hydra.launcher``) submits to SLURM."""
    target = str((launcher or {}).get("_target_", ""))
    return "submitit" in target and target.endswith("SlurmLauncher")


def partitions(env: dict | None = None, timeout_s: float = 30) -> tuple[list[str], str | None]:
    """The cluster's partitions and its default one, from `sinfo`; one line if SLURM cannot be asked."""
    if shutil.which("sinfo") is None:
        raise TrinityError("sinfo not found: a SLURM sweep is submitted from a host with SLURM's client commands",
                           field="hydra/launcher")
    try:
        res = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise TrinityError(f"sinfo did not answer in {timeout_s:.0f} s: is slurmctld up?",
                           field="hydra/launcher") from None
    if res.returncode:
        why = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise TrinityError(f"SLURM does not answer (sinfo: {why})", field="hydra/launcher")
    names = [line.strip() for line in res.stdout.splitlines() if line.strip()]
    default = next((n.rstrip("*") for n in names if n.endswith("*")), None)
    return [n.rstrip("*") for n in names], default


def check_launcher(launcher, tracking_uri: str, env: dict | None = None) -> None:
    """Refuse a SLURM sweep without a tracking server URI or on a partition that does not exist."""
    if not is_slurm_launcher(launcher):
        return
    if not tracking_uri.startswith(("http://", "https://")):
        raise TrinityError(f"a SLURM sweep logs from every node, so it needs a tracking server: set "
                           f"MLFLOW_TRACKING_URI=http://HOST:PORT (now {tracking_uri})", field="MLFLOW_TRACKING_URI")
    names, default = partitions(env)
    wanted = launcher.get("partition")
    if wanted is None and default is None:
        raise TrinityError(f"SLURM has no default partition; set hydra.launcher.partition to one of "
                           f"{', '.join(names) or 'none'}", field="hydra.launcher.partition")
    if wanted is not None and str(wanted) not in names:
        raise TrinityError(f"SLURM partition {str(wanted)!r} does not exist; partitions: {', '.join(names) or 'none'}",
                           field="hydra.launcher.partition")
