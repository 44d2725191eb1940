"""What a playback measured: messages published per topic, the wall time, how late each message went out
(in bounded memory) and the topics not acknowledged at the end."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from cosmos_reasoner_ros.percentiles import percentile

__all__ = ["LAG_SAMPLES", "PlayStats"]

# The lag figures come from a uniform sample of at most this many messages: `play --loop` runs for hours (a
# float per message grew by some 80 MB a day at 30 Hz), and the median or p95 of 4,096 samples is within a
# few per cent of the whole run's.
LAG_SAMPLES = 4096


@dataclass
class PlayStats:
    published: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    unacknowledged: list[str] = field(default_factory=list)  # topics not acknowledged within drain_s
    lag_count: int = 0  # messages whose lag (actual - scheduled publish time) was measured
    lag_max_s: float = 0.0  # [s] the largest lag, exact
    # [s] a uniform sample (reservoir) of at most LAG_SAMPLES lags: median and p95 come from it
    lag_sample: list[float] = field(default_factory=list)
    _rng: random.Random = field(default_factory=lambda: random.Random(0), repr=False, compare=False)  # noqa: S311

    def add_lag(self, lag_s: float) -> None:
        """One message's lag, in bounded memory (reservoir sampling, Vitter's algorithm R)."""
        self.lag_count += 1
        self.lag_max_s = max(self.lag_max_s, lag_s) if self.lag_count > 1 else lag_s
        if len(self.lag_sample) < LAG_SAMPLES:
            self.lag_sample.append(lag_s)
        else:
            slot = self._rng.randrange(self.lag_count)
            if slot < LAG_SAMPLES:
                self.lag_sample[slot] = lag_s

    def summary(self) -> dict[str, Any]:
        lags = self.lag_sample
        return {
            "published": self.published,
            "per_topic": dict(self.per_topic),
            "wall_s": round(self.wall_s, 3),
            "lag_median_ms": round(statistics.median(lags) * 1e3, 3) if lags else 0.0,
            "lag_p95_ms": round(percentile(lags, 0.95) * 1e3, 3),
            "lag_max_ms": round(self.lag_max_s * 1e3, 3),
            "lag_samples": len(lags),
            "unacknowledged": list(self.unacknowledged),
        }
