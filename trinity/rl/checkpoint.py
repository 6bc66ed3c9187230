"""A search's checkpoint on disk: written atomically, read back with one-line errors, and matched
against the settings of the search resuming it (a resume under other settings is refused, naming
them, because it would silently continue another search)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import torch

from trinity.cluster import Cluster
from trinity.errors import TrinityError
from trinity.fileio import atomic_write_bytes

FILE = "checkpoint.pt"

#: settings a search may change when resumed: they do not shape its state
RESUMABLE_CHANGES = ("iterations", "checkpoint_every", "threads", "sim_threads")


def save(path: Path, state: dict) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def load(path: Path) -> dict:
    try:
        return torch.load(path, weights_only=False)
    except Exception as exc:  # any unpickling problem means the file is unusable
        raise TrinityError(f"checkpoint is corrupt ({type(exc).__name__}: {str(exc)[:200]}); "
                           "pass --fresh to discard it and start over", source=str(path)) from None


def shaping(search_config: dict, cluster: Cluster) -> dict:
    """Everything that shapes a search's state, flattened to ``a.b.c`` keys: a resume must match it."""
    c = cluster
    shared = [c.corun_slowdown, c.step_sync_us] if c.corun_slowdown or c.step_sync_us else []  # old hashes hold
    h = hashlib.sha256(json.dumps([c.device_names, [d.kind for d in c.devices], c.send_cpu_share, *shared]).encode())
    for a in (c.bandwidth, c.latency, c.memory, np.array([d.speed for d in c.devices])):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    flat = {"cluster": h.hexdigest()[:16]}  # devices, links, memory, speeds (a digest: 1,024 devices are 1M links)

    def add(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                add(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat[prefix] = value

    add("", {k: v for k, v in search_config.items() if k not in RESUMABLE_CHANGES})
    return flat


def check_shaping(saved: dict, now: dict, source: str) -> None:
    differ = [k for k in sorted(set(saved) | set(now)) if _normal(saved.get(k)) != _normal(now.get(k))]
    if differ:
        shown = "; ".join(f"{k}: {saved.get(k)!r} then, {now.get(k)!r} now" for k in differ[:4])
        more = f" (and {len(differ) - 4} more)" if len(differ) > 4 else ""
        raise TrinityError(f"was made with other settings ({shown}{more}); resume with the same ones, or "
                           "use --fresh or another output folder", source=source, field=differ[0])


def checkpoint_run_id(out_dir: str | Path) -> str | None:
    """The MLflow run a checkpointed search logged to, so a resumed search continues it."""
    path = Path(out_dir) / FILE
    if not path.exists():
        return None
    try:
        return torch.load(path, weights_only=False).get("run_id")
    except Exception:  # a corrupt checkpoint is reported by the search itself
        return None


def _normal(value):
    """Values as a checkpoint stores them and as configs give them compare equal (tuples, lists)."""
    return list(value) if isinstance(value, tuple) else value
