"""Atomic writes: all or nothing, durable, and readable as the user's umask says."""

import os
import stat

import pytest

from trinity import fileio
from trinity.fileio import atomic_write_bytes


@pytest.fixture
def umask(monkeypatch):
    """Set the process umask for one test (and forget fileio's cached copy); restored afterwards."""
    old = os.umask(0o022)
    os.umask(old)

    def set_umask(mask: int) -> None:
        os.umask(mask)
        monkeypatch.setattr(fileio, "_UMASK", None)

    yield set_umask
    os.umask(old)
    fileio._UMASK = None


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_follow_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    path = tmp_path / "out.json"
    atomic_write_bytes(path, b"{}")
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert os.umask(mask) == mask  # reading the umask put it back


def test_umask_is_read_once(tmp_path, umask, monkeypatch):
    umask(0o022)
    calls = []
    real = os.umask
    monkeypatch.setattr(os, "umask", lambda m: calls.append(m) or real(m))
    for i in range(3):
        atomic_write_bytes(tmp_path / f"{i}.txt", b"x")
    assert len(calls) == 2  # set to 0 and restored, the first time only


def test_failure_mid_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    atomic_write_bytes(path, b"old")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left behind


def test_the_folder_is_synced_and_a_refusal_is_ignored(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append("folder")
            raise OSError(22, "Invalid argument")  # as some file systems answer for a folder
        synced.append("file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "sub" / "out.json", b"data")
    assert synced == ["file", "folder"]
    assert (tmp_path / "sub" / "out.json").read_bytes() == b"data"


def test_a_gzip_bomb_is_refused_before_it_fills_memory(tmp_path):
    import gzip

    import pytest

    from trinity.errors import FormatError
    from trinity.fileio import read_json

    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b"[" + b" " * (50 * 2**20) + b"1]"))  # 50 MiB of spaces, ~50 kB on disk
    with pytest.raises(FormatError, match="bomb.json.gz: expands past 10 MiB"):
        read_json(bomb, max_bytes=10 * 2**20)
    assert read_json(bomb) == [1]  # under the default limit it reads
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes(gzip.compress(b'{"a": 1}')[:-6])
    with pytest.raises(FormatError, match="truncated or corrupt gzip data"):
        read_json(truncated)
