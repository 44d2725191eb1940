"""Generated sequences against a real reasoner_node process: a hypothesis RuleBasedStateMachine that drives a
node (managed or plain) through lifecycle transitions (those that exist and those that do not, back to back),
trigger bursts, goals (many tasks, deadlines, cancels), parameter sets (of every kind, all refused: the node's
parameters are read-only), camera frames (good, undecodable, too large, not colour, stamps ahead and back,
gaps), the scripted server's behaviours and shutdown signals, and checks after every step:

- the process is alive until a signal tells it to stop, then exits 0 without a traceback;
- every call gets its one reply within REPLY_BOUND_S; a trigger's reply says what the state allows (a request
  while active, a refusal naming the state otherwise); a goal is accepted exactly while active;
- every announced request ends in exactly one ~/result within the request's bound (zero or one only for a
  request still open when a cleanup released the result publisher); never two;
- the lifecycle state is what the transitions say (get_state);
- the node's memory stays within MEMORY_BOUND_MB;
- /diagnostics agree with what was sent: every frame published while the node subscribed was received or
  counted lost before the callback, and the counts by outcome add up.

test/node/test_node_sequences.py runs a short budget in the suite (and keeps failing sequences as named
tests); bench/sequences.py runs many seeds.
"""

from __future__ import annotations

import collections
import functools
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from support.node_driver import FRAME_KINDS, TRIGGER_REFUSED, Call, NodeDriver, trigger_reply_ids
from support.processes import wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

# What a request may take here: the node's bounds below (request_total_timeout_s 6 s, deadlines, 1 s of
# deadline grace), clip writing, and a machine other work keeps busy.
REQUEST_TOTAL_S = 6.0
RESULT_BOUND_S = REQUEST_TOTAL_S + 24.0
REPLY_BOUND_S = 30.0  # a transition waits up to shutdown_timeout_s (3 s) and the health thread's stop (5 s)
EXIT_BOUND_S = 20.0  # what ros2 launch gives the node after SIGINT (launch_config.NODE_SIGTERM_TIMEOUT_S)
MEMORY_BOUND_MB = 1200.0  # RSS: ~250 MB of libraries and DDS, buffers of 5 s of frames, a huge answer
MAX_PIXELS = 640 * 480 * 4

WORDS = " ".join(f"w{i}" for i in range(40))
# The scripted server's behaviours, each past the node's bounds below where it is a failure (a request ends
# within them whatever the server does) and within them where it is a slow but working server.
SERVER_BEHAVIOURS = {
    "answer": ScriptedReply(text="scripted answer"),
    "slow_answer": ScriptedReply(text=WORDS, chunk_delay_s=0.02, delay_s=0.5),
    "slow_first_token": ScriptedReply(text=WORDS, first_token_delay_s=5.0),
    "trickle": ScriptedReply(text=WORDS, chunk_delay_s=1.0),
    "comments_only": ScriptedReply(keepalive_s=60.0, keepalive_interval_s=0.3),
    "slow_headers": ScriptedReply(header_byte_delay_s=0.3),
    "huge_answer": ScriptedReply(huge_answer_bytes=8 * 2**20),
    "truncated": ScriptedReply(text=WORDS, cut_after_bytes=300),
    "disconnect": ScriptedReply(drop_connection=True),
    "http_503": ScriptedReply(status=503, error_message="overloaded"),
    "http_400": ScriptedReply(status=400, error_message="bad request"),
    "garbage": ScriptedReply(garbage="data: {not json\n\n"),
    "hang": ScriptedReply(hang=True),
}

# What the runs in this process did, for bench/sequences.py: rules run, answer latencies by kind of call,
# the largest RSS seen.
RULES_RUN: collections.Counter[str] = collections.Counter()
LATENCIES: dict[str, list[float]] = collections.defaultdict(list)
PEAK_RSS_MB = [0.0]

_F = TypeVar("_F", bound=Callable[..., Any])


def counted(rule_function: _F) -> _F:
    @functools.wraps(rule_function)
    def run(*args: Any, **kwargs: Any) -> Any:
        RULES_RUN[rule_function.__name__] += 1
        return rule_function(*args, **kwargs)

    return run  # type: ignore[return-value]


