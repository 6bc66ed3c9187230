"""Sharing outputs through a DVC remote (trinity.share): the repository's default is a local folder, any
URL is one command, push then pull in a fresh checkout restores the outputs, and a remote that cannot be
reached is one line before anything is sent."""

from __future__ import annotations

import configparser
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {"PATH": f"{BIN}:/usr/bin:/bin", "DVC_NO_ANALYTICS": "1", "PYTHONPATH": str(ROOT), "HOME": "/tmp"}


def share(project: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trinity.share", *map(str, args)], cwd=project, env=ENV,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path) -> Path:
    """A DVC project of one stage that wrote ``out/table.csv``."""
    folder = tmp_path / "project"
    folder.mkdir()
    subprocess.run([BIN / "dvc", "init", "--no-scm", "-q"], cwd=folder, env=ENV, check=True)
    (folder / "dvc.yaml").write_text("stages:\n  make:\n    cmd: mkdir -p out && echo 'a,b' > out/table.csv\n"
                                     "    outs: [out]\n")
    subprocess.run([BIN / "dvc", "repro", "-q"], cwd=folder, env=ENV, check=True, timeout=300)
    return folder


def test_the_repository_shares_through_a_local_folder_by_default():
    config = configparser.ConfigParser()
    config.read(ROOT / ".dvc" / "config")
    assert config["core"]["remote"] == "shared"
    url = config["'remote \"shared\"'"]["url"]
    assert "://" not in url and (ROOT / ".dvc" / url).resolve() == ROOT.parent / "trinity-dvc-store"


def test_push_then_pull_in_a_fresh_checkout_restores_the_outputs(project, tmp_path):
    store = tmp_path / "store"
    res = share(project, "set", store)
    assert res.returncode == 0 and f"DVC remote 'shared': {store}" in res.stdout, res.stderr
    assert share(project, "push").returncode == 0
    assert any(p.is_file() for p in store.rglob("*"))  # the outputs' content is in the store
    clone = tmp_path / "clone"  # what a teammate has: the project's files, no cache, no outputs
    shutil.copytree(project, clone, ignore=shutil.ignore_patterns("cache", "tmp", "out"))
    res = share(clone, "pull")
    assert res.returncode == 0, res.stderr
    assert (clone / "out" / "table.csv").read_text() == "a,b\n"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("url", ["/proc/no-such-store", "http://127.0.0.1:{port}/store"])
def test_a_remote_that_cannot_be_reached_is_one_line_before_anything_is_sent(project, url):
    url = url.format(port=_closed_port())
    share(project, "set", url)
    res = share(project, "push")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    line, = res.stderr.strip().splitlines()
    assert line.startswith(f"trinity share: error: remote: DVC remote 'shared' ({url}) cannot be reached: ")
    assert "Pushed" not in res.stdout + res.stderr
