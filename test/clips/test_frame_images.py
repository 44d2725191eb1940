"""clips/frame_images: a clip as at most N stills, in time order, evenly spread, the newest among them, each
with its time from the clip's start; written through the writer's image path at the video frames' size.

The oracle is computed here from the frames' stamps: each written image carries its frame's stamp in its
pixels (a grey level per frame), so the images are matched to frames without trusting the module's indices.
"""

from __future__ import annotations

import base64
import itertools
from pathlib import Path

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.clips import (
    Clip,
    ClipWriter,
    Frame,
    MediaStore,
    VisionProfile,
    sample_frame_indices,
    write_frame_images,
)
from cosmos_reasoner_ros.errors import ClipError

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


def _evenly_spread(indices: list[int], count: int, limit: int) -> None:
    """The oracle: ascending, at most `limit`, all when they fit, else exactly `limit` with the newest and
    (limit >= 2) the first, neighbouring gaps differing by at most one."""
    assert indices == sorted(set(indices))
    assert all(0 <= i < count for i in indices)
    assert len(indices) == min(count, limit)
    if count == 0:
        return
    assert indices[-1] == count - 1
    if limit >= 2:
        assert indices[0] == 0
    gaps = [b - a for a, b in itertools.pairwise(indices)]
    if gaps:
        assert max(gaps) - min(gaps) <= 1
        # even: each gap is the mean gap rounded down or up
        mean = (indices[-1] - indices[0]) / len(gaps)
        assert all(int(mean) <= g <= int(mean) + 1 for g in gaps)


@given(count=st.integers(0, 400), limit=st.integers(1, 64))
@example(count=9, limit=8)
@example(count=2, limit=1)
@example(count=0, limit=3)
def test_sampled_indices_are_ordered_even_and_keep_the_newest(count: int, limit: int) -> None:
    _evenly_spread(sample_frame_indices(count, limit), count, limit)


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        sample_frame_indices(5, 0)


def _clip(camera: str, stamps: list[int], size: tuple[int, int] = (16, 12)) -> Clip:
    """Frames whose grey level encodes their index (readable back from a JPEG: levels 8 apart)."""
    width, height = size
    frames = tuple(
        Frame(camera, stamp, np.full((height, width, 3), 8 * (i % 30), np.uint8), "optical")
        for i, stamp in enumerate(stamps)
    )
    return Clip(camera, frames, stamps[0], stamps[-1], 4.0, width, height)


def _level(url: str) -> int:
    """The grey level of an image sent as a data: URL (which frame it is)."""
    data = base64.b64decode(url.split(",", 1)[1])
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
    return round(float(image.mean()) / 8)


@st.composite
def clips(draw: st.DrawFn) -> tuple[list[Clip], int]:
    """1-3 cameras, each 1-29 frames at its own rate with gaps, starting at its own offset; and a limit."""
    cameras = draw(st.integers(1, 3))
    out = []
    for c in range(cameras):
        count = draw(st.integers(1, 29))
        period_ns = draw(st.sampled_from([NS // 30, NS // 15, NS // 4, NS // 2, NS]))
        start = T0 + draw(st.integers(0, 2 * NS))
        gaps = draw(st.lists(st.integers(0, 3 * NS), min_size=count, max_size=count))
        stamps, t = [], start
        for i in range(count):
            t += period_ns + (gaps[i] if i % 5 == 4 else 0)  # some frames lost: a gap every fifth
            stamps.append(t)
        out.append(_clip(f"cam{c}", stamps))
    return out, draw(st.integers(1, 12))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=clips())
@example(case=([_clip("cam0", [T0 + i * NS // 4 for i in range(9)])], 8))
@example(case=([_clip("cam0", [T0]), _clip("cam1", [T0 + NS, T0 + 2 * NS])], 1))
def test_images_are_the_sampled_frames_with_their_times(case: tuple[list[Clip], int], tmp_path: Path) -> None:
    clip_list, limit = case
    writer = ClipWriter(MediaStore(tmp_path), inline=True)
    images = write_frame_images(writer, clip_list, limit)
    assert all(ref.kind == "image" and ref.mime == "image/jpeg" for ref in images.media)
    if len(clip_list) > limit:  # one grid of all cameras
        assert {ref.camera for ref in images.media} == {"+".join(c.camera for c in clip_list)}
        assert len(images.media) <= limit
        return
    assert len(images.media) <= limit
    origin = min(c.start_ns for c in clip_list)
    for clip in clip_list:
        mine = [i for i, ref in enumerate(images.media) if ref.camera == clip.camera]
        resolved = [_level(images.media[i].url) for i in mine]  # under 30 frames: the level is the index
        _evenly_spread(resolved, len(clip.frames), max(1, limit // len(clip_list)))
        expected = [(clip.frames[j].stamp_ns - origin) / NS for j in resolved]
        assert [images.offsets_s[i] for i in mine] == pytest.approx(expected, abs=1e-9)


def test_frames_are_written_at_the_size_of_the_model_s_video_frames(robot_clip: Path, tmp_path: Path) -> None:
    """With the served model's video processor known, each still has the size the clip's video frames get
    (the CPU tier's tiny checkpoint: fps 2, a budget of 2,097,152 pixels), written as files in the store."""
    capture = cv2.VideoCapture(str(robot_clip))
    images = []
    while True:
        ok, image = capture.read()
        if not ok:
            break
        images.append(cv2.cvtColor(image, cv2.COLOR_BGR2RGB))
    capture.release()
    stamps = [T0 + i * NS // 4 for i in range(len(images))]
    frames = tuple(Frame("front", s, img) for s, img in zip(stamps, images, strict=True))
    height, width = images[0].shape[:2]
    clip = Clip("front", frames, stamps[0], stamps[-1], 4.0, width, height)
    writer = ClipWriter(MediaStore(tmp_path), vision=VisionProfile(fps=2.0, max_pixels=2_097_152))
    video = writer.write_clip(clip)
    stills = write_frame_images(writer, [clip], 8)
    assert len(stills.media) == 8
    assert {(ref.width, ref.height) for ref in stills.media} == {(video.width, video.height)}
    for ref in stills.media:
        assert ref.path is not None and ref.path.parent == tmp_path and ref.url == ref.path.as_uri()
    assert stills.offsets_s[-1] == pytest.approx((stamps[-1] - stamps[0]) / NS)


def test_a_clip_without_frames_is_a_clip_error(tmp_path: Path) -> None:
    empty = Clip("front", (), T0, T0, 4.0, 16, 12)
    with pytest.raises(ClipError):
        write_frame_images(ClipWriter(MediaStore(tmp_path), inline=True), [empty], 8)
