"""What the benches share about their figures: latency statistics, and the results file each writes into
bench/results/ (beside the benches: a bench run as a script has its own folder first on sys.path)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from support.paths import BENCH_RESULTS

from cosmos_reasoner_ros.percentiles import percentile


def latency_ms(values: list[float]) -> dict[str, float]:
    """Count, median, p95 and maximum of latencies in seconds, in milliseconds to 0.1 ms."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}
    return {
        "n": len(ordered),
        "median_ms": round(1000 * statistics.median(ordered), 1),
        "p95_ms": round(1000 * percentile(ordered, 0.95), 1),
        "max_ms": round(1000 * ordered[-1], 1),
    }


def write_figures(name: str, figures: dict[str, Any], indent: int) -> Path:
    """bench/results/NAME.json (the figures indented, a newline at the end), and the figures on stdout as one
    line of JSON."""
    out = BENCH_RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=indent) + "\n")
    print(json.dumps(figures))
    return out