# The managed-node design's transitions: (state, id) -> the state it leads to; no other pair exists.
GOES_TO = {
    ("unconfigured", 1): "inactive",
    ("unconfigured", 5): "finalized",
    ("inactive", 2): "unconfigured",
    ("inactive", 3): "active",
    ("inactive", 6): "finalized",
    ("active", 4): "inactive",
    ("active", 7): "finalized",
}
TRANSITION_IDS = st.sampled_from([1, 2, 3, 4, 5, 6, 7, 0, 8, 11, 99])
# Declared parameters with a value of their own type, of another type, and names never declared.
PARAMETER_SETS = st.sampled_from(
    [
        ("clip_seconds", "double", 2.0),
        ("clip_seconds", "string", "two"),
        ("task", "string", "trajectory"),
        ("max_in_flight", "integer", 5),
        ("max_in_flight", "double", float("nan")),
        ("lifecycle", "bool", False),
        ("no_such_parameter", "integer", 1),
        ("", "string", "x"),
    ]
)


def node_params(server_url: str, media_dir: Path, topic: str, managed: bool) -> dict[str, Any]:
    return {
        "lifecycle": managed,
        "cameras": ["front"],
        "camera": {"front": {"topic": topic, "frame_id": "front_optical"}},
        "image_qos": "reliable",
        "server_url": server_url,
        "media_dir": str(media_dir),
        "clip_seconds": 0.5,
        "sample_fps": 4.0,
        "buffer_seconds": 5.0,
        "max_long_side": 320,
        "max_pixels": MAX_PIXELS,
        "max_retries": 0,
        "request_timeout_s": 3.0,
        "first_token_timeout_s": 2.0,
        "min_tokens_per_s": 2.0,
        "progress_window_s": 2.0,
        "request_total_timeout_s": REQUEST_TOTAL_S,
        "health_period_s": 0.5,
        "diagnostics_period_s": 0.25,
        "task": "next_action",
        "max_in_flight": 3,
        "shutdown_timeout_s": 3.0,
    }


