"""A sweep on a real SLURM: a single-node cluster on this machine (slurm-wlm, munge, slurmdbd on MariaDB),
an `mlflow server`, searches submitted through Hydra's submitit launcher.

Checked: jobs queue and run two at a time on a node of 2 CPUs (one each), every job logs to the server
under one parent run, a cancelled job (`scancel`) ends its run KILLED, and the same sweep submitted again
resumes that job from its checkpoint in its own run, under the same parent. Bad input is refused in one
line before anything is submitted. Skips in one line where the packages cannot be installed.
`make test-slurm` runs this file.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_pipeline import BIN, ENV, make_project, sh
from trinity.slurm import local
from trinity.track import TrackingServer

pytestmark = pytest.mark.slow

SMOKE = "experiments/smoke"  # the smoke experiment's folder: its data, runs/ and results (paths.*)
SEEDS = (0, 1, 2, 3)
ITERATIONS = 400  # about 20 s of search per job here
SWEEP = ["pipeline/search.py", "-m", "experiment=smoke", "hydra/launcher=submitit_slurm_trinity",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=20",
         "job.model=layered12", "job.cluster=p100x2", "job.method=hierarchical",
         f"job.seed={','.join(map(str, SEEDS))}", f"methods.hierarchical.search.iterations={ITERATIONS}",
         "methods.hierarchical.search.checkpoint_every=1", "paths.results=slurm_results", "mlflow.experiment=slurm"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A project with layered12 embedded, a local SLURM of the machine's CPUs and a tracking server; every
    daemon is stopped and its state removed when the module ends, however it ends."""
    why = local.install()
    if why:
        pytest.skip(f"no local SLURM: {why}")
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        pytest.skip("no Hydra submitit launcher: pip install -e '.[slurm]'")
    project = make_project(tmp_path_factory.mktemp("slurm"))
    sh(sys.executable, "-m", "trinity.stages.params", "experiment=smoke", "run.models=[layered12]",
       "run.regime.models=[]", cwd=project)
    sh(BIN / "dvc", "repro", "embed@layered12", cwd=project / SMOKE, timeout=600)  # the smoke experiment's data
    with local.LocalSlurm(cpus=2) as slurm, TrackingServer(project / "tracking") as server:
        yield project, slurm, {**slurm.env, "PATH": ENV["PATH"], "MLFLOW_TRACKING_URI": server.uri,
                               "PYTHONUNBUFFERED": "1"}, server.uri


def sweep(project, env, sweep_dir, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *SWEEP, f"hydra.sweep.dir={sweep_dir}", *extra], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def job_errors(project: Path, sweep_dir: str) -> str:
    """The end of each SLURM job's stderr (submitit's logs), for a failure's message."""
    logs = sorted((project / sweep_dir / ".submitit").glob("*/*_log.err"))
    return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}" for log in logs)


def runs(uri: str):
    import mlflow

    mlflow.set_tracking_uri(uri)  # each test starts without it (conftest)
    return mlflow.search_runs(experiment_names=["slurm"])


@pytest.mark.parametrize("extra, env_change, message", [
    (["hydra.launcher.partition=gpu-nowhere"], {}, "hydra.launcher.partition: SLURM partition 'gpu-nowhere' "
                                                   "does not exist; partitions: trinity"),
    ([], {"MLFLOW_TRACKING_URI": None}, "a SLURM sweep logs from every node, so it needs a tracking server"),
    ([], {"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, "MLflow tracking server http://127.0.0.1:9 is not reachable"),
])
def test_bad_input_is_refused_in_one_line_before_any_job(cluster, extra, env_change, message):
    project, slurm, env, _ = cluster
    env = {k: v for k, v in {**env, **env_change}.items() if v is not None}
    proc = sweep(project, env, "sweeps/refused", *extra)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2, out
    assert message in out and "Traceback" not in out
    assert slurm.queue() == [] and not (project / "sweeps" / "refused" / ".submitit").exists()


@pytest.fixture(scope="module")
def cancelled(cluster):
    """The sweep with seed 0's job cancelled mid-search, run until the queue is empty; squeue's states
    every half second."""
    project, slurm, env, uri = cluster
    proc = sweep(project, env, "sweeps/first")
    states, cancelled_at = [], None
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        queue = dict(slurm.queue())
        states.append(queue)
        first = next((job for job, state in queue.items() if job.endswith("_0") and state == "RUNNING"), None)
        if cancelled_at is None and first and list((project / SMOKE).glob("runs/layered12-p100x2-hierarchical-s0-*/"
                                                                           "checkpoint.pt")):
            subprocess.run(["scancel", first], env=env, check=True, timeout=60)
            cancelled_at = first
        time.sleep(0.5)
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=60)
    # the sweep stops waiting at the cancelled job; the others run on, as jobs on a cluster do
    while slurm.queue() and time.monotonic() < deadline:
        states.append(dict(slurm.queue()))
        time.sleep(0.5)
    assert cancelled_at, \
        f"seed 0's job never ran with a checkpoint: {out[-3000:]}\n{job_errors(project, 'sweeps/first')}"
    return states, out, runs(uri)


def test_jobs_queue_and_run_in_parallel_as_the_node_allows(cancelled):
    states, out, table = cancelled
    running = [sum(s == "RUNNING" for s in queue.values()) for queue in states]
    assert max(running) == 2, running  # 2 CPUs, one per job
    assert any("PENDING" in queue.values() for queue in states)  # 4 jobs: two wait
    # the runs' own times agree: two overlap, never three
    jobs = table[table["tags.trinity.stage"] == "search"]
    assert len(jobs) == len(SEEDS)
    spans = sorted(zip(jobs["start_time"], jobs["end_time"]))
    at_once = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert at_once == 2


def test_every_job_logs_under_one_parent_and_the_cancelled_one_ends_killed(cancelled):
    _, out, table = cancelled
    parents = table[table["tags.trinity.stage"] == "multirun"]
    assert len(parents) == 1 and parents["status"].iloc[0] == "FAILED", out[-3000:]  # one job did not complete
    children = table[table["tags.mlflow.parentRunId"] == parents["run_id"].iloc[0]]
    status = dict(zip(children["tags.mlflow.runName"], children["status"]))
    assert status == {"search/layered12-p100x2-hierarchical-s0": "KILLED",
                      **{f"search/layered12-p100x2-hierarchical-s{s}": "FINISHED" for s in SEEDS[1:]}}


def test_a_resubmitted_sweep_resumes_the_cancelled_job_from_its_checkpoint(cluster, cancelled):
    project, slurm, env, uri = cluster
    _, _, before = cancelled
    proc = sweep(project, env, "sweeps/second")
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    after = runs(uri)
    assert sorted(after["run_id"]) == sorted(before["run_id"])  # the same parent and the same four runs
    assert set(after["status"]) == {"FINISHED"}
    logs = "".join(p.read_text() for p in Path(project, "sweeps", "second", ".submitit").rglob("*_0_log.out"))
    resumed = [line for line in logs.splitlines()
               if line.startswith(f"resuming {SMOKE}/runs/layered12-p100x2-hierarchical-s0")]
    assert resumed and int(resumed[0].rsplit(" ", 1)[1]) > 0, logs[-3000:]
    s0 = after[after["tags.mlflow.runName"] == "search/layered12-p100x2-hierarchical-s0"]
    from mlflow.tracking import MlflowClient

    steps = [m.step for m in MlflowClient(uri).get_metric_history(s0["run_id"].iloc[0], "charts/reward_mean")]
    assert sorted(steps) == list(range(ITERATIONS))  # every iteration logged once, across both jobs
