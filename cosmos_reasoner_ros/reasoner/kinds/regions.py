"""The regions kind ("describe anything"): regions of the image, each a box with a free-text caption
(`[{"bbox_2d": [x1, y1, x2, y2], "caption": "a red mug with a chipped rim"}]`, 0-1000 per axis).

Unlike boxes, every region needs its caption (a box without one, or a bare [x1, y1, x2, y2], is refused), and
a region is judged by where it is and what it says: regions are paired greedily by IoU, each pair scores its
IoU and (where the boxes overlap) its captions' word similarity (text.text_similarity), unpaired regions 0.
The captions live in the boxes' labels: the node publishes and records a region as a box whose label is its
caption, so the ROS messages and results.jsonl need nothing new."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.geometry import Box2D
from cosmos_reasoner_ros.reasoner.kinds import base, boxes
from cosmos_reasoner_ros.reasoner.kinds import json_items as ji
from cosmos_reasoner_ros.reasoner.kinds.text import text_similarity

__all__ = ["KIND", "RegionsKind"]

_CAPTION_KEYS = ("caption", "description", "text", "label", "name")


def _paired(a: Sequence[Box2D], b: Sequence[Box2D]) -> tuple[list[float], list[float], int]:
    """(IoU, caption similarity) of each pair of regions paired by IoU, and the number of slots (pairs plus
    the regions of either side left unpaired). Boxes that do not overlap are not one region: similarity 0."""
    na, nb = [boxes.norm_box(x) for x in a], [boxes.norm_box(x) for x in b]
    pairs = base.greedy_pairs(len(a), len(b), lambda i, j: boxes.box_iou(na[i], nb[j]))
    ious = [iou for iou, _, _ in pairs]
    similar = [text_similarity(a[i].label, b[j].label) if iou > 0 else 0.0 for iou, i, j in pairs]
    return ious, similar, len(a) + len(b) - len(pairs)


class RegionsKind(base.AnswerKind):
    """regions of the image, each a box with a free-text caption (describe anything)"""

    name = "regions"
    slot = "boxes"

    def parse(self, text: base.AnswerText) -> tuple[Box2D, ...]:
        raw = text.raw
        keyed, _ = ji.items(text.values, boxes.ITEM_KEYS)
        found: list[tuple[str, list[Any]]] = []
        for n, item in enumerate(keyed, start=1):
            quads = boxes.quads(ji.first(item, boxes.BOX_KEYS), item, raw)
            caption = ji.label(item, _CAPTION_KEYS).strip()
            if not caption:
                raise ParseError(f"region {n} has no caption (a region is a box and what it shows)", raw=raw)
            found.extend((caption, q) for q in quads)
        if not found:
            raise ParseError(
                'no regions {"bbox_2d": [x1, y1, x2, y2], "caption": ...} in the answer', raw=raw
            )
        return tuple(boxes.box_of(caption, quad, text.size, raw) for caption, quad in found)

    rank = ("region", 1)
    metrics = (
        base.MetricSpec(
            "mean_region",
            "region",
            "mean",
            "higher",
            "",
            "IoU times caption similarity of regions paired by IoU (unpaired 0)",
        ),
        *boxes.IOU_METRICS,
        base.MetricSpec(
            "caption_similarity",
            "caption_similarity",
            "mean",
            "higher",
            "",
            "word similarity of the captions of regions paired by IoU (unpaired or apart: 0)",
        ),
        base.MetricSpec(
            "caption_match",
            "caption_match",
            "share",
            "higher",
            "",
            "share of requests whose caption similarity reaches the label's match_min",
        ),
    )

    def grade(
        self, ours: Sequence[boxes.CameraBox], theirs: Sequence[Box2D], context: base.GradeContext
    ) -> tuple[base.Values, list[str]]:
        ious, similar, slots = _paired([x.box for x in ours], theirs)
        if not slots:
            return self.unanswered, []
        iou, caption = sum(ious) / slots, sum(similar) / slots
        return {
            "region": sum(i * s for i, s in zip(ious, similar, strict=True)) / slots,
            "iou": iou,
            "iou50": float(iou >= context.limits.iou_min - 1e-12),
            "caption_similarity": caption,
            "caption_match": float(caption >= context.limits.match_min - 1e-12),
        }, []

    compare_checks = boxes.KIND.compare_checks

    def compare(
        self, baseline: Sequence[boxes.CameraBox], current: Sequence[boxes.CameraBox]
    ) -> tuple[base.Values, list[str]]:
        ious, similar, slots = _paired([x.box for x in baseline], [x.box for x in current])
        scores = ious + [0.0] * (slots - len(ious))
        captions = similar + [0.0] * (slots - len(similar))
        return {
            "box_iou_min": min(scores, default=0.0),
            "box_iou_mean": float(np.mean(scores)) if scores else 0.0,
            "caption_similarity_min": min(captions, default=0.0),
            "caption_similarity_mean": float(np.mean(captions)) if captions else 0.0,
        }, []

    # ---- forms: the CLI's, a drafted label's; a record holds, dumps and loads regions as boxes ---

    def to_json(self, values: Sequence[Box2D]) -> list[dict[str, Any]]:
        return [
            {"caption": b.label, **box} for b, box in zip(values, boxes.KIND.to_json(values), strict=True)
        ]

    label_form = (
        '[{"bbox_2d": [x1, y1, x2, y2], "caption": "a red mug with a chipped rim"}] (0-1000 per axis)'
    )

    def draft(self, values: Sequence[boxes.CameraBox]) -> str:
        return json.dumps(
            [{"bbox_2d": [ji.compact(v) for v in boxes.norm_box(b.box)], "caption": b.label} for b in values]
        )

    def held(
        self, values: Sequence[Box2D], camera: str, width: int, height: int
    ) -> tuple[boxes.CameraBox, ...]:
        return boxes.KIND.held(values, camera, width, height)

    def dump(self, values: Sequence[boxes.CameraBox]) -> list[dict[str, Any]]:
        return boxes.KIND.dump(values)

    def load(self, data: Sequence[Mapping[str, Any]]) -> tuple[boxes.CameraBox, ...]:
        return boxes.KIND.load(data)


KIND = RegionsKind()
