"""One request end to end without ROS: real buffer, writer, catalog, client and parser, scripted server.

Every path ends in one Outcome: success, each ReasonerError kind, and unexpected exceptions as "internal".
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pytest
from support.pipelines import make_pipeline
from support.processes import wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaStore
from cosmos_reasoner_ros.clips.multi_camera import MultiCameraBuffer
from cosmos_reasoner_ros.errors import BusyError
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.requests.outcome import STAGES, Cancel, RequestSpec, error_outcome

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
TRAJECTORY = (
    "<think>\nMove to the cup.\n</think>\n\n```json\n"
    '[{"point_2d": [500, 250], "label": "gripper trajectory"}, '
    '{"point_2d": [600, 400], "label": "gripper trajectory"}]'
    "\n```"
)


@pytest.fixture(scope="module")
def robot_frames(robot_clip: Path) -> list[np.ndarray]:
    with av.open(str(robot_clip)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


@pytest.fixture
def buffer(robot_frames: list[np.ndarray]) -> MultiCameraBuffer:
    """The robot clip (644x476, 4 fps) in a buffer with true 4 Hz stamps."""
    buf = ClipBuffer("front", 4.0, 30.0, 512 * 1024 * 1024, 0)
    for i, image in enumerate(robot_frames):
        stamp = T0 + i * NS // 4
        if buf.wants(stamp):
            buf.add(Frame(camera="front", stamp_ns=stamp, image=image, frame_id="front_optical"))
    return MultiCameraBuffer([buf])


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def __call__(self, stage: str, text: str, request_id: str = "") -> None:
        self.events.append((stage, text))

    @property
    def stages(self) -> list[str]:
        return list(dict.fromkeys(s for s, _ in self.events))


def test_text_task_success_with_stages_in_order(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path
) -> None:
    server.push(
        ScriptedReply(
            text="<think>\nThe arm holds a cup.\n</think>\n\nPlace the cup on the shelf.", prompt_tokens=321
        )
    )
    pipeline = make_pipeline(buffer, tmp_path, server.base_url)
    rec = Recorder()
    out = pipeline.run(RequestSpec("r1", "next_action", trigger_time=time.monotonic()), on_progress=rec)
    assert out.success, out.error
    assert (out.error_kind, out.error) == ("", "")
    assert out.answer == "Place the cup on the shelf." and out.reasoning == "The arm holds a cup."
    assert out.model == "scripted" and out.prompt_tokens == 321 and out.completion_tokens > 0
    assert out.finish_reason == "stop" and out.latency_s > 0 and out.ttft_s > 0
    assert rec.stages == list(STAGES)
    streamed = [t for s, t in rec.events if s == "streaming"]
    assert streamed[-1].endswith("shelf.") and all(b.startswith(a) for a, b in itertools.pairwise(streamed))
    # 2 s at 4 fps from the newest frame; the clip is a real video file the request points at.
    assert out.cameras == ("front",) and out.answer_camera == "front"
    assert 8 <= out.clip_frames <= 9 and out.clip_end_ns == T0 + 25 * NS // 4
    assert out.clip_end_ns - out.clip_start_ns <= 2 * NS
    assert len(out.media) == 1 and out.media[0].path is not None and out.media[0].path.is_file()
    assert out.clip_uris == (out.media[0].url,) and out.clip_uris[0].startswith("file://")
    assert (out.image_width, out.image_height) == (out.media[0].width, out.media[0].height)
    sent = server.requests[-1]["messages"][-1]["content"]
    assert sent[0]["type"] == "video_url" and sent[0]["video_url"]["url"] == out.media[0].url
    t = out.timings
    assert t is not None and t.trigger <= t.started <= t.request_sent <= t.first_token <= t.response_received
    assert t.response_received <= t.finished


def test_points_in_pixels_of_the_image_sent(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path
) -> None:
    server.push(ScriptedReply(text=TRAJECTORY))
    out = make_pipeline(buffer, tmp_path, server.base_url).run(
        RequestSpec("r2", "trajectory", instruction="pick up the cup")
    )
    assert out.success, out.error
    assert out.media[0].kind == "image"
    w, h = out.image_width, out.image_height
    assert (w, h) == (644, 476)  # the robot clip's size (max_long_side 0 keeps it)
    assert out.parsed is not None and len(out.parsed.trajectories) == 1
    pts = [(p.x, p.y) for p in out.parsed.trajectories[0].points]
    np.testing.assert_allclose(pts, [(0.5 * w, 0.25 * h), (0.6 * w, 0.4 * h)])
    # The instruction fills the task's own placeholder ({task} for trajectory).
    assert (
        'You are given the task "pick up the cup"'
        in server.requests[-1]["messages"][-1]["content"][-1]["text"]
    )


def test_points_in_pixels_of_the_camera_image_when_the_buffer_downscaled_it(
    robot_frames: list[np.ndarray], server: ScriptedServer, tmp_path: Path
) -> None:
    """The model sees a 640-px image, the planner gets pixels of the camera's own 1288x952 image."""
    buf = ClipBuffer("front", 4.0, 30.0, 512 * 1024 * 1024, 640)
    for i, image in enumerate(robot_frames[:8]):
        buf.add(Frame("front", T0 + i * NS // 4, cv2.resize(image, (1288, 952))))
    server.push(ScriptedReply(text=TRAJECTORY))
    out = make_pipeline(MultiCameraBuffer([buf]), tmp_path, server.base_url).run(
        RequestSpec("r2b", "trajectory", instruction="pick up the cup")
    )
    assert out.success, out.error
    assert (out.media[0].width, out.media[0].height) == (640, 474)
    assert (out.image_width, out.image_height) == (1288, 952)
    assert out.parsed is not None
    pts = [(p.x, p.y) for p in out.parsed.trajectories[0].points]
    np.testing.assert_allclose(pts, [(0.5 * 1288, 0.25 * 952), (0.6 * 1288, 0.4 * 952)])


def test_grounding_uses_the_instruction_as_object(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path
) -> None:
    server.push(ScriptedReply(text='```json\n[{"bbox_2d": [100, 200, 300, 400], "label": "cup"}]\n```'))
    out = make_pipeline(buffer, tmp_path, server.base_url).run(
        RequestSpec("r3", "grounding_2d", "the red cup")
    )
    assert out.success, out.error
    assert "Locate the bounding box of the red cup" in str(server.requests[-1]["messages"])
    b = out.parsed.boxes[0] if out.parsed else None
    assert b is not None and (b.x1, b.y2) == pytest.approx((64.4, 190.4))


@pytest.mark.parametrize(
    ("reply", "kind", "raw_kept"),
    [
        (ScriptedReply(status=400, error_message="video too long"), "rejected", False),
        (ScriptedReply(text="no json here at all"), "unparseable", True),
        (ScriptedReply(text='<think>\nhalf [{"point_2d": [1', finish_reason="length"), "truncated", True),
    ],
)
def test_server_and_answer_errors_become_outcomes(
    buffer: MultiCameraBuffer,
    server: ScriptedServer,
    tmp_path: Path,
    reply: ScriptedReply,
    kind: str,
    raw_kept: bool,
) -> None:
    server.push(reply)
    out = make_pipeline(buffer, tmp_path, server.base_url).run(RequestSpec("e", "trajectory", "pick"))
    assert not out.success and out.error_kind == kind and out.error
    if kind == "rejected":
        assert "video too long" in out.error
    if raw_kept:
        assert out.answer == reply.text  # the raw text is kept for the result's answer field
    assert out.media and out.clips  # what was done before the error is still reported


@pytest.mark.parametrize("release", ["vllm-0.26", "vllm-0.32"])
def test_a_grammar_the_server_cannot_compile_ends_as_a_grammar_outcome(
    buffer: MultiCameraBuffer, tmp_path: Path, release: str
) -> None:
    """The H200's temporal_localization, through the pipeline: one request, kind grammar, the task named."""
    with ScriptedServer(refuse_grammars=release) as refusing:
        pipeline = make_pipeline(buffer, tmp_path, refusing.base_url)
        pipeline.request_settings = RequestSettings(structured_output=True)
        out = pipeline.run(RequestSpec("g", "temporal_localization"))
        assert refusing.request_count == 1
    assert (out.success, out.error_kind) == (False, "grammar")
    assert (
        out.error.startswith("task temporal_localization: the server ") and "connection lost" not in out.error
    )


def test_no_frames_and_invalid_task(tmp_path: Path, server: ScriptedServer) -> None:
    empty = MultiCameraBuffer([ClipBuffer("front", 4.0, 30.0, 1 << 20, 0)])
    pipeline = make_pipeline(empty, tmp_path, server.base_url)
    rec = Recorder()
    out = pipeline.run(RequestSpec("n", "next_action"), on_progress=rec)
    assert (out.success, out.error_kind) == (False, "no_frames") and rec.stages == ["capturing"]
    bad = pipeline.run(RequestSpec("t", "no_such_task"))
    assert bad.error_kind == "invalid_request" and "no_such_task" in bad.error
    missing = pipeline.run(RequestSpec("m", "trajectory"))  # {task} has no value and no default
    assert missing.error_kind == "invalid_request"
    assert server.requests == []


def test_server_down_and_timeout(buffer: MultiCameraBuffer, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = make_pipeline(buffer, tmp_path, f"http://127.0.0.1:{port}/v1").run(RequestSpec("d", "next_action"))
    assert down.error_kind == "server_unavailable"
    waiting = make_pipeline(buffer, tmp_path, f"http://127.0.0.1:{port}/v1", wait_for_server_s=0.3)
    rec = Recorder()
    out = waiting.run(RequestSpec("w", "next_action"), on_progress=rec)
    assert out.error_kind == "server_unavailable" and rec.stages[-1] == "waiting_for_server"
    with ScriptedServer(default=ScriptedReply(delay_s=3.0)) as slow:
        out = make_pipeline(buffer, tmp_path, slow.base_url, read_timeout_s=0.5).run(
            RequestSpec("s", "next_action")
        )
        assert out.error_kind == "timeout"  # how soon (goal: within 2.5 s): bench/time_bounds.py


def test_cancel_while_streaming(buffer: MultiCameraBuffer, tmp_path: Path) -> None:
    slow = ScriptedReply(text="word " * 200, chunk_delay_s=0.02)
    with ScriptedServer(default=slow) as server:
        pipeline = make_pipeline(buffer, tmp_path, server.base_url)
        cancel = threading.Event()
        rec = Recorder()

        def on_progress(stage: str, text: str, request_id: str) -> None:
            rec(stage, text)
            if stage == "streaming" and len(text) > 50:
                cancel.set()

        out = pipeline.run(RequestSpec("c", "next_action"), on_progress=on_progress, cancel=cancel)
        assert out.error_kind == "cancelled" and not out.success
        assert 0 < len(out.answer) < len(slow.text)  # the partial text is kept
        # Cancelled before it starts: no request at all.
        before = len(server.requests)
        cancel2 = threading.Event()
        cancel2.set()
        assert pipeline.run(RequestSpec("c2", "next_action"), cancel=cancel2).error_kind == "cancelled"
        assert len(server.requests) == before


def test_unexpected_exception_is_internal_and_logged(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(buffer, tmp_path, server.base_url)

    class BrokenWriter(ClipWriter):
        def write_clips(self, clips: Any, tiled: bool) -> Any:
            raise RuntimeError("encoder exploded")

    pipeline.writer = BrokenWriter(MediaStore(tmp_path))
    with caplog.at_level(logging.ERROR, logger="cosmos_reasoner_ros.requests.pipeline"):
        out = pipeline.run(RequestSpec("x", "next_action"))
    assert out.error_kind == "internal" and "RuntimeError: encoder exploded" in out.error
    assert any("x" in r.getMessage() and r.exc_info for r in caplog.records)

    def bad_callback(stage: str, text: str, request_id: str) -> None:
        raise ValueError("callback bug")

    server.push(ScriptedReply(text="fine"))
    ok = make_pipeline(buffer, tmp_path, server.base_url).run(
        RequestSpec("y", "caption"), on_progress=bad_callback
    )
    assert ok.success and ok.answer == "fine"  # a failing progress callback does not fail the request


def test_clip_not_written(buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path) -> None:
    media = tmp_path / "media"
    pipeline = make_pipeline(buffer, media, server.base_url)
    media.rmdir()
    media.write_text("a file where the media directory was")
    out = pipeline.run(RequestSpec("w", "next_action"))
    assert out.error_kind == "clip_not_written" and out.error
    assert server.requests == []


def test_error_outcome_for_triggers_that_never_ran() -> None:
    spec = RequestSpec("b", "next_action", cameras=("front",), trigger_time=5.0)
    out = error_outcome(spec, BusyError("1 request in flight"))
    assert (out.success, out.error_kind, out.error, out.cameras) == (
        False,
        "busy",
        "1 request in flight",
        ("front",),
    )
    assert out.timings is not None and out.timings.trigger == 5.0


def test_two_cameras_one_window_separate_or_tiled(
    robot_frames: list[np.ndarray], tmp_path: Path, server: ScriptedServer
) -> None:
    buffers = [ClipBuffer(name, 4.0, 30.0, 512 * 1024 * 1024, 0) for name in ("front", "wrist")]
    for i, image in enumerate(robot_frames):
        for buf, img in zip(buffers, (image, image[::-1]), strict=True):
            stamp = T0 + i * NS // 4
            if buf.wants(stamp):
                buf.add(Frame(camera=buf.camera, stamp_ns=stamp, image=np.ascontiguousarray(img)))
    multi = MultiCameraBuffer(buffers)
    separate = make_pipeline(multi, tmp_path, server.base_url).run(RequestSpec("s", "next_action"))
    assert separate.success, separate.error
    assert separate.cameras == ("front", "wrist") and separate.answer_camera == "front"
    assert [m.camera for m in separate.media] == ["front", "wrist"]
    parts = server.requests[-1]["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["video_url", "video_url", "text"]
    only_wrist = make_pipeline(multi, tmp_path, server.base_url).run(
        RequestSpec("w", "next_action", cameras=("wrist",))
    )
    assert only_wrist.cameras == ("wrist",) and len(only_wrist.media) == 1
    tiled = make_pipeline(multi, tmp_path, server.base_url, tiled=True).run(RequestSpec("t", "next_action"))
    assert tiled.success and len(tiled.media) == 1
    assert tiled.answer_camera == tiled.media[0].camera == "front+wrist"
    assert (tiled.image_width, tiled.image_height) == (tiled.media[0].width, tiled.media[0].height)
    assert tiled.image_width > 644 or tiled.image_height > 476  # pixels refer to the tiled image


def test_a_kept_outcome_pins_no_frame_but_the_annotated_one_and_no_inline_media(
    buffer: MultiCameraBuffer, tmp_path: Path, server: ScriptedServer
) -> None:
    # The node keeps recent outcomes; a 10-minute soak grew to 1.4 GB when they held their clips' frames.
    import gc
    import weakref

    server.default = ScriptedReply(text=TRAJECTORY)
    pipeline = make_pipeline(buffer, tmp_path / "media", server.base_url)
    pipeline.writer = ClipWriter(MediaStore(tmp_path / "media"), inline=True)
    out = pipeline.run(RequestSpec("r1", "next_action"))
    assert out.success and out.clip_frames > 2
    assert out.clip_uris == ("data:video/mp4",) and all(
        not m.url.startswith("data:video/mp4;") for m in out.media
    )
    assert out.last_frame is not None and out.last_frame.stamp_ns == out.clip_end_ns
    sent = [weakref.ref(f) for f in buffer["front"].clip(2.0).frames]
    buffer["front"].clear()
    gc.collect()
    alive = [r() for r in sent if r() is not None]
    assert alive == [out.last_frame]  # only the annotated frame, and only until the node drops it
    kept = out.without_frames()
    del out, alive
    gc.collect()
    assert all(r() is None for r in sent) and kept.clip_frames > 2


def test_a_stale_camera_is_left_out_and_named_not_fatal(
    robot_frames: list[np.ndarray], tmp_path: Path, server: ScriptedServer
) -> None:
    # Before: the window ended at the stale camera's last frame, and every request failed with no_frames.
    buffers = [ClipBuffer(name, 4.0, 30.0, 512 * 1024 * 1024, 0) for name in ("front", "wrist")]
    for i, image in enumerate(robot_frames):
        stamp = T0 + i * NS // 4
        for buf in buffers if i < 4 else buffers[:1]:  # the wrist camera stopped after its 4th frame
            if buf.wants(stamp):
                buf.add(Frame(camera=buf.camera, stamp_ns=stamp, image=image))
    multi = MultiCameraBuffer(buffers)
    out = make_pipeline(multi, tmp_path, server.base_url).run(RequestSpec("s", "next_action"))
    assert out.success, out.error
    assert out.cameras == ("front",) and out.stale_cameras == ("wrist",) and out.stale_reasons[0]
    assert out.clip_end_ns == T0 + (len(robot_frames) - 1) * NS // 4  # the window ends at the newest frame
    from cosmos_reasoner_ros.node.ros_conversion import result_msg

    assert list(result_msg(out).stale_cameras) == ["wrist"]
    for buf in buffers:
        buf.clear()  # no camera has frames: only then the request fails
    none_fresh = make_pipeline(multi, tmp_path, server.base_url).run(RequestSpec("n", "next_action"))
    assert (
        none_fresh.error_kind == "no_frames" and "front" in none_fresh.error and "wrist" in none_fresh.error
    )


# ---- several tasks about one clip, reasoning off, deadlines, age ---


def test_several_tasks_of_one_clip_write_it_once_and_name_it_with_one_uuid(
    buffer: MultiCameraBuffer, tmp_path: Path
) -> None:
    """One capture, one video file and one image for three tasks; every request names its media with the
    clip's uuid; the second video question waits for the first one's first token (its prefill), the image
    question (other media) does not; each outcome is handed over as soon as its request ends."""
    arrivals: dict[str, float] = {}

    def reply(body: dict[str, Any]) -> ScriptedReply:
        text = body["messages"][-1]["content"][-1]["text"]
        name = "trajectory" if "trajectory" in text else "caption" if "Describe" in text else "next_action"
        arrivals[name] = time.monotonic()
        if name == "next_action":  # prefill 3 s (a stall of this machine is far shorter), then a long answer
            return ScriptedReply(
                text="<think>\nlong\n</think>\n\n" + "step " * 30, delay_s=3.0, chunk_delay_s=0.03
            )
        return ScriptedReply(text=TRAJECTORY if name == "trajectory" else "A robot arm.", cached_tokens=64)

    specs = [
        RequestSpec("c-1", "next_action", clip_id="clip-1"),
        RequestSpec("c-2", "caption", clip_id="clip-1"),
        RequestSpec("c-3", "trajectory", "pick up the cup", clip_id="clip-1"),
    ]
    handed: list[str] = []
    with ScriptedServer(reply) as server:
        t0 = time.monotonic()
        outcomes = make_pipeline(buffer, tmp_path, server.base_url).run_clip(
            specs, on_outcome=lambda o: handed.append(o.request_id)
        )
        bodies = list(server.requests)
    assert [o.request_id for o in outcomes] == ["c-1", "c-2", "c-3"]
    assert all(o.success for o in outcomes), [o.error for o in outcomes]
    assert [o.task for o in outcomes] == ["next_action", "caption", "trajectory"]
    assert {o.clip_id for o in outcomes} == {"clip-1"}
    assert outcomes[0].answer.startswith("step") and outcomes[1].answer == "A robot arm."
    assert outcomes[2].parsed is not None and len(outcomes[2].parsed.trajectories) == 1
    assert outcomes[1].cached_tokens == 64 and outcomes[0].cached_tokens == 0
    files = sorted(p.suffix for p in tmp_path.iterdir() if p.is_file())
    assert files == [".jpg", ".mp4"]  # written once per media kind
    parts = {b["messages"][-1]["content"][-1]["text"][:10]: b["messages"][-1]["content"][0] for b in bodies}
    videos = [p for p in parts.values() if p["type"] == "video_url"]
    assert len(videos) == 2 and videos[0] == videos[1]  # the same file, the same uuid
    assert videos[0]["uuid"] == "clip-1:video:front"
    assert [p["uuid"] for p in parts.values() if p["type"] == "image_url"] == ["clip-1:image:front"]
    first_token = arrivals["next_action"] + 3.0
    assert arrivals["caption"] >= first_token - 0.05  # sent after the first question's prefill
    assert arrivals["trajectory"] < first_token - 1.0  # another media kind: not held back
    assert handed[-1] == "c-1" and sorted(handed) == ["c-1", "c-2", "c-3"]  # the long answer comes last
    assert time.monotonic() - t0 < 30


def test_an_invalid_task_among_several_fails_alone(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path
) -> None:
    specs = [RequestSpec("a", "next_action"), RequestSpec("b", "trajectory")]  # {task} has no value
    ok, bad = make_pipeline(buffer, tmp_path, server.base_url).run_clip(specs)
    assert ok.success and (bad.success, bad.error_kind) == (False, "invalid_request")
    assert len(server.requests) == 1


def test_reasoning_off_sends_the_plain_prompt_and_profile(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path
) -> None:
    server.push(ScriptedReply(text="Lift the cup."))
    out = make_pipeline(buffer, tmp_path, server.base_url).run(
        RequestSpec("f", "next_action", reasoning=False)
    )
    assert out.success and out.answer == "Lift the cup." and not out.reasoning_requested
    body = server.requests[-1]
    assert body["messages"][-1]["content"][-1]["text"] == "What can be the next immediate action?"
    assert (body["temperature"], body["top_p"], body["presence_penalty"]) == (0.7, 0.8, 1.5)
    server.push(ScriptedReply())
    assert (
        make_pipeline(buffer, tmp_path, server.base_url)
        .run(RequestSpec("g", "next_action"))
        .reasoning_requested
    )
    assert "<think>" in server.requests[-1]["messages"][-1]["content"][-1]["text"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_40_mib_answer_never_reaches_the_outcome(
    buffer: MultiCameraBuffer, tmp_path: Path, stream: bool
) -> None:
    """A server that answers 40 MiB: the outcome is answer_too_large and carries at most the bound (the task's
    max_tokens x 32 characters) of it; the stream is closed at the server."""
    with ScriptedServer(default=ScriptedReply(huge_answer_bytes=40 << 20)) as server:
        pipeline = make_pipeline(buffer, tmp_path, server.base_url, stream=stream)
        out = pipeline.run(RequestSpec("huge", "next_action"))
        bound = TaskCatalog.load().render("next_action").sampling.max_tokens * 32
        assert (out.success, out.error_kind) == (False, "answer_too_large")
        assert f"passed {bound} characters" in out.error or "bytes on the wire" in out.error
        assert len(out.answer) + len(out.reasoning) <= bound
        if stream:
            assert len(out.answer) > 0  # what came up to the bound is kept
        wait_until(lambda: server.disconnects == 1, 10, "the server to see the connection closed")


def test_an_expired_cancel_ends_as_a_timeout_and_closes_the_stream_at_the_server(
    buffer: MultiCameraBuffer, tmp_path: Path
) -> None:
    slow = ScriptedReply(text="word " * 200, chunk_delay_s=0.02)
    with ScriptedServer(default=slow) as server:
        pipeline = make_pipeline(buffer, tmp_path, server.base_url)
        cancel = Cancel()
        timer = threading.Timer(0.4, cancel.expire)
        timer.start()
        out = pipeline.run(RequestSpec("d", "next_action", deadline_s=0.4), cancel=cancel)
        assert (out.success, out.error_kind) == (False, "timeout")
        assert "deadline of 0.4 s passed" in out.error and 0 < len(out.answer) < len(slow.text)
        assert out.timings is not None and out.timings.first_token is not None
        wait_until(lambda: server.disconnects == 1, 5, "the server to see the stream closed")
        plain = Cancel()
        plain.set()  # a caller's cancel is not a timeout
        assert pipeline.run(RequestSpec("e", "next_action"), cancel=plain).error_kind == "cancelled"


def test_the_age_at_publication_and_a_stale_success(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path
) -> None:
    server.push(ScriptedReply(text=TRAJECTORY))
    out = make_pipeline(buffer, tmp_path, server.base_url).run(
        RequestSpec("s", "trajectory", "pick", max_result_age_s=2.0)
    )
    assert out.success and out.max_age_s == 2.0
    fresh = out.published(out.clip_end_ns + 1_500_000_000)
    assert fresh.success and fresh.age_s == pytest.approx(1.5) and fresh.published_ns > 0
    stale = out.published(out.clip_end_ns + 2_500_000_000)
    assert (stale.success, stale.error_kind) == (False, "stale") and stale.age_s == pytest.approx(2.5)
    assert "2.500 s old" in stale.error and stale.parsed == out.parsed  # the answer is kept
    unlimited = dataclasses.replace(out, max_age_s=0.0).published(out.clip_end_ns + 10**12)
    assert unlimited.success and unlimited.age_s == pytest.approx(1000.0)
    failed = error_outcome(RequestSpec("b", "trajectory", max_result_age_s=1.0), BusyError("busy"))
    assert failed.published(10**12).error_kind == "busy"  # only successes become stale


@pytest.mark.parametrize("deadline_s", [0.001, 0.005, 0.02])
def test_a_request_past_its_deadline_is_never_sent(
    buffer: MultiCameraBuffer, server: ScriptedServer, tmp_path: Path, deadline_s: float
) -> None:
    """Before: deadlines of 1-20 ms still sent the request after the deadline had passed (the scheduler's
    deadline thread had not woken yet). The trigger came 50 ms ago: its deadline has passed whatever the
    machine's speed, and nobody expires the cancel event: the pipeline must see the deadline itself."""
    pipeline = make_pipeline(buffer, tmp_path, server.base_url)
    cancel = Cancel()
    spec = RequestSpec("tiny", "next_action", deadline_s=deadline_s, trigger_time=time.monotonic() - 0.05)
    out = pipeline.run(spec, cancel=cancel)
    assert (out.success, out.error_kind) == (False, "timeout"), out.error
    assert f"deadline of {deadline_s:g} s passed" in out.error
    assert not server.requests  # nothing reached the server
