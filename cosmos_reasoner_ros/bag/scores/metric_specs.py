"""The score metrics, named once: which per-request value each task metric summarises, by which statistic,
which direction is better, and which answer kinds have it. scores.json, the report, thresholds and the
leaderboard read this table."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HANDOFF", "KIND_METRICS", "METRES", "METRICS", "MetricSpec", "metric_spec"]


@dataclass(frozen=True)
class MetricSpec:
    name: str  # the name in scores.json
    column: str  # the per-request value it summarises (grading.Grade.values)
    statistic: str  # mean | share (a mean of 0/1) | p50 | p95 (nearest rank), over the requests that have it
    better: str  # higher | lower | "" (neither: reported, never ranked)
    unit: str = ""
    description: str = ""

    def sign(self) -> int:
        return {"higher": 1, "lower": -1}.get(self.better, 0)


_SPECS = (
    MetricSpec("accuracy", "accuracy", "share", "higher", "", "choice letter equal to an acceptable one"),
    MetricSpec(
        "mean_iou", "iou", "mean", "higher", "", "box IoU with the label (boxes paired greedily, unpaired 0)"
    ),
    MetricSpec(
        "iou50", "iou50", "share", "higher", "", "share of requests with IoU >= the label's iou_min (0.5)"
    ),
    MetricSpec("ade_px", "ade_px", "mean", "lower", "px", "average displacement of corresponding points"),
    MetricSpec("fde_px", "fde_px", "mean", "lower", "px", "displacement of the final point"),
    MetricSpec("frechet_px", "frechet_px", "mean", "lower", "px", "discrete Fréchet distance"),
    MetricSpec("ade_m", "ade_m", "mean", "lower", "m", "average displacement in 3D (depth back-projection)"),
    MetricSpec("fde_m", "fde_m", "mean", "lower", "m", "final displacement in 3D"),
    MetricSpec("frechet_m", "frechet_m", "mean", "lower", "m", "discrete Fréchet distance in 3D"),
    MetricSpec(
        "mean_tiou", "tiou", "mean", "higher", "", "temporal IoU (segments paired greedily, unpaired 0)"
    ),
    MetricSpec(
        "tiou50", "tiou50", "share", "higher", "", "share of requests with tIoU >= the label's tiou_min"
    ),
    MetricSpec(
        "match", "match", "share", "higher", "", "answer words match an acceptable answer (>= match_min)"
    ),
    MetricSpec(
        "similarity", "similarity", "mean", "higher", "", "best word-sequence similarity to an acceptable one"
    ),
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

METRICS: dict[str, MetricSpec] = {s.name: s for s in _SPECS}

_COMMON = ("answered", "latency_p50_s", "latency_p95_s", "completion_tokens")
KIND_METRICS: dict[str, tuple[str, ...]] = {
    "choice": ("accuracy", *_COMMON),
    "boxes": ("mean_iou", "iou50", *_COMMON),
    "points": ("ade_px", "fde_px", "frechet_px", *_COMMON),
    "segments": ("mean_tiou", "tiou50", *_COMMON),
    "text": ("match", "similarity", *_COMMON),
}
METRES = ("ade_m", "fde_m", "frechet_m")  # points, where depth gave 3D points
HANDOFF = ("handoff_frechet_px", "handoff_frechet_m", "handoff_passed")  # points, with the handoff rehearsed


def metric_spec(name: str) -> MetricSpec | None:
    return METRICS.get(name)
