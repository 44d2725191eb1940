"""scheduler: admission (reject / replace), exactly one delivered outcome per job, storms, cancellation and a
bounded shutdown, without ROS."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.processes import wait_until

from cosmos_reasoner_ros.pipeline import Outcome, RequestSpec
from cosmos_reasoner_ros.scheduler import Job, RequestScheduler


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

    def execute(self, job: Job) -> Outcome:
        with self.lock:
            self.started.append(job.spec.request_id)
        while not self.release.wait(0.01):
            if job.cancel.is_set():
                return Outcome(job.spec.request_id, job.spec.task, "", False, "cancelled", "cancelled")
        return Outcome(job.spec.request_id, job.spec.task, "", True, answer="ok")

    def deliver(self, job: Job, outcome: Outcome) -> None:
        with self.lock:
            self.delivered.append(outcome)

    def kinds(self) -> dict[str, str]:
        with self.lock:
            return {o.request_id: o.error_kind or "success" for o in self.delivered}


def job(n: int, group: tuple[str, ...] = ("front",), runner: Runner | None = None) -> Job:
    j = Job(spec=RequestSpec(request_id=f"r{n}", task="next_action"), group=group)
    if runner is not None:
        j.on_done = lambda o: runner.done_callbacks.update([o.request_id])
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

    def execute(j: Job) -> Outcome:
        stuck.wait(10)  # ignores its cancel event
        return Outcome(j.spec.request_id, "t", "", True)

    delivered: list[Outcome] = []
    s = RequestScheduler(execute, lambda _j, o: delivered.append(o), busy_policy="replace")
    s.submit(job(0))
    s.submit(job(1))  # waiting
    wait_until(lambda: s.in_flight() == 1, 5, "running")
    t0 = time.monotonic()
    assert s.shutdown(0.5)
    assert time.monotonic() - t0 < 2.0
    assert sorted((o.request_id, o.error_kind) for o in delivered) == [
        ("r0", "cancelled"),
        ("r1", "cancelled"),
    ]
    stuck.set()
    time.sleep(0.1)  # the stuck request finishes late: its result is dropped, not delivered a second time
    assert len(delivered) == 2


def test_after_shutdown_a_submission_is_refused_and_still_delivered_once() -> None:
    runner = Runner(hold=False)
    s = scheduler(runner)
    assert s.shutdown(1.0)
    admission = s.submit(job(7))
    assert not admission.accepted and "shutting down" in admission.reason
    assert runner.kinds() == {"r7": "cancelled"}
    assert s.shutdown(1.0)  # idempotent


def test_a_failing_delivery_or_callback_does_not_stop_the_others() -> None:
    seen: list[str] = []

    def deliver(j: Job, o: Outcome) -> None:
        if o.request_id == "r0":
            raise RuntimeError("publisher gone")
        seen.append(o.request_id)

    s = RequestScheduler(lambda j: Outcome(j.spec.request_id, "t", "", True), deliver, max_in_flight=5)
    bad = job(0)
    bad.on_done = lambda _o: (_ for _ in ()).throw(RuntimeError("callback bug"))
    for j in (bad, job(1), job(2)):
        s.submit(j)
    wait_until(lambda: len(seen) == 2, 5, "the other deliveries")
    assert s.shutdown(2.0)


def test_execute_raising_still_gives_one_internal_outcome() -> None:
    delivered: list[Outcome] = []

    def execute(_j: Job) -> Outcome:
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
