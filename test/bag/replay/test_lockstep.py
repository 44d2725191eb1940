"""bag.replay.lockstep: the ingest count read from a node's diagnostics values, and the wait for the node's
clock to reach the bag's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay.lockstep import IngestWatch, camera_progress


def test_camera_progress_counts_only_finished_frames() -> None:
    values = {
        "topic": "/cam",
        "frames_received": "10",
        "frames_buffered": "3",
        "frames_skipped_by_sampling": "5",
        "frames_dropped": "1",
    }
    assert camera_progress(values) == ("/cam", 9)  # the tenth is still being handled
    assert camera_progress({**values, "frames_dropped": "2"}) == ("/cam", 10)
    assert camera_progress({"url": "http://x"}) is None  # the server's status


class _DiagnosticsNode:
    """What IngestWatch uses of a node; the test delivers the diagnostics itself."""

    def __init__(self) -> None:
        self.callback: Any = None

    def create_subscription(self, msg_type: object, topic: str, callback: Any, qos: object) -> object:
        self.callback = callback
        return object()

    def destroy_subscription(self, sub: object) -> None:
        pass


def test_the_first_frame_waits_for_the_nodes_clock_to_reach_the_bag(tmp_path: Path) -> None:
    # Until the node has taken a /clock sample, its diagnostics are stamped 0 (then frames stamped in 2020
    # look decades ahead and are refused): the replay waits for a stamp in bag time, however long the node
    # takes on a busy machine, and fails naming the cause when none comes.
    from builtin_interfaces.msg import Time
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Header

    bag_start = 1_600_000_000_123_000_000
    node = _DiagnosticsNode()
    watch = IngestWatch(node)

    def diagnostics(ns: int) -> DiagnosticArray:
        return DiagnosticArray(header=Header(stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9)))

    node.callback(diagnostics(0))
    with pytest.raises(BagError, match=r"clock did not reach the bag's start .* no /diagnostics stamped"):
        watch.wait_clock(bag_start, 0.3)
    delivered: list[int] = []

    def deliver() -> None:
        delivered.append(bag_start)
        node.callback(diagnostics(bag_start))

    late = threading.Timer(1.0, deliver)
    late.start()
    watch.wait_clock(bag_start, 60.0)
    assert delivered  # it returned on the stamp, not before
    late.join()
    watch.wait_clock(bag_start - 1, 0.0)  # already there
    watch.close()
