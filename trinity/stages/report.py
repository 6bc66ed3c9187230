"""Stage `report`: the paper's tables and figures from every search and validation, into reports/,
MLflow (artifacts, the simulator-vs-real table) and DVC (metrics, plots)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.report import build_report

    out = Path(cfg.paths.reports)
    written = build_report(Path(cfg.paths.results), Path(cfg.paths.data), out)
    for path in sorted(out.glob("*.csv")) + sorted(out.glob("*.md")) + [out / "metrics.json"]:
        tracker.log_artifact(path)
    for path in sorted((out / "figures").glob("*.png")):
        tracker.log_artifact(path, "figures")
    scatter = out / "plots" / "sim_vs_real.csv"
    if scatter.exists():
        tracker.log_table(pd.read_csv(scatter), "sim_vs_real.json")
    print(f"report: {len(written.get('files', written))} files in {out}")
