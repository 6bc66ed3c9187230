"""Reading and writing JSON/YAML files safely.

Writes are atomic (temporary file in the same folder, then rename), so an
interrupted run never leaves a half-written output; durable (the folder is
synced after the rename); and readable by whoever the user's umask lets read
a new file. Reads turn every decode failure into a one-line `FormatError`
naming the file.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

import yaml

from trinity.errors import FormatError


_UMASK: int | None = None


def _umask() -> int:
    """The process umask. Reading it means setting it, so do that once and restore it at once."""
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0)
        os.umask(_UMASK)
    return _UMASK


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable; some platforms cannot open or sync a folder."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` all or nothing, readable as any new file of this user is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp made it 0600: private to the writer
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON, gzip-compressed when the name ends in ``.gz``."""
    data = json.dumps(obj, indent=None if str(path).endswith(".gz") else 1).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(path, data)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise FormatError("file not found", source=str(path)) from None
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None


#: the most a gzip file may expand to (a 100k-op graph is ~100 MB of JSON): a "gzip bomb" is refused
MAX_DECOMPRESSED_BYTES = 4 * 2**30


def _gunzip(raw: bytes, source: str, limit: int) -> bytes:
    """Decompress in pieces, refusing output past ``limit`` before it is held in memory."""
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out, size = [], 0
    try:
        for i in range(0, len(raw), 1 << 20):
            piece = d.decompress(raw[i:i + (1 << 20)], limit - size + 1)
            while True:
                size += len(piece)
                if size > limit:
                    raise FormatError(f"expands past {limit / 2**20:,.0f} MiB: not a file this project wrote",
                                      source=source)
                out.append(piece)
                if not d.unconsumed_tail:
                    break
                piece = d.decompress(d.unconsumed_tail, limit - size + 1)
        out.append(d.flush())
        if not d.eof:
            raise EOFError
    except (EOFError, zlib.error):
        raise FormatError("truncated or corrupt gzip data", source=source) from None
    return b"".join(out)


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> Any:
    path = Path(path)
    raw = _read_bytes(path)
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, str(path), max_bytes)
    try:
        return json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, or an integer of thousands of digits
        msg = getattr(exc, "msg", str(exc))
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise FormatError(f"not valid JSON (truncated?): {msg}{where}", source=str(path)) from None
    except RecursionError:
        raise FormatError("not valid JSON: nested too deeply", source=str(path)) from None


def write_yaml(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_bytes(path, yaml.safe_dump(obj, sort_keys=False).encode())


def read_yaml(path: str | os.PathLike) -> Any:
    path = Path(path)
    raw = _read_bytes(path)
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise FormatError(f"not valid YAML: {exc}".replace("\n", " "), source=str(path)) from None
    except (ValueError, OverflowError) as exc:  # a scalar YAML resolves but cannot build, e.g. date 2001-13-01
        raise FormatError(f"not valid YAML: {exc}", source=str(path)) from None
    except RecursionError:
        raise FormatError("not valid YAML: nested too deeply", source=str(path)) from None


def check_format(doc: Any, expected: str, version: int, source: str) -> None:
    """Require ``doc["format"] == f"{expected}/{version}"`` with a clear message otherwise."""
    if not isinstance(doc, dict):
        raise FormatError(f"expected a JSON object, got {type(doc).__name__}", source=source)
    fmt = doc.get("format")
    if not isinstance(fmt, str) or "/" not in fmt:
        raise FormatError(f"missing or malformed format tag {fmt!r}; expected '{expected}/{version}'",
                          source=source, field="format")
    name, _, ver = fmt.rpartition("/")
    if name != expected:
        raise FormatError(f"is {name!r}, expected {expected!r}", source=source, field="format")
    if ver != str(version):
        raise FormatError(f"version {ver} is not supported (this Trinity reads version {version})",
                          source=source, field="format")
