"""What the paper (Zeng et al., "Trinity", Algorithms 2022, 15(4), 108) publishes, to set beside our numbers.

Table 3's graph sizes come from the model registry (`ModelSpec.paper_table3`). The per-case values of the
paper's Tables 4 and 5 could not be found in any stored copy of the article (those give its abstract, not its
tables: https://www.mdpi.com/1999-4893/15/4/108), so the two dicts below are empty and the report's paper
columns stay blank. Nothing here is estimated or read off a figure.

Where the values become known, fill them in with the source's address in a comment:
  TABLE4[(model, devices, method)] = {"runtime_s": float | "OOM", "peak_comm_MB": float, "peak_memory_GB": float}
  TABLE5[(model, devices)] = {"runtime_change_pct": float, "comm_change_pct": float, "memory_change_pct": float,
                              "search_time_change_pct": float}
with the report's names: model as in trinity.models (inception_v3, nmt_2layer, ...), method as in conf/method.
"""

from __future__ import annotations

#: the paper's Table 4, per (model, number of devices, method); empty: not in this repository
TABLE4: dict[tuple[str, int, str], dict[str, float | str]] = {}

#: the paper's Table 5 (Trinity against Hierarchical, %), per (model, number of devices); empty likewise
TABLE5: dict[tuple[str, int], dict[str, float]] = {}

#: the abstract's claim (https://www.mdpi.com/1999-4893/15/4/108), the only Table 4/5 result we have in words
CLAIM_VS_HIERARCHICAL = ("up to 5% lower runtime, communication and memory than Hierarchical, and up to "
                         "40% faster strategy search")

TABLES_4_5_NOTE = ("the paper's Table 4/5 values are not in this repository; its abstract claims "
                   + CLAIM_VS_HIERARCHICAL) if not (TABLE4 or TABLE5) else \
    "paper columns: Zeng et al., Algorithms 2022, 15(4), 108, Tables 4 and 5"
