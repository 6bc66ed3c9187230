"""Reading and writing JSON/YAML files safely.

Writes are atomic (temporary file in the same folder, then rename), so an
interrupted run never leaves a half-written output. Reads turn every decode
failure into a one-line `FormatError` naming the file.
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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON, gzip-compressed when the name ends in ``.gz``."""
    data = json.dumps(obj, indent=None if str(path).endswith(".gz") else 1).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(path, data)


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FormatError("file not found", source=str(path)) from None
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror}", source=str(path)) from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error):
            raise FormatError("truncated or corrupt gzip data", source=str(path)) from None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        msg = getattr(exc, "msg", str(exc))
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise FormatError(f"not valid JSON (truncated?): {msg}{where}", source=str(path)) from None


def write_yaml(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_bytes(path, yaml.safe_dump(obj, sort_keys=False).encode())


def read_yaml(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except FileNotFoundError:
        raise FormatError("file not found", source=str(path)) from None
    except yaml.YAMLError as exc:
        raise FormatError(f"not valid YAML: {exc}".replace("\n", " "), source=str(path)) from None


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
