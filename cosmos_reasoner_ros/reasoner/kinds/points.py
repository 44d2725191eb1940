"""The points kind: labelled 2D points in the 0-1000 space (`[{"point_2d": [x, y], "label": ...}]`), read as
one trajectory per label, with pixels for the image. A record holds them in the camera image they refer to
(CameraTrajectory). Graded by point displacement and the discrete Fréchet distance in that image's pixels (and
in metres where depth gives 3D points); compared with a baseline the same way; the Nav2 handoff follows them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.geometry import Point2D, Trajectory, norm_to_pixel, point_pixels
from cosmos_reasoner_ros.reasoner.kinds import base
from cosmos_reasoner_ros.reasoner.kinds import json_items as ji

__all__ = ["KIND", "CameraTrajectory", "PointsKind", "discrete_frechet", "dtw_mean", "point_distances"]

NAN = float("nan")
_POINT_KEYS = ("point_2d", "point", "points", "point2d", "coordinates", "coords", "position", "xy")


@dataclass(frozen=True)
class CameraTrajectory:
    """A trajectory drawn on one camera's image (ReasonerResult.trajectories[i]); the points carry both the
    0-1000 values and the pixels of that width x height image."""

    trajectory: Trajectory
    camera: str = ""
    width: int = 0
    height: int = 0

    @property
    def label(self) -> str:
        return self.trajectory.label

    def pixels(self) -> list[tuple[float, float]]:
        """(x, y) per point in pixels of the camera image."""
        return [
            (p.x, p.y) if p.x is not None and p.y is not None else point_pixels(p, self.width, self.height)
            for p in self.trajectory.points
        ]


# ---- parsing ---


def _pairs(value: Any, raw: str) -> list[tuple[Any, Any]]:
    """[x, y] or [[x, y], ...] or {"x":, "y":} or [{"x":, "y":}, ...]."""
    if isinstance(value, dict):
        lowered = {str(k).lower(): v for k, v in value.items()}
        if "x" in lowered and "y" in lowered:
            return [(lowered["x"], lowered["y"])]
    if isinstance(value, list):
        if len(value) == 2 and all(ji.is_scalar(v) for v in value):
            return [(value[0], value[1])]
        if value and all(isinstance(v, list | dict) for v in value):
            return [pair for v in value for pair in _pairs(v, raw)]
    raise ParseError(f"not a point [x, y]: {value!r}"[:300], raw=raw)


# ---- distances between two paths ---


def _polyline(points: Sequence[Sequence[float]]) -> np.ndarray:
    """The points as an (n, d) array: 2D pixels, or 3D points in metres (scores in metres with depth)."""
    array = np.asarray(points, dtype=float)
    return array.reshape(-1, array.shape[-1] if array.ndim == 2 else 2)


def _resample(path: np.ndarray, n: int) -> np.ndarray:
    """n points evenly spaced along the polyline (its own points when it already has n)."""
    if len(path) == n:
        return path
    if len(path) == 1:
        return np.repeat(path, n, axis=0)
    steps = np.linalg.norm(np.diff(path, axis=0), axis=1)
    along = np.concatenate([[0.0], np.cumsum(steps)])
    if along[-1] == 0.0:
        return np.repeat(path[:1], n, axis=0)
    at = np.linspace(0.0, along[-1], n)
    return np.stack([np.interp(at, along, path[:, k]) for k in range(path.shape[1])], axis=1)


def point_distances(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> np.ndarray:
    """Distances between corresponding points; paths of different lengths are both resampled along their
    length to the longer one's number of points."""
    pa, pb = _polyline(a), _polyline(b)
    if len(pa) == 0 or len(pb) == 0:
        raise ValueError("a trajectory without points")
    n = max(len(pa), len(pb))
    return np.asarray(np.linalg.norm(_resample(pa, n) - _resample(pb, n), axis=1))


