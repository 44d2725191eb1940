"""Clips as the served model takes them (model_frames.VisionProfile, ClipWriter's `vision`): the frames the
Qwen3-VL processor keeps, at the size it resizes them to.

- VisionProfile.resized agrees with transformers' own smart_resize (differential, in .venv-vllm), and
  frame_size is a fixed point of it: the processor leaves such a clip's frames as they are.
- The robot clip written with the tiny checkpoint's profile: 13 frames of 448x320 at 2 fps, and the real
  processor (vLLM's loader and transformers' Qwen3VLVideoProcessor in .venv-vllm) gives it the same grid,
  hence the same prompt tokens, as the 26 frames of 644x476 it would otherwise decode and resize.
"""

from __future__ import annotations

import json
import random
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import vllm_tier

from cosmos_reasoner_ros.clips import ClipWriter, Frame, MediaStore, VisionProfile
from cosmos_reasoner_ros.clips.clip_buffer import Clip

NS = 1_000_000_000
TINY = VisionProfile(
    fps=2.0, max_pixels=2048 * 32 * 32, min_pixels=4 * 32 * 32
)  # tools/build_tiny_checkpoint.py

PROCESSOR = textwrap.dedent(
    """
    import json, sys
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize
    cases = json.load(sys.stdin)
    out = []
    for frames, width, height, max_pixels, min_pixels in cases:
        h, w = smart_resize(frames, height, width, temporal_factor=2, factor=32,
                            min_pixels=min_pixels, max_pixels=max_pixels)
        out.append([w, h])
    print(json.dumps(out))
    """
)


def test_resized_agrees_with_transformers() -> None:
    reason = vllm_tier.missing_reason()
    if reason:
        pytest.skip(reason)
    rng = random.Random(29)
    cases = [[26, 644, 476, 2048 * 32 * 32, 4096], [13, 644, 476, 2048 * 32 * 32, 4096]]
    for _ in range(400):
        cases.append(
            [
                rng.randint(2, 64),
                rng.randint(32, 2000),
                rng.randint(32, 1200),
                rng.choice([786_432, 2_097_152, 25_165_824]),
                rng.choice([4096, 131_072]),
            ]
        )
    done = subprocess.run(
        [str(vllm_tier.vllm_python()), "-c", PROCESSOR],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=vllm_tier.clean_env(),
        check=True,
        timeout=300,
    )
    theirs = json.loads(done.stdout.splitlines()[-1])
    ours = [list(VisionProfile(max_pixels=mx, min_pixels=mn).resized(t, w, h)) for t, w, h, mx, mn in cases]
    assert ours == theirs
    assert theirs[1] == [448, 320]  # the robot clip's 13 kept frames


@given(
    st.integers(2, 80),
    st.integers(32, 4000),
    st.integers(32, 3000),
    st.sampled_from([0, 786_432, 2_097_152, 25_165_824]),
)
@settings(max_examples=300, deadline=None)
def test_frame_size_is_a_fixed_point_of_the_processors_resize(
    frames: int, width: int, height: int, max_pixels: int
) -> None:
    profile = VisionProfile(max_pixels=max_pixels, min_pixels=4096)
    size = profile.frame_size(frames, width, height)
    assert profile.resized(frames, *size) == size
    assert size[0] % 32 == 0 and size[1] % 32 == 0


def test_frame_indices_are_the_processors_sampling() -> None:
    assert TINY.frame_indices(26, 4.0) == [0, 2, 4, 6, 8, 10, 12, 15, 17, 19, 21, 23, 25]
    assert TINY.frame_indices(6, 4.0) == [0, 2, 3, 5]  # min_frames 4
    assert TINY.frame_indices(10, 1.0) == list(range(10))  # slower than the processor: every frame
    assert VisionProfile().frame_indices(26, 4.0) == list(range(26))  # fps unknown: every frame
    with pytest.raises(ValueError, match="must be >= 0"):
        VisionProfile(fps=-1.0)


def robot_clip(frames: list[np.ndarray]) -> Clip:
    images = [Frame("front", 5 * NS + i * NS // 4, image) for i, image in enumerate(frames[:26])]
    height, width = frames[0].shape[:2]
    return Clip("front", tuple(images), images[0].stamp_ns, images[-1].stamp_ns, 4.0, width, height)


def test_the_robot_clip_is_written_as_the_tiny_model_takes_it(
    tmp_path: Path, real_frames: list[np.ndarray]
) -> None:
    store = MediaStore(tmp_path / "media")
    plain = ClipWriter(store).write_clip(robot_clip(real_frames))
    writer = ClipWriter(store, vision=TINY)
    try:
        ref = writer.write_clip(robot_clip(real_frames))
    finally:
        writer.close()
    assert (plain.frames, plain.width, plain.height, plain.fps) == (26, 644, 476, 4.0)
    assert (ref.frames, ref.width, ref.height, ref.fps, ref.duration_s) == (13, 448, 320, 2.0, 6.5)
    assert ref.size_bytes < plain.size_bytes / 2
    # Only the size differs from what the model reads: no frame count, no budget (sides rounded to 32).
    snap = ClipWriter(store, vision=VisionProfile()).write_clip(robot_clip(real_frames))
    assert (snap.frames, snap.width, snap.height, snap.fps) == (26, 640, 480, 4.0)

    reason = vllm_tier.missing_reason()
    if reason:
        pytest.skip(reason)
    script = textwrap.dedent(
        """
        import json, sys
        from transformers import AutoProcessor
        from vllm.multimodal.video import VIDEO_LOADER_REGISTRY
        loader = VIDEO_LOADER_REGISTRY.load("opencv")
        processor = AutoProcessor.from_pretrained(sys.argv[1]).video_processor
        out = []
        for path, fps in json.loads(sys.argv[2]):
            frames, meta = loader.load_bytes(open(path, "rb").read(), num_frames=256, fps=fps)
            sample = meta.pop("do_sample_frames")
            got = processor(
                videos=[frames], video_metadata=[meta], do_sample_frames=sample, return_tensors="pt"
            )
            out.append([list(frames.shape), got["video_grid_thw"].tolist()[0]])
        print(json.dumps(out))
        """
    )
    clips = [[str(plain.path), plain.fps], [str(ref.path), ref.fps]]
    done = subprocess.run(
        [
            str(vllm_tier.vllm_python()),
            "-c",
            script,
            str(vllm_tier.tiny_checkpoint("qwen3vl")),
            json.dumps(clips),
        ],
        capture_output=True,
        text=True,
        env=vllm_tier.clean_env({"TOKENIZERS_PARALLELISM": "false"}),
        check=True,
        timeout=300,
    )
    (plain_shape, plain_grid), (model_shape, model_grid) = json.loads(done.stdout.splitlines()[-1])
    assert plain_shape == [26, 476, 644, 3] and model_shape == [13, 320, 448, 3]  # decoded by the server
    assert plain_grid == model_grid == [7, 20, 28]  # the same grid: the same prompt tokens, no resize
