"""The package's one percentile: nearest rank, so that a p95 is a value that was measured, the same in the bag
tools' verdicts, reports and JUnit properties, the replay's lag figures and every benchmark. (Before, the
benchmarks had two other definitions; with 20 samples one of them gave the largest as the p95.)"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["percentile"]


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank percentile (q in 0-1) of the values: the smallest value with at least q of them at
    or below it; 0.0 for none."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
