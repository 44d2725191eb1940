"""scheduler: admission (reject / replace), exactly one delivered outcome per job, storms, cancellation and a
bounded shutdown, without ROS."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.processes import wait_until

from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.requests.outcome import Outcome, RequestSpec
from cosmos_reasoner_ros.requests.scheduler import Job, RequestScheduler


class Runner:
    """execute(): waits until released (or cancelled), then succeeds; records every delivery."""

    def __init__(self, hold: bool = True) -> None:
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.started: list[str] = []
        self.delivered: list[Outcome] = []
        self.done_callbacks: Counter[str] = Counter()
        self.lock = threading.Lock()

    def execute(self, job: Job, _report: object) -> tuple[Outcome, ...]:
        with self.lock:
            self.started.append(job.spec.request_id)
        while not self.release.wait(0.01):
            if job.cancel.is_set():
                return (Outcome(job.spec.request_id, job.spec.task, "", False, "cancelled", "cancelled"),)
        return (Outcome(job.spec.request_id, job.spec.task, "", True, answer="ok"),)

    def deliver(self, job: Job, outcome: Outcome) -> None:
        with self.lock:
            self.delivered.append(outcome)

    def kinds(self) -> dict[str, str]:
        with self.lock:
            return {o.request_id: o.error_kind or "success" for o in self.delivered}


def job(n: int, group: tuple[str, ...] = ("front",), runner: Runner | None = None) -> Job:
    j = Job(spec=RequestSpec(request_id=f"r{n}", task="next_action"), group=group)
    if runner is not None:
        j.on_done = lambda outcomes: runner.done_callbacks.update(o.request_id for o in outcomes)
    return j


def scheduler(runner: Runner, **kwargs: object) -> RequestScheduler:
    return RequestScheduler(runner.execute, runner.deliver, **kwargs)  # type: ignore[arg-type]


def test_reject_policy_runs_one_and_rejects_the_rest_each_with_one_outcome() -> None:
    runner = Runner()
    s = scheduler(runner, max_in_flight=1, busy_policy="reject")
    admissions = [s.submit(job(i, runner=runner)) for i in range(5)]
    assert admissions[0].accepted and not any(a.accepted for a in admissions[1:])
    assert all("in flight" in a.reason for a in admissions[1:])
    wait_until(lambda: len(runner.delivered) == 4, 5, "4 busy outcomes")
    assert set(runner.kinds().values()) == {"busy"}
    runner.release.set()
    wait_until(lambda: len(runner.delivered) == 5, 5, "the accepted one")
    assert runner.kinds()["r0"] == "success"
    assert runner.done_callbacks == Counter({f"r{i}": 1 for i in range(5)})
    assert s.shutdown(2.0)


def test_replace_policy_keeps_the_newest_waiting_and_frees_the_slot_before_delivery() -> None:
    runner = Runner()
    s = scheduler(runner, max_in_flight=1, busy_policy="replace")
    assert all(s.submit(job(i)).accepted for i in range(4))  # r0 runs; r1, r2 replaced; r3 waits
    wait_until(lambda: len(runner.delivered) == 2, 5, "two replaced")
    assert runner.kinds() == {"r1": "busy", "r2": "busy"}
    assert "replaced by the newer request r2" in runner.delivered[0].error
    assert s.waiting() == 1
    runner.release.set()
    wait_until(lambda: len(runner.delivered) == 4, 5, "r0 and r3")
    assert runner.started == ["r0", "r3"]
    assert s.shutdown(2.0)


def test_groups_have_their_own_slots() -> None:
    runner = Runner()
    s = scheduler(runner, max_in_flight=1, workers=4)
    assert s.submit(job(0, ("front",))).accepted
    assert s.submit(job(1, ("wrist",))).accepted
    assert not s.submit(job(2, ("front",))).accepted
    wait_until(lambda: s.in_flight() == 2, 5, "two running")
    runner.release.set()
    assert s.shutdown(5.0)


@settings(max_examples=25, deadline=None)
@given(
    calls=st.lists(st.sampled_from(["front", "wrist", "both"]), min_size=1, max_size=60),
    policy=st.sampled_from(["reject", "replace"]),
    in_flight=st.integers(1, 3),
)
def test_a_storm_delivers_exactly_one_outcome_per_job(calls: list[str], policy: str, in_flight: int) -> None:
    runner = Runner(hold=False)
    s = scheduler(runner, max_in_flight=in_flight, busy_policy=policy, workers=3)
    groups = {"front": ("front",), "wrist": ("wrist",), "both": ("front", "wrist")}
    jobs = [job(i, groups[g], runner) for i, g in enumerate(calls)]
    threads = [threading.Thread(target=s.submit, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_until(lambda: len(runner.delivered) == len(jobs), 10, "every outcome")
    assert Counter(o.request_id for o in runner.delivered) == Counter(j.spec.request_id for j in jobs)
    assert runner.done_callbacks == Counter(j.spec.request_id for j in jobs)
    assert s.counts()["submitted"] == s.counts()["delivered"] == len(jobs)
    assert s.shutdown(2.0)


def test_cancel_ends_a_waiting_job_at_once_and_stops_a_running_one() -> None:
    runner = Runner()
    s = scheduler(runner, busy_policy="replace")
    running, waiting = job(0), job(1)
    s.submit(running)
    s.submit(waiting)
    s.cancel(waiting)
    wait_until(lambda: runner.kinds().get("r1") == "cancelled", 5, "the waiting job cancelled")
    assert "waiting" in runner.delivered[0].error
    s.cancel(running)
    wait_until(lambda: runner.kinds().get("r0") == "cancelled", 5, "the running job cancelled")
    assert runner.started == ["r0"]  # the cancelled waiting job never ran
    assert s.shutdown(2.0)


def test_shutdown_cancels_everything_and_is_bounded_even_when_a_request_ignores_cancel() -> None:
    stuck = threading.Event()

    def execute(j: Job, _report: object) -> tuple[Outcome, ...]:
        stuck.wait(10)  # ignores its cancel event
        return (Outcome(j.spec.request_id, "t", "", True),)

    delivered: list[Outcome] = []
    s = RequestScheduler(execute, lambda _j, o: delivered.append(o), busy_policy="replace")
    s.submit(job(0))
    s.submit(job(1))  # waiting
    wait_until(lambda: s.in_flight() == 1, 5, "running")
    t0 = time.monotonic()
    assert s.shutdown(0.5)
    assert time.monotonic() - t0 < 5.0  # its bound plus a grace, never the stuck request's 10 s
    assert sorted((o.request_id, o.error_kind) for o in delivered) == [
        ("r0", "cancelled"),
        ("r1", "cancelled"),
    ]
    stuck.set()
    time.sleep(0.1)  # the stuck request finishes late: its result is dropped, not delivered a second time
    assert len(delivered) == 2


def test_shutdown_returns_with_no_worker_left_whose_job_ended() -> None:
    """CI (a busy machine): a worker whose job had ended was still alive when shutdown returned, its thread
    not yet past the pool's loop. Here each worker lingers 0.5 s after its job, as a descheduled thread would;
    shutdown joins it within its bound."""
    runner = Runner(hold=True)
    s = scheduler(runner, max_in_flight=2)
    run = s._run

    def lingering(j: Job) -> None:
        run(j)
        time.sleep(0.5)

    s._run = lingering  # type: ignore[method-assign]
    s.submit(job(0, ("a",)))
    s.submit(job(1, ("b",)))
    wait_until(lambda: s.in_flight() == 2, 5, "both running")
    assert s.shutdown(3.0)
    assert s._workers and not [t.name for t in s._workers if t.is_alive()]
    assert runner.kinds() == {"r0": "cancelled", "r1": "cancelled"}


def test_after_shutdown_a_submission_is_refused_and_still_delivered_once() -> None:
    runner = Runner(hold=False)
    s = scheduler(runner)
    assert s.shutdown(1.0)
    admission = s.submit(job(7))
    assert not admission.accepted and "shutting down" in admission.reason
    assert runner.kinds() == {"r7": "cancelled"}
    assert s.shutdown(1.0)  # idempotent


def test_submissions_during_a_slow_shutdown_each_get_exactly_one_delivered_outcome() -> None:
    """The ~/trigger service stays up during SIGINT shutdown: a storm then lands while the delivery thread
    is still publishing. Before, a refusal queued behind the thread's stop mark was never delivered (the
    thread was alive, so the submitter left it to the thread; the thread then stopped at the mark)."""
    gate = threading.Event()
    delivered: list[str] = []
    lock = threading.Lock()

    def deliver(_j: Job, o: Outcome) -> None:
        gate.wait(30)  # a slow publisher: the delivery thread outlives shutdown's wait
        with lock:
            delivered.append(o.request_id)

    runner = Runner()
    s = RequestScheduler(runner.execute, deliver)
    s.submit(job(0))
    wait_until(lambda: runner.started == ["r0"], 30, "r0 running")
    assert not s.shutdown(0.2)  # r0's cancelled outcome is stuck in deliver: the join timed out
    threads = [threading.Thread(target=s.submit, args=(job(i),)) for i in range(1, 51)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()  # every refusal queued while the delivery thread is still busy, none after
    gate.set()

    def counts() -> Counter[str]:
        with lock:
            return Counter(delivered)

    wait_until(lambda: sum(counts().values()) >= 51 and s.undelivered() == 0, 30, "51 delivered outcomes")
    assert counts() == Counter(f"r{i}" for i in range(51))
    assert s.counts()["delivered"] == 51
    assert s.shutdown(1.0)


def test_a_storm_racing_shutdown_gets_exactly_one_outcome_and_one_completion_per_job() -> None:
    """The same storm with shutdown in the middle of it: whichever thread delivers (the delivery thread
    draining, or a submitter after it ended), each request gets one outcome and each job one on_done."""
    runner = Runner(hold=False)

    def deliver(j: Job, o: Outcome) -> None:
        time.sleep(0.002)  # a publisher that takes a little time
        runner.deliver(j, o)

    s = RequestScheduler(runner.execute, deliver, max_in_flight=3, workers=3)
    jobs = [job(i, runner=runner) for i in range(60)]
    threads = [threading.Thread(target=s.submit, args=(j,)) for j in jobs]
    closing = threading.Thread(target=s.shutdown, args=(0.0,))
    for t in threads[:30]:
        t.start()
    closing.start()
    for t in threads[30:]:
        t.start()
    for t in (*threads, closing):
        t.join()
    wait_until(lambda: s.undelivered() == 0 and len(runner.kinds()) == 60, 30, "60 delivered outcomes")
    assert Counter(o.request_id for o in runner.delivered) == Counter(f"r{i}" for i in range(60))
    assert runner.done_callbacks == Counter(f"r{i}" for i in range(60))


def test_a_failing_delivery_or_callback_does_not_stop_the_others() -> None:
    seen: list[str] = []

    def deliver(j: Job, o: Outcome) -> None:
        if o.request_id == "r0":
            raise RuntimeError("publisher gone")
        seen.append(o.request_id)

    s = RequestScheduler(lambda j, _r: (Outcome(j.spec.request_id, "t", "", True),), deliver, max_in_flight=5)
    bad = job(0)
    bad.on_done = lambda _o: (_ for _ in ()).throw(RuntimeError("callback bug"))
    for j in (bad, job(1), job(2)):
        s.submit(j)
    wait_until(lambda: len(seen) == 2, 5, "the other deliveries")
    assert s.shutdown(2.0)


def test_execute_raising_still_gives_one_internal_outcome() -> None:
    delivered: list[Outcome] = []

    def execute(_j: Job, _report: object) -> tuple[Outcome, ...]:
        raise ValueError("bug")

    s = RequestScheduler(execute, lambda _j, o: delivered.append(o))
    s.submit(job(0))
    wait_until(lambda: delivered, 5, "the internal outcome")
    assert delivered[0].error_kind == "internal" and "ValueError: bug" in delivered[0].error
    assert s.shutdown(1.0)


def test_settings_are_checked() -> None:
    runner = Runner()
    with pytest.raises(ValueError, match="busy_policy"):
        scheduler(runner, busy_policy="queue")
    with pytest.raises(ValueError, match="max_in_flight"):
        scheduler(runner, max_in_flight=0)


# ---- several requests about one clip, deadlines, finalize ---


def spec(name: str, deadline_s: float = 0.0) -> RequestSpec:
    return RequestSpec(
        request_id=name, task="next_action", trigger_time=time.monotonic(), deadline_s=deadline_s
    )


def test_several_requests_of_one_job_take_one_slot_and_each_gets_one_outcome_as_it_ends() -> None:
    """A quick task's outcome is delivered at once (early report), the slot is held until the last one ends,
    on_done gets all of them once, in the job's order; a request execute() forgot still gets one."""
    release = threading.Event()
    delivered: list[str] = []
    done: list[tuple[str, ...]] = []

    def execute(j: Job, report: Callable[[Outcome], None]) -> tuple[Outcome, ...]:
        quick = Outcome(j.more[0].request_id, "caption", "", True, answer="quick")
        report(quick)
        release.wait(5)
        return (Outcome(j.spec.request_id, "next_action", "", True), quick)  # j.more[1]: forgotten

    s = RequestScheduler(execute, lambda _j, o: delivered.append(o.request_id))
    j = Job(spec("a"), ("front",), more=(spec("b"), spec("c")))
    j.on_done = lambda outcomes: done.append(tuple(o.request_id for o in outcomes))
    assert s.submit(j).accepted
    wait_until(lambda: delivered == ["b"], 5, "the quick outcome first")
    assert not s.submit(Job(spec("d"), ("front",))).accepted  # the job holds the camera group's slot
    assert s.in_flight() == 1 and done == []
    release.set()
    wait_until(lambda: len(delivered) == 4, 5, "every outcome")
    assert sorted(delivered) == ["a", "b", "c", "d"] and delivered.count("b") == 1
    assert done == [("a", "b", "c")]
    assert j.outcomes["c"].error_kind == "internal" and j.outcome is j.outcomes["a"]
    assert s.shutdown(1.0)


