"""Every strategy family side by side (``results/families/<model>.json``, the families stage) as one table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from trinity.fileio import read_json


def side_by_side(results_dir: Path) -> pd.DataFrame:
    """``results/families/<model>.json`` as one row per model x cluster x entry, the winner marked."""
    rows = []
    for path in sorted((Path(results_dir) / "families").glob("*.json")):
        doc = read_json(path)
        for case in doc.get("cases", []):
            top = case.get("winner") or {}
            for entry in case["entries"]:
                won = entry["family"] == top.get("family") and entry["method"] == top.get("method")
                rows.append({"model": case["model"], "cluster": case["cluster"], "family": entry["family"],
                             "method": entry["method"], "step_time_ms": round(entry["step_time_ms"], 3),
                             "comm_share": round(entry["comm_share"], 4), "comm_MB": round(entry["comm_MB"], 3),
                             "peak_memory_GB": round(entry["peak_memory_GB"], 4), "fits": entry["fits"],
                             "winner": won, "real_step_ms": top.get("real_step_ms") if won else None,
                             "note": top.get("note", "") if won else "", "detail": entry.get("detail", "")})
    return pd.DataFrame(rows)