class NodeSequences(RuleBasedStateMachine):
    """One node process per example. Subclasses choose `managed`."""

    managed = True

    def __init__(self) -> None:
        super().__init__()
        self.work = Path(tempfile.mkdtemp(prefix="crr-sequences-"))
        self.server = ScriptedServer(default=SERVER_BEHAVIOURS["answer"]).start()
        name = f"seq_{uuid.uuid4().hex[:8]}"
        topic = f"/{name}_cam/image_raw"
        params = node_params(self.server.base_url, self.work / "media", topic, self.managed)
        self.driver = NodeDriver(name, params, self.work, topic)
        self.state = "unconfigured" if self.managed else "active"
        self.cleanups = 0
        self.published_since_configure = 0
        # Frames published after a configure but lost before the node's first reception of one (its new
        # subscription not yet matched): the node cannot know of them; counted once a frame arrived.
        self.lost_unknowable = 0
        self.stopped = False
        self.last_change = 0.0  # time.monotonic() of the last state change
        self.checked_calls = 0  # calls whose answers were checked
        self.original_parameters: dict[str, Any] = {}
        self.problems: list[str] = []

    # -- set-up and the end -----------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.driver.start()
        self.last_change = time.monotonic()
        if self.state == "active":
            self._camera_reaches_the_node(configured=True)
        self.original_parameters = self._parameter_values()

    def teardown(self) -> None:
        try:
            if self.driver.node is not None and not self.stopped:
                self._settle()
                self._stop(signal.SIGINT, 1)
        finally:
            for call in self.driver.calls:
                if call.latency_s is not None:
                    LATENCIES[call.kind].append(call.latency_s)
            self.driver.close()
            self.server.stop()
            shutil.rmtree(self.work, ignore_errors=True)

    def _settle(self) -> None:
        """Every call answered and every announced request ended, within their bounds."""
        self.driver.wait_answered(self.driver.calls, REPLY_BOUND_S)
        self._check_answers()
        deadline = time.monotonic() + RESULT_BOUND_S
        while time.monotonic() < deadline and self._open_requests():
            time.sleep(0.05)
        self.requests_end_in_time(now=time.monotonic() + RESULT_BOUND_S)

    def _open_requests(self) -> list[str]:
        return [i for i in self.driver.announced if self.driver.result_count(i) == 0]

    def _stop(self, signum: int, repeat: int) -> None:
        node = self.driver.node
        assert node is not None
        self.stopped = True
        code, took = node.stop(signum, timeout_s=EXIT_BOUND_S, repeat=repeat)
        log = node.output()
        assert code == 0, f"exit code {code} after {signal.Signals(signum).name} x{repeat}: {log[-4000:]}"
        assert took < EXIT_BOUND_S, f"took {took:.1f} s to exit"
        assert "Traceback" not in log, log[-4000:]

    # -- helpers ----------------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.state == "active" and not self.stopped

    def _parameter_values(self) -> dict[str, Any]:
        names = ["clip_seconds", "task", "max_in_flight", "lifecycle"]
        future = self.driver.get_parameters.call_async(self.driver.GetParameters.Request(names=names))
        call = self.driver.record("get_parameters", future, self.state)
        assert self.driver.wait_answered([call], REPLY_BOUND_S), "get_parameters: no answer"
        values = future.result().values
        return {
            n: (v.type, v.double_value, v.string_value, v.integer_value)
            for n, v in zip(names, values, strict=True)
        }

    def _camera_reaches_the_node(self, configured: bool) -> None:
        """After the node (re)subscribed: good frames until one is seen to arrive. Frames sent before (to the
        subscription that went at deactivate, or before discovery matched the new one) are lost; the node
        counts them by the publisher's sequence numbers once a later one arrives, except, after a configure
        (a fresh count), those before its first."""
        self.driver.wait_camera_matched(True)
        received = -1
        deadline = time.monotonic() + REPLY_BOUND_S
        while time.monotonic() < deadline:
            sent = time.monotonic()
            self.driver.publish_frames(FRAME_KINDS["good"], 1)
            self.published_since_configure += 1
            while time.monotonic() < sent + 1.0:
                values = self.driver.camera_status(newer_than=sent)
                if values is not None and received < 0:
                    received = int(values["frames_received"])  # the count before this frame
                if values is not None and int(values["frames_received"]) > max(received, 0):
                    if configured:
                        counted = int(values["frames_received"]) + int(values["frames_lost_before_callback"])
                        self.lost_unknowable = self.published_since_configure - counted
                    return
                time.sleep(0.02)
        raise AssertionError(f"no frame reached the node in {REPLY_BOUND_S} s: {self.driver.log_tail()}")

    def _change(self, after: str) -> None:
        self.state = after
        self.last_change = time.monotonic()

    def _send_transitions(self, ids: list[int]) -> None:
        from lifecycle_msgs.msg import Transition

        calls = [
            self.driver.record(
                "change_state",
                self.driver.change_state.call_async(
                    self.driver.ChangeState.Request(transition=Transition(id=tid))
                ),
                self.state,
                note=str(tid),
            )
            for tid in ids
        ]
        assert self.driver.wait_answered(calls, REPLY_BOUND_S), f"transitions {ids}: not all answered"
        was_active, configured = self.state == "active", False
        for tid, call in zip(ids, calls, strict=True):
            after = GOES_TO.get((self.state, tid))
            success = bool(call.reply().success)
            assert success == (after is not None), (
                f"transition {tid} from {self.state}: success {success}; sent {ids}; {self.driver.log_tail()}"
            )
            if after is not None:
                if after == "inactive" and self.state == "unconfigured":
                    self.published_since_configure, self.lost_unknowable, configured = 0, 0, True
                if after == "unconfigured":
                    self.cleanups += 1
                was_active = was_active and after == "active"
                self._change(after)
        if self.state == "active" and not was_active:
            self._camera_reaches_the_node(configured)

    # -- rules ------------------------------------------------------------------------------------------

    @precondition(lambda self: self.managed and not self.stopped)
    @rule(transition=TRANSITION_IDS)
    @counted
    def transition(self, transition: int) -> None:
        self._send_transitions([transition])

    @precondition(lambda self: self.managed and not self.stopped and self.state != "finalized")
    @rule(data=st.data())
    @counted
    def transition_that_exists(self, data: st.DataObject) -> None:
        """One of the transitions the current state has (a random id seldom is): sequences get to every
        state. A shutdown (the end of a managed node's life) is drawn less often than the others."""
        exist = sorted(tid for (state, tid) in GOES_TO if state == self.state)
        lasting = [tid for tid in exist if GOES_TO[(self.state, tid)] != "finalized"]
        self._send_transitions([data.draw(st.sampled_from(lasting) | st.sampled_from(exist))])

    @precondition(lambda self: self.managed and not self.stopped)
    @rule(transitions=st.lists(TRANSITION_IDS, min_size=2, max_size=6))
    @counted
    def transitions_back_to_back(self, transitions: list[int]) -> None:
        self._send_transitions(transitions)

    @precondition(lambda self: not self.stopped)
    @rule(calls=st.integers(1, 40), fresh=st.booleans())
    @counted
    def trigger_burst(self, calls: int, fresh: bool = False) -> None:
        """`fresh`: good frames just before, so that the requests reach the server (a clip of 0.5 s)."""
        if fresh:
            self._fresh_frames()
        self._triggers(calls)

    def _fresh_frames(self) -> None:
        if self.active:
            self.driver.publish_frames(FRAME_KINDS["good"], 3)
            self.published_since_configure += 3

    def _triggers(self, calls: int) -> None:
        for _ in range(calls):
            future = self.driver.trigger.call_async(self.driver.Trigger.Request())
            self.driver.record("trigger", future, self.state)

    @precondition(lambda self: not self.stopped)
    @rule(
        tasks=st.sampled_from([(), ("next_action",), ("next_action", "trajectory"), ("fly",)]),
        deadline_s=st.sampled_from([0.0, 0.02, 0.5, 3.0]),
        cancel_after_s=st.sampled_from([None, 0.0, 0.3]),
        fresh=st.booleans(),
    )
    @counted
    def goal(
        self, tasks: tuple[str, ...], deadline_s: float, cancel_after_s: float | None, fresh: bool = False
    ) -> None:
        if fresh:
            self._fresh_frames()
        self._goal(self.driver.Reason.Goal(tasks=list(tasks), deadline_s=deadline_s), cancel_after_s)

    @precondition(lambda self: not self.stopped)
    @rule(tasks=st.sampled_from([9, 1000, 100_000]))
    @counted
    def goal_of_many_tasks(self, tasks: int) -> None:
        self._goal(self.driver.Reason.Goal(tasks=["next_action"] * tasks), None)

    def _goal(self, goal: Any, cancel_after_s: float | None) -> None:
        sent = self.driver.record("goal", self.driver.action.send_goal_async(goal), self.state)
        assert self.driver.wait_answered([sent], REPLY_BOUND_S), "a goal got no answer"
        handle = sent.reply()
        if sent.state == self.state and sent.sent > self.last_change:
            assert handle.accepted == self.active, f"goal accepted {handle.accepted} while {self.state}"
        if not handle.accepted:
            return
        if cancel_after_s is not None:
            time.sleep(cancel_after_s)
            self.driver.record("cancel", handle.cancel_goal_async(), self.state)
        self.driver.record("get_result", handle.get_result_async(), self.state)

    @precondition(lambda self: not self.stopped)
    @rule(parameter=PARAMETER_SETS)
    @counted
    def set_parameter(self, parameter: tuple[str, str, Any]) -> None:
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue

        name, kind, value = parameter
        types = {"double": ParameterType.PARAMETER_DOUBLE, "string": ParameterType.PARAMETER_STRING}
        types |= {"integer": ParameterType.PARAMETER_INTEGER, "bool": ParameterType.PARAMETER_BOOL}
        msg = ParameterValue(type=types[kind])
        setattr(msg, f"{kind}_value", value)
        request = self.driver.SetParameters.Request(parameters=[Parameter(name=name, value=msg)])
        future = self.driver.set_parameters.call_async(request)
        call = self.driver.record("set_parameters", future, self.state)
        assert self.driver.wait_answered([call], REPLY_BOUND_S), f"set_parameters {parameter}: no answer"
        results = call.reply().results
        assert len(results) <= 1 and not any(r.successful for r in results), (parameter, results)
        assert self._parameter_values() == self.original_parameters  # read-only: nothing changed

    @precondition(lambda self: self.active)
    @rule(
        kind=st.sampled_from(sorted(FRAME_KINDS)), count=st.integers(1, 8), gap_s=st.sampled_from([0.0, 3.0])
    )
    @counted
    def frames(self, kind: str, count: int, gap_s: float) -> None:
        self.driver.publish_frames(FRAME_KINDS[kind], count, gap_s)
        self.published_since_configure += count
        self._diagnostics_agree()

    @precondition(lambda self: not self.stopped)
    @rule(behaviour=st.sampled_from(sorted(SERVER_BEHAVIOURS)))
    @counted
    def server_behaves(self, behaviour: str) -> None:
        self.server.default = SERVER_BEHAVIOURS[behaviour]

    @precondition(lambda self: not self.stopped)
    @rule()
    @counted
    def requests_end(self) -> None:
        """Until every request announced so far has its result: each within its bound, whatever the server
        did."""
        self.driver.wait_answered(self.driver.calls, REPLY_BOUND_S)
        self._check_answers()
        deadline = time.monotonic() + RESULT_BOUND_S
        while time.monotonic() < deadline and self._open_requests():
            time.sleep(0.02)
        open_requests = [
            i for i in self._open_requests() if self.driver.announced[i].cleanup_epoch == self.cleanups
        ]
        assert not open_requests, f"no result in {RESULT_BOUND_S} s for {open_requests[:5]}"

    @precondition(lambda self: not self.stopped)
    @rule(seconds=st.sampled_from([0.2, 1.0, 3.0]))
    @counted
    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    @precondition(lambda self: not self.stopped)
    @rule(
        signum=st.sampled_from([signal.SIGINT, signal.SIGTERM]),
        repeat=st.sampled_from([1, 30]),
        burst=st.sampled_from([0, 20]),
    )
    @counted
    def shutdown_signal(self, signum: int, repeat: int, burst: int) -> None:
        """The end of the sequence: a burst of triggers (none, or 20 at once) queued at the node when the
        signal(s) come. What was in flight ends with its results; every call queued is answered. (The signal
        goes once the node answered the first of the burst: a call still in transit when a process exits
        gets no answer from any process, and a client needs its timeout for that.)"""
        first = len(self.driver.calls)
        self._triggers(burst)
        burst_calls = self.driver.calls[first:]
        wait_until(
            lambda: not burst_calls or any(c.answered for c in burst_calls),
            REPLY_BOUND_S,
            "the first answer of the burst",
        )
        self._stop(signum, repeat)
        # Answered before the node exited; this process's executor may take a moment to read the last ones.
        self.driver.wait_answered(self.driver.calls, REPLY_BOUND_S)
        self._check_answers()
        unanswered = [c for c in self.driver.calls if not c.answered]
        assert not unanswered, f"{len(unanswered)} calls without an answer at exit: {unanswered[:3]}"
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and self._open_requests():
            time.sleep(0.05)
        self.requests_end_in_time(now=time.monotonic() + RESULT_BOUND_S)

    @precondition(lambda self: self.stopped)
    @rule()
    def after_the_end(self) -> None:
        """Nothing is sent to a node told to stop (hypothesis needs a rule it may still run)."""

    # -- invariants -------------------------------------------------------------------------------------

    @invariant()
    def alive_until_told_to_stop(self) -> None:
        if self.driver.node is not None and not self.stopped:
            assert self.driver.alive, f"the node died: {self.driver.log_tail()}"

    @invariant()
    def calls_answered_in_time(self) -> None:
        if self.stopped:
            return
        overdue = self.driver.overdue_calls(REPLY_BOUND_S)
        assert not overdue, f"{len(overdue)} calls unanswered after {REPLY_BOUND_S} s: {overdue[:3]}"
        self._check_answers()

    @invariant()
    def requests_end_in_time(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for request_id, announced in self.driver.announced.items():
            count = self.driver.result_count(request_id)
            assert count <= 1, f"{count} results for {request_id}"
            released = self.cleanups > announced.cleanup_epoch  # cleanup released ~/result meanwhile
            if now - announced.when > RESULT_BOUND_S and not released:
                assert count == 1, f"no result for {request_id} after {RESULT_BOUND_S} s"

    @invariant()
    def results_agree_with_themselves(self) -> None:
        assert not self.driver.inconsistent, self.driver.inconsistent[:3]

    @invariant()
    def state_is_what_the_transitions_say(self) -> None:
        if self.managed and self.driver.node is not None and not self.stopped:
            assert self.driver.lifecycle_state() == self.state

    @invariant()
    def memory_within_bound(self) -> None:
        if self.driver.node is not None and self.driver.alive:
            rss = self.driver.node.rss_mb()
            PEAK_RSS_MB[0] = max(PEAK_RSS_MB[0], rss)
            assert rss < MEMORY_BOUND_MB, f"RSS {rss:.0f} MB"

    def check_every_invariant(self) -> None:
        """What hypothesis checks after each step, for a replayed sequence (a named regression test)."""
        self.alive_until_told_to_stop()
        self.calls_answered_in_time()
        self.results_agree_with_themselves()
        self.requests_end_in_time()
        self.state_is_what_the_transitions_say()
        self.memory_within_bound()

    # -- checks -----------------------------------------------------------------------------------------

    def _check_answers(self) -> None:
        """The answers that came since the last look: their form, and the requests they announce."""
        calls = self.driver.calls
        while self.checked_calls < len(calls) and calls[self.checked_calls].answered:
            self._check_answer(calls[self.checked_calls])
            self.checked_calls += 1

    def _check_answer(self, call: Call) -> None:
        reply = call.reply()
        assert reply is not None, f"{call.kind}: an answer of None"
        steady = call.state == self.state and call.sent > self.last_change and not self.stopped
        if call.kind == "trigger":
            message = str(reply.message)
            ids = trigger_reply_ids(message)
            if steady and call.state != "active":
                expected = f"{TRIGGER_REFUSED}the node is not active (lifecycle state {call.state})"
                assert message.startswith(expected) and not reply.success, message
            if steady and call.state == "active":
                assert ids, f"a trigger while active made no request: {message}"
            assert reply.success == (bool(ids) and " rejected:" not in message), message
            twice = self.driver.announce(ids, self.cleanups)
            assert not twice, f"request ids announced twice: {twice}"
        elif call.kind == "get_result":
            results = list(reply.result.results)
            assert results, f"a goal's result without results (status {reply.status})"
            self.driver.announce([r.request_id for r in results], self.cleanups)

    def _diagnostics_agree(self) -> None:
        """Frames published while the node subscribed (reliable QoS) all reached its callback or were counted
        lost before it; the node's counts by outcome add up to what it received."""
        since = time.monotonic()
        deadline = since + 20.0
        values: dict[str, str] | None = None
        while time.monotonic() < deadline:
            values = self.driver.camera_status(newer_than=since)
            if values is not None:
                counted = int(values["frames_received"]) + int(values["frames_lost_before_callback"])
                if counted == self.published_since_configure - self.lost_unknowable:
                    break
            time.sleep(0.05)
        assert values is not None, "no /diagnostics while active"
        received = int(values["frames_received"])
        counted = received + int(values["frames_lost_before_callback"])
        expected = self.published_since_configure - self.lost_unknowable
        assert counted == expected, (
            f"published {expected} (since the first arrival), counted {counted}: {values}"
        )
        outcomes = int(values["frames_buffered"]) + int(values["frames_skipped_by_sampling"])
        outcomes += int(values["frames_dropped"])
        assert outcomes == received, f"received {received}, outcomes {outcomes}: {values}"


class ManagedNodeSequences(NodeSequences):
    managed = True


class PlainNodeSequences(NodeSequences):
    managed = False