def test_a_deadline_cancels_the_request_which_ends_as_a_timeout_with_its_own_outcome() -> None:
    """At the deadline the job's cancel event is set as expired (the pipeline then reports a timeout with what
    it had done); a waiting job ends at its deadline without running."""
    seen: list[tuple[str, bool]] = []
    delivered: list[Outcome] = []

    def execute(j: Job, _report: object) -> tuple[Outcome, ...]:
        j.cancel.wait(5)
        seen.append((j.spec.request_id, j.cancel.expired))
        return (Outcome(j.spec.request_id, "t", "", False, "timeout", "deadline, with the partial answer"),)

    s = RequestScheduler(execute, lambda _j, o: delivered.append(o), busy_policy="replace")
    t0 = time.monotonic()
    s.submit(Job(spec("r", deadline_s=0.3), ("front",)))
    s.submit(Job(spec("w", deadline_s=0.2), ("front",)))  # waits for the slot past its deadline
    wait_until(lambda: len(delivered) == 2, 5, "both outcomes")
    assert [(o.request_id, o.error_kind) for o in delivered] == [("w", "timeout"), ("r", "timeout")]
    assert "deadline of 0.2 s passed" in delivered[0].error
    assert delivered[1].error == "deadline, with the partial answer"  # the request's own outcome
    assert seen == [("r", True)] and 0.25 < time.monotonic() - t0 < 4.5  # the deadline, not the 5 s wait
    assert s.counts()["timeout"] == 2
    assert s.shutdown(1.0)


