"""The learned list scheduler zero-shot (`trinity.rl.learned_list`): one greedy decode by a pre-trained
policy, no search. ``policy`` names a policy file; None = the committed one."""

from __future__ import annotations

import numpy as np

from trinity.cluster import Cluster
from trinity.graph.ir import OpGraph
from trinity.placers.base import register


@register("learned-list")
def place_learned_list(graph: OpGraph, cluster: Cluster, policy: str | None = None) -> np.ndarray:
    from trinity.rl.learned_list import greedy_placement  # torch only when this placer runs

    return greedy_placement(graph, cluster, policy)
