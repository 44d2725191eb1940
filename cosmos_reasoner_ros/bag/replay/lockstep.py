"""What makes a replay independent of the machine's speed: knowing how many of the published frames the node
has taken in, and a bound on the requests in flight.

The node reports per camera, in /diagnostics, the frames it received and what became of each (buffered,
skipped by sampling, dropped). With the diagnostics period short, `IngestWatch` tells when every frame
published so far has been dealt with: then a request sees exactly those frames, whatever the load. Nothing in
the node changes for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError

__all__ = ["DIAGNOSTICS_PERIOD_S", "IngestWatch", "RequestGate", "camera_progress"]

DIAGNOSTICS_PERIOD_S = 0.05  # [s] the node's diagnostics period in lock-step (its minimum)


def camera_progress(values: dict[str, str]) -> tuple[str, int] | None:
    """(topic, frames fully handled) from a camera status's key/values, or None for another status.

    Read in the order the node writes them: `frames_received` first, so a frame counted as received whose
    outcome is not yet counted keeps the figure below it (the outcome counters only grow after `received`)."""
    try:
        received = int(values["frames_received"])
        done = (
            int(values["frames_buffered"])
            + int(values["frames_skipped_by_sampling"])
            + int(values["frames_dropped"])
        )
    except (KeyError, ValueError):
        return None
    return values.get("topic", ""), min(received, done)


class IngestWatch:
    """Subscribes to the node's /diagnostics; `wait(topic, n)` returns once n frames of that image topic have
    been handled (buffered, skipped or dropped), `wait_clock(ns)` once the node's clock has reached `ns` (the
    node stamps its diagnostics with its own clock: with use_sim_time, the newest /clock it has taken)."""

    def __init__(self, node: Any, topic: str = "/diagnostics") -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        self._handled: dict[str, int] = {}
        self._values: dict[str, dict[str, str]] = {}  # camera topic -> its newest status values
        self._stamp_ns = 0  # the newest header stamp of the node's diagnostics
        self._cond = threading.Condition()
        self._node = node
        self._sub = node.create_subscription(
            DiagnosticArray,
            topic,
            self._on_diagnostics,
            QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE),
        )

    def _on_diagnostics(self, msg: Any) -> None:
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with self._cond:
            self._stamp_ns = max(self._stamp_ns, stamp_ns)
            for status in msg.status:
                values = {kv.key: kv.value for kv in status.values}
                progress = camera_progress(values)
                if progress is not None:
                    topic, done = progress
                    if done >= self._handled.get(topic, 0):
                        self._values[topic] = values
                    self._handled[topic] = max(done, self._handled.get(topic, 0))
            self._cond.notify_all()

    def handled(self, topic: str) -> int:
        with self._cond:
            return self._handled.get(topic, 0)

    def refused(self, topic: str) -> dict[str, int]:
        """The camera's frames refused so far by kind (undecodable, too large, bad stamp, not colour; dropped:
        refused by the buffer, e.g. out of order), from its newest status; only kinds with frames."""
        with self._cond:
            values = dict(self._values.get(topic, {}))
        kinds = {
            "too large": "frames_too_large",
            "bad stamp": "frames_bad_stamp",
            "not colour": "frames_not_colour",
        }
        out = {kind: _int(values.get(key)) for kind, key in kinds.items()}
        invalid = _int(values.get("frames_invalid"))
        out["undecodable"] = max(0, invalid - sum(out.values()))
        out["dropped"] = max(0, _int(values.get("frames_dropped")) - invalid)
        return {kind: n for kind, n in out.items() if n}

    def wait(
        self, topic: str, count: int, timeout_s: float, alive: Callable[[], None] = lambda: None
    ) -> None:
        """Block until `count` frames of `topic` were handled; BagError after timeout_s (a lost frame)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._handled.get(topic, 0) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    have = self._handled.get(topic, 0)
                    raise BagError(
                        f"lock-step: reasoner_node handled {have} of {count} frames of {topic} within "
                        f"{timeout_s:.0f} s (frames lost between the player and the node?)"
                    )
                self._cond.wait(min(left, 0.5))
                alive()

    def wait_clock(
        self, ns: int, timeout_s: float, alive: Callable[[], None] = lambda: None, what: str = "reasoner_node"
    ) -> None:
        """Block until the node's diagnostics carry a stamp at or after `ns`; BagError after timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._stamp_ns < ns:
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = f"its newest stamp {self._stamp_ns / 1e9:.3f} s" if self._stamp_ns else "none"
                    raise BagError(
                        f"{what}'s clock did not reach the bag's start ({ns / 1e9:.3f} s since the epoch) "
                        f"within {timeout_s:.0f} s: no /diagnostics stamped in bag time ({seen}); does it "
                        "run with use_sim_time and see the player's /clock?"
                    )
                self._cond.wait(min(left, 0.5))
                alive()

    def close(self) -> None:
        self._node.destroy_subscription(self._sub)


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


class RequestGate:
    """At most `limit` requests in flight over a whole run (0: no limit); `acquire` blocks the caller (the
    player of one bag, whose playback clock stands still meanwhile)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self.in_flight = 0
        self.peak = 0

    def acquire(self, timeout_s: float = float("inf")) -> None:
        """Take a slot; BagError when none frees within timeout_s (answers that never came)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.limit > 0 and self.in_flight >= self.limit:
                if time.monotonic() > deadline:
                    raise BagError(
                        f"no request slot freed within {timeout_s:.0f} s ({self.in_flight} in flight)"
                    )
                self._cond.wait(0.2)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def release(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()
