"""The score metrics, named once: which per-request value each task metric summarises, by which statistic,
which direction is better, and which answer kinds have it. Each answer kind names its own (reasoner.KINDS:
`metrics`, and `extra_metrics` scored where present); the run's own (the text judge, the rehearsed handoff,
answered, latency, tokens) are named here. scores.json, the report, thresholds and the leaderboard read this
table."""

from __future__ import annotations

from cosmos_reasoner_ros.reasoner import KINDS, MetricSpec

__all__ = ["HANDOFF", "KIND_METRICS", "METRES", "METRICS", "MetricSpec", "metric_spec"]

_RUN_SPECS = (
    MetricSpec("judge_match", "judge_match", "share", "higher", "", "the judge model said: same meaning"),
    MetricSpec(
        "handoff_frechet_px",
        "handoff_frechet_px",
        "mean",
        "lower",
        "px",
        "Fréchet distance in the image between the Nav2 path that would have been sent and the label's",
    ),
    MetricSpec(
        "handoff_frechet_m",
        "handoff_frechet_m",
        "mean",
        "lower",
        "m",
        "the same on the ground (the label put on the run's ground plane as the answer was)",
    ),
    MetricSpec(
        "handoff_passed",
        "handoff_passed",
        "share",
        "higher",
        "",
        "share of labelled answers the handoff's gates let through (sent, or would send when dry)",
    ),
    MetricSpec(
        "answered", "answered", "share", "higher", "", "share of labelled requests with a parsed answer"
    ),
    MetricSpec("latency_p50_s", "latency_s", "p50", "lower", "s", "latency of the answered requests"),
    MetricSpec("latency_p95_s", "latency_s", "p95", "lower", "s", "latency of the answered requests"),
    MetricSpec(
        "completion_tokens", "completion_tokens", "mean", "", "", "completion tokens of answered requests"
    ),
)


def _table() -> dict[str, MetricSpec]:
    """The kinds' metrics in the table's order (a metric two kinds share, once), then the run's."""
    table: dict[str, MetricSpec] = {}
    kinds = (s for kind in KINDS.values() for s in (*kind.metrics, *kind.extra_metrics))
    for spec in (*kinds, *_RUN_SPECS):
        if table.setdefault(spec.name, spec) != spec:
            raise ValueError(f"metric {spec.name} is defined twice, differently")
    return table


METRICS: dict[str, MetricSpec] = _table()

_COMMON = ("answered", "latency_p50_s", "latency_p95_s", "completion_tokens")
KIND_METRICS: dict[str, tuple[str, ...]] = {
    name: (*(s.name for s in kind.metrics), *_COMMON) for name, kind in KINDS.items()
}
METRES = tuple(dict.fromkeys(s.name for k in KINDS.values() for s in k.extra_metrics))  # with depth
HANDOFF = ("handoff_frechet_px", "handoff_frechet_m", "handoff_passed")  # path kinds, the handoff rehearsed


def metric_spec(name: str) -> MetricSpec | None:
    return METRICS.get(name)
