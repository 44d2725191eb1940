"""ingest: one camera's messages to buffered frames, and what a request without frames is told about the
frames that were refused, without ROS (duck-typed messages)."""

from __future__ import annotations

from types import SimpleNamespace

from cosmos_reasoner_ros.clips import ClipBuffer
from cosmos_reasoner_ros.node.diagnostics import ProblemLog
from cosmos_reasoner_ros.node.ingest import CameraIngest

S = 1_000_000_000


def frame(stamp_ns: int) -> SimpleNamespace:
    sec, nanosec = divmod(stamp_ns, S)
    return SimpleNamespace(
        header=SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=nanosec), frame_id="cam"),
        height=4,
        width=4,
        encoding="rgb8",
        is_bigendian=0,
        step=12,
        data=bytes(48),
    )


def ingest() -> CameraIngest:
    buffer = ClipBuffer("front", sample_fps=100.0, max_seconds=10.0, max_bytes=10**7, max_long_side=64)
    logged: list[str] = []
    return CameraIngest(
        "front",
        buffer,
        ProblemLog(logged.append),
        use_receive_time=True,
        max_stamp_ahead_s=1.0,
        max_pixels=10**6,
    )


def test_refusals_are_those_since_the_last_buffered_frame() -> None:
    """Before: the counts since start. A camera with five bad stamps at boot that stopped publishing an hour
    later was still said to have '5 frame(s) refused (bad stamp 5)', blaming the wrong cause."""
    camera = ingest()
    now = 1000 * S
    for k in range(5):  # at boot: stamped a minute ahead of their arrival
        camera(frame(now + 60 * S + k), now)
    assert camera.refusals().startswith("camera front: 5 frame(s) refused (bad stamp 5); last: ")
    camera(frame(now + S // 10), now + S // 10)  # then good frames
    assert camera.buffer.stats().added == 1
    assert camera.refusals() == ""  # nothing refused since: a request without frames now blames no stamp
    assert camera.stats.bad_stamp == camera.stats.invalid == 5  # the diagnostics keep the totals
    camera(SimpleNamespace(header=None), now + S)  # then an undecodable message
    camera(frame(now + 90 * S), now + S)
    text = camera.refusals()
    assert text.startswith("camera front: 2 frame(s) refused since its last buffered frame")
    assert "(bad stamp 1, undecodable 1)" in text and "ahead" in text.split("last: ")[1]


def test_frames_lost_before_the_callback_are_counted_from_sequence_numbers() -> None:
    """Every arrival counts, a refused one too; the publisher's sequence numbers tell what never arrived."""
    camera = ingest()
    now = 1000 * S
    for seq in (1, 2, 5, 6, 10):  # 3, 4, 7, 8, 9 were lost before the callback
        camera(frame(now + seq * S // 20), now + seq * S // 20, seq)
    camera(frame(now + 90 * S), now + 11 * S // 20, 11)  # refused (stamped ahead) but received
    report = camera.stats.arrivals.report()
    assert (report.received, report.lost, report.measured_by) == (6, 5, "sequence")
    assert camera.stats.received == 6 and camera.stats.bad_stamp == 1
    camera(frame(now + 12 * S // 20), now + 12 * S // 20)  # a middleware without sequence numbers
    assert camera.stats.arrivals.report().received == 7
