"""Stage `report`: the paper's tables and figures from every search and validation, into reports/,
MLflow (artifacts, the simulator-vs-real table) and DVC (metrics, plots)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.report import build_report, provenance
    from trinity.stages.tracked import STARTED_ENV

    out = Path(cfg.paths.reports)
    run_section = OmegaConf.to_container(cfg.run, resolve=True)
    started = os.environ.get(STARTED_ENV)
    preamble = provenance.header(run_section, OmegaConf.to_container(cfg.methods, resolve=True),
                                 commit_id=provenance.commit(), started=float(started) if started else None,
                                 data_parallel_epochs=OmegaConf.select(cfg, "data_parallel.train.epochs"))
    written = build_report(Path(cfg.paths.results), Path(cfg.paths.data), out, run=run_section, preamble=preamble)
    for path in sorted(out.glob("*.csv")) + sorted(out.glob("*.md")) + [out / "metrics.json"]:
        tracker.log_artifact(path)
    for path in sorted((out / "figures").glob("*.png")):
        tracker.log_artifact(path, "figures")
    scatter = out / "plots" / "sim_vs_real.csv"
    if scatter.exists():
        tracker.log_table(pd.read_csv(scatter), "sim_vs_real.json")
    print(f"report: {len(written.get('files', written))} files in {out}")
