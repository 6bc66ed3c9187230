"""A single-node SLURM cluster on this machine, for tests and for running sweeps here through the same
path as on a real cluster.

    with LocalSlurm() as slurm:                 # munge, MariaDB, slurmdbd, slurmctld, slurmd
        subprocess.run(["sbatch", ...], env=slurm.env)

It runs Debian's `slurm-wlm`, `slurmdbd`, `munge` and `mariadb-server` (`install()` installs them with
apt-get), as the current user, on free local ports: a controller and one node with ``cpus`` CPUs, one
partition, and job accounting (slurmdbd on a private MariaDB), because submitit reads a job's end
(CANCELLED, FAILED) from `sacct`: without accounting a cancelled job would leave its sweep waiting.
Everything (configuration, keys, sockets, database, spool, logs) lives in one temporary folder; each
daemon runs in the foreground in its own session, and every one is stopped and the folder removed on
every exit path (an exception, Ctrl-C, SIGTERM). Clients reach this cluster through ``env``
(``SLURM_CONF``), so a machine's own SLURM, if any, is left alone.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from trinity.errors import TrinityError

#: Debian packages and the programs this module runs from them
PACKAGES = ("slurm-wlm", "slurmdbd", "munge", "mariadb-server")
PROGRAMS = ("munged", "mungekey", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd", "sbatch",
            "squeue", "sinfo", "sacct", "sacctmgr", "scancel")
CLUSTER = "trinity"
PARTITION = "trinity"
NODE = "trinity-node"


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


def install(timeout_s: float = 900) -> str | None:
    """Install the Debian packages if a program is missing; None when ready, else why not (one line)."""
    if not missing_programs():
        return None
    if shutil.which("apt-get") is None:
        return f"no apt-get here to install {' '.join(PACKAGES)}"
    if os.geteuid() != 0:
        return f"installing {' '.join(PACKAGES)} needs root"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        res = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES], env=env,
                             capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"apt-get install {' '.join(PACKAGES)} took over {timeout_s:.0f} s"
    if res.returncode or missing_programs():
        last = (res.stderr.strip().splitlines() or ["exit status %d" % res.returncode])[-1]
        return f"apt-get install {' '.join(PACKAGES)} failed: {last}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class LocalSlurm:
    """A controller, one node (``cpus`` CPUs, ``memory_mb`` MB) and accounting, in a temporary folder."""

    def __init__(self, cpus: int | None = None, memory_mb: int | None = None, kill_wait_s: int = 30,
                 start_timeout_s: float = 120):
        import psutil

        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = memory_mb or int(psutil.virtual_memory().total / 2**20 * 0.9)
        self.kill_wait_s = kill_wait_s
        self.start_timeout_s = start_timeout_s
        self.dir: Path | None = None
        self._previous = None
        self._daemons: list[tuple[str, subprocess.Popen]] = []

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalSlurm:
        missing = missing_programs()
        if missing:
            raise TrinityError(f"SLURM programs missing: {', '.join(missing)}; install {' '.join(PACKAGES)}")
        # a SIGTERM (a scheduler, `kill`) inside the block unwinds it like Ctrl-C, so the daemons stop
        self._previous = signal.signal(signal.SIGTERM, _raise_interrupt) if _main_thread() else None
        try:
            self.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        try:
            self.stop()
        finally:
            if self._previous is not None:
                signal.signal(signal.SIGTERM, self._previous)
                self._previous = None

    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="trinity-slurm-"))  # short: unix socket paths are <108 bytes
        d = self.dir
        for sub in ("munge", "db", "ctld", "spool", "log"):
            (d / sub).mkdir(mode=0o700)
        self.ports = {name: free_port() for name in ("db", "dbd", "ctld", "slurmd")}
        self._start_munge()
        self._start_mariadb()
        self._write_configs()
        self._spawn("slurmdbd", [_program("slurmdbd"), "-D"])
        self._wait(lambda: self._ok(["sacctmgr", "-n", "list", "cluster"]), "slurmdbd", "log/slurmdbd.log")
        self._run(["sacctmgr", "-i", "add", "cluster", CLUSTER])
        self._spawn("slurmctld", [_program("slurmctld"), "-D", "-i"])
        self._wait(lambda: self._ok(["sinfo", "-h"]), "slurmctld", "log/slurmctld.log")
        self._spawn("slurmd", [_program("slurmd"), "-D", "-N", NODE])
        self._wait(lambda: self.node_state() in ("idle", "mixed", "allocated"), "slurmd", "log/slurmd.log")

    def stop(self) -> None:
        """Cancel every job, stop every daemon (last started first: slurmd, slurmctld, slurmdbd, MariaDB,
        munge; SIGTERM, then SIGKILL after 20 s), end any process still running under this cluster (a job
        step outlives slurmd), then remove the folder."""
        if self.dir is not None and any(n == "slurmctld" and p.poll() is None for n, p in self._daemons):
            self._drain()
        while self._daemons:
            name, proc = self._daemons.pop()
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=20)
                except ProcessLookupError:
                    pass
            self._kill_group(proc.pid)  # whatever the daemon left in its session (job steps, mariadb's helpers)
        if self.dir is not None:
            self._kill_leftovers()
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _drain(self) -> None:
        """Cancel every job and wait (up to KillWait + 30 s) for the queue to empty."""
        try:
            subprocess.run(["scancel", "--partition", PARTITION], env=self.env, capture_output=True, timeout=30)
            deadline = time.monotonic() + self.kill_wait_s + 30
            while self.queue() and time.monotonic() < deadline:
                time.sleep(0.5)
        except (subprocess.TimeoutExpired, OSError):
            pass

    def _kill_leftovers(self) -> None:
        """SIGKILL every process started under this cluster (its environment names our slurm.conf)."""
        import psutil

        conf = str(self.dir / "slurm.conf")
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and proc.environ().get("SLURM_CONF") == conf:
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue

    # ------------------------------------------------------------ clients
    @property
    def env(self) -> dict[str, str]:
        """The environment a client (sbatch, squeue, submitit) needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}

    def node_state(self) -> str:
        res = subprocess.run(["sinfo", "-h", "-N", "-n", NODE, "-o", "%T"], env=self.env, capture_output=True,
                             text=True, timeout=30)
        return res.stdout.strip().rstrip("*~#") if res.returncode == 0 else ""

    def queue(self) -> list[tuple[str, str]]:
        """(job id, state) of every job in the queue: PENDING, RUNNING, COMPLETING ..."""
        res = subprocess.run(["squeue", "-h", "-o", "%i %T"], env=self.env, capture_output=True, text=True,
                             timeout=30)
        return [tuple(line.split()) for line in res.stdout.splitlines() if line.strip()]

    # ------------------------------------------------------------ the daemons
    def _start_munge(self) -> None:
        d = self.dir
        self.munge_socket = d / "munge" / "munge.socket"
        self._run([_program("mungekey"), "--create", f"--keyfile={d / 'munge' / 'munge.key'}"])
        self._spawn("munged", [_program("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={d / 'munge' / 'munge.key'}", f"--pid-file={d / 'munge' / 'munged.pid'}",
                               f"--seed-file={d / 'munge' / 'munged.seed'}", f"--log-file={d / 'log' / 'munged.log'}"])
        self._wait(lambda: self.munge_socket.exists(), "munged", "log/munged.log")

    def _start_mariadb(self) -> None:
        d = self.dir
        user = _user()
        self._run(["mariadb-install-db", "--no-defaults", f"--datadir={d / 'db'}", f"--user={user}",
                   "--auth-root-authentication-method=normal", "--skip-test-db"])
        self.db_socket = d / "mysqld.sock"
        self._spawn("mariadbd", [_program("mariadbd"), "--no-defaults", f"--datadir={d / 'db'}", f"--user={user}",
                                 f"--socket={self.db_socket}", f"--port={self.ports['db']}",
                                 "--bind-address=127.0.0.1", f"--pid-file={d / 'mysqld.pid'}",
                                 f"--log-error={d / 'log' / 'mariadb.log'}", "--innodb-buffer-pool-size=32M",
                                 "--skip-name-resolve"])
        self._wait(lambda: self.db_socket.exists() and _port_open(self.ports["db"]), "mariadbd", "log/mariadb.log")

    def _write_configs(self) -> None:
        d, p, user = self.dir, self.ports, _user()
        host = socket.gethostname().split(".")[0]
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
        dbd = d / "slurmdbd.conf"
        dbd.write_text(
            f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={p['dbd']}\nSlurmUser={user}\n"
            f"PidFile={d / 'slurmdbd.pid'}\nLogFile={d / 'log' / 'slurmdbd.log'}\n"
            f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={p['db']}\n"
            f"StorageUser=root\nStorageLoc=slurm_acct_db\n")
        dbd.chmod(0o600)  # slurmdbd refuses a readable configuration (it holds the database's password)
        (d / "slurm.conf").write_text(
            f"ClusterName={CLUSTER}\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={p['ctld']}\n"
            f"SlurmdPort={p['slurmd']}\nSlurmUser={user}\nSlurmdUser=root\n{auth}CredType=cred/munge\n"
            f"StateSaveLocation={d / 'ctld'}\nSlurmdSpoolDir={d / 'spool'}\n"
            f"SlurmctldPidFile={d / 'slurmctld.pid'}\nSlurmdPidFile={d / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}\nSlurmdLogFile={d / 'log' / 'slurmd.log'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nSchedulerType=sched/backfill\n"
            "MpiDefault=none\nReturnToService=2\nSwitchType=switch/none\nLaunchParameters=use_interactive_step\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
            # AccountingStoragePass: the munge socket of connections to slurmdbd (AuthInfo covers the others)
            f"AccountingStoragePort={p['dbd']}\nAccountingStoragePass={self.munge_socket}\n"
            "JobCompType=jobcomp/none\n"
            f"KillWait={self.kill_wait_s}\nMinJobAge=300\nSchedulerParameters=sched_interval=2\n"
            f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={self.cpus} "
            f"RealMemory={self.memory_mb} State=UNKNOWN\n"
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / "log" / f"{name}.out", "ab")
        proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self._daemons.append((name, proc))

    def _wait(self, ready, name: str, log: str) -> None:
        proc = next(p for n, p in self._daemons if n == name)
        deadline = time.monotonic() + self.start_timeout_s
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited {proc.returncode}" if proc.poll() is not None else \
                    f"not ready after {self.start_timeout_s:.0f} s"
                raise TrinityError(f"local SLURM: {name} {why}: {self._tail(log)}")
            time.sleep(0.3)

    def _tail(self, log: str) -> str:
        lines = []
        for path in (self.dir / log, self.dir / "log" / f"{Path(log).stem}.out"):
            if path.exists():
                lines += path.read_text(errors="replace").strip().splitlines()[-3:]
        return " | ".join(lines) or "no log"

    def _ok(self, argv: list[str]) -> bool:
        try:
            return subprocess.run(argv, env=self.env, capture_output=True, timeout=30).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def _run(self, argv: list[str]) -> None:
        res = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=120)
        if res.returncode:
            raise TrinityError(f"local SLURM: {' '.join(argv)} exited {res.returncode}: "
                               f"{(res.stderr or res.stdout).strip()[-500:]}")

    @staticmethod
    def _kill_group(pgid: int) -> None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(*_):
    raise KeyboardInterrupt
