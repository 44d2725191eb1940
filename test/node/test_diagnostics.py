"""diagnostics: throttled problem logging and the status values the node publishes, without ROS."""

from __future__ import annotations

import time

from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
from cosmos_reasoner_ros.node.diagnostics import (
    CameraStats,
    LastRequest,
    ProblemLog,
    camera_status,
    namesake_status,
    requests_status,
    server_status,
)


def test_problem_log_reports_each_problem_once_per_period() -> None:
    lines: list[str] = []
    log = ProblemLog(lines.append, period_s=0.2)
    for _ in range(5):
        log.report("a", "problem a")
    log.report("b", "problem b")
    assert lines == ["problem a", "problem b"]
    time.sleep(0.25)
    log.report("a", "problem a")
    assert lines[-1] == "problem a (4 more since last report)"


def test_repeats_held_back_are_stated_with_their_count_once_the_period_ends() -> None:
    """Issue 37, finding 7: of 9 refusals in a row, 4 got a log line and nothing said how many were dropped
    when no line of the same problem followed."""
    lines: list[str] = []
    log = ProblemLog(lines.append, period_s=0.2)
    for i in range(9):
        log.report("refused", f"refusal {i}")
    log.flush()
    assert lines == ["refusal 0"]  # the period has not ended: nothing stated yet
    time.sleep(0.25)
    log.flush()
    assert lines == ["refusal 0", "refusal 8 (8 more like this in the last 0.2 s, not logged each)"]
    log.flush()
    log.report("other", "another problem")  # a report states what is due too
    assert lines[-1] == "another problem" and len(lines) == 3


def test_server_status_levels() -> None:
    assert server_status("u", "", None, "").level == "warn"
    assert server_status("u", "m", True, "").message == "healthy"
    down = server_status("u", "", False, "refused")
    assert down.level == "error" and "refused" in down.message and down.values["model"] == "(not discovered)"


def test_requests_status_counts_failures_by_kind() -> None:
    counts = {"submitted": 6, "delivered": 5, "success": 2, "busy": 2, "timeout": 1}
    status = requests_status(counts, 1, 0, LastRequest(error="slow", error_kind="timeout"), {"x": 3})
    assert status.level == "warn" and "timeout" in status.message
    v = status.values
    assert (v["submitted"], v["succeeded"], v["failed"], v["failed_busy"], v["failed_timeout"], v["x"]) == (
        6,
        2,
        3,
        2,
        1,
        3,
    )
    assert requests_status({"success": 1}, 0, 0, LastRequest()).level == "ok"


def test_camera_status_names_a_stale_camera_and_counts_refusals() -> None:
    stats = CameraStats(
        received=10, invalid=3, too_large=1, bad_stamp=1, not_colour=1, last_receive=time.monotonic()
    )
    buffer = ClipBuffer("front", 4.0, 10.0, 1 << 20, 0).stats()
    fresh = camera_status("front", "/f", stats, buffer, time.monotonic(), 2.0)
    assert fresh.level == "ok" and fresh.hardware_id == "front"
    assert (
        fresh.values["frames_too_large"],
        fresh.values["frames_bad_stamp"],
        fresh.values["frames_not_colour"],
    ) == (1, 1, 1)
    stale = camera_status("front", "/f", stats, buffer, time.monotonic() + 5.0, 2.0)
    assert stale.level == "warn" and "stale" in stale.message


def test_the_server_status_tells_how_long_it_is_unreachable_and_its_outages() -> None:
    down = server_status("u", "m", False, "health check failed", 12.4, 2, 47.3)
    assert down.message == "unreachable for 12 s: health check failed"
    assert (down.values["unreachable_for_s"], down.values["outages"], down.values["last_outage_s"]) == (
        12.4,
        2,
        47.3,
    )


def test_a_camera_outrun_by_its_publisher_warns_that_clips_are_short() -> None:
    """An 8K camera publishing 24 Hz of which 0.8 Hz arrive: the status says so, with the numbers, and warns
    that a 4 s clip at 4 fps holds 3 frames of 16 (before: 'receiving', 0 frames dropped)."""
    stats = CameraStats()
    start = time.monotonic() - 10.0
    for k in range(9):  # one frame in 30 arrives
        stats.received += 1
        stats.last_receive = start + k * 1.25
        stats.arrivals.observe(stats.last_receive, (1000 + k * 30) * 41_666_667, 1 + 30 * k)
    buffer = ClipBuffer("front", 4.0, 10.0, 1 << 20, 0).stats()
    status = camera_status("front", "/f", stats, buffer, stats.last_receive, 2.0, 4.0, 4.0)
    assert status.level == "warn"
    assert status.message == (
        "receiving 0.8 Hz of 24 Hz published (96 % lost before the callback); "
        "a 4 s clip would hold 3 of 16 frames"
    )
    v = status.values
    assert (v["frames_lost_before_callback"], v["frames_lost_measured_by"]) == (232, "sequence")
    assert (v["published_hz"], v["received_hz"], v["clip_frames_expected"]) == (24.0, 0.8, 3.2)


def test_frames_lost_that_sampling_would_skip_anyway_do_not_warn() -> None:
    stats = CameraStats()
    start = time.monotonic()
    for k in range(40):  # 30 Hz published, every third frame arrives: 10 Hz, more than sample_fps 4
        stats.received += 1
        stats.last_receive = start + k * 0.1
        stats.arrivals.observe(stats.last_receive, (1000 * 30 + 3 * k) * 33_333_333, 1 + 3 * k)
    buffer = ClipBuffer("front", 4.0, 10.0, 1 << 20, 0).stats()
    status = camera_status("front", "/f", stats, buffer, stats.last_receive, 2.0, 4.0, 4.0)
    assert status.level == "ok"
    assert status.message.startswith("receiving 10 Hz of 30 Hz published (66 % lost")  # 78 of 118


def test_a_namesake_on_the_domain_is_an_error_and_the_only_node_reports_nothing() -> None:
    assert namesake_status("/reasoner_node", 0, "7") is None  # not discovered yet
    assert namesake_status("/reasoner_node", 1, "7") is None
    report = namesake_status("/robot1/reasoner_node", 3, "7")
    assert report is not None and report.level == "error" and report.name == "reasoner_node: namesake"
    assert "3 nodes named /robot1/reasoner_node on ROS domain 7" in report.message
    assert report.values == {"nodes_of_this_name": 3, "ros_domain_id": "7"}
