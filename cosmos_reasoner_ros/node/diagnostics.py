"""What reasoner_node reports about itself, without ROS: per-camera ingest counters, the /diagnostics statuses
(server, requests, one per camera) as plain values, and warnings throttled per kind of problem.

ros_conversion turns the StatusReports into diagnostic_msgs; the node only gathers the numbers.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cosmos_reasoner_ros.clips import ArrivalReport, Arrivals, BufferStats, clip_shortfall

if TYPE_CHECKING:  # annotations only: diagnostics stays below the modules it reports on
    from cosmos_reasoner_ros.node.health import HealthMonitor
    from cosmos_reasoner_ros.node.parameters import NodeConfig
    from cosmos_reasoner_ros.requests import RequestScheduler

__all__ = [
    "CameraStats",
    "ProblemLog",
    "StatusReport",
    "camera_status",
    "namesake_status",
    "node_status",
    "requests_status",
    "server_status",
]


@dataclass(frozen=True)
class StatusReport:
    """One diagnostic status: level is "ok", "warn" or "error"; values are shown as strings."""

    name: str
    level: str
    message: str
    values: Mapping[str, object]
    hardware_id: str = ""


@dataclass
class CameraStats:
    """Ingest counters of one camera (written by its callback only; read by diagnostics)."""

    received: int = 0
    skipped: int = 0  # decimated before decoding: not wanted at the sample rate
    added: int = 0
    dropped: int = 0  # refused by the buffer (out of order, duplicate, too large for the bound)
    invalid: int = 0  # every refused message: undecodable, too large, implausible stamp, wrong encoding
    too_large: int = 0  # declared size above max_pixels (refused before decoding)
    bad_stamp: int = 0  # stamped implausibly far ahead of the receive time
    not_colour: int = 0  # depth or other non-colour encodings on a colour topic
    last_receive: float = 0.0  # time.monotonic() of the newest message
    last_error: str = ""
    arrivals: Arrivals = field(default_factory=Arrivals)  # what the camera sent against what arrived


class ProblemLog:
    """Logs each distinct problem at most once per period; the repeats held back meanwhile are never lost
    silently: the next line of that problem says how many were dropped, and `flush` (a timer's) states them
    once the period ended, with the newest of their messages."""

    def __init__(self, log: Callable[[str], object], period_s: float = 10.0) -> None:
        self._log = log
        self._period = period_s
        self._last: dict[str, float] = {}
        self._suppressed: collections.Counter[str] = collections.Counter()
        self._latest: dict[str, str] = {}  # the newest message held back, per key
        self._lock = threading.Lock()

    def report(self, key: str, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            lines = self._overdue(now, skip=key)
            last = self._last.get(key)
            if last is not None and now - last < self._period:
                self._suppressed[key] += 1
                self._latest[key] = message
            else:
                self._last[key] = now
                repeats = self._suppressed.pop(key, 0)
                self._latest.pop(key, None)
                lines.append(message + (f" ({repeats} more since last report)" if repeats else ""))
        for line in lines:
            self._log(line)

    def flush(self) -> None:
        """Each problem whose repeats were held back for a whole period: one line with their count."""
        with self._lock:
            lines = self._overdue(time.monotonic())
        for line in lines:
            self._log(line)

    def _overdue(self, now: float, skip: str = "") -> list[str]:
        lines = []
        for key, repeats in list(self._suppressed.items()):
            if key != skip and now - self._last[key] >= self._period:
                del self._suppressed[key]
                self._last[key] = now  # the next repeat is held back for a period again
                lines.append(
                    f"{self._latest.pop(key)} ({repeats} more like this in the last {self._period:g} s, "
                    "not logged each)"
                )
        return lines


def namesake_status(name: str, servers: int, domain: str) -> StatusReport | None:
    """An error while another node of this node's name is on the ROS domain (`servers` nodes serve its
    ~/trigger): each trigger and goal goes to either, and a client may wait on the other for a result that
    never comes (a node left running, or launched twice). None while this node is the only one."""
    if servers <= 1:
        return None
    return StatusReport(
        "reasoner_node: namesake",
        "error",
        f"{servers} nodes named {name} on ROS domain {domain}: triggers and goals go to either; "
        "stop the other or give each its own name or namespace",
        {"nodes_of_this_name": servers, "ros_domain_id": domain},
    )


def server_status(
    url: str,
    model: str,
    healthy: bool | None,
    error: str,
    unreachable_for_s: float = 0.0,
    outages: int = 0,
    last_outage_s: float = 0.0,
) -> StatusReport:
    """outages: times the server went from healthy to unreachable (its supervisor restarting it after a crash
    or a freeze shows as one), last_outage_s how long the last ended one lasted."""
    level = "ok" if healthy else ("warn" if healthy is None else "error")
    down = (
        f"unreachable for {unreachable_for_s:.0f} s: {error}"
        if unreachable_for_s
        else f"unreachable: {error}"
    )
    message = {True: "healthy", False: down, None: "not checked yet"}[healthy]
    values = {
        "url": url,
        "model": model or "(not discovered)",
        "healthy": healthy,
        "unreachable_for_s": round(unreachable_for_s, 1),
        "outages": outages,
        "last_outage_s": round(last_outage_s, 1),
    }
    return StatusReport("reasoner_node: server", level, message, values)


@dataclass
class LastRequest:
    """The newest request's figures, for diagnostics."""

    latency_s: float = 0.0
    ttft_s: float = 0.0
    error: str = ""
    error_kind: str = ""
    stale_cameras: tuple[str, ...] = ()


