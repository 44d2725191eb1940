"""The ROS edge on the way out: pipeline outcomes, 3D paths, images and diagnostics to ROS messages.

Stamps are int nanoseconds inside the package and builtin_interfaces/Time only here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point, PoseStamped
from nav_msgs.msg import Path
from sensor_msgs.msg import Image
from std_msgs.msg import ColorRGBA, Header
from visualization_msgs.msg import Marker, MarkerArray

from cosmos_reasoner_ros.geometry import (
    Box2D,
    Trajectory,
    norm_to_pixel,
    ns_from_sec_nanosec,
    ns_to_sec_nanosec,
    point_pixels,
    seconds_to_ns,
)
from cosmos_reasoner_ros.msg import (
    BoundingBox2D,
    GeometryCheck,
    ReasonerResult,
    Stage,
    TimeSegment,
    Trajectory2D,
)
from cosmos_reasoner_ros.node.handoff_messages import decision_msg
from cosmos_reasoner_ros.reasoner import Segment
from cosmos_reasoner_ros.requests import Check, Outcome


def ns_to_time(ns: int) -> Time:
    """builtin_interfaces/Time from int nanoseconds (negative values clamp to 0: Time is unsigned in DDS)."""
    sec, nanosec = ns_to_sec_nanosec(ns)
    return Time(sec=sec, nanosec=nanosec)


def time_to_ns(stamp: Time) -> int:
    return ns_from_sec_nanosec(stamp.sec, stamp.nanosec)


def ros_string(text: str) -> str:
    """Text safe for a ROS string field: rmw passes strings as C strings, so a NUL (random and broken models
    emit them) would silently cut off everything after it. It becomes U+FFFD, visibly."""
    return text.replace("\x00", "\ufffd")


def _on_image(label: str, camera: str, width: int, height: int) -> dict[str, Any]:
    """The fields a 2D answer's message shares: its label, and the camera and image size it is drawn on."""
    return {
        "label": ros_string(label),
        "camera": camera,
        "image_width": max(0, width),
        "image_height": max(0, height),
    }


def trajectory_msg(t: Trajectory, camera: str, width: int, height: int) -> Trajectory2D:
    return Trajectory2D(
        **_on_image(t.label, camera, width, height),
        points_px=[Point(x=x, y=y) for x, y in (point_pixels(p, width, height) for p in t.points)],
        points_norm=[Point(x=float(p.x_norm), y=float(p.y_norm)) for p in t.points],
    )


def box_msg(b: Box2D, camera: str, width: int, height: int) -> BoundingBox2D:
    return BoundingBox2D(
        **_on_image(b.label, camera, width, height),
        x1_px=norm_to_pixel(b.x1_norm, width),
        y1_px=norm_to_pixel(b.y1_norm, height),
        x2_px=norm_to_pixel(b.x2_norm, width),
        y2_px=norm_to_pixel(b.y2_norm, height),
        x1_norm=float(b.x1_norm),
        y1_norm=float(b.y1_norm),
        x2_norm=float(b.x2_norm),
        y2_norm=float(b.y2_norm),
    )


def segment_msg(s: Segment, clip_start_ns: int) -> TimeSegment:
    return TimeSegment(
        caption=ros_string(s.caption),
        start_offset_s=float(s.start_s),
        end_offset_s=float(s.end_s),
        start_stamp=ns_to_time(clip_start_ns + seconds_to_ns(s.start_s)),
        end_stamp=ns_to_time(clip_start_ns + seconds_to_ns(s.end_s)),
    )


def check_msg(check: Check) -> GeometryCheck:
    return GeometryCheck(
        name=check.name,
        passed=check.passed,
        value=float(check.value),
        limit=float(check.limit),
        detail=ros_string(check.detail),
    )


def mark_ns(outcome: Outcome, mark: float | None) -> int:
    """A time.monotonic() mark of the outcome on the node's clock: the trigger stamp plus the steady interval
    since the trigger; 0 when the mark was never reached or the trigger stamp is unknown."""
    timings = outcome.timings
    if mark is None or timings is None or not outcome.trigger_ns:
        return 0
    return outcome.trigger_ns + seconds_to_ns(mark - timings.trigger)


