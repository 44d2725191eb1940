"""Outcomes, paths, images and diagnostics to ROS messages; every message survives a CDR round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 Kilted wheels)")
from builtin_interfaces.msg import Time
from cosmos_reasoner_ros.msg import ReasonerResult, Stage
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.serialization import deserialize_message, serialize_message
from visualization_msgs.msg import Marker

from cosmos_reasoner_ros.clips.clip_buffer import Clip
from cosmos_reasoner_ros.clips.image_conversion import Frame, image_msg_to_array
from cosmos_reasoner_ros.clips.media_store import MediaRef
from cosmos_reasoner_ros.errors import ServerUnavailable
from cosmos_reasoner_ros.geometry.shapes import Box2D, Point2D, Trajectory
from cosmos_reasoner_ros.node.ros_conversion import (
    diagnostic_array,
    diagnostic_status,
    image_msg,
    ns_to_time,
    path_markers,
    path_msg,
    result_msg,
    time_to_ns,
)
from cosmos_reasoner_ros.reasoner.parsing import ParsedAnswer, Segment
from cosmos_reasoner_ros.requests.outcome import (
    LATENCY_STAGES,
    ClipSummary,
    Outcome,
    RequestSpec,
    error_outcome,
)

NS = 1_000_000_000
START = 1_700_000_000 * NS + 250_000_000


def roundtrip(msg: object) -> object:
    return deserialize_message(serialize_message(msg), type(msg))


def sample_outcome() -> Outcome:
    frames = tuple(
        Frame(camera="front", stamp_ns=START + i * NS // 4, image=np.zeros((476, 644, 3), np.uint8))
        for i in range(9)
    )
    clip = Clip(
        camera="front", frames=frames, start_ns=START, end_ns=START + 2 * NS, fps=4.0, width=644, height=476
    )
    media = (
        MediaRef("video", "file:///m/crr-1.mp4", None, "video/mp4", 1000, 0.01, 644, 476, camera="front"),
        MediaRef("video", "data:video/mp4;base64,AAAA", None, "video/mp4", 4, 0.01, 644, 476, camera="front"),
    )
    parsed = ParsedAnswer(
        raw="raw",
        reasoning="because",
        answer="go",
        trajectories=(
            Trajectory("gripper", (Point2D("gripper", 500, 250, 322.0, 119.0), Point2D("gripper", 0, 1000))),
        ),
        boxes=(Box2D("cup", 100, 200, 300, 400, 64.4, 95.2, 193.2, 190.4),),
        segments=(Segment(0.5, 1.25, "reach"),),
        choice="B",
    )
    return Outcome(
        request_id="r-1",
        task="trajectory",
        instruction="pick",
        success=True,
        reasoning="because",
        answer="go",
        choice="B",
        parsed=parsed,
        clips=(ClipSummary.of(clip),),
        media=media,
        cameras=("front",),
        answer_camera="front",
        image_width=644,
        image_height=476,
        model="m",
        prompt_tokens=10,
        completion_tokens=5,
        latency_s=0.5,
        ttft_s=0.1,
        finish_reason="stop",
    )


def test_stamps_round_trip_and_clamp() -> None:
    for ns in (0, 1, 999_999_999, START, 2**62):
        assert time_to_ns(ns_to_time(ns)) == ns
    assert ns_to_time(START) == Time(sec=1_700_000_000, nanosec=250_000_000)
    assert ns_to_time(-5) == Time(sec=0, nanosec=0)


def test_result_msg_carries_every_field() -> None:
    msg = roundtrip(result_msg(sample_outcome(), "front_optical"))
    assert isinstance(msg, ReasonerResult)
    assert msg.header.frame_id == "front_optical" and time_to_ns(msg.header.stamp) == START + 2 * NS
    assert (msg.request_id, msg.task, msg.instruction, msg.success) == ("r-1", "trajectory", "pick", True)
    assert (msg.reasoning, msg.answer, msg.choice) == ("because", "go", "B")
    t = msg.trajectories[0]
    assert (t.label, t.camera, t.image_width, t.image_height) == ("gripper", "front", 644, 476)
    # Pixels given by the parser are used; missing ones come from the normalised value and the image size.
    assert [(p.x, p.y) for p in t.points_px] == [(322.0, 119.0), (0.0, 476.0)]
    assert [(p.x, p.y) for p in t.points_norm] == [(500.0, 250.0), (0.0, 1000.0)]
    b = msg.boxes[0]
    assert (b.label, b.x1_px, b.y2_px, b.x2_norm) == ("cup", 64.4, 190.4, 300.0)
    s = msg.segments[0]
    assert (s.caption, s.start_offset_s, s.end_offset_s) == ("reach", 0.5, 1.25)
    assert time_to_ns(s.start_stamp) == START + NS // 2 and time_to_ns(s.end_stamp) == START + 1_250_000_000
    assert time_to_ns(msg.clip_start) == START and msg.clip_frames == 9 and msg.cameras == ["front"]
    assert msg.clip_uris == ["file:///m/crr-1.mp4", "data:video/mp4"]  # never megabytes of base64
    assert (msg.model, msg.prompt_tokens, msg.completion_tokens) == ("m", 10, 5)
    assert (msg.latency_s, msg.time_to_first_token_s, msg.finish_reason) == (0.5, 0.1, "stop")


def test_nul_in_model_text_does_not_cut_the_ros_strings() -> None:
    """rmw passes strings as C strings: a NUL (random models emit them) would silently drop the rest."""
    import dataclasses

    outcome = sample_outcome()
    parsed = outcome.parsed
    assert parsed is not None
    parsed = dataclasses.replace(
        parsed, trajectories=(dataclasses.replace(parsed.trajectories[0], label="grip\x00per"),)
    )
    outcome = dataclasses.replace(outcome, answer="go\x00 left", reasoning="a\x00b", parsed=parsed)
    msg = roundtrip(result_msg(outcome, "front_optical"))
    assert msg.answer == "go\ufffd left"
    assert msg.reasoning == "a\ufffdb"
    assert msg.trajectories[0].label == "grip\ufffdper"


def test_error_result_has_kind_and_message_and_no_clip() -> None:
    out = error_outcome(RequestSpec("r-2", "next_action", "x", cameras=("front",)), ServerUnavailable("down"))
    msg = roundtrip(result_msg(out))
    assert isinstance(msg, ReasonerResult)
    assert (msg.success, msg.error_kind, msg.error) == (
        False,
        ReasonerResult.ERROR_SERVER_UNAVAILABLE,
        "down",
    )
    assert msg.trajectories == [] and msg.clip_frames == 0 and time_to_ns(msg.header.stamp) == 0


def test_path_and_markers() -> None:
    pts = [(0.1, -0.2, 1.5), (0.2, 0.0, 1.6)]
    path = roundtrip(path_msg(pts, "cam_optical", START))
    got = [(p.pose.position.x, p.pose.position.y, p.pose.position.z) for p in path.poses]
    assert got == pts and path.header.frame_id == "cam_optical"
    assert all(p.pose.orientation.w == 1.0 for p in path.poses)
    markers = roundtrip(path_markers([("a", pts), ("empty", []), ("b", pts[:1])], "cam_optical", START))
    kinds = [(m.action, m.type) for m in markers.markers]
    assert kinds[0][0] == Marker.DELETEALL  # stale markers of the previous answer go first
    assert (
        kinds[1:]
        == [
            (Marker.ADD, Marker.LINE_STRIP),
            (Marker.ADD, Marker.SPHERE_LIST),
            (Marker.ADD, Marker.TEXT_VIEW_FACING),
        ]
        * 2
    )
    ids = [m.id for m in markers.markers[1:]]
    assert len(set(ids)) == len(ids)
    assert markers.markers[3].text == "a" and len(markers.markers[1].points) == 2


def test_image_msg_round_trips_pixels() -> None:
    rgb = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    msg = roundtrip(image_msg(rgb, START, "cam"))
    assert (msg.width, msg.height, msg.encoding, msg.step) == (64, 48, "rgb8", 192)
    assert np.array_equal(image_msg_to_array(msg), rgb)
    with pytest.raises(ValueError, match="HxWx3"):
        image_msg(rgb[:, :, 0], START, "cam")


def test_diagnostics() -> None:
    st = diagnostic_status(
        "reasoner_node: server",
        "error",
        "unreachable",
        {"url": "http://x", "latency": 0.123456, "healthy": False},
    )
    arr = roundtrip(diagnostic_array([st], START))
    s = arr.status[0]
    assert s.level == DiagnosticStatus.ERROR and s.message == "unreachable"
    assert {kv.key: kv.value for kv in s.values} == {
        "url": "http://x",
        "latency": "0.1235",
        "healthy": "False",
    }
    with pytest.raises(KeyError):
        diagnostic_status("x", "fatal", "", {})


def test_result_msg_carries_timing_age_clip_id_and_checks() -> None:
    """The steady-clock marks become stamps on the node's clock: the trigger stamp plus each interval."""
    import dataclasses

    from cosmos_reasoner_ros.requests.outcome import Timings
    from cosmos_reasoner_ros.requests.result_checks import Check

    trigger_ns = START + 3 * NS
    outcome = dataclasses.replace(
        sample_outcome(),
        clip_id="clip-7",
        trigger_ns=trigger_ns,
        timings=Timings(
            trigger=100.0, started=100.01, request_sent=100.05, first_token=100.3, response_received=101.0
        ),
        cached_tokens=848,
        reasoning_requested=True,
        max_age_s=2.0,
        checks=(
            Check("points_in_image", True, 1.0, 1.0, "all inside"),
            Check("max_step", False, 0.9, 0.5, "far"),
        ),
        checks_passed=False,
    ).published(trigger_ns + 1_100_000_000)
    msg = roundtrip(result_msg(outcome, "front_optical"))
    assert isinstance(msg, ReasonerResult)
    assert msg.clip_id == "clip-7" and msg.cached_prompt_tokens == 848 and msg.reasoning_requested
    assert time_to_ns(msg.trigger_stamp) == trigger_ns
    assert time_to_ns(msg.request_sent_stamp) == trigger_ns + 50_000_000
    assert time_to_ns(msg.first_token_stamp) == trigger_ns + 300_000_000
    assert time_to_ns(msg.answer_stamp) == trigger_ns + 1_000_000_000
    assert (
        msg.age_s == pytest.approx(2.1) and msg.max_age_s == 2.0
    )  # clip end START+2 s, published START+4.1 s
    assert (msg.success, msg.error_kind) == (False, "stale")
    assert [(c.name, c.passed, c.value, c.limit, c.detail) for c in msg.checks] == [
        ("points_in_image", True, 1.0, 1.0, "all inside"),
        ("max_step", False, 0.9, 0.5, "far"),
    ]
    assert not msg.checks_passed
    never_sent = roundtrip(
        result_msg(
            error_outcome(RequestSpec("b", "next_action", trigger_ns=trigger_ns), ServerUnavailable("down"))
        )
    )
    assert time_to_ns(never_sent.trigger_stamp) == trigger_ns
    assert time_to_ns(never_sent.request_sent_stamp) == 0 and time_to_ns(never_sent.answer_stamp) == 0


_MARK = st.none() | st.sampled_from([100.0, 100.5, 101.0, 99.0]) | st.floats(90.0, 200.0)


@given(
    marks=st.fixed_dictionaries({mark: _MARK for _, mark in LATENCY_STAGES}),
    trigger=st.sampled_from([100.0, 95.5]),
)
@settings(max_examples=200, deadline=None)
def test_result_msg_carries_the_stages_through_a_round_trip(
    marks: dict[str, float | None], trigger: float
) -> None:
    """Every stage reached, in order, with its seconds, survives the message's CDR round trip."""
    import dataclasses

    from cosmos_reasoner_ros.requests.outcome import Timings

    outcome = dataclasses.replace(
        sample_outcome(), timings=Timings(trigger=trigger, started=trigger, **marks)
    )
    msg = roundtrip(result_msg(outcome, "front_optical"))
    assert isinstance(msg, ReasonerResult)
    assert [(s.name, s.seconds) for s in msg.stages] == list(outcome.stages)
    assert {s.name for s in msg.stages} <= {v for k, v in vars(Stage).items() if k.startswith("NAME_")}
    assert list(roundtrip(result_msg(dataclasses.replace(outcome, timings=None))).stages) == []
