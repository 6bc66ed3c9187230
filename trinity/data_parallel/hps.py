"""H-PS (Computer Engineering and Design 2024): a parameter server for workers of different speeds.

Three parts, each on top of `trinity.data_parallel.ps.ParameterServer`:

* batch shares: each worker computes a share of every global batch proportional to its measured
  speed (samples per second of its own computation, in its thread's CPU time), so all finish a step
  together; speeds are re-measured every few steps (`SpeedMeter`, exponential average) and the shares
  re-split;
* overlap: the exchange of step t (gradients in, parameters out) runs on the link thread while the
  workers compute step t + 1 on the parameters they have, one update behind (gradients one step
  stale, as in pipelined SGD), and applies its result after that computation;
* quantized parameters: the server sends parameters with `precision_for`'s number of bits
  (8 while the loss falls fast, 16 from its first plateau on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trinity.data_parallel.config import DataParallelError
from trinity.errors import short_repr


def check_shares(shares: list[int], batch: int) -> list[int]:
    """Refuse shares that are not whole, are zero or negative, or do not add up to the batch."""
    if not shares:
        raise DataParallelError("no workers: shares are empty", field="shares")
    for i, s in enumerate(shares):
        if not isinstance(s, int) or isinstance(s, bool) or s < 1:
            raise DataParallelError(f"every worker needs at least 1 sample per batch, worker {i} has "
                                    f"{short_repr(s)}", field="shares")
    if sum(shares) != batch:
        raise DataParallelError(f"shares {shares} add up to {sum(shares)}, not the batch of {batch}",
                                field="shares")
    return list(shares)


def batch_shares(speeds: list[float], batch: int) -> list[int]:
    """Split ``batch`` samples in proportion to ``speeds``: integers >= 1 that add up to ``batch``.

    Largest remainder: each worker gets the whole part of its exact share (at least 1), the samples
    left go to the largest fractions (ties to the lower index); samples lent to a worker raised to 1
    are taken back from the shares furthest above their exact value.
    """
    if not speeds:
        raise DataParallelError("no workers: speeds are empty", field="speeds")
    for i, v in enumerate(speeds):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise DataParallelError(f"worker {i}'s speed must be a finite number > 0, got {short_repr(v)}",
                                    field="speeds")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < len(speeds):
        raise DataParallelError(f"must be an integer of at least one sample per worker ({len(speeds)}), "
                                f"got {short_repr(batch)}", field="batch")
    total = float(sum(speeds))
    ideal = [batch * v / total for v in speeds]
    shares = [max(1, int(math.floor(x))) for x in ideal]
    while sum(shares) > batch:
        i = max((j for j in range(len(shares)) if shares[j] > 1), key=lambda j: (shares[j] - ideal[j], -j))
        shares[i] -= 1
    order = sorted(range(len(speeds)), key=lambda i: (-(ideal[i] - shares[i]), i))
    for i in order[:batch - sum(shares)]:
        shares[i] += 1
    return check_shares(shares, batch)


@dataclass
class SpeedMeter:
    """A worker's speed in samples per second of computation, averaged exponentially over its steps."""

    smoothing: float = 0.5  # weight of the newest measurement
    speed: float | None = None
    history: list[float] = field(default_factory=list)

    def add(self, samples: int, seconds: float) -> float:
        if samples < 1 or seconds <= 0:
            return self.speed or 0.0
        now = samples / seconds
        self.speed = now if self.speed is None else self.smoothing * now + (1 - self.smoothing) * self.speed
        self.history.append(now)
        return self.speed