def test_a_request_that_ignores_its_deadline_gets_a_timeout_after_the_grace_and_keeps_its_slot() -> None:
    stuck = threading.Event()
    delivered: list[Outcome] = []

    progress: list[tuple[str, str, str]] = []

    def execute(j: Job, _report: object) -> tuple[Outcome, ...]:
        j.progress("querying", "", "x")
        j.progress("streaming", "[1, 2", "x")  # what x had streamed when it got stuck
        stuck.wait(10)
        return (Outcome(j.spec.request_id, "t", "", True),)

    s = RequestScheduler(execute, lambda _j, o: delivered.append(o))
    t0 = time.monotonic()
    s.submit(
        Job(
            spec("x", deadline_s=0.2),
            ("front",),
            more=(spec("y"),),
            on_progress=lambda *a: progress.append(a),
        )
    )
    wait_until(lambda: len(delivered) == 2, 5, "timeouts for both requests")
    assert 1.2 <= time.monotonic() - t0 < 8.0  # the deadline plus the grace (1 s), not the stuck 10 s
    assert {o.error_kind for o in delivered} == {"timeout"} and "did not stop" in delivered[0].error
    assert {o.request_id: o.answer for o in delivered} == {"x": "[1, 2", "y": ""}  # what each had streamed
    # An answer never comes without its first token (CI: a result carried the streamed text with a zero
    # first_token_stamp): x's timings are when it began, was sent and streamed; y never began.
    x, y = sorted(delivered, key=lambda o: o.request_id)
    assert x.timings is not None and y.timings is not None
    assert x.timings.first_token is not None and x.timings.request_sent is not None
    assert x.timings.trigger <= x.timings.started <= x.timings.request_sent <= x.timings.first_token
    assert x.timings.first_token <= x.timings.finished
    assert y.timings.first_token is None and y.timings.request_sent is None
    assert progress == [("querying", "", "x"), ("streaming", "[1, 2", "x")]  # passed on to the job's callback
    assert s.in_flight() == 1  # still running: the slot is honest about it
    stuck.set()
    wait_until(lambda: s.in_flight() == 0, 5, "the slot freed")
    time.sleep(0.1)
    assert len(delivered) == 2  # the late success is dropped
    assert s.shutdown(1.0)


