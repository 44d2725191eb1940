"""The handoff's values as ROS messages: a decision (cosmos_reasoner_ros/HandoffDecision, with its gates and
its path), and a path for a base as nav_msgs/Path with its poses' orientations (no nav2_msgs needed)."""

from __future__ import annotations

import math

from geometry_msgs.msg import Point, PoseStamped
from nav_msgs.msg import Path
from std_msgs.msg import Header

from cosmos_reasoner_ros.geometry import BasePath, ns_to_sec_nanosec
from cosmos_reasoner_ros.msg import HandoffDecision as HandoffDecisionMsg
from cosmos_reasoner_ros.msg import HandoffGate
from cosmos_reasoner_ros.requests import HandoffDecision

__all__ = ["base_path_msg", "decision_msg"]


def _header(stamp_ns: int, frame_id: str) -> Header:
    sec, nanosec = ns_to_sec_nanosec(stamp_ns)
    header = Header(frame_id=frame_id)
    header.stamp.sec, header.stamp.nanosec = sec, nanosec
    return header


def _float32(value: float) -> float:
    """A value a float32 field takes: rosidl refuses NaN and values beyond float32's range (a Nav2 server's
    feedback is anyone's)."""
    return max(-3.4e38, min(3.4e38, float(value))) if math.isfinite(value) else 0.0


def base_path_msg(path: BasePath) -> Path:
    """A nav_msgs/Path of the path's poses, in its frame, stamped at its observation (tf2 transforms it from
    then: Nav2's controller server does, into its own frame)."""
    header = _header(path.stamp_ns, path.frame_id)
    msg = Path(header=header)
    for (x, y, z), (qx, qy, qz, qw) in zip(path.points, path.orientations, strict=True):
        pose = PoseStamped(header=header)
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = float(x), float(y), float(z)
        o = pose.pose.orientation
        o.x, o.y, o.z, o.w = float(qx), float(qy), float(qz), float(qw)
        msg.poses.append(pose)
    return msg


def decision_msg(decision: HandoffDecision) -> HandoffDecisionMsg:
    path = decision.path
    msg = HandoffDecisionMsg(
        header=_header(decision.decided_ns, path.frame_id if path else ""),
        request_id=decision.request_id,
        clip_id=decision.clip_id,
        task=decision.task,
        decision=decision.decision,
        reason=decision.reason.replace("\x00", "\ufffd"),
        dry_run=decision.dry_run,
        gates=[
            HandoffGate(
                name=g.name,
                passed=g.passed,
                value=float(g.value),
                limit=float(g.limit),
                detail=g.detail.replace("\x00", "\ufffd"),
            )
            for g in decision.gates
        ],
        action=decision.action,
        error_code=max(0, min(65535, int(decision.error_code))),
        error_msg=decision.error_msg.replace("\x00", "\ufffd"),
        distance_to_goal=_float32(decision.distance_to_goal),
        speed=_float32(decision.speed),
    )
    if path is not None:
        msg.path = base_path_msg(path)
        msg.path_px = [Point(x=float(u), y=float(v)) for u, v in path.pixels]
        msg.path_source = path.source
        msg.path_length_m = float(path.length_m)
        msg.answered_length_m = float(path.answered_length_m)
    return msg