def _cost(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> np.ndarray:
    pa, pb = _polyline(a), _polyline(b)
    if len(pa) == 0 or len(pb) == 0:
        raise ValueError("a trajectory without points")
    return np.asarray(np.linalg.norm(pa[:, None, :] - pb[None, :, :], axis=2))


def discrete_frechet(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    """The discrete Fréchet distance (Eiter and Mannila 1994): the shortest leash that lets two walkers go
    through both point sequences in order, each only forward."""
    d = _cost(a, b)
    n, m = d.shape
    ca = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            if i == 0 and j == 0:
                best = 0.0
            elif i == 0:
                best = ca[0, j - 1]
            elif j == 0:
                best = ca[i - 1, 0]
            else:
                best = min(ca[i - 1, j], ca[i - 1, j - 1], ca[i, j - 1])
            ca[i, j] = max(best, d[i, j])
    return float(ca[-1, -1])


def dtw_mean(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Dynamic time warping cost divided by the warping path's length: the mean distance of aligned points."""
    d = _cost(a, b)
    n, m = d.shape
    acc = np.full((n + 1, m + 1), np.inf)
    steps = np.zeros((n + 1, m + 1), dtype=int)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            options = ((acc[i - 1, j], steps[i - 1, j]), (acc[i, j - 1], steps[i, j - 1]))
            best = min(((acc[i - 1, j - 1], steps[i - 1, j - 1]), *options), key=lambda o: o[0])
            acc[i, j] = best[0] + d[i - 1, j - 1]
            steps[i, j] = best[1] + 1
    return float(acc[n, m] / steps[n, m])


# ---- grading against a label, comparing with a baseline ---

A = TypeVar("A", CameraTrajectory, Trajectory)
B = TypeVar("B", CameraTrajectory, Trajectory)


def _by_label(a: Sequence[A], b: Sequence[B]) -> list[tuple[A, B]]:
    """By label when both name their trajectories uniquely with the same labels, else in order."""
    la, lb = [t.label for t in a], [t.label for t in b]
    if len(set(la)) == len(la) and len(set(lb)) == len(lb) and set(la) == set(lb):
        by_label = {t.label: t for t in b}
        return [(t, by_label[t.label]) for t in a]
    return list(zip(a, b, strict=False))


def _label_pixels(t: Trajectory, width: int, height: int) -> list[tuple[float, float]]:
    if width <= 0 or height <= 0:  # the image size is unknown: 0-1000 units
        return [(p.x_norm, p.y_norm) for p in t.points]
    return [(norm_to_pixel(p.x_norm, width), norm_to_pixel(p.y_norm, height)) for p in t.points]


def _answer_pixels(t: CameraTrajectory) -> list[tuple[float, float]]:
    if t.width <= 0 or t.height <= 0:
        return [(p.x_norm, p.y_norm) for p in t.trajectory.points]
    return t.pixels()


def _distances(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    d = point_distances(a, b)
    fde = float(np.linalg.norm(np.asarray(a[-1], dtype=float) - np.asarray(b[-1], dtype=float)))
    return float(d.mean()), fde, discrete_frechet(a, b)


def _with_depth(
    answer: CameraTrajectory,
    answer_px: list[tuple[float, float]],
    label_px: list[tuple[float, float]],
    project: base.Project,
) -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]] | None:
    size = (answer.width, answer.height)
    a3, b3 = project(answer_px, size), project(label_px, size)
    a = [p for p in a3 if p is not None]
    b = [p for p in b3 if p is not None]
    # Only with depth under every point: a path with points left out would be another path.
    return (a, b) if a and b and len(a) == len(a3) and len(b) == len(b3) else None


_PX = ("ade_px", "fde_px", "frechet_px")
_M = ("ade_m", "fde_m", "frechet_m")


def _load_one(data: Mapping[str, Any]) -> CameraTrajectory:
    label = str(data.get("label", ""))
    norm = data.get("points_norm", [])
    px = data.get("points_px") or [[None, None]] * len(norm)  # files written before pixels were kept
    points = tuple(
        Point2D(label, float(n[0]), float(n[1]), ji.optional_float(p[0]), ji.optional_float(p[1]))
        for n, p in zip(norm, px, strict=True)
    )
    return CameraTrajectory(Trajectory(label, points), *ji.camera_image(data))


def _tolerated(name: str) -> base.CompareCheck:
    return base.CompareCheck(name, name, name, "<=", " px")


class PointsKind(base.AnswerKind):
    """labelled 2D points in the image (0-1000 per axis), one trajectory per label"""

    name = "points"
    slot = "trajectories"
    path = True

    def parse(self, text: base.AnswerText) -> tuple[Trajectory, ...]:
        raw, size = text.raw, text.size
        keyed, bare = ji.items(text.values, _POINT_KEYS)
        labelled: list[tuple[str, tuple[Any, Any]]] = []
        if keyed:
            for item in keyed:
                value = ji.first(item, _POINT_KEYS)
                pairs = _pairs(value if value is not None else item, raw)
                labelled.extend((ji.label(item), pair) for pair in pairs)
        else:
            pairs = [tuple(v) for v in bare if len(v) == 2]
            labelled.extend(("", (p[0], p[1])) for p in pairs)
        if not labelled:
            raise ParseError("no points [x, y] in the answer", raw=raw)
        order: dict[str, list[Point2D]] = {}
        for label, (vx, vy) in labelled:
            x_norm, y_norm = ji.norm(vx, "x", raw), ji.norm(vy, "y", raw)
            x = norm_to_pixel(x_norm, size[0]) if size else None
            y = norm_to_pixel(y_norm, size[1]) if size else None
            order.setdefault(label, []).append(Point2D(label, x_norm, y_norm, x, y, ji.off_image(vx, vy)))
        return tuple(Trajectory(label, tuple(points)) for label, points in order.items())

    # ---- grading against a label, comparing with a baseline ---

    rank = ("ade_px", -1)
    metrics = (
        base.MetricSpec(
            "ade_px", "ade_px", "mean", "lower", "px", "average displacement of corresponding points"
        ),
        base.MetricSpec("fde_px", "fde_px", "mean", "lower", "px", "displacement of the final point"),
        base.MetricSpec("frechet_px", "frechet_px", "mean", "lower", "px", "discrete Fréchet distance"),
    )
    extra_metrics = (
        base.MetricSpec(
            "ade_m", "ade_m", "mean", "lower", "m", "average displacement in 3D (depth back-projection)"
        ),
        base.MetricSpec("fde_m", "fde_m", "mean", "lower", "m", "final displacement in 3D"),
        base.MetricSpec("frechet_m", "frechet_m", "mean", "lower", "m", "discrete Fréchet distance in 3D"),
    )

    def grade(
        self, ours: Sequence[CameraTrajectory], theirs: Sequence[Trajectory], context: base.GradeContext
    ) -> tuple[base.Values, list[str]]:
        pairs = _by_label(ours, theirs)
        notes = []
        if len(ours) != len(theirs):
            notes.append(f"{len(ours)} trajectories answered, {len(theirs)} labelled: {len(pairs)} compared")
        if not pairs:
            return dict.fromkeys(_PX, NAN), notes
        px: list[tuple[float, float, float]] = []
        metres: list[tuple[float, float, float]] = []
        for answer, label in pairs:
            answer_px = _answer_pixels(answer)
            label_px = _label_pixels(label, answer.width, answer.height)
            px.append(_distances(answer_px, label_px))
            if context.project is not None and answer.width > 0 and answer.height > 0:
                both = _with_depth(answer, answer_px, label_px, context.project)
                if both is not None:
                    metres.append(_distances(*both))
        values = dict(zip(_PX, np.mean(px, axis=0).tolist(), strict=True))
        if metres and len(metres) == len(px):
            values.update(zip(_M, np.mean(metres, axis=0).tolist(), strict=True))
        elif context.project is not None:
            notes.append("no depth under every point: no distances in metres")
        if any(t.width <= 0 for t, _ in pairs):
            notes.append("the image size is unknown: distances in 0-1000 units")
        return values, notes

    compare_checks = tuple(
        _tolerated(n) for n in ("trajectory_mean_px", "trajectory_max_px", "trajectory_frechet_px")
    )

    def compare(
        self, baseline: Sequence[CameraTrajectory], current: Sequence[CameraTrajectory]
    ) -> tuple[base.Values, list[str]]:
        notes = []
        if len(baseline) != len(current):
            notes.append(f"trajectories: {len(baseline)} in the baseline, {len(current)} now")
        pairs = _by_label(baseline, current)
        if len(pairs) != max(len(baseline), len(current)) or not pairs:
            inf = float("inf")
            return {"trajectory_mean_px": inf, "trajectory_max_px": inf, "trajectory_frechet_px": inf}, notes
        means, maxes, frechet, dtw = [], [], [], []
        for tb, tc in pairs:
            pb, pc = tb.pixels(), tc.pixels()
            d = point_distances(pb, pc)
            means.append(float(d.mean()))
            maxes.append(float(d.max()))
            frechet.append(discrete_frechet(pb, pc))
            dtw.append(dtw_mean(pb, pc))
        metrics = {
            "trajectory_mean_px": max(means),
            "trajectory_max_px": max(maxes),
            "trajectory_frechet_px": max(frechet),
            "trajectory_dtw_px": max(dtw),
        }
        return metrics, notes

    # ---- forms: the CLI's, a drafted label's, results.jsonl's ---

    def to_json(self, values: Sequence[Trajectory]) -> list[dict[str, Any]]:
        return [
            {"label": p.label, "x": p.x, "y": p.y, "x_norm": p.x_norm, "y_norm": p.y_norm}
            for t in values
            for p in t.points
        ]

    label_form = '[{"point_2d": [x, y], "label": "gripper trajectory"}, ...] (0-1000 per axis)'

    def draft(self, values: Sequence[CameraTrajectory]) -> str:
        return json.dumps(
            [
                {"point_2d": [ji.compact(p.x_norm), ji.compact(p.y_norm)], "label": t.label}
                for t in values
                for p in t.trajectory.points
            ]
        )

    def held(
        self, values: Sequence[Trajectory], camera: str, width: int, height: int
    ) -> tuple[CameraTrajectory, ...]:
        return tuple(CameraTrajectory(t, camera, width, height) for t in values)

    def dump(self, values: Sequence[CameraTrajectory]) -> list[dict[str, Any]]:
        return [
            {
                "label": t.label,
                **ji.camera_fields(t),
                "points_norm": [[p.x_norm, p.y_norm] for p in t.trajectory.points],
                "points_px": [[x, y] for x, y in t.pixels()],
            }
            for t in values
        ]

    def load(self, data: Sequence[Mapping[str, Any]]) -> tuple[CameraTrajectory, ...]:
        return tuple(_load_one(t) for t in data)


KIND = PointsKind()
