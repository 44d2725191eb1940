"""Admission and execution of Reasoner requests, without ROS: in-flight slots per camera group, the busy
policy (reject, or replace a waiting request), a worker pool, and one delivery thread that hands each
request's outcome to the node exactly once.

Callers (service, action and timer callbacks) only enqueue: `submit` decides under a lock and returns at
once; it never runs a request or publishes anything itself. Every submitted job ends in exactly one delivered
outcome: its result, a busy or replaced rejection, or a cancellation (also at shutdown, in bounded time).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cosmos_reasoner_ros.errors import BusyError, ReasonerError, RequestCancelled
from cosmos_reasoner_ros.pipeline import Outcome, ProgressCallback, RequestSpec, error_outcome

__all__ = ["BUSY_POLICIES", "Admission", "Job", "RequestScheduler"]

_log = logging.getLogger(__name__)

BUSY_POLICIES = ("reject", "replace")
_DELIVERY_GRACE_S = 1.0


@dataclass(eq=False)
class Job:
    """One request on its way through the scheduler; `outcome` is set once it has been delivered."""

    spec: RequestSpec
    group: tuple[str, ...]  # the sorted camera names whose in-flight slots the request takes
    cancel: threading.Event = field(default_factory=threading.Event)
    on_progress: ProgressCallback | None = None
    on_done: Callable[[Outcome], None] | None = None
    outcome: Outcome | None = None
    _finished: bool = False  # guarded by the scheduler's lock: an outcome was queued for delivery


@dataclass(frozen=True)
class Admission:
    """What submit() decided: accepted (running or waiting for a slot), or rejected with the reason."""

    accepted: bool
    reason: str = ""


@dataclass
class _Group:
    running: list[Job] = field(default_factory=list)
    pending: Job | None = None  # busy_policy "replace": the newest request waiting for a slot


class RequestScheduler:
    """Runs `execute(job)` on a worker pool and passes each outcome to `deliver(job, outcome)`, then to the
    job's own `on_done`, on the delivery thread. Thread-safe."""

    def __init__(
        self,
        execute: Callable[[Job], Outcome],
        deliver: Callable[[Job, Outcome], None],
        *,
        max_in_flight: int = 1,
        busy_policy: str = "reject",
        workers: int = 2,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if busy_policy not in BUSY_POLICIES:
            raise ValueError(f"busy_policy must be one of {', '.join(BUSY_POLICIES)}, got {busy_policy!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._execute = execute
        self._deliver = deliver
        self.max_in_flight = max_in_flight
        self.busy_policy = busy_policy
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified whenever a running job ends
        self._groups: dict[tuple[str, ...], _Group] = collections.defaultdict(_Group)
        self._closed = False
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="reasoner-worker")
        self._deliveries: queue.SimpleQueue[tuple[Job, Outcome] | None] = queue.SimpleQueue()
        self._undelivered = 0  # queued for delivery and not yet handed over
        self._counts: collections.Counter[str] = collections.Counter()
        self._delivery_thread = threading.Thread(
            target=self._delivery_loop, name="reasoner-delivery", daemon=True
        )
        self._delivery_thread.start()

    # -- admission -----------------------------------------------------------------------------------------

    def submit(self, job: Job) -> Admission:
        """Admit a job: run it now, let it wait (replace policy), or reject it with a busy outcome."""
        rejected: tuple[Job, ReasonerError] | None = None
        admission = Admission(True)
        with self._lock:
            self._counts["submitted"] += 1
            g = self._groups[job.group]
            if self._closed:
                rejected = (job, RequestCancelled("the node is shutting down"))
            elif len(g.running) < self.max_in_flight:
                self._start(g, job)
            elif self.busy_policy == "replace":
                if g.pending is not None:
                    rejected = (g.pending, BusyError(f"replaced by the newer request {job.spec.request_id}"))
                g.pending = job
            else:
                rejected = (
                    job,
                    BusyError(f"{len(g.running)} request(s) in flight for cameras {list(job.group)}"),
                )
            if rejected is not None:
                self._finish_locked(rejected[0], error_outcome(rejected[0].spec, rejected[1]))
                if rejected[0] is job:
                    admission = Admission(False, str(rejected[1]))
        self._deliver_after_shutdown()
        return admission

    def fail(self, job: Job, error: ReasonerError) -> None:
        """End a job that cannot be admitted (an invalid request) with `error`, delivered like any outcome."""
        with self._lock:
            self._counts["submitted"] += 1
            self._finish_locked(job, error_outcome(job.spec, error))
        self._deliver_after_shutdown()

    def cancel(self, job: Job) -> None:
        """Cancel a job: a waiting one ends at once, a running one is asked to stop (its cancel event)."""
        job.cancel.set()
        with self._lock:
            g = self._groups.get(job.group)
            if g is not None and g.pending is job:
                g.pending = None
                self._finish_locked(job, error_outcome(job.spec, RequestCancelled("cancelled while waiting")))

    # -- state ---------------------------------------------------------------------------------------------

    def in_flight(self) -> int:
        with self._lock:
            return sum(len(g.running) for g in self._groups.values())

    def waiting(self) -> int:
        with self._lock:
            return sum(g.pending is not None for g in self._groups.values())

    def undelivered(self) -> int:
        with self._lock:
            return self._undelivered

    def counts(self) -> dict[str, int]:
        """submitted, delivered, and delivered outcomes by kind ("success" or the error kind)."""
        with self._lock:
            return dict(self._counts)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- shutdown ------------------------------------------------------------------------------------------

    def shutdown(self, timeout_s: float) -> bool:
        """Stop admitting, cancel what waits or runs, and deliver every outcome within timeout_s (+1 s).

        A request that does not end in time gets a cancelled outcome anyway (its late result is dropped).
        Returns True when everything was delivered. Idempotent.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            if self._closed:
                first = False
            else:
                first = True
                self._closed = True
                for g in self._groups.values():
                    if g.pending is not None:
                        job, g.pending = g.pending, None
                        self._finish_locked(
                            job, error_outcome(job.spec, RequestCancelled("the node is shutting down"))
                        )
                    for job in g.running:
                        job.cancel.set()
            while any(g.running for g in self._groups.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            for g in self._groups.values():
                for job in g.running:
                    self._finish_locked(
                        job,
                        error_outcome(
                            job.spec,
                            RequestCancelled(
                                f"the node shut down; the request did not stop within {timeout_s:g} s"
                            ),
                        ),
                    )
        if first:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._deliveries.put(None)  # after everything queued above
        # Publishing what was just cancelled takes milliseconds: a short grace beyond timeout_s for it.
        self._delivery_thread.join(max(0.0, deadline - time.monotonic()) + _DELIVERY_GRACE_S)
        return not self._delivery_thread.is_alive()

    # -- internals -----------------------------------------------------------------------------------------

    def _start(self, g: _Group, job: Job) -> None:
        g.running.append(job)
        self._pool.submit(self._run, job)

    def _run(self, job: Job) -> None:
        try:
            outcome = self._execute(job)
        except Exception as exc:  # execute() should not raise; the one-outcome promise must hold if it does
            _log.exception("request %s failed unexpectedly", job.spec.request_id)
            outcome = error_outcome(job.spec, ReasonerError(f"{type(exc).__name__}: {exc}"))
        with self._lock:
            g = self._groups[job.group]
            if job in g.running:
                g.running.remove(job)
            # The slot is handed on before the outcome is delivered, so that a trigger sent on receipt of this
            # result is not busy.
            if g.pending is not None and not self._closed:
                nxt, g.pending = g.pending, None
                self._start(g, nxt)
            self._finish_locked(job, outcome)
            self._idle.notify_all()

    def _finish_locked(self, job: Job, outcome: Outcome) -> None:
        if job._finished:
            return
        job._finished = True
        self._undelivered += 1
        self._deliveries.put((job, outcome))

    def _deliver_after_shutdown(self) -> None:
        """Once the delivery thread has ended, outcomes are delivered by the caller (a late trigger still gets
        its one result)."""
        if self._closed and not self._delivery_thread.is_alive():
            while True:
                try:
                    item = self._deliveries.get_nowait()
                except queue.Empty:
                    return
                if item is not None:
                    self._hand_over(*item)

    def _delivery_loop(self) -> None:
        while True:
            item = self._deliveries.get()
            if item is None:
                return
            self._hand_over(*item)

    def _hand_over(self, job: Job, outcome: Outcome) -> None:
        job.outcome = outcome
        try:
            self._deliver(job, outcome)
        except Exception:
            _log.exception("request %s: delivering the outcome failed", outcome.request_id)
        if job.on_done is not None:
            try:
                job.on_done(outcome)
            except Exception:
                _log.exception("request %s: completion callback failed", outcome.request_id)
        with self._lock:
            self._undelivered -= 1
            self._counts["delivered"] += 1
            self._counts["success" if outcome.success else outcome.error_kind] += 1
