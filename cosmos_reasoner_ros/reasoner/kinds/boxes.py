"""The boxes kind: labelled boxes in the 0-1000 space (`[{"bbox_2d": [x1, y1, x2, y2], "label": ...}]`, also
`bbox`, `box`, corner keys, bare arrays), with pixels for the image. A record holds them in the camera image
they refer to (CameraBox). Graded and compared by IoU, boxes paired greedily (unpaired: 0).

Decisions: corners outside 0-1000 are clamped into it (then to the image); swapped corners are reordered, a
box with no area after clamping is rejected."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.geometry import Box2D, norm_to_pixel
from cosmos_reasoner_ros.reasoner.kinds import base
from cosmos_reasoner_ros.reasoner.kinds import json_items as ji

__all__ = [
    "BOX_KEYS",
    "IOU_METRICS",
    "ITEM_KEYS",
    "KIND",
    "BoxesKind",
    "CameraBox",
    "box_iou",
    "box_of",
    "norm_box",
    "quads",
]

BOX_KEYS = ("bbox_2d", "bbox", "box", "box_2d", "bounding_box", "bbox2d")
ITEM_KEYS = (*BOX_KEYS, "x1", "xmin")  # any of them makes a JSON object a box (corners: x1.. or xmin..)


@dataclass(frozen=True)
class CameraBox:
    """A box in one camera's image (ReasonerResult.boxes[i]), with that image's size."""

    box: Box2D
    camera: str = ""
    width: int = 0
    height: int = 0

    @property
    def label(self) -> str:
        return self.box.label

    def pixels(self) -> tuple[float, float, float, float]:
        b = self.box
        if None not in (b.x1, b.y1, b.x2, b.y2):
            return float(b.x1 or 0.0), float(b.y1 or 0.0), float(b.x2 or 0.0), float(b.y2 or 0.0)
        return (
            norm_to_pixel(b.x1_norm, self.width),
            norm_to_pixel(b.y1_norm, self.height),
            norm_to_pixel(b.x2_norm, self.width),
            norm_to_pixel(b.y2_norm, self.height),
        )


# ---- parsing ---


def quads(value: Any, item: dict[str, Any], raw: str) -> list[list[Any]]:
    """The [x1, y1, x2, y2] lists of an item's box value (or of its corner keys when `value` is None)."""
    if value is None:
        corners = [item.get(k) for k in ("x1", "y1", "x2", "y2")]
        if any(c is None for c in corners):
            corners = [item.get(k) for k in ("xmin", "ymin", "xmax", "ymax")]
        value = corners
    if isinstance(value, dict):
        lowered = {str(k).lower(): v for k, v in value.items()}
        return quads(None, lowered, raw)
    if isinstance(value, list):
        if len(value) == 4 and all(ji.is_scalar(v) for v in value):
            return [value]
        if len(value) == 2 and all(isinstance(v, list) and len(v) == 2 for v in value):
            return [[value[0][0], value[0][1], value[1][0], value[1][1]]]  # [[x1, y1], [x2, y2]]
        if value and all(isinstance(v, list | dict) for v in value):
            return [q for v in value for q in quads(v, item, raw)]
    raise ParseError(f"not a box [x1, y1, x2, y2]: {value!r}"[:300], raw=raw)


def box_of(label: str, quad: list[Any], size: tuple[int, int] | None, raw: str) -> Box2D:
    """One answered box: corners clamped to 0-1000 and ordered, pixels for `size`; ParseError without area."""
    a, b, c, d = (ji.norm(v, "box corner", raw) for v in quad)
    x1, x2 = min(a, c), max(a, c)
    y1, y2 = min(b, d), max(b, d)
    if x1 == x2 or y1 == y2:
        raise ParseError(f"box {quad!r} has no area", raw=raw)
    clamped = ji.off_image(*quad)
    if size:
        w, h = size
        px = (norm_to_pixel(x1, w), norm_to_pixel(y1, h), norm_to_pixel(x2, w), norm_to_pixel(y2, h))
        return Box2D(label, x1, y1, x2, y2, *px, clamped=clamped)
    return Box2D(label, x1, y1, x2, y2, clamped=clamped)


# ---- grading against a label, comparing with a baseline ---


