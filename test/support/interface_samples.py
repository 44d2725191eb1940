"""A fully populated ReasonerResult, shared by the interface tests and the peer process."""

from __future__ import annotations

from builtin_interfaces.msg import Time
from cosmos_reasoner_ros.msg import (
    BoundingBox2D,
    GeometryCheck,
    ReasonerResult,
    TimeSegment,
    Trajectory2D,
)
from geometry_msgs.msg import Point


def sample_result(text: str = "move the left arm to the box") -> ReasonerResult:
    msg = ReasonerResult()
    msg.header.stamp = Time(sec=1_700_000_008, nanosec=250_000_000)
    msg.header.frame_id = "front_camera_optical_frame"
    msg.request_id = "req-42"
    msg.task = "trajectory"
    msg.instruction = "pick up the red cube"
    msg.success = True
    msg.reasoning = "The gripper is above the cube. " * 50
    msg.answer = text
    msg.choice = "B"
    msg.trajectories = [
        Trajectory2D(
            label="gripper trajectory",
            camera="front",
            image_width=644,
            image_height=476,
            points_px=[Point(x=322.0, y=119.0), Point(x=64.4, y=47.6)],
            points_norm=[Point(x=500.0, y=250.0), Point(x=100.0, y=100.0)],
        )
    ]
    msg.boxes = [
        BoundingBox2D(
            label="red cube",
            camera="front",
            image_width=644,
            image_height=476,
            x1_px=64.4,
            y1_px=47.6,
            x2_px=128.8,
            y2_px=95.2,
            x1_norm=100.0,
            y1_norm=100.0,
            x2_norm=200.0,
            y2_norm=200.0,
        )
    ]
    msg.segments = [
        TimeSegment(
            caption="arm reaches",
            start_offset_s=0.5,
            end_offset_s=2.25,
            start_stamp=Time(sec=1_700_000_000, nanosec=500_000_000),
            end_stamp=Time(sec=1_700_000_002, nanosec=250_000_000),
        )
    ]
    msg.clip_start = Time(sec=1_700_000_000)
    msg.clip_end = Time(sec=1_700_000_008, nanosec=250_000_000)
    msg.clip_frames = 33
    msg.cameras = ["front", "wrist"]
    msg.clip_uris = ["file:///var/lib/cosmos/media/crr-1.mp4", "file:///var/lib/cosmos/media/crr-2.mp4"]
    msg.model = "nvidia/Cosmos3-Nano"
    msg.prompt_tokens = 1234
    msg.completion_tokens = 321
    msg.latency_s = 2.5
    msg.time_to_first_token_s = 0.142
    msg.finish_reason = "stop"
    msg.clip_id = "reasoner_node-7-0a1b2c3d"
    msg.cached_prompt_tokens = 1024
    msg.reasoning_requested = True
    msg.trigger_stamp = Time(sec=1_700_000_008, nanosec=300_000_000)
    msg.request_sent_stamp = Time(sec=1_700_000_008, nanosec=320_000_000)
    msg.first_token_stamp = Time(sec=1_700_000_008, nanosec=462_000_000)
    msg.answer_stamp = Time(sec=1_700_000_010, nanosec=820_000_000)
    msg.age_s = 2.58
    msg.max_age_s = 3.0
    msg.checks = [
        GeometryCheck(
            name="points_in_image", passed=True, value=1.0, limit=1.0, detail="all 2 points inside"
        ),
        GeometryCheck(name="max_step", passed=False, value=0.74, limit=0.5, detail="largest step 0.740 m"),
    ]
    msg.checks_passed = False
    return msg
