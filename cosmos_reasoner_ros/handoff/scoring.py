"""A path the handoff sent (or, in a rehearsal, would have sent) scored against a labelled path, without ROS:
how far apart the two are on the ground (discrete Fréchet distance, the first and the last pose) when the
camera's intrinsics and ground plane are known, and in the answer's image always.

The labelled path is a label's trajectory (0-1000, as an answer's; issue 30's labels files), put on the ground
exactly as an answer is (ground_path: the same limits, so that a path cropped to max_path_length_m is compared
with the labelled path cropped the same). For the bag tools to wire to their labels and scores
(`score_path_against_label`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cosmos_reasoner_ros.geometry import (
    GroundPlane,
    Intrinsics,
    Trajectory,
    Vec3,
    frechet_distance,
    point_pixels,
    resample,
)
from cosmos_reasoner_ros.handoff.ground_path import PathLimits, ground_path
from cosmos_reasoner_ros.reasoner import POINTS, ParsedAnswer
from cosmos_reasoner_ros.requests import ClipSummary, Outcome

__all__ = ["PathScore", "score_path_against_label"]

_PIXEL_STEP = 4.0  # [px] both polylines are resampled this finely before their Fréchet distance in the image


@dataclass(frozen=True)
class PathScore:
    """A path against its label: on the ground [m] (None without intrinsics and plane, or when the labelled
    path has no ground path: `label_problem` says why), and in the answer's image [px]."""

    frechet_m: float | None
    start_m: float | None
    end_m: float | None
    frechet_px: float
    label_problem: str = ""


def _flat(points: Sequence[tuple[float, float]]) -> tuple[Vec3, ...]:
    return tuple((float(u), float(v), 0.0) for u, v in points)


def score_path_against_label(
    path: Sequence[Vec3],
    path_px: Sequence[tuple[float, float]],
    label: Trajectory,
    image_size: tuple[int, int],
    intrinsics: Intrinsics | None = None,
    plane: GroundPlane | None = None,
    limits: PathLimits | None = None,
) -> PathScore:
    """`path` [m] (the handoff's, in the camera's optical frame) and `path_px` (its poses in the answer's
    image of `image_size`) against the labelled trajectory. With intrinsics, plane and limits, the label is
    put on the ground as an answer is and both are compared there; the image comparison needs none of them."""
    width, height = image_size
    label_px = [point_pixels(p, width, height) for p in label.points]
    frechet_px = _frechet_px(path_px, label_px)
    if intrinsics is None or plane is None or limits is None or not path:
        return PathScore(None, None, None, frechet_px)
    parsed = ParsedAnswer(raw="", reasoning=None, answer="", trajectories=(label,), answer_kind=POINTS.name)
    outcome = Outcome(
        request_id="label",
        task="",
        instruction="",
        success=True,
        parsed=parsed,
        answer_camera="label",
        image_width=width,
        image_height=height,
        clips=(ClipSummary("label", 0, 0, 1, 1.0, width, height, (width, height)),),
    )
    labelled = ground_path(outcome, intrinsics, plane, limits, "label")
    if isinstance(labelled, str):
        return PathScore(None, None, None, frechet_px, labelled)
    return PathScore(
        frechet_distance(path, labelled.points),
        math.dist(path[0], labelled.points[0]),
        math.dist(path[-1], labelled.points[-1]),
        # In the image too, the label as the handoff made it (resampled on the ground, projected back): the
        # raw label beside a resampled path differed by its cut corners and discretization (issue 38).
        _frechet_px(path_px, labelled.pixels) if labelled.pixels else frechet_px,
    )


def _frechet_px(path_px: Sequence[tuple[float, float]], label_px: Sequence[tuple[float, float]]) -> float:
    if not path_px or not label_px:
        return math.inf
    return frechet_distance(resample(_flat(path_px), _PIXEL_STEP), resample(_flat(label_px), _PIXEL_STEP))