def box_iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes; 0 when either has no area."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def norm_box(b: Box2D) -> tuple[float, float, float, float]:
    # IoU does not change when both axes are scaled: the 0-1000 values give the pixels' IoU.
    return (b.x1_norm, b.y1_norm, b.x2_norm, b.y2_norm)


def _load_one(data: Mapping[str, Any]) -> CameraBox:
    x1, y1, x2, y2 = (float(v) for v in data["norm"])
    px = [ji.optional_float(v) for v in data.get("px") or [None] * 4]
    box = Box2D(str(data.get("label", "")), x1, y1, x2, y2, px[0], px[1], px[2], px[3])
    return CameraBox(box, *ji.camera_image(data))


IOU_METRICS = (
    base.MetricSpec(
        "mean_iou", "iou", "mean", "higher", "", "box IoU with the label (boxes paired greedily, unpaired 0)"
    ),
    base.MetricSpec(
        "iou50", "iou50", "share", "higher", "", "share of requests with IoU >= the label's iou_min (0.5)"
    ),
)


class BoxesKind(base.AnswerKind):
    """labelled boxes in the image (0-1000 per axis)"""

    name = "boxes"
    slot = "boxes"

    def parse(self, text: base.AnswerText) -> tuple[Box2D, ...]:
        raw = text.raw
        keyed, bare = ji.items(text.values, ITEM_KEYS)
        found: list[tuple[str, list[Any]]] = []
        if keyed:
            for item in keyed:
                found.extend((ji.label(item), q) for q in quads(ji.first(item, BOX_KEYS), item, raw))
        else:
            found.extend(("", v) for v in bare if len(v) == 4)
        if not found:
            raise ParseError("no boxes [x1, y1, x2, y2] in the answer", raw=raw)
        return tuple(box_of(label, quad, text.size, raw) for label, quad in found)

    # ---- grading against a label, comparing with a baseline ---

    rank = ("iou", 1)
    metrics = IOU_METRICS

    def grade(
        self, ours: Sequence[CameraBox], theirs: Sequence[Box2D], context: base.GradeContext
    ) -> tuple[base.Values, list[str]]:
        a, b = [norm_box(x.box) for x in ours], [norm_box(x) for x in theirs]
        iou = base.greedy_mean(len(a), len(b), lambda i, j: box_iou(a[i], b[j]))
        return {"iou": iou, "iou50": float(iou >= context.limits.iou_min - 1e-12)}, []

    compare_checks = (base.CompareCheck("box_iou", "box_iou_min", "box_iou_min", ">="),)

    def compare(
        self, baseline: Sequence[CameraBox], current: Sequence[CameraBox]
    ) -> tuple[base.Values, list[str]]:
        low, mean = base.greedy_min_mean(
            len(baseline), len(current), lambda i, j: box_iou(baseline[i].pixels(), current[j].pixels())
        )
        return {"box_iou_min": low, "box_iou_mean": mean}, []

    # ---- forms: the CLI's, a drafted label's, results.jsonl's ---

    def to_json(self, values: Sequence[Box2D]) -> list[dict[str, Any]]:
        return [
            {
                "label": b.label,
                "x1": b.x1,
                "y1": b.y1,
                "x2": b.x2,
                "y2": b.y2,
                "x1_norm": b.x1_norm,
                "y1_norm": b.y1_norm,
                "x2_norm": b.x2_norm,
                "y2_norm": b.y2_norm,
            }
            for b in values
        ]

    label_form = '[{"bbox_2d": [x1, y1, x2, y2], "label": "cup"}] (0-1000 per axis)'

    def draft(self, values: Sequence[CameraBox]) -> str:
        return json.dumps(
            [{"bbox_2d": [ji.compact(v) for v in norm_box(b.box)], "label": b.label} for b in values]
        )

    def held(self, values: Sequence[Box2D], camera: str, width: int, height: int) -> tuple[CameraBox, ...]:
        return tuple(CameraBox(b, camera, width, height) for b in values)

    def dump(self, values: Sequence[CameraBox]) -> list[dict[str, Any]]:
        return [
            {"label": b.label, **ji.camera_fields(b), "norm": list(norm_box(b.box)), "px": list(b.pixels())}
            for b in values
        ]

    def load(self, data: Sequence[Mapping[str, Any]]) -> tuple[CameraBox, ...]:
        return tuple(_load_one(b) for b in data)


KIND = BoxesKind()
