"""Run a command against a SLURM and a tracking server started on this machine for it, then stop both.

    python -m trinity.slurm [--cpus N] [--tracking DIR] -- COMMAND ...

The command sees ``SLURM_CONF`` (sbatch, squeue, Hydra's submitit launcher reach the local cluster) and
``MLFLOW_TRACKING_URI`` (an `mlflow server` whose SQLite store and artifacts stay in DIR afterwards,
`tracking/` by default). Every daemon stops when the command ends, fails or is interrupted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from trinity.errors import TrinityError
from trinity.slurm.local import LocalSlurm, install
from trinity.track import TrackingServer


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(prog="python -m trinity.slurm", description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=os.cpu_count(), help="the node's CPUs (default: this machine's)")
    parser.add_argument("--tracking", default="tracking", help="the tracking server's folder")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not command:
        parser.error("give the command after --")
    why = install()
    if why:
        print(f"trinity slurm: error: {why}", file=sys.stderr)
        return 2
    try:
        with LocalSlurm(cpus=args.cpus) as slurm, TrackingServer(args.tracking) as server:
            print(f"SLURM: {args.cpus} CPUs, partition trinity; MLflow: {server.uri} ({args.tracking}/)", flush=True)
            child = subprocess.Popen(command, env={**slurm.env, "MLFLOW_TRACKING_URI": server.uri})
            try:
                return child.wait()
            except KeyboardInterrupt:
                child.terminate()
                child.wait(timeout=60)
                return 130
    except TrinityError as exc:
        print(f"trinity slurm: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
