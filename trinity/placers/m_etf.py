"""m-ETF (Baechi, SoCC 2020): memory-constrained Earliest Task First.

Plain ETF list scheduling with each device limited to its static memory;
the scheduler itself lives in `trinity.placers.list_scheduling`.
"""

from __future__ import annotations

import numpy as np

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.placers.base import register
from trinity.placers.list_scheduling import list_schedule


@register("m-etf")
def place_m_etf(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """Schedule the (ready op, device) pair that can start earliest, until all ops are placed."""
    return list_schedule(graph, cluster)
