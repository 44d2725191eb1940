"""What a camera sent against what reached the node, without ROS: the rate its stamps (and its publisher's
sequence numbers) show, the rate its messages arrive at, the frames lost before the node's callback, and
whether a clip would be short of frames.

Frames are lost before the callback by the transport (best effort), the subscription's history (a slow
callback: newer frames replace older ones) or shared memory segments, and none of these tells the node.
What tells: the publisher's sequence number of each message (rmw_fastrtps fills it; `lost` is then exact), or,
where the middleware gives none, the camera's period inferred from its stamps (the common spacing of
consecutive frames: an estimate, and a lower bound on the loss when consecutive frames never arrive).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections import deque

__all__ = ["ArrivalReport", "Arrivals", "clip_shortfall"]

WINDOW_S = 10.0  # the recent window the rates are measured over (receive time)
_WINDOW_MESSAGES = 512
_DELTAS = 64  # the stamp spacings the period is estimated from: the newest, however long ago they came
_MAX_RATE_HZ = 10_000.0  # a sequence jump of more than 1,000 implying more is a new publisher, not a loss
_MAX_GAP = 1_000
_NS = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class ArrivalReport:
    received: int = 0  # messages that reached the callback, in all
    lost: int = 0  # published but never reached the callback, in all (see `measured_by`)
    received_hz: float = 0.0  # over the recent window
    published_hz: float = 0.0  # the camera's own rate over the recent window; 0: not known yet
    lost_recent: int = 0  # of the frames published during the recent window
    recent_received: int = 0  # messages received during the recent window
    measured_by: str = ""  # "sequence" (exact), "stamps" (estimated from the stamps' spacing), "" (not yet)
    restarts: int = 0  # the publisher's sequence went back (a restarted driver, a second publisher)

    @property
    def lost_percent(self) -> float:
        """Of the frames published during the recent window, the share lost before the callback."""
        published = self.lost_recent + self.recent_received
        return 100.0 * self.lost_recent / published if published else 0.0


@dataclasses.dataclass(slots=True)
class _Entry:
    receive_s: float
    stamp_ns: int | None
    sequence: int | None


class Arrivals:
    """One camera's arrivals: `observe` from its callback (any thread), `report` from another."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._recent: deque[_Entry] = deque(maxlen=_WINDOW_MESSAGES)
        self._received = 0
        self._lost = 0
        self._restarts = 0
        self._last: _Entry | None = None
        self._deltas: deque[int] = deque(maxlen=_DELTAS)  # positive stamp spacings of consecutive arrivals

    def observe(self, receive_s: float, stamp_ns: int | None = None, sequence: int | None = None) -> None:
        """One message reached the callback at `receive_s` (monotonic seconds), with its header stamp when it
        is usable and its publisher's sequence number when the middleware gives one."""
        entry = _Entry(receive_s, stamp_ns, sequence)
        with self._lock:
            self._received += 1
            last = self._last
            if last is not None:
                if last.stamp_ns is not None and stamp_ns is not None and stamp_ns < last.stamp_ns:
                    self._recent.clear()  # the stamps went back (a bag looping, sim time reset): a new run
                    self._deltas.clear()
                self._lost += self._gap(last, entry)
                if last.stamp_ns is not None and stamp_ns is not None and stamp_ns > last.stamp_ns:
                    self._deltas.append(stamp_ns - last.stamp_ns)
            self._recent.append(entry)
            while self._recent and receive_s - self._recent[0].receive_s > self.window_s:
                self._recent.popleft()
            self._last = entry

    def _gap(self, last: _Entry, entry: _Entry) -> int:
        """Frames published between two received ones and never received."""
        if last.sequence is not None and entry.sequence is not None:
            step = entry.sequence - last.sequence
            # Messages queued while a callback was slow arrive back to back: the span is the stamps'.
            limit = max(_MAX_GAP, _span_s(last, entry) * _MAX_RATE_HZ)
            if step <= 0 or step - 1 > limit:
                self._restarts += 1
                return 0
            return step - 1
        if last.stamp_ns is None or entry.stamp_ns is None or not self._deltas:
            return 0
        step_ns = entry.stamp_ns - last.stamp_ns
        # The period is at least the shortest spacing: a step under 1.5 of it spans no lost frame (the
        # common case, every message), without sorting the spacings for the period each time.
        if step_ns < 1.5 * min(self._deltas):
            return 0
        period = _stamp_period_ns(self._deltas)
        return max(0, round(step_ns / period) - 1)

    def report(self) -> ArrivalReport:
        with self._lock:
            recent = list(self._recent)
            received, lost, restarts = self._received, self._lost, self._restarts
            period = _stamp_period_ns(self._deltas)
        report = ArrivalReport(received=received, lost=lost, restarts=restarts, recent_received=len(recent))
        if len(recent) < 2:
            return report
        span_s = recent[-1].receive_s - recent[0].receive_s
        received_hz = (len(recent) - 1) / span_s if span_s > 0 else 0.0
        published, measured_by = _published(recent, period)
        if published is None:
            return dataclasses.replace(report, received_hz=received_hz)
        published_hz, published_frames = published
        return dataclasses.replace(
            report,
            received_hz=received_hz,
            published_hz=published_hz,
            lost_recent=max(0, published_frames - len(recent)),
            measured_by=measured_by,
        )


def _published(recent: list[_Entry], period: float) -> tuple[tuple[float, int] | None, str]:
    """((published Hz, frames published from the first to the last recent message), how it was found)."""
    first, last = recent[0], recent[-1]
    sequences = [e.sequence for e in recent if e.sequence is not None]
    if len(sequences) == len(recent) and all(b > a for a, b in itertools.pairwise(sequences)):
        frames = sequences[-1] - sequences[0] + 1
        span_s = _span_s(first, last)
        return ((frames - 1) / span_s if span_s > 0 else 0.0, frames), "sequence"
    if not period or first.stamp_ns is None or last.stamp_ns is None:
        return None, ""
    frames = round((last.stamp_ns - first.stamp_ns) / period) + 1
    return (_NS / period, max(frames, len(recent))), "stamps"


def _span_s(first: _Entry, last: _Entry) -> float:
    """Seconds between two messages on the camera's clock (its stamps), else on the receive clock."""
    if first.stamp_ns is not None and last.stamp_ns is not None and last.stamp_ns > first.stamp_ns:
        return (last.stamp_ns - first.stamp_ns) / _NS
    return last.receive_s - first.receive_s


def _stamp_period_ns(spacings: deque[int]) -> float:
    """The camera's period from its stamps: the typical spacing of consecutive frames, i.e. the median of the
    recent stamp spacings no longer than 1.5 times the shortest one (longer ones span lost frames). 0: no
    spacing yet."""
    deltas = sorted(spacings)
    if not deltas:
        return 0.0
    close = [d for d in deltas if d <= 1.5 * deltas[0]]
    return float(close[len(close) // 2])


def clip_shortfall(report: ArrivalReport, clip_seconds: float, sample_fps: float) -> tuple[float, float]:
    """(frames a clip of clip_seconds would hold at the rate frames arrive, frames it would hold if every
    published frame arrived), both at most sample_fps per second. Equal when nothing is lost that the sampling
    would have kept."""
    published = report.published_hz or report.received_hz
    wanted = clip_seconds * min(sample_fps, published)
    return clip_seconds * min(sample_fps, report.received_hz), wanted
