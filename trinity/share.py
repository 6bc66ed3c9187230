"""Sharing a run's outputs through a DVC remote: `dvc push` sends what `dvc repro` made (data/, results/,
reports/ as dvc.lock records them), `dvc pull` brings them to another checkout.

    python -m trinity.share set URL    # any DVC remote (a folder, s3://..., ssh://...), in .dvc/config.local
    python -m trinity.share check      # can the remote be reached? one line either way
    python -m trinity.share push|pull [TARGETS ...]   # check, then dvc push / dvc pull

The repository's own default (``.dvc/config``) is the folder ``trinity-dvc-store`` beside the checkout.
A remote that cannot be reached (a folder that cannot be created or written, a server that does not
answer, missing credentials) is one line and exit status 2 before anything is sent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trinity.errors import TrinityError

REMOTE = "shared"  #: the remote's name in .dvc/config


def set_remote(url: str, project: str | os.PathLike = ".") -> None:
    """Make ``url`` this checkout's default remote (in .dvc/config.local, so the shared default stays)."""
    if _dvc(["remote", "add", "--local", "--force", "--default", REMOTE, url], project):
        raise TrinityError(f"dvc remote add {REMOTE} {url} failed (see above)", field="remote")


def check_remote(project: str | os.PathLike = ".") -> str:
    """The default remote's URL, once it answers; a local folder is created if missing."""
    from dvc.repo import Repo

    with Repo(str(project)) as repo:
        name = repo.config["core"].get("remote")
        if not name:
            raise TrinityError("no default DVC remote; set one: python -m trinity.share set URL", field="remote")
        url = repo.config["remote"].get(name, {}).get("url", "?")
        try:
            remote = repo.cloud.get_remote(name)
            if remote.fs.protocol == "local":
                Path(remote.path).mkdir(parents=True, exist_ok=True)
                if not os.access(remote.path, os.W_OK):
                    raise PermissionError(f"{remote.path} is not writable")
            elif remote.fs.protocol in ("http", "https"):  # fsspec's exists() reads a refused connection as False
                _answers(url)
            else:
                remote.fs.exists(remote.path)  # reaches the storage: network, credentials, bucket
        except Exception as exc:  # noqa: BLE001 - any failure to reach it is the user's one line
            why = " ".join(str(exc).split()) or type(exc).__name__
            raise TrinityError(f"DVC remote {name!r} ({url}) cannot be reached: {why}", field="remote") from None
        return url


def _answers(url: str, timeout_s: float = 10) -> None:
    """An HTTP server answers at ``url`` (any status, a 404 included); raises if nothing does."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s).close()
    except urllib.error.HTTPError:
        pass
    except urllib.error.URLError as exc:
        raise OSError(str(exc.reason)) from None


def _dvc(args: list[str], project: str | os.PathLike) -> int:
    dvc = Path(sys.executable).with_name("dvc")
    return subprocess.call([str(dvc) if dvc.exists() else "dvc", *args], cwd=project)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "set" and len(rest) == 1:
            set_remote(rest[0])
            print(f"DVC remote {REMOTE!r}: {check_remote()}")
            return 0
        if command == "check" and not rest:
            print(f"DVC remote {REMOTE!r}: {check_remote()} answers")
            return 0
        if command in ("push", "pull"):
            check_remote()
            return _dvc([command, *rest], ".")
    except TrinityError as exc:
        print(f"trinity share: error: {exc}", file=sys.stderr)
        return 2
    print("usage: python -m trinity.share {set URL | check | push [TARGETS] | pull [TARGETS]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
