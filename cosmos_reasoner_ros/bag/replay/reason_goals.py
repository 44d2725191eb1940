"""Reason goals of one bag's replay through the node's action: sent at trigger times (taking a slot of the
run's request bound), their ReasonerResults collected as they come back on the executor's thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cosmos_reasoner_ros.bag.replay.lockstep import RequestGate
from cosmos_reasoner_ros.bag.replay.plan import TaskSpec

__all__ = ["PendingGoal", "ReasonGoals"]


@dataclass
class PendingGoal:
    spec: TaskSpec
    trigger_s: float
    result: Any = None
    error: str = ""
    done: threading.Event = field(default_factory=threading.Event)
    # The node has cut the goal's clip (its feedback reached the stage after "capturing") or finished it:
    # the trigger's stamp and its clip's window are taken.
    captured: threading.Event = field(default_factory=threading.Event)


class ReasonGoals:
    """Reason goals in flight for one bag; completion arrives on the executor thread."""

    def __init__(self, client: Any, gate: RequestGate, on_done: Callable[[], None], timeout_s: float) -> None:
        self.client = client
        self.gate = gate
        self.timeout_s = timeout_s
        self.items: list[PendingGoal] = []
        self._on_done = on_done
        self._lock = threading.Lock()

    def send(self, spec: TaskSpec, trigger_s: float) -> PendingGoal:
        from cosmos_reasoner_ros.action import Reason

        self.gate.acquire(self.timeout_s)  # blocks the player (its clock stands still) at the run's bound
        pending = PendingGoal(spec, trigger_s)
        with self._lock:
            self.items.append(pending)

        def on_feedback(message: Any) -> None:
            if message.feedback.stage >= 1:  # STAGES[1]: encoding, after the window was cut
                pending.captured.set()

        future = self.client.send_goal_async(
            Reason.Goal(task=spec.task, instruction=spec.instruction, step=spec.step),
            feedback_callback=on_feedback,
        )

        def on_goal(f: Any) -> None:
            try:
                handle = f.result()
            except BaseException:
                pending.captured.set()
                raise
            if handle is None or not handle.accepted:
                self._finish(pending, None, "goal rejected")
                return
            handle.get_result_async().add_done_callback(lambda r: self._on_result(pending, r.result()))

        future.add_done_callback(on_goal)
        return pending

    def _on_result(self, pending: PendingGoal, response: Any) -> None:
        result = response.result.result
        if not result.request_id:  # an aborted goal carries an empty result, not the node's ReasonerResult
            self._finish(
                pending, None, f"the node ended the goal without a result (goal status {response.status})"
            )
        else:
            self._finish(pending, result, "")

    def _finish(self, pending: PendingGoal, result: Any, error: str) -> None:
        if pending.done.is_set():
            return
        pending.result, pending.error = result, error
        pending.done.set()
        pending.captured.set()
        self.gate.release()
        self._on_done()

    def wait_captured(self, items: list[PendingGoal], timeout_s: float) -> bool:
        """Until the node has stamped each goal and cut its clip (or ended it): with the playback clock paused
        meanwhile, at the bag time the clock shows."""
        deadline = time.monotonic() + timeout_s
        return all(p.captured.wait(max(0.0, deadline - time.monotonic())) for p in items)

    def wait_all(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(p.done.wait(max(0.0, deadline - time.monotonic())) for p in list(self.items))
