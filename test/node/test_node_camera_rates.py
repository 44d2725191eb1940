"""/diagnostics tells the input's truth: a camera that publishes faster than the node takes frames in shows
its losses (before: an 8K camera at 0.8-24 Hz, 0.3-0.8 frames/s received, '0 frames dropped')."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.camera_publisher import camera_process

pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 wheels)")
from support.node_harness import base_params

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _camera_values(arrays: list[Any]) -> dict[str, str] | None:
    """The newest published camera status with frames lost before the callback, as key/values (+ message)."""
    for array in reversed(arrays):
        for status in array.status:
            if status.name.endswith("camera front"):
                values = {kv.key: kv.value for kv in status.values}
                if int(values["frames_lost_before_callback"]) >= 100:
                    return {**values, "message": status.message}
    return None


def test_a_camera_that_outruns_the_node_shows_its_losses(tmp_path: Path, harness_factory: Any) -> None:
    """Small frames at 3,000 Hz outrun the node's callback (an 8K camera outruns the transport the same way:
    frames replaced in the subscription's history or lost on the way, which nothing reports). The published
    /diagnostics count them from the publisher's sequence numbers, with both rates."""
    with camera_process("/test_cam/image_raw", 160, 120, rate=3000.0):
        h = harness_factory(
            base_params("http://127.0.0.1:9/v1", tmp_path / "media", diagnostics_period_s=0.5)
        )
        values = h.diagnostics.wait_for(_camera_values, 60.0, "a camera status with frames lost")
    assert values["frames_lost_measured_by"] == "sequence"
    assert float(values["published_hz"]) > float(values["received_hz"]) > 0
    assert int(values["frames_received"]) > 0
    assert "published (" in values["message"] and "lost before the callback" in values["message"]
