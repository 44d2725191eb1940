"""Which frames of a clip, at which size, the served model's video processor takes: so that a clip can be
written as the model will see it, and the server's API process (one per server, on the fleet's critical path)
neither decodes frames it drops nor resizes the ones it keeps.

Qwen3-VL's video processor (transformers' Qwen3VLVideoProcessor, as vLLM runs it for the Cosmos 3 Reasoner)
samples a video at its own `fps` (whatever rate the request asked vLLM's loader for), then resizes the frames
to multiples of patch_size * merge_size (32) within a pixel budget for the whole video (`size.longest_edge`).
On the CPU tier's tiny checkpoint (fps 2, budget 2,097,152): the robot clip's 26 frames of 644x476 at 4 fps
become 13 frames of 448x320. VisionProfile replicates both steps (transformers 5.x) for the values given; a
value left at 0 is not applied (the processor then still does that step itself: correct, only not cheaper).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["VisionProfile"]


@dataclass(frozen=True)
class VisionProfile:
    """The served model's video processor settings (its video_preprocessor_config.json)."""

    factor: int = 32  # patch_size * merge_size: frame sides are multiples of it
    temporal_factor: int = 2  # temporal_patch_size
    fps: float = 0.0  # the rate it samples a video at; 0: unknown (every frame of the clip is kept)
    max_pixels: int = 0  # size.longest_edge: pixels of the whole video (frames x height x width); 0: unknown
    min_pixels: int = 0  # size.shortest_edge; 0: unknown
    min_frames: int = 4
    max_frames: int = 768

    def __post_init__(self) -> None:
        if self.factor < 1 or self.temporal_factor < 1 or self.min_frames < 1 or self.max_frames < 1:
            raise ValueError("factor, temporal_factor, min_frames and max_frames must be >= 1")
        if not (math.isfinite(self.fps) and self.fps >= 0) or self.max_pixels < 0 or self.min_pixels < 0:
            raise ValueError("fps, max_pixels and min_pixels must be >= 0")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> VisionProfile:
        """The profile of a video_preprocessor_config.json (transformers' Qwen3VLVideoProcessor keys)."""
        size = config.get("size") or {}
        return cls(
            factor=int(config.get("patch_size", 16)) * int(config.get("merge_size", 2)),
            temporal_factor=int(config.get("temporal_patch_size", 2)),
            fps=float(config.get("fps") or 0.0),
            max_pixels=int(size.get("longest_edge") or 0),
            min_pixels=int(size.get("shortest_edge") or 0),
            min_frames=int(config.get("min_frames", 4)),
            max_frames=int(config.get("max_frames", 768)),
        )

    def frame_indices(self, total: int, clip_fps: float) -> list[int]:
        """The frames of a clip of `total` frames at `clip_fps` the processor keeps (its own sampling, as
        transformers' Qwen3VLVideoProcessor.sample_frames and vLLM's timestamps compute them)."""
        if total < 1:
            return []
        if self.fps <= 0 or clip_fps <= 0:
            return list(range(total))
        count = int(total / clip_fps * self.fps)
        count = min(max(count, self.min_frames), self.max_frames, total)
        return [int(i) for i in np.linspace(0, total - 1, count).round().astype(int)]

    def resized(self, frames: int, width: int, height: int) -> tuple[int, int]:
        """(width, height) the processor resizes `frames` frames of width x height to (transformers'
        qwen3_vl smart_resize); the budgets it does not know are not applied."""
        factor = self.factor
        if height < factor or width < factor:
            scale = max(factor / height, factor / width)
            height, width = int(height * scale), int(width * scale)
        h_bar = round(height / factor) * factor
        w_bar = round(width / factor) * factor
        t_bar = round(frames / self.temporal_factor) * self.temporal_factor
        if self.max_pixels and t_bar * h_bar * w_bar > self.max_pixels:
            beta = math.sqrt((frames * height * width) / self.max_pixels)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif self.min_pixels and t_bar * h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (frames * height * width))
            h_bar = math.ceil(height * beta / factor) * factor
            w_bar = math.ceil(width * beta / factor) * factor
        return w_bar, h_bar

    def frame_size(self, frames: int, width: int, height: int) -> tuple[int, int]:
        """The size to write `frames` frames of width x height at, so that the processor keeps it as it is:
        its own resize, checked to be a fixed point of it (else made smaller until it is)."""
        width, height = self.resized(frames, width, height)
        for _ in range(64):
            if self.resized(frames, width, height) == (width, height):
                return width, height
            if width >= height:
                width = max(self.factor, width - self.factor)
            else:
                height = max(self.factor, height - self.factor)
        return width, height
