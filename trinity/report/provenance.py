"""What a report was made from, as the first lines of REPORT.md: the experiment, the code's commit, the
date, what ran (models, clusters, methods and their budgets, seeds) and the wall time, so that a toy run
never reads like the paper's."""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from pathlib import Path
from typing import Any

from trinity.rl import defaults


# what makes a run, not what it made; from the checkout's top, so an experiment's own folder sees the same
CODE = tuple(f":(top,glob){p}" for p in ("trinity/**", "pipeline/**", "conf/**", "**/params.yaml", "**/dvc.yaml",
                                          "pyproject.toml"))


def commit(folder: str | Path = ".") -> str:
    """The git commit of ``folder``'s checkout, ``+ uncommitted changes`` when its code or configuration
    differs from it (the pipeline's own outputs, rewritten by the very run being reported, do not count);
    or ``unknown (not a git checkout)``."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", *CODE)
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{head} + uncommitted changes" if dirty else head


def budget(method: dict[str, Any]) -> str:
    """One method's budget in words (a placer has none)."""
    kind = method.get("kind")
    if kind == "search":
        search = method.get("search") or {}
        # a key the method leaves unset runs at the loop's default: say that, not "None"
        iterations, batch = (search.get(k) if search.get(k) is not None else getattr(defaults, k.upper())
                             for k in ("iterations", "batch"))
        text = f"{iterations} iterations x {batch} samples"
        if search.get("warm_start"):
            text += f", warm start {search['warm_start']} ({search.get('warm_start_steps')} imitation steps)"
        return text
    if kind == "local-search":
        return f"{(method.get('options') or {}).get('budget')} simulator calls"
    if kind == "pipeline-parallel" and (method.get("options") or {}).get("iterations"):
        options = method["options"]
        return f"{options['iterations']} iterations x {options.get('batch')} samples"
    return "-"


def _names(values) -> str:
    return ", ".join(str(v) for v in values) if values else "-"


def header(run: dict[str, Any], methods: dict[str, dict[str, Any]], *, commit_id: str, started: float | None = None,
           data_parallel_epochs: int | None = None, now: float | None = None) -> str:
    """REPORT.md's opening: ``run`` is the composed ``run`` section, ``methods`` the catalogue's methods
    (for their budgets), ``started`` when the pipeline started (seconds since the epoch; None: unknown)."""
    now = time.time() if now is None else now
    date = dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    wall = (f"{(now - started) / 60:.1f} min from the pipeline's start to this report" if started is not None
            else "unknown (the report stage ran outside `make repro`)")
    regime = run.get("regime") or {}
    pp, dp, families = run.get("pipeline_parallel") or {}, run.get("data_parallel") or {}, run.get("families") or {}
    lines = [f"**Experiment `{run['name']}`** (conf/experiment/{run['name']}.yaml), commit {commit_id}, "
             f"made {date}; wall time: {wall}.", "",
             "| what | ran |", "|---|---|",
             f"| op placement | models {_names(run.get('models'))}; clusters {_names(run.get('clusters'))}; "
             f"seeds {_names(run.get('seeds'))} |",
             f"| placers (once per case) | {_names(run.get('placers'))} |"]
    lines += [f"| {name} | {budget(methods.get(name, {}))} |" for name in run.get("searches") or []]
    if regime:
        lines.append(f"| the paper's regime | models {_names(regime.get('models'))}; clusters "
                     f"{_names(regime.get('clusters'))}; placers {_names(regime.get('placers'))}; searches "
                     f"{_names(regime.get('searches'))}; seeds {_names(regime.get('seeds'))} |")
    if run.get("validate"):
        lines.append(f"| validated on real workers | {_names(run['validate'])} |")
    if pp:
        tapp = [f"{m}: {budget(methods.get(m, {}))}" for m in pp.get("methods") or [] if
                budget(methods.get(m, {})) != "-"]
        lines.append(f"| pipeline parallelism | models {_names(pp.get('models'))}; clusters "
                     f"{_names(pp.get('clusters'))}; methods {_names(pp.get('methods'))}"
                     f"{'; ' + '; '.join(tapp) if tapp else ''}; seeds {_names(pp.get('seeds'))} |")
    if dp:
        epochs = f"; {data_parallel_epochs} epochs" if data_parallel_epochs is not None else ""
        lines.append(f"| data parallelism | methods {_names(dp.get('methods'))}{epochs}; seeds "
                     f"{_names(dp.get('seeds'))} |")
    if families:
        lines.append(f"| every family side by side | models {_names(families.get('models'))}; clusters "
                     f"{_names(families.get('clusters'))} |")
    return "\n".join(lines) + "\n"
