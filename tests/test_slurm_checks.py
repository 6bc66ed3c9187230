"""A SLURM sweep's checks before it submits (trinity.slurm), against a stand-in `sinfo`: no SLURM needed."""

from __future__ import annotations

import os
import stat

import pytest

from trinity.errors import TrinityError
from trinity.slurm import check_launcher, is_slurm_launcher, partitions

SLURM = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher", "partition": None}
SERVER = "http://tracking-host:5000"


def test_which_launchers_submit_to_slurm():
    assert is_slurm_launcher(SLURM)
    assert not is_slurm_launcher({"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"})
    assert not is_slurm_launcher({"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"})
    assert not is_slurm_launcher(None)


@pytest.fixture
def sinfo(tmp_path, monkeypatch):
    """Put a `sinfo` on PATH that prints ``out`` (or fails with ``err``)."""
    def make(out: str = "", err: str = "", code: int = 0):
        script = tmp_path / "sinfo"
        script.write_text(f"#!/bin/sh\nprintf '{out}'\nprintf '{err}' >&2\nexit {code}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return make


def test_partitions_and_the_default_one(sinfo):
    sinfo("debug*\\ngpu\\n")
    assert partitions() == (["debug", "gpu"], "debug")


def test_a_sweep_on_an_existing_or_the_default_partition_passes(sinfo):
    sinfo("debug*\\ngpu\\n")
    check_launcher(SLURM, SERVER)
    check_launcher({**SLURM, "partition": "gpu"}, SERVER)
    check_launcher({"_target_": "joblib"}, "sqlite:///mlflow.db")  # not SLURM: nothing to check


@pytest.mark.parametrize("launcher, uri, out, err, code, message", [
    (SLURM, "sqlite:///mlflow.db", "debug*\\n", "", 0,
     "MLFLOW_TRACKING_URI: a SLURM sweep logs from every node, so it needs a tracking server: set "
     "MLFLOW_TRACKING_URI=http://HOST:PORT (now sqlite:///mlflow.db)"),
    ({**SLURM, "partition": "cpu"}, SERVER, "debug*\\ngpu\\n", "", 0,
     "hydra.launcher.partition: SLURM partition 'cpu' does not exist; partitions: debug, gpu"),
    (SLURM, SERVER, "gpu\\n", "", 0,
     "hydra.launcher.partition: SLURM has no default partition; set hydra.launcher.partition to one of gpu"),
    (SLURM, SERVER, "", "slurm_load_partitions: Unable to contact slurm controller (connect failure)\\n", 1,
     "hydra/launcher: SLURM does not answer (sinfo: slurm_load_partitions: Unable to contact slurm controller "
     "(connect failure))"),
])
def test_a_sweep_that_cannot_run_is_one_line(sinfo, launcher, uri, out, err, code, message):
    sinfo(out, err, code)
    with pytest.raises(TrinityError) as exc:
        check_launcher(launcher, uri)
    assert str(exc.value) == message


def test_without_slurm_commands_it_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TrinityError, match="sinfo not found"):
        check_launcher(SLURM, SERVER)