def result_msg(outcome: Outcome, frame_id: str = "") -> ReasonerResult:
    """The ReasonerResult of one outcome; header.stamp is the clip end (0 when no clip was taken)."""
    msg = ReasonerResult()
    msg.header = Header(stamp=ns_to_time(outcome.clip_end_ns), frame_id=frame_id)
    msg.request_id = outcome.request_id
    msg.clip_id = outcome.clip_id
    msg.task = outcome.task
    msg.instruction = ros_string(outcome.instruction)
    msg.success = outcome.success
    msg.error_kind = outcome.error_kind
    msg.error = ros_string(outcome.error)
    msg.reasoning = ros_string(outcome.reasoning)
    msg.answer = ros_string(outcome.answer)
    msg.choice = ros_string(outcome.choice)
    parsed, camera = outcome.parsed, outcome.answer_camera
    w, h = outcome.image_width, outcome.image_height
    if parsed is not None:
        msg.trajectories = [trajectory_msg(t, camera, w, h) for t in parsed.trajectories]
        msg.boxes = [box_msg(b, camera, w, h) for b in parsed.boxes]
        msg.segments = [segment_msg(s, outcome.clip_start_ns) for s in parsed.segments]
    msg.clip_start = ns_to_time(outcome.clip_start_ns)
    msg.clip_end = ns_to_time(outcome.clip_end_ns)
    msg.clip_frames = outcome.clip_frames
    msg.cameras = list(outcome.cameras)
    msg.stale_cameras = list(outcome.stale_cameras)
    msg.clip_uris = list(outcome.clip_uris)
    msg.model = outcome.model
    msg.prompt_tokens = max(0, outcome.prompt_tokens)
    msg.completion_tokens = max(0, outcome.completion_tokens)
    msg.latency_s = float(outcome.latency_s)
    msg.time_to_first_token_s = float(outcome.ttft_s)
    msg.finish_reason = outcome.finish_reason
    msg.cached_prompt_tokens = max(0, outcome.cached_tokens)
    msg.reasoning_requested = outcome.reasoning_requested
    t = outcome.timings
    msg.trigger_stamp = ns_to_time(outcome.trigger_ns)
    if t is not None:
        msg.request_sent_stamp = ns_to_time(mark_ns(outcome, t.request_sent))
        msg.first_token_stamp = ns_to_time(mark_ns(outcome, t.first_token))
        msg.answer_stamp = ns_to_time(mark_ns(outcome, t.response_received))
    msg.stages = [Stage(name=name, seconds=float(seconds)) for name, seconds in outcome.stages]
    msg.age_s = float(outcome.age_s)
    msg.max_age_s = float(outcome.max_age_s)
    msg.checks = [check_msg(c) for c in outcome.checks]
    msg.checks_passed = outcome.checks_passed
    if outcome.handoff is not None:
        msg.handoff = decision_msg(outcome.handoff)
    return msg


def path_msg(points: Sequence[tuple[float, float, float]], frame_id: str, stamp_ns: int) -> Path:
    """A nav_msgs/Path of 3D points ([m], in `frame_id`), identity orientations."""
    header = Header(stamp=ns_to_time(stamp_ns), frame_id=frame_id)
    path = Path(header=header)
    for x, y, z in points:
        pose = PoseStamped(header=header)
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = float(x), float(y), float(z)
        pose.pose.orientation.w = 1.0
        path.poses.append(pose)
    return path


def _colour(i: int) -> ColorRGBA:
    from cosmos_reasoner_ros.geometry import PALETTE

    r, g, b = PALETTE[i % len(PALETTE)]
    return ColorRGBA(r=r / 255.0, g=g / 255.0, b=b / 255.0, a=1.0)


def path_markers(
    paths: Sequence[tuple[str, Sequence[tuple[float, float, float]]]],
    frame_id: str,
    stamp_ns: int,
    namespace: str = "reasoner",
    lifetime_s: float = 0.0,
) -> MarkerArray:
    """DELETEALL, then per (label, 3D points): a line strip, the waypoints as spheres, the label as text."""
    header = Header(stamp=ns_to_time(stamp_ns), frame_id=frame_id)
    lifetime_sec, lifetime_nanosec = ns_to_sec_nanosec(seconds_to_ns(lifetime_s))
    lifetime = Duration(sec=lifetime_sec, nanosec=lifetime_nanosec)
    out = MarkerArray()
    out.markers.append(Marker(header=header, ns=namespace, action=Marker.DELETEALL))
    for i, (label, pts) in enumerate(paths):
        points = [Point(x=float(x), y=float(y), z=float(z)) for x, y, z in pts]
        if not points:
            continue
        common = {"header": header, "ns": namespace, "lifetime": lifetime, "color": _colour(i)}
        line = Marker(id=3 * i, type=Marker.LINE_STRIP, action=Marker.ADD, points=points, **common)
        line.scale.x = 0.01
        line.pose.orientation.w = 1.0
        spheres = Marker(id=3 * i + 1, type=Marker.SPHERE_LIST, action=Marker.ADD, points=points, **common)
        spheres.scale.x = spheres.scale.y = spheres.scale.z = 0.03
        spheres.pose.orientation.w = 1.0
        text = Marker(
            id=3 * i + 2, type=Marker.TEXT_VIEW_FACING, action=Marker.ADD, text=ros_string(label), **common
        )
        text.pose.position = Point(x=points[0].x, y=points[0].y - 0.05, z=points[0].z)
        text.pose.orientation.w = 1.0
        text.scale.z = 0.04
        out.markers.extend([line, spheres, text])
    return out


def image_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str) -> Image:
    """An rgb8 sensor_msgs/Image from an HxWx3 uint8 array."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"image_msg needs HxWx3 uint8, got {rgb.shape} {rgb.dtype}")
    h, w = rgb.shape[:2]
    msg = Image(height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3)
    msg.header = Header(stamp=ns_to_time(stamp_ns), frame_id=frame_id)
    msg.data = np.ascontiguousarray(rgb).tobytes()
    return msg


LEVELS = {"ok": DiagnosticStatus.OK, "warn": DiagnosticStatus.WARN, "error": DiagnosticStatus.ERROR}


def diagnostic_status(
    name: str, level: str, message: str, values: Mapping[str, object], hardware_id: str = ""
) -> DiagnosticStatus:
    """One DiagnosticStatus; level is "ok", "warn" or "error"; values are stringified."""
    status = DiagnosticStatus(level=LEVELS[level], name=name, message=message, hardware_id=hardware_id)
    status.values = [KeyValue(key=str(k), value=_value_str(v)) for k, v in values.items()]
    return status


def _value_str(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def diagnostic_array(statuses: Sequence[DiagnosticStatus], stamp_ns: int) -> DiagnosticArray:
    return DiagnosticArray(header=Header(stamp=ns_to_time(stamp_ns)), status=list(statuses))
