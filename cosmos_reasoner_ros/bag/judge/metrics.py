"""Agreement metrics between two answers, where the judge and its tests find them: each lives with the answer
kind it measures (reasoner.kinds: point distances, the discrete Fréchet distance and dynamic time warping with
points, box IoU with boxes, temporal IoU with segments, the normalised text similarity with text, the greedy
pairing in kinds/base.py); the judge's percentile is the package's one (percentiles.py)."""

from __future__ import annotations

from cosmos_reasoner_ros.percentiles import percentile
from cosmos_reasoner_ros.reasoner import (
    box_iou,
    discrete_frechet,
    dtw_mean,
    greedy_scores,
    point_distances,
    segment_iou,
    text_similarity,
)

__all__ = [
    "box_iou",
    "discrete_frechet",
    "dtw_mean",
    "greedy_scores",
    "percentile",
    "point_distances",
    "segment_iou",
    "text_similarity",
]
