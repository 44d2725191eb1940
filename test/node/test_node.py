"""reasoner_node over real DDS: a camera process streams the robot clip, the scripted server answers.

The node runs in this process with its own executor thread (a probe node beside it calls the service and the
action and records what is published); the camera is a separate process using the shared-memory profile.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.camera_publisher import camera_process, intrinsics_k, synthetic_depth_m
from support.collector import Collector
from support.paths import REASONER_YAML
from support.processes import free_port, ros_env, wait_until

rclpy = pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 Kilted wheels)")
from action_msgs.msg import GoalStatus  # noqa: E402
from cosmos_reasoner_ros.action import Reason  # noqa: E402
from cosmos_reasoner_ros.msg import ReasonerResult  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.context import Context  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from support.node_harness import base_params, depth_camera_node, goal_summary  # noqa: E402
from support.scripted_server import ScriptedReply, ScriptedServer  # noqa: E402

from cosmos_reasoner_ros.node.reasoner_node import ConfigError, ReasonerNode  # noqa: E402
from cosmos_reasoner_ros.node.ros_conversion import time_to_ns  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

W, H = 640, 480
TRAJECTORY_TEXT = (
    "<think>\nThe gripper should move to the cup, then lift it.\n</think>\n\n```json\n"
    '[{"point_2d": [500, 250], "label": "gripper trajectory"}, '
    '{"point_2d": [600, 400], "label": "gripper trajectory"}, '
    '{"point_2d": [750, 800], "label": "gripper trajectory"}]\n```'
)
BOXES_TEXT = '```json\n[{"bbox_2d": [100, 200, 300, 600], "label": "cup"}]\n```'


def assert_px(points: Any, expected_norm: list[tuple[float, float]], width: int, height: int) -> None:
    got = [(p.x, p.y) for p in points]
    want = [(x / 1000 * width, y / 1000 * height) for x, y in expected_norm]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_service_and_action_publish_trajectories_and_boxes_in_camera_pixels(
    tmp_path: Path, harness_factory: Any
) -> None:
    def reply(body: dict[str, Any]) -> ScriptedReply:
        text = json.dumps(body)
        return ScriptedReply(text=BOXES_TEXT if "bounding box" in text else TRAJECTORY_TEXT)

    with ScriptedServer(reply) as server, camera_process("/test_cam/image_raw", W, H):
        h = harness_factory(base_params(server.base_url, tmp_path / "media"))
        h.wait_frames(3)

        response = h.call_trigger()
        assert response.success and response.message
        result = h.result_for(response.message)
        assert result.success, (result.error_kind, result.error)
        assert result.task == "trajectory" and result.instruction == "pick up the cup"
        assert result.header.frame_id == "front_optical" and result.cameras == ["front"]
        assert result.model == "scripted" and result.reasoning.startswith("The gripper")
        assert len(result.trajectories) == 1
        t = result.trajectories[0]
        assert (t.camera, t.image_width, t.image_height, t.label) == ("front", W, H, "gripper trajectory")
        assert_px(t.points_px, [(500, 250), (600, 400), (750, 800)], W, H)
        assert [(p.x, p.y) for p in t.points_norm] == [(500, 250), (600, 400), (750, 800)]
        assert result.clip_frames >= 1 and result.clip_uris[0].startswith("file://")
        sent = server.requests[-1]
        parts = sent["messages"][-1]["content"]
        assert parts[0]["type"] == "image_url" and "pick up the cup" in parts[-1]["text"]

        image = h.annotated.wait_for(lambda items: items[-1] if items else None, 10.0, "annotated image")
        assert (image.width, image.height, image.encoding) == (W, H, "rgb8")
        assert image.header.frame_id == "front_optical"
        h.next_actions.wait_for(lambda items: items, 10.0, "next_action")

        feedback: list[Any] = []
        goal = Reason.Goal(task="grounding_2d", instruction="the cup")
        handle = h.send_goal(goal, feedback)
        res_future = handle.get_result_async()
        res = wait_until(lambda: res_future.result() if res_future.done() else None, 30.0, "goal result")
        assert res.status == GoalStatus.STATUS_SUCCEEDED, goal_summary(res)
        boxes = res.result.result.boxes
        assert len(boxes) == 1 and boxes[0].label == "cup"
        b = boxes[0]
        assert (b.image_width, b.image_height) == (W, H)
        np.testing.assert_allclose([b.x1_px, b.y1_px, b.x2_px, b.y2_px], [64.0, 96.0, 192.0, 288.0])
        published = h.result_for(res.result.result.request_id)
        assert published.boxes[0].x2_px == pytest.approx(192.0)
        assert "the cup" in json.dumps(server.requests[-1])


def test_compressed_camera_without_stamps(tmp_path: Path, harness_factory: Any) -> None:
    params = base_params(
        "", tmp_path / "media", **{"camera.front.compressed": True, "camera.front.frame_id": ""}
    )
    with (
        ScriptedServer(default=ScriptedReply(text=BOXES_TEXT)) as server,
        camera_process("/test_cam/image_raw", W, H, compressed=True, zero_stamps=True, frame_id="cam_jpeg"),
    ):
        params.update(server_url=server.base_url, task="grounding_2d", instruction="the cup")
        h = harness_factory(params)
        h.wait_frames(3)
        before_ns = h.node.get_clock().now().nanoseconds
        result = h.result_for(h.trigger_id())
        after_ns = h.node.get_clock().now().nanoseconds
        assert result.success, (result.error_kind, result.error)
        assert result.header.frame_id == "cam_jpeg"  # from the images, no override
        # Unstamped frames take the receive time: the clip ends around the trigger, not at 0 (a frame kept
        # between the trigger and the capture may be its end).
        assert before_ns - 30 * 10**9 < time_to_ns(result.clip_end) <= after_ns
        b = result.boxes[0]
        assert (b.image_width, b.image_height) == (W, H)
        np.testing.assert_allclose([b.x1_px, b.y1_px, b.x2_px, b.y2_px], [64.0, 96.0, 192.0, 288.0])


def test_action_feedback_in_stage_order_and_cancel(tmp_path: Path, harness_factory: Any) -> None:
    slow = ScriptedReply(text="<think>\n" + "thinking " * 60 + "\n</think>\n\nmove left", chunk_delay_s=0.05)
    with ScriptedServer(default=slow) as server, camera_process("/test_cam/image_raw", W, H):
        h = harness_factory(base_params(server.base_url, tmp_path / "media", task="next_action"))
        h.wait_frames(3)

        feedback: list[Any] = []
        handle = h.send_goal(Reason.Goal(), feedback)
        res_future = handle.get_result_async()
        res = wait_until(lambda: res_future.result() if res_future.done() else None, 60.0, "goal result")
        assert res.status == GoalStatus.STATUS_SUCCEEDED, goal_summary(res)
        assert res.result.result.answer == "move left"
        stages = [f.stage for f in feedback]
        assert stages == sorted(stages), stages
        names = list(dict.fromkeys(f.stage_name for f in feedback))
        assert names == ["capturing", "encoding", "waiting_for_server", "querying", "streaming"]
        streamed = [f.partial_text for f in feedback if f.stage_name == "streaming"]
        assert len(streamed) >= 2 and all(b.startswith(a) for a, b in itertools.pairwise(streamed))
        elapsed = [f.elapsed_s for f in feedback]
        assert elapsed == sorted(elapsed) and elapsed[-1] > 0

        # Cancel while the answer streams: the goal ends canceled with a cancelled result, published once.
        feedback = []
        handle = h.send_goal(Reason.Goal(), feedback)
        wait_until(lambda: any(f.stage_name == "streaming" for f in feedback), 30.0, "streaming feedback")
        cancel_future = handle.cancel_goal_async()
        wait_until(lambda: cancel_future.done(), 10.0, "cancel response")
        res_future = handle.get_result_async()
        res = wait_until(lambda: res_future.result() if res_future.done() else None, 10.0, "cancelled result")
        assert res.status == GoalStatus.STATUS_CANCELED, goal_summary(res)
        assert res.result.result.error_kind == "cancelled" and not res.result.result.success
        request_id = res.result.result.request_id
        h.only_result(request_id)

        # A goal while another is in flight is aborted with a busy result; an unknown camera is invalid.
        first = h.send_goal(Reason.Goal(), [])
        wait_until(lambda: len(server.requests) >= 3, 20.0, "the first goal's request")
        for goal, kind in [(Reason.Goal(), "busy"), (Reason.Goal(cameras=["nope"]), "invalid_request")]:
            handle = h.send_goal(goal, [])
            res_future = handle.get_result_async()
            res = wait_until(lambda f=res_future: f.result() if f.done() else None, 10.0, f"{kind} result")
            assert res.status == GoalStatus.STATUS_ABORTED and res.result.result.error_kind == kind, (
                goal_summary(res)
            )
        res_future = first.get_result_async()
        res = wait_until(
            lambda: res_future.result() if res_future.done() else None, 60.0, "first goal result"
        )
        assert res.status == GoalStatus.STATUS_SUCCEEDED, goal_summary(res)


@pytest.mark.parametrize("encoding", ["16UC1", "32FC1"])
def test_3d_path_equals_analytic_back_projection(tmp_path: Path, harness_factory: Any, encoding: str) -> None:
    params = base_params(
        "",
        tmp_path / "media",
        max_step_m=2.0,  # the crafted path steps 1.006 m at most
        **{"camera.front.depth_topic": "/test_cam/depth", "camera.front.camera_info_topic": "/test_cam/info"},
    )
    with (
        ScriptedServer(default=ScriptedReply(text=TRAJECTORY_TEXT)) as server,
        depth_camera_node(
            harness_factory, params, server.base_url, width=W, height=H, depth_encoding=encoding
        ) as h,
    ):
        response = h.call_trigger()
        result = h.result_for(response.message)
        assert result.success, (result.error_kind, result.error)
        path = h.paths.wait_for(lambda items: items[-1] if items else None, 10.0, "3D path")
        assert path.header.frame_id == "front_optical"
        assert path.header.stamp == result.header.stamp  # the clip's last frame
        got = [(p.pose.position.x, p.pose.position.y, p.pose.position.z) for p in path.poses]
        # Analytic: pixel = norm/1000 * size, Z of the synthetic plane at that pixel, pinhole with K.
        depth_m = synthetic_depth_m(W, H)
        if encoding == "16UC1":
            depth_m = np.round(depth_m * 1000) / 1000.0  # what survives millimetre storage
        k = intrinsics_k(W, H)
        fx, fy, cx, cy = k[0], k[4], k[2], k[5]
        want = []
        for xn, yn in [(500, 250), (600, 400), (750, 800)]:
            u, v = xn / 1000 * W, yn / 1000 * H
            z = float(depth_m[int(v), int(u)])
            want.append(((u - cx) * z / fx, (v - cy) * z / fy, z))
        np.testing.assert_allclose(got, want, atol=1e-5)
        markers = h.markers.wait_for(lambda items: items[-1] if items else None, 10.0, "markers")
        strips = [m for m in markers.markers if m.type == m.LINE_STRIP]
        assert len(strips) == 1 and len(strips[0].points) == 3
        assert strips[0].header.frame_id == "front_optical"
        np.testing.assert_allclose([(p.x, p.y, p.z) for p in strips[0].points], want, atol=1e-5)


def test_server_down_then_slow_frames_keep_flowing_one_result_each(
    tmp_path: Path, harness_factory: Any
) -> None:
    port = free_port()  # nothing listens here
    params = base_params(
        f"http://127.0.0.1:{port}/v1",
        tmp_path / "media",
        task="next_action",
        request_timeout_s=1.0,
        connect_timeout_s=0.5,
    )
    with camera_process("/test_cam/image_raw", W, H):
        h = harness_factory(params)
        h.wait_frames(3)
        before = h.frames_received()
        ids = [h.trigger_id() for _ in range(3)]  # the 2nd and 3rd may find the first in flight
        results = [h.result_for(i) for i in ids]
        kinds = [r.error_kind for r in results]
        assert kinds[0] == "server_unavailable" and set(kinds) <= {"server_unavailable", "busy"}, kinds
        assert all(not r.success and r.error for r in results)
        wait_until(lambda: h.frames_received() > before + 5, 10.0, "frames after the failed requests")

        def server_status(items: list[DiagnosticArray]) -> Any:
            for arr in reversed(items):
                for s in arr.status:
                    if s.name.endswith("server") and s.level == s.ERROR:
                        return s
            return None

        status = h.diagnostics.wait_for(server_status, 10.0, "diagnostics saying the server is down")
        assert "unreachable" in status.message
        req = h.diagnostics.wait_for(
            lambda items: next(
                (
                    s
                    for a in reversed(items)
                    for s in a.status
                    if s.name.endswith("requests") and "server_unavailable" in s.message
                ),
                None,
            ),
            10.0,
            "request diagnostics",
        )
        values = {kv.key: kv.value for kv in req.values}
        assert int(values["failed_server_unavailable"]) >= 1
        h.close()  # one reasoner_node at a time: the next one has the same service names

    # Slow server: the request times out while image callbacks keep running.
    with (
        ScriptedServer(default=ScriptedReply(text="late", delay_s=60.0)) as server,
        camera_process("/test_cam/image_raw", W, H),
    ):
        # The read timeout must outlast waiting for 5 frames on a loaded machine (5 s once did not). It ends
        # this silent request, not the first-token bound (too_slow), which is set longer.
        params = base_params(
            server.base_url,
            tmp_path / "media2",
            task="next_action",
            request_timeout_s=30.0,
            first_token_timeout_s=60.0,
        )
        h = harness_factory(params)
        h.wait_frames(3)
        rid = h.trigger_id()
        busy = h.call_trigger()  # in flight: rejected at once with its own result
        assert not busy.success
        assert h.result_for(busy.message.split()[0], 5.0).error_kind == "busy"
        during = h.frames_received()
        wait_until(lambda: h.frames_received() > during + 5, 25.0, "frames while the request is in flight")
        assert not h.results_for(rid), "the slow request should still be in flight"
        result = h.result_for(rid, 90.0)
        assert result.error_kind == "timeout", (result.error_kind, result.error)

        def timeouts_counted() -> Any:  # counted just after the result is published
            req = h.node.diagnostics().status[1]
            return req if {kv.key: kv.value for kv in req.values}.get("failed_timeout") else None

        req = wait_until(timeouts_counted, 10.0, "the timeout counted in the diagnostics")
        assert {kv.key: kv.value for kv in req.values}["failed_timeout"] == "1" and "timeout" in req.message
        h.only_result(rid)
        h.only_result(busy.message.split()[0])


def test_a_second_node_of_its_name_on_the_domain_is_an_error_in_diagnostics(
    tmp_path: Path, harness_factory: Any
) -> None:
    """Two nodes named /reasoner_node (one left running, or launched twice): each says so in /diagnostics,
    at ERROR, until the other is gone."""

    def namesake(items: list[DiagnosticArray]) -> Any:
        latest = items[-1] if items else None
        if latest is None:
            return None
        return next((s for s in latest.status if s.name == "reasoner_node: namesake"), False)

    with ScriptedServer() as server:
        first = harness_factory(base_params(server.base_url, tmp_path / "a"))
        # Alone: no namesake status (diagnostics of the first node only, before the second exists).
        first.diagnostics.wait_for(lambda items: len(items) >= 2 or None, 20.0, "two diagnostics")
        assert namesake(list(first.diagnostics.items)) is False
        second = harness_factory(base_params(server.base_url, tmp_path / "b"))
        status = first.diagnostics.wait_for(namesake, 20.0, "a namesake status")
        assert status.level == status.ERROR, status
        assert f"2 nodes named /reasoner_node on ROS domain {os.environ['ROS_DOMAIN_ID']}" in status.message
        second.close()
        first.diagnostics.items.clear()
        first.diagnostics.wait_for(
            lambda items: (len(items) >= 2 and namesake(items) is False) or None, 30.0, "the namesake gone"
        )


def test_bad_frames_replace_policy_and_instruction_topic(tmp_path: Path, harness_factory: Any) -> None:
    with (
        ScriptedServer(default=ScriptedReply(text=TRAJECTORY_TEXT, delay_s=1.0)) as server,
        camera_process("/test_cam/image_raw", W, H),
    ):
        h = harness_factory(base_params(server.base_url, tmp_path / "media", busy_policy="replace"))
        assert h.node.executor_threads == 2  # one camera, plus triggers and timers
        h.wait_frames(3)
        assert (
            h.node.core.pre_encoder is not None and h.node.core.pre_encoder.encoded == 0
        )  # auto: idle, no trigger yet
        # Malformed images on the camera topic are counted and logged, never raised; the stream goes on.
        bad_pub = h.probe.create_publisher(Image, "/test_cam/image_raw", qos_profile_sensor_data)
        wait_until(lambda: bad_pub.get_subscription_count() > 0, 10.0, "camera subscriber")
        for _ in range(40):
            bad = Image(height=10, width=10, encoding="rgb8", step=30, data=b"short")
            bad.header.stamp = h.probe.get_clock().now().to_msg()
            bad_pub.publish(bad)
            time.sleep(0.025)
        wait_until(lambda: h.node.ingest["front"].stats.invalid > 0, 10.0, "invalid frames counted")
        added = h.frames_buffered()
        h.wait_frames(added + 2)
        camera_status = next(s for s in h.node.diagnostics().status if s.name.endswith("camera front"))
        values = {kv.key: kv.value for kv in camera_status.values}
        assert int(values["frames_invalid"]) > 0 and values["last_frame_error"]
        wait_until(lambda: h.instruction_pub.get_subscription_count() > 0, 10.0, "instruction subscriber")
        h.instruction_pub.publish(String(data="open the drawer"))
        wait_until(lambda: h.node.intake.instruction == "open the drawer", 10.0, "instruction set")
        # The first request takes 5 s: the second and third come while it runs, however loaded the machine.
        server.push(ScriptedReply(text=TRAJECTORY_TEXT, delay_s=5.0))
        first, second, third = (h.trigger_id() for _ in range(3))
        assert h.result_for(second).error_kind == "busy"  # displaced by the third while queued
        r1, r3 = h.result_for(first), h.result_for(third, 30.0)
        assert r1.success and r3.success and r3.instruction == "open the drawer"
        assert "open the drawer" in json.dumps(server.requests[-1])
        # pre_encode auto: after a trigger, frames are encoded as they arrive (off the image callback).

        def requests_status() -> dict[str, str]:
            status = next(s for s in h.node.diagnostics().status if s.name.endswith("requests"))
            return {kv.key: kv.value for kv in status.values}

        wait_until(
            lambda: int(requests_status()["frames_pre_encoded"]) >= 2, 10.0, "frames encoded on arrival"
        )
        assert int(requests_status()["frames_encoded_kept"]) >= 2


def test_shutdown_cancels_in_flight_requests(tmp_path: Path, harness_factory: Any) -> None:
    with (
        ScriptedServer(default=ScriptedReply(text="late", delay_s=20.0)) as server,
        camera_process("/test_cam/image_raw", W, H),
    ):
        h = harness_factory(base_params(server.base_url, tmp_path / "media", task="next_action"))
        h.wait_frames(3)
        rid = h.trigger_id()
        wait_until(lambda: server.requests, 20.0, "the request on the wire")
        t0 = time.monotonic()
        h.node.shutdown()  # what destroy_node does first: cancel, publish the cancelled results, join workers
        # Cancelled, not waited for: the server's answer would come after 20 s. (Under 5 s on an idle machine;
        # CI's two sections side by side once took longer, so the bound here is the cancellation's.)
        assert time.monotonic() - t0 < 15.0
        result = h.result_for(rid, 10.0)
        assert result.error_kind == "cancelled" and not result.success
        assert not any(t.name.startswith("reasoner-worker") and t.is_alive() for t in threading.enumerate())
        late = h.call_trigger()  # after shutdown a trigger still gets its reply and its one (error) result
        assert not late.success and "shutting down" in late.message
        assert h.result_for(late.message.split()[0], 10.0).error_kind == "cancelled"


def test_a_parameter_the_node_did_not_declare_is_refused_whatever_its_name(
    tmp_path: Path, harness_factory: Any
) -> None:
    """rclpy's check of undeclared names skips a falsy one: setting the name '' succeeded and created that
    parameter (found by the generated sequences). Declared parameters stay read-only; use_sim_time, rclpy's
    own, can still be set."""
    h = harness_factory(base_params("http://127.0.0.1:9/v1", tmp_path / "media"))
    result = h.node.set_parameters_atomically([Parameter("", Parameter.Type.STRING, "x")])
    assert not result.successful and "no parameter ''" in result.reason, result
    assert not h.node.has_parameter("")
    result = h.node.set_parameters_atomically([Parameter("clip_seconds", Parameter.Type.DOUBLE, 3.0)])
    assert not result.successful and h.node.get_parameter("clip_seconds").value == 2.0
    sim_time = Parameter("use_sim_time", Parameter.Type.BOOL, False)
    assert h.node.set_parameters_atomically([sim_time]).successful


def test_invalid_parameters_stop_the_node_with_a_clear_message(tmp_path: Path) -> None:
    context = Context()
    rclpy.init(context=context)
    try:
        overrides = [
            Parameter("busy_policy", value="sometimes"),
            Parameter("clip_seconds", value=-1.0),
            Parameter("camera.camera.depth_topic", value="/depth"),
            Parameter("pre_encode", value="always"),
        ]
        with pytest.raises(ConfigError) as err:
            ReasonerNode(parameter_overrides=overrides, context=context)
        text = str(err.value)
        assert "busy_policy" in text and "clip_seconds" in text and "camera_info_topic" in text
        assert "pre_encode: must be one of auto, on, off" in text
        # Checks of the core modules surface the same way: a media directory that is a file, an unknown task.
        (tmp_path / "file").write_text("not a directory")
        for name, value, words in [
            ("media_dir", str(tmp_path / "file"), "is not a directory"),
            ("task", "fly", "unknown task 'fly'"),
            ("video_kwargs_mode", "sometimes", "video_kwargs_mode"),
            # Before: started normally, and every trigger was then rejected.
            ("trigger_tasks", "next_action, fly", "trigger_tasks: unknown task\\(s\\) 'fly'"),
        ]:
            extra = [] if name == "media_dir" else [Parameter("media_dir", value=str(tmp_path / "m"))]
            with pytest.raises(ConfigError, match=words):
                ReasonerNode(parameter_overrides=[Parameter(name, value=value), *extra], context=context)
    finally:
        rclpy.shutdown(context=context)


def test_pre_encoding_only_where_packets_are_reused(tmp_path: Path) -> None:
    context = Context()
    rclpy.init(context=context)
    try:
        for params, expected in [
            ({}, True),
            ({"pre_encode": "off"}, False),
            ({"cameras": ["left", "right"]}, True),
            ({"cameras": ["left", "right"], "tiled": True}, False),  # tiles are composed at trigger time
            ({"codec": "mp4v"}, True),
        ]:
            overrides = [Parameter("media_dir", value=str(tmp_path / "m"))]
            overrides += [Parameter(k, value=v) for k, v in params.items()]
            node = ReasonerNode(parameter_overrides=overrides, context=context)
            try:
                assert (node.core.pre_encoder is not None) == expected, params
            finally:
                node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_main_exits_2_with_the_reason_on_bad_parameters(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "cosmos_reasoner_ros.node",
        "--ros-args",
        "-p",
        "busy_policy:=sometimes",
        "-p",
        f"media_dir:={tmp_path}",
        "-p",
        "clip_seconds:=4",
        "-p",
        "buffer_seconds:=.inf",
        "-p",
        "trigger_period_s:=0.000001",
    ]  # an integer for a float is accepted
    done = subprocess.run(cmd, env=ros_env(), capture_output=True, text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "busy_policy: must be one of reject, replace, got 'sometimes'" in output
    assert "clip_seconds" not in output
    # Before: OverflowError, then AttributeError in destroy_node of the half-built node, exit 1.
    assert "buffer_seconds: must be a finite number, got inf" in output
    assert "trigger_period_s: must be 0 (off) or at least 0.05 s" in output
    assert "Traceback" not in output and "Error:" not in output.replace("ConfigError", "")


@pytest.mark.parametrize("lifecycle", [False, True])
def test_a_server_url_with_credentials_is_refused_and_its_secret_never_shown(
    tmp_path: Path, lifecycle: bool
) -> None:
    """Before: `http://user:password@host/v1` started; the password appeared in /diagnostics every second, the
    log and `ros2 param dump`, and the server got Basic authentication instead of the API key as a bearer.
    A managed node then waited for configure with the password readable by `ros2 param get`: now it refuses
    at start too (exit 2)."""
    name = f"creds_{'managed' if lifecycle else 'plain'}_{os.getpid()}"
    cmd = [
        sys.executable,
        "-m",
        "cosmos_reasoner_ros.node",
        "--ros-args",
        "-r",
        f"__node:={name}",
        "-p",
        "server_url:=http://robot:s3cr3t-pw@127.0.0.1:9/v1",
        "-p",
        f"media_dir:={tmp_path}",
        "-p",
        f"lifecycle:={str(lifecycle).lower()}",
    ]
    log_dir = tmp_path / "ros_log"
    env = ros_env(ROS_LOG_DIR=str(log_dir))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        # Still up (a managed node waiting for configure): what the graph can read of it.
        ros2 = shutil.which("ros2")
        shown = subprocess.run(
            [ros2 or "true", "param", "get", f"/{name}", "server_url"],
            env=env,
            capture_output=True,
            text=True,
        )
        proc.kill()
        output = proc.communicate()[0]
        raise AssertionError(f"the node kept running; ros2 param get: {shown.stdout}{shown.stderr}") from None
    assert proc.returncode == 2, output
    assert "server_url: must not contain credentials" in output and "<redacted>@127.0.0.1:9" in output
    assert "s3cr3t-pw" not in output and "Traceback" not in output
    logs = [p for p in log_dir.glob("**/*") if p.is_file()]
    assert logs and not any("s3cr3t-pw" in p.read_text(errors="replace") for p in logs)


@pytest.mark.parametrize("given", ["parameter_overrides", "-p", "params file"])
def test_a_server_url_with_credentials_never_reaches_parameter_events(tmp_path: Path, given: str) -> None:
    """Declaring a parameter publishes its value on /parameter_events, to anyone on the graph and into any
    `ros2 bag record -a`. Before, the node declared server_url and refused it only afterwards: the password
    went out. A probe in the node's own process (matched before the node exists) reads every event raw."""
    from rcl_interfaces.msg import ParameterEvent
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import qos_profile_parameter_events

    secret = "s3cr3t-pw"
    url = f"http://robot:{secret}@127.0.0.1:9/v1"
    overrides = [Parameter("media_dir", value=str(tmp_path / "media"))]
    args: list[str] | None = None
    if given == "-p":
        args = ["--ros-args", "-p", f"server_url:={url}"]
    elif given == "params file":
        params_file = tmp_path / "robot.yaml"
        params_file.write_text(json.dumps({"/**": {"ros__parameters": {"server_url": url}}}))  # JSON is YAML
        args = ["--ros-args", "--params-file", str(params_file)]
    else:
        overrides.append(Parameter("server_url", value=url))
    context = Context()
    rclpy.init(args=args, context=context)
    try:
        probe = rclpy.create_node("events_probe", context=context)
        events: list[bytes] = []
        probe.create_subscription(
            ParameterEvent, "/parameter_events", events.append, qos_profile_parameter_events, raw=True
        )
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(probe)
        with pytest.raises(ConfigError, match="server_url: must not contain credentials") as refused:
            ReasonerNode(parameter_overrides=overrides, context=context)
        assert secret not in str(refused.value) and "<redacted>@127.0.0.1:9" in str(refused.value)
        # The probe hears the node: rclpy's own use_sim_time is declared (and published) first of all.
        deadline = time.monotonic() + 30.0
        while not any(b"use_sim_time" in e and b"reasoner_node" in e for e in events):
            assert time.monotonic() < deadline, (
                f"no parameter event of the node in 30 s ({len(events)} others)"
            )
            executor.spin_once(timeout_sec=0.1)
        # What one publisher wrote after it is delivered in order, in this process at once: take the rest.
        count = -1
        while count != len(events):
            count = len(events)
            executor.spin_once(timeout_sec=0.5)
        assert not [e for e in events if secret.encode() in e], "the password went out on /parameter_events"
        executor.shutdown()
        probe.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_python_m_node_runs_and_stops_on_sigint(tmp_path: Path) -> None:
    # The shipped parameter file, a timer trigger, no camera publisher: each tick gives one no_frames result.
    cmd = [
        sys.executable,
        "-m",
        "cosmos_reasoner_ros.node",
        "--ros-args",
        "--params-file",
        str(REASONER_YAML),
        "-p",
        f"media_dir:={tmp_path}",
        "-p",
        "server_url:=http://127.0.0.1:9/v1",
        "-p",
        "diagnostics_period_s:=0.2",
        "-p",
        "trigger_period_s:=0.3",
        "-p",
        "camera.camera.topic:=/no_camera_here",
    ]
    proc = subprocess.Popen(cmd, env=ros_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        context = Context()
        rclpy.init(context=context)
        probe = rclpy.create_node("probe_main", context=context)
        seen = Collector()
        results = Collector()
        probe.create_subscription(DiagnosticArray, "/diagnostics", seen, 10)
        probe.create_subscription(ReasonerResult, "/reasoner_node/result", results, 10)
        executor = rclpy.executors.SingleThreadedExecutor(context=context)
        executor.add_node(probe)
        deadline = time.monotonic() + 30
        while (
            (not seen.items or len(results.items) < 3) and time.monotonic() < deadline and proc.poll() is None
        ):
            executor.spin_once(timeout_sec=0.1)
        executor.shutdown()
        probe.destroy_node()
        rclpy.shutdown(context=context)
        assert seen.items, "the node published no diagnostics"
        assert len(results.items) >= 3, "the timer did not trigger"
        assert {r.error_kind for r in results.items} == {"no_frames"}
        assert len({r.request_id for r in results.items}) == len(results.items)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
