"""A server that takes no video (vLLM's --limit-mm-per-prompt '{"image": 8, "video": 0}'), through the real
buffer, writer, client and parser against the scripted server, which refuses as vLLM does (HTTP 400, "At most
0 video(s) may be provided in one prompt."): media_form auto falls back once and then sends frames directly,
video ends with the refusal, frames never sends a video; every shipped task answers in frames form."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from support.configs import default_config
from support.pipelines import make_pipeline
from support.scripted_server import ScriptedReply, ScriptedServer, media_counts

from cosmos_reasoner_ros.clips import ClipBuffer, Frame, MultiCameraBuffer
from cosmos_reasoner_ros.node import core
from cosmos_reasoner_ros.node.parameters import validate
from cosmos_reasoner_ros.reasoner import (
    MediaForm,
    MediaRefusal,
    TaskCatalog,
)
from cosmos_reasoner_ros.requests import RequestSpec

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
NO_VIDEO = {"image": 8, "video": 0}
THOR_NANO = {"image": 1, "video": 0}  # NVIDIA's recipe for Nano on Jetson Thor
# A whole answer of each answer kind, as the parser reads it without structured output.
ANSWERS = {
    "text": "<think>\nThe arm holds a cup.\n</think>\n\nPlace the cup on the shelf.",
    "points": '<think>\nr\n</think>\n\n[{"point_2d": [500, 250], "label": "gripper trajectory"}]',
    "boxes": '[{"bbox_2d": [100, 100, 400, 300], "label": "cup"}]',
    "segments": '[{"start": 0.5, "end": 1.5, "caption": "the arm lifts the cup"}]',
    "choice": "<think>\nr\n</think>\n\n<answer>\nA\n</answer>",
    "regions": '[{"bbox_2d": [100, 100, 400, 300], "caption": "a white cup on the shelf"}]',
}
VALUES = {
    "task": "put the cup away",
    "step": "pick up the cup",
    "object": "the cup",
    "event": "the arm lifts",
}
VALUES |= {"question": "Is the gripper holding anything?", "prompt": "Which objects are on the table?"}


@pytest.fixture(scope="module")
def robot_frames(robot_clip: Path) -> list[np.ndarray]:
    with av.open(str(robot_clip)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def _buffer(robot_frames: list[np.ndarray], cameras: tuple[str, ...] = ("front",)) -> MultiCameraBuffer:
    """The robot clip (644x476) at true 4 Hz stamps, one buffer per camera."""
    buffers = []
    for camera in cameras:
        buf = ClipBuffer(camera, 4.0, 30.0, 512 * 1024 * 1024, 0)
        for i, image in enumerate(robot_frames):
            stamp = T0 + i * NS // 4
            if buf.wants(stamp):
                buf.add(Frame(camera=camera, stamp_ns=stamp, image=image, frame_id="optical"))
        buffers.append(buf)
    return MultiCameraBuffer(buffers)


@pytest.fixture
def buffer(robot_frames: list[np.ndarray]) -> MultiCameraBuffer:
    return _buffer(robot_frames)


@pytest.fixture
def no_video() -> Iterator[ScriptedServer]:
    with ScriptedServer(mm_limits=NO_VIDEO) as s:
        yield s


def _content(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["messages"][-1]["content"]


def _spec(request_id: str, task: str = "next_action", **kwargs: Any) -> RequestSpec:
    return RequestSpec(request_id, task, **kwargs)


def test_auto_falls_back_once_then_sends_frames_directly(
    buffer: MultiCameraBuffer, no_video: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    form = MediaForm("auto", 8)
    pipeline = make_pipeline(buffer, tmp_path, no_video.base_url, media_form=form)
    with caplog.at_level(logging.WARNING):
        first = pipeline.run(_spec("r1"))
        second = pipeline.run(_spec("r2"))
    assert first.success and second.success, (first.error, second.error)
    sent = [media_counts(body) for body in no_video.requests]
    # the first request's video refused, at once again as 8 frames; the next request frames only
    assert sent == [{"video": 1}, {"image": 8}, {"image": 8}]
    assert no_video.mm_refused == 1 and form.frames
    notes = [r.getMessage() for r in caplog.records if "takes no video" in r.getMessage()]
    assert len(notes) == 1, notes
    assert all(m.kind == "image" for m in first.media) and len(first.media) == 8
    for body in no_video.requests[1:]:
        parts = _content(body)
        assert [p["type"] for p in parts] == ["image_url"] * 8 + ["text"]  # media first, then the text
        assert "media_io_kwargs" not in body
    # the frames are files in the media directory, the newest frame last
    assert first.media[-1].path is not None and first.media[-1].path.parent == tmp_path


def test_temporal_tasks_get_each_frame_s_time_from_the_clip_start(
    buffer: MultiCameraBuffer, no_video: ScriptedServer, tmp_path: Path
) -> None:
    no_video.push(ScriptedReply(text=ANSWERS["segments"]))
    out = make_pipeline(buffer, tmp_path, no_video.base_url, media_form=MediaForm("frames", 8)).run(
        _spec("t1", "temporal_localization")
    )
    assert out.success, out.error
    parts = _content(no_video.requests[-1])
    labels = [p["text"] for p in parts[:-1] if p["type"] == "text"]
    # the oracle: the buffer's stamps (4 Hz from T0, 26 frames), the clip's 2 s window ending at the newest
    stamps = [T0 + i * NS // 4 for i in range(26)]
    window = [s for s in stamps if s >= stamps[-1] - 2 * NS]
    times = [float(re.fullmatch(r"Frame at (\d+\.\d\d) s:", label).group(1)) for label in labels]  # type: ignore[union-attr]
    assert len(times) == 8 and times == sorted(times)
    offsets = [(s - window[0]) / NS for s in window]
    assert all(any(abs(t - o) < 0.006 for o in offsets) for t in times)
    assert times[0] == 0.0 and times[-1] == pytest.approx(offsets[-1], abs=0.006)
    assert [p["type"] for p in parts[:-1]] == ["text", "image_url"] * 8
    assert out.parsed is not None and out.parsed.segments


def test_video_mode_ends_with_the_refusal(
    buffer: MultiCameraBuffer, no_video: ScriptedServer, tmp_path: Path
) -> None:
    out = make_pipeline(buffer, tmp_path, no_video.base_url, media_form=MediaForm("video")).run(_spec("v1"))
    assert not out.success and out.error_kind == "rejected"
    assert "At most 0 video(s)" in out.error and "media_form is video" in out.error
    assert [media_counts(body) for body in no_video.requests] == [{"video": 1}]


def test_frames_mode_never_sends_a_video(buffer: MultiCameraBuffer, tmp_path: Path) -> None:
    with ScriptedServer() as server:  # a server that would take a video
        pipeline = make_pipeline(buffer, tmp_path, server.base_url, media_form=MediaForm("frames", 3))
        outs = pipeline.run_clip(
            [
                _spec(f"f{i}", task, clip_id="clip", instruction="x")
                for i, task in enumerate(("next_action", "caption", "image_caption"))
            ]
        )
        assert all(o.success for o in outs), [o.error for o in outs]
        sent = [media_counts(body) for body in server.requests]
    assert all("video" not in counts for counts in sent)
    assert sorted(counts["image"] for counts in sent) == [
        1,
        3,
        3,
    ]  # the image task's one still, 3 frames each
    # the two video tasks share the clip's frames: the same files, the same media uuids
    framed = [_content(b) for b in server.requests if media_counts(b)["image"] == 3]
    assert [p.get("uuid") for p in framed[0]] == [p.get("uuid") for p in framed[1]]


def test_a_server_that_takes_one_image_gets_one_frame(buffer: MultiCameraBuffer, tmp_path: Path) -> None:
    """NVIDIA's Nano-on-Thor limits: the video refused, then 8 frames refused ("At most 1 image(s)"), then
    the newest frame alone; the next request sends it at once."""
    with ScriptedServer(mm_limits=THOR_NANO) as server:
        form = MediaForm("auto", 8)
        pipeline = make_pipeline(buffer, tmp_path, server.base_url, media_form=form)
        first, second = pipeline.run(_spec("n1")), pipeline.run(_spec("n2"))
        sent = [media_counts(body) for body in server.requests]
    assert first.success and second.success, (first.error, second.error)
    assert sent == [{"video": 1}, {"image": 8}, {"image": 1}, {"image": 1}]
    assert form.image_limit == 1
    assert first.media[0].url != "" and len(first.media) == 1


def test_several_requests_about_one_clip_fall_back_together(
    buffer: MultiCameraBuffer, no_video: ScriptedServer, tmp_path: Path
) -> None:
    pipeline = make_pipeline(buffer, tmp_path, no_video.base_url, media_form=MediaForm("auto", 4))
    outs = pipeline.run_clip(
        [
            _spec(f"c{i}", task, clip_id="clip", instruction="why?")
            for i, task in enumerate(("next_action", "caption", "common_sense"))
        ]
    )
    assert all(o.success for o in outs), [o.error for o in outs]
    sent = [media_counts(body) for body in no_video.requests]
    assert sent.count({"video": 1}) == 1 and sent.count({"image": 4}) == 3  # one refusal for the clip
    urls = {tuple(m.url for m in o.media) for o in outs}
    assert len(urls) == 1  # the frames written once, shared


def test_a_server_restart_asks_again(buffer: MultiCameraBuffer, tmp_path: Path) -> None:
    """After forget() (the node's return to health), a video is tried again: a server restarted with video."""
    with ScriptedServer(mm_limits=NO_VIDEO) as server:
        form = MediaForm("auto")
        pipeline = make_pipeline(buffer, tmp_path, server.base_url, media_form=form)
        assert pipeline.run(_spec("s1")).success
        server.mm_limits = {}
        form.forget()
        assert pipeline.run(_spec("s2")).success
        sent = [media_counts(body) for body in server.requests]
    assert sent == [{"video": 1}, {"image": 8}, {"video": 1}]


def test_other_refusals_are_not_retried(
    buffer: MultiCameraBuffer, no_video: ScriptedServer, tmp_path: Path
) -> None:
    no_video.mm_limits = {}
    no_video.push(
        ScriptedReply(status=400, error_message="The decoder prompt is longer than the model length")
    )
    out = make_pipeline(buffer, tmp_path, no_video.base_url, media_form=MediaForm("auto")).run(_spec("o1"))
    assert out.error_kind == "rejected" and len(no_video.requests) == 1


@pytest.mark.parametrize("name", TaskCatalog.load().names())
def test_every_shipped_task_answers_in_frames_form(
    name: str, buffer: MultiCameraBuffer, no_video: ScriptedServer, tmp_path: Path
) -> None:
    catalog = TaskCatalog.load()
    task = catalog.spec(name)
    answer = ANSWERS[task.answer_kind]
    if name == "timestamp_query":
        answer = '{"start": "00:00.50", "end": "00:01.50"}'
    no_video.default = ScriptedReply(text=answer)
    main = next((VALUES[k] for k in task.placeholders if k != "step"), "")
    step = VALUES["step"] if "step" in task.placeholders else ""
    out = make_pipeline(buffer, tmp_path, no_video.base_url, media_form=MediaForm("auto")).run(
        _spec(f"all-{name}", name, instruction=main, step=step)
    )
    assert out.success, (name, out.error_kind, out.error)
    assert out.parsed is not None and out.parsed.answer
    assert all("video" not in media_counts(body) for body in no_video.requests[-1:])


def test_the_node_s_parameters_reach_the_pipeline(tmp_path: Path, no_video: ScriptedServer) -> None:
    cfg = default_config(
        media_form="frames", max_image_frames=5, server_url=no_video.base_url, media_dir=str(tmp_path / "m")
    )
    built = core.Core.build(cfg)
    try:
        assert built.pipeline.media_form.form == "frames" and built.pipeline.media_form.image_limit == 5
        built.pipeline.media_form.learn(MediaRefusal("image", 2))
        assert built.pipeline.media_form.image_limit == 2
        built.adapt_to_server(None)  # the server came back: what it said is forgotten
        assert built.pipeline.media_form.image_limit == 5
    finally:
        built.close()
    problems = validate(default_config(media_form="sometimes", max_image_frames=0))
    assert any(p.startswith("media_form: must be one of auto, video, frames") for p in problems)
    assert any(p.startswith("max_image_frames: must be in [1, 256]") for p in problems)