def requests_status(
    counts: Mapping[str, int],
    in_flight: int,
    waiting: int,
    last: LastRequest,
    extra: Mapping[str, object] | None = None,
) -> StatusReport:
    """counts: delivered outcomes by kind ("success" or the error kind), plus "submitted" and "delivered"."""
    outcomes = {k: v for k, v in counts.items() if k not in ("submitted", "delivered")}
    failures = {k: v for k, v in outcomes.items() if k != "success"}
    level = "warn" if last.error_kind and failures else "ok"
    message = f"last error ({last.error_kind}): {last.error}" if last.error_kind else "ok"
    values: dict[str, object] = {
        "submitted": counts.get("submitted", 0),
        "succeeded": outcomes.get("success", 0),
        "failed": sum(failures.values()),
        "in_flight": in_flight,
        "waiting": waiting,
        "last_latency_s": last.latency_s,
        "last_ttft_s": last.ttft_s,
        "last_error_kind": last.error_kind,
        "last_stale_cameras": ",".join(last.stale_cameras),
        **dict(extra or {}),
    }
    values.update({f"failed_{k}": v for k, v in sorted(failures.items())})
    return StatusReport("reasoner_node: requests", level, message, values)


def camera_status(
    name: str,
    topic: str,
    stats: CameraStats,
    buffer: BufferStats,
    now: float,
    stale_after_s: float,
    clip_seconds: float = 0.0,
    sample_fps: float = 0.0,
) -> StatusReport:
    """A camera is stale when no message arrived for stale_after_s (monotonic time). It warns too when a clip
    of clip_seconds would be short of frames: fewer arrive than the sampling would keep of what it publishes
    (a camera outrunning the transport or the node; the frames lost before the callback are counted)."""
    stale = stats.last_receive == 0.0 or now - stats.last_receive > stale_after_s
    arrivals = stats.arrivals.report()
    has, wanted = clip_shortfall(arrivals, clip_seconds, sample_fps)
    short = not stale and clip_seconds > 0 and wanted - has >= 1 and has < 0.8 * wanted
    values: dict[str, object] = {
        "topic": topic,
        "frames_received": stats.received,
        "frames_buffered": stats.added,
        "frames_skipped_by_sampling": stats.skipped,
        "frames_dropped": stats.dropped + stats.invalid,
        "frames_invalid": stats.invalid,
        "frames_too_large": stats.too_large,
        "frames_bad_stamp": stats.bad_stamp,
        "frames_not_colour": stats.not_colour,
        "frames_lost_before_callback": arrivals.lost,
        "frames_lost_recent_percent": round(arrivals.lost_percent, 1),
        "frames_lost_measured_by": arrivals.measured_by or "(not yet)",
        "published_hz": round(arrivals.published_hz, 2),
        "received_hz": round(arrivals.received_hz, 2),
        "clip_frames_expected": round(has, 1),
        "clip_frames_if_none_lost": round(wanted, 1),
        "publisher_restarts": arrivals.restarts,
        "last_frame_error": stats.last_error,
        "seconds_since_last_frame": (now - stats.last_receive) if stats.last_receive else -1.0,
        "buffer_frames": buffer.frames,
        "buffer_seconds": buffer.fill_seconds,
        "buffer_bytes": buffer.fill_bytes,
        "buffer_fill_bytes_percent": 100.0 * buffer.fill_bytes / buffer.max_bytes
        if buffer.max_bytes
        else 0.0,
        "buffer_resets": buffer.resets,
    }
    if stale:
        message = "stale: no frames"
    else:
        message = "receiving" + _arrival_words(arrivals)
        if short:
            message += f"; a {clip_seconds:g} s clip would hold {has:.0f} of {wanted:.0f} frames"
    return StatusReport(
        f"reasoner_node: camera {name}",
        "warn" if stale or short else "ok",
        message,
        values,
        hardware_id=name,
    )


def _arrival_words(arrivals: ArrivalReport) -> str:
    """ "" when nothing is lost, else how much of what the camera publishes arrives."""
    if not arrivals.lost_recent:
        return ""
    how = "" if arrivals.measured_by == "sequence" else ", estimated from the stamps"
    return (
        f" {_hz(arrivals.received_hz)} Hz of {_hz(arrivals.published_hz)} Hz published "
        f"({arrivals.lost_percent:.0f} % lost before the callback{how})"
    )


def _hz(rate: float) -> str:
    return f"{rate:.0f}" if rate >= 10 else f"{rate:.2g}"


def node_status(
    cfg: NodeConfig,
    health: HealthMonitor,
    scheduler: RequestScheduler,
    last: LastRequest,
    cameras: Mapping[str, tuple[CameraStats, BufferStats]],
    extra: Mapping[str, object],
) -> list[StatusReport]:
    """reasoner_node's statuses: the server, the requests, one per camera (stale after 5 sampling periods or
    2 s without a message)."""
    reports = [
        server_status(
            cfg.server_url,
            health.model,
            health.healthy,
            health.error,
            health.unreachable_for_s(),
            health.outages,
            health.last_outage_s,
        )
    ]
    counts = scheduler.counts()
    reports.append(requests_status(counts, scheduler.in_flight(), scheduler.waiting(), last, extra))
    now, stale_after = time.monotonic(), max(2.0, 5.0 / cfg.sample_fps)
    for cam in cfg.cameras:
        stats, buffer = cameras[cam.name]
        reports.append(
            camera_status(
                cam.name, cam.topic, stats, buffer, now, stale_after, cfg.clip_seconds, cfg.sample_fps
            )
        )
    return reports