def test_after_a_stall_past_deadline_and_grace_the_request_still_gets_its_grace_to_stop() -> None:
    delivered: list[Outcome] = []

    def execute(j: Job, _report: object) -> tuple[Outcome, ...]:
        j.cancel.wait(10)  # stops as soon as it is told to, with its own outcome
        return (Outcome(j.spec.request_id, "t", "", False, "timeout", "stopped, with the partial answer"),)

    s = RequestScheduler(execute, lambda _j, o: delivered.append(o))
    s.submit(Job(spec("x", deadline_s=0.1), ("front",)))
    with (
        s._lock
    ):  # the deadline thread gets no CPU (a stalled machine) until after the deadline and the grace
        time.sleep(1.5)
    wait_until(lambda: delivered, 5, "the outcome")
    time.sleep(0.2)
    assert [o.error for o in delivered] == [
        "stopped, with the partial answer"
    ]  # not the fallback after the grace
    assert s.shutdown(1.0)


def test_finalize_changes_the_outcome_everyone_sees_and_a_failing_one_changes_nothing() -> None:
    delivered: list[Outcome] = []
    done: list[tuple[Outcome, ...]] = []

    def finalize(_j: Job, o: Outcome) -> Outcome:
        if o.request_id == "boom":
            raise RuntimeError("finalize bug")
        return Outcome(o.request_id, o.task, "", False, "stale", "too old")

    s = RequestScheduler(
        lambda j, _r: (Outcome(j.spec.request_id, "t", "", True),),
        lambda _j, o: delivered.append(o),
        finalize=finalize,
        max_in_flight=2,
    )
    old, boom = Job(spec("old"), ("front",)), Job(spec("boom"), ("front",))
    old.on_done = done.append
    s.submit(old)
    s.submit(boom)
    wait_until(lambda: len(delivered) == 2 and done, 5, "both delivered")
    kinds = {o.request_id: o.error_kind or "success" for o in delivered}
    assert kinds == {"old": "stale", "boom": "success"}
    assert done[0][0].error_kind == "stale" and old.outcome is not None and old.outcome.error_kind == "stale"
    assert s.counts()["stale"] == 1 and s.counts()["success"] == 1
    assert s.shutdown(1.0)


