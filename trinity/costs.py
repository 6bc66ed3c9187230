"""Op compute time on each device of a cluster."""

from __future__ import annotations

import numpy as np

from trinity.cluster import Cluster
from trinity.errors import TrinityError
from trinity.graph.ir import OpGraph


def op_times(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """float64[n_ops, n_devices]: microseconds op i takes on device d.

    In order of preference: a time measured or fitted for the device's kind
    (``compute_us_by_kind``, e.g. from a roofline speed model); the profiled
    time scaled by the device's relative speed; FLOPs over the device's FLOP/s;
    else zero (an op nobody costed, such as a constant, is free). An op timed
    for other kinds only, on a kind with none of these, is refused: it has no
    cost there, and pricing it at zero would make that kind look free.
    """
    n, d = graph.n_ops, cluster.n_devices
    speed = np.array([dev.speed for dev in cluster.devices])
    flops_rate = np.array([dev.flops_per_s for dev in cluster.devices])
    # devices by kind: the per-op loop below visits each kind once, not each of (say) 1,024 devices
    kinds: dict[str, np.ndarray] = {}
    for j, dev in enumerate(cluster.devices):
        kinds.setdefault(dev.kind, []).append(j)
    kinds = {k: np.array(cols) for k, cols in kinds.items()}
    times = np.zeros((n, d))
    for i, op in enumerate(graph.ops):
        if op.compute_us is not None:
            times[i] = op.compute_us / speed
        elif op.flops:
            times[i] = np.where(flops_rate > 0, op.flops / np.where(flops_rate > 0, flops_rate, 1) * 1e6, 0.0)
        if not op.compute_us_by_kind:
            continue
        for kind, cols in kinds.items():
            t = op.compute_us_by_kind.get(kind)
            if t is not None:
                times[i, cols] = t
            elif op.compute_us is None and not (op.flops and (flops_rate[cols] > 0).all()):
                j = cols[flops_rate[cols] <= 0][0] if op.flops else cols[0]
                dev = cluster.devices[j]
                raise TrinityError(f"op {op.name!r} has times for {sorted(op.compute_us_by_kind)} but none for "
                                   f"device kind {dev.kind!r} ({dev.name}), and no measured time or FLOP rate "
                                   f"to derive one: profile with a speed model for {dev.kind!r}",
                                   source=graph.source, field="compute_us_by_kind")
    return times
