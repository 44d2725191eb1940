"""Drawing a parsed answer on a frame: trajectories as numbered polylines, labelled boxes, a caption."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import cv2
import numpy as np

from cosmos_reasoner_ros.geometry.coordinates import norm_to_pixel, point_pixels

if TYPE_CHECKING:
    from cosmos_reasoner_ros.geometry.shapes import Box2D, Point2D, Trajectory

# RGB colours, cycled per trajectory / box; chosen to stay visible on both bright and dark scenes.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (255, 64, 64),
    (64, 220, 64),
    (64, 128, 255),
    (255, 200, 0),
    (255, 0, 255),
    (0, 220, 220),
)


def _point(p: Point2D, width: int, height: int) -> tuple[int, int]:
    # Always from the 0-1000 value: the frame drawn on may be smaller than the camera image pixels refer to.
    x, y = point_pixels(p, width, height)
    return round(x), round(y)


def _label(
    img: np.ndarray, text: str, org: tuple[int, int], colour: tuple[int, int, int], scale: float
) -> None:
    if not text:
        return
    thickness = max(1, round(scale * 2))
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
    x = int(np.clip(org[0], 0, max(0, img.shape[1] - tw)))
    y = int(np.clip(org[1], th + base, img.shape[0] - 1))
    # A dark backing box keeps labels readable on any background.
    cv2.rectangle(img, (x, y - th - base), (x + tw, y + base), (0, 0, 0), -1)
    cv2.putText(img, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, thickness, cv2.LINE_AA)


def annotate(
    image: np.ndarray,
    trajectories: Sequence[Trajectory] = (),
    boxes: Sequence[Box2D] = (),
    caption: str = "",
) -> np.ndarray:
    """A copy of an HxWx3 uint8 RGB image with the answer drawn on it (the input is not modified)."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"annotate needs an HxWx3 uint8 image, got {image.shape} {image.dtype}")
    out: np.ndarray = np.ascontiguousarray(image).copy()
    height, width = out.shape[:2]
    scale = max(0.4, min(width, height) / 800.0)
    thickness = max(1, round(min(width, height) / 240))
    for i, box in enumerate(boxes):
        colour = PALETTE[i % len(PALETTE)]
        p1 = (round(norm_to_pixel(box.x1_norm, width)), round(norm_to_pixel(box.y1_norm, height)))
        p2 = (round(norm_to_pixel(box.x2_norm, width)), round(norm_to_pixel(box.y2_norm, height)))
        cv2.rectangle(out, p1, p2, colour, thickness, cv2.LINE_AA)
        _label(out, box.label, (p1[0], p1[1] - 4), colour, scale)
    for i, trajectory in enumerate(trajectories):
        colour = PALETTE[(i + len(boxes)) % len(PALETTE)]
        pts = [_point(p, width, height) for p in trajectory.points]
        if len(pts) > 1:
            poly = np.array(pts, dtype=np.int32).reshape(-1, 1, 2)
            cv2.polylines(out, [poly], False, colour, thickness, cv2.LINE_AA)
        for n, pt in enumerate(pts, start=1):
            cv2.circle(out, pt, thickness + 3, colour, -1, cv2.LINE_AA)
            _label(out, str(n), (pt[0] + thickness + 4, pt[1] - thickness - 4), colour, scale * 0.8)
        if pts:
            _label(out, trajectory.label, (pts[0][0], pts[0][1] + int(30 * scale)), colour, scale)
    if caption:
        _label(out, caption[:120], (4, int(24 * scale)), (255, 255, 255), scale)
    return out