def test_a_job_of_many_requests_costs_the_scheduler_no_work_per_request_under_its_lock() -> None:
    """Each refused task of a 100,000-task goal used to rebuild the set of every request id of its job under
    the scheduler's lock (50 s for 16,000 tasks, a trigger's reply held 34 s). What the scheduler asks of a
    job per outcome is now fixed when the job is made: reading its specs does not grow with the outcomes."""

    class CountingJob(Job):
        reads = 0

        @property
        def specs(self) -> tuple[RequestSpec, ...]:
            type(self).reads += 1
            return super().specs

    runner = Runner(hold=False)
    sched = scheduler(runner)
    specs = [RequestSpec(request_id=f"big-{i}", task="next_action") for i in range(2000)]
    big = CountingJob(spec=specs[0], group=("front",), more=tuple(specs[1:]))
    sched.fail(big, TaskError("too many tasks"))
    wait_until(lambda: len(runner.delivered) == 2000, 30, "2000 outcomes")
    assert sched.submit(job(1)).accepted  # the scheduler is free for the next trigger
    wait_until(lambda: len(runner.delivered) == 2001, 10, "the next trigger's outcome")
    assert CountingJob.reads <= 2, CountingJob.reads  # before: one per outcome delivered and per finish
    assert sched.shutdown(1.0)


def test_a_job_that_ended_is_not_kept_until_its_deadline() -> None:
    """A trigger each second with a deadline of an hour kept every ended job, its outcomes and their frames,
    in the deadline heap until the hour had passed: 3,600 jobs."""
    import gc
    import weakref

    runner = Runner(hold=False)
    sched = scheduler(runner)
    j = Job(spec=RequestSpec(request_id="long", task="next_action", deadline_s=3600.0), group=("front",))
    assert sched.submit(j).accepted
    wait_until(lambda: runner.kinds().get("long") == "success", 10, "the outcome")
    ref = weakref.ref(j)
    del j
    gc.collect()
    assert ref() is None
    assert sched.shutdown(1.0)
