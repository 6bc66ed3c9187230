"""Placement algorithms, one module each, all behind `trinity.placers.base`.

Importing this package registers every placer in `PLACERS`.
"""

from trinity.placers import annealing, exhaustive, expert, learned_list, m_etf, m_sct, m_topo, metis, simple  # noqa: F401
from trinity.placers.base import PLACERS, PlacerResult, best_by_reward, get_placer, place, place_each

__all__ = ["PLACERS", "PlacerResult", "best_by_reward", "get_placer", "place", "place_each"]
