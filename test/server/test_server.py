"""cosmos-reasoner-server: the flag table and the command each vLLM release gets, version detection, settings,
pre-start checks, and supervision of a stand-in server process (readiness, log forwarding, restart with
backoff, no restart after a usage error or a repeated start failure, stopping the whole process group)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from support import vllm_tier
from support.fake_vllm import FAKE_VLLM, fake_dist
from support.in_process_supervisor import InProcessSupervisor, in_a_long_backoff
from support.processes import free_port
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    records,
    running_reaper,
    wait_for,
    write_config,
)

from cosmos_reasoner_ros.server import errors, settings, watchdog
from cosmos_reasoner_ros.server.settings import ServerSettings


@pytest.mark.slow
def test_a_sigkilled_supervisor_takes_the_server_group_and_its_ready_file_with_it(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: a SIGKILLed supervisor (ros2 launch escalating, the OOM killer, the demo's killpg) left vLLM
    and its ready file behind, and the next supervisor on the port exited 4."""
    port = free_port()
    proc = start_supervisor(write_config(tmp_path, fake_vllm, port, stop_grace_s=2.0), fake_env(tmp_path))
    proc.read_until("READY ")
    server = records(tmp_path / "record.jsonl")[0]
    assert (tmp_path / "ready.json").exists()
    proc.proc.kill()  # SIGKILL: no handler, no finally
    proc.finish()
    wait_for(lambda: not alive(server["pid"]) and not alive(server["worker"]))
    wait_for(lambda: not (tmp_path / "ready.json").exists())
    # The next supervisor on the same port starts at once.
    again = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    assert again.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert again.stop() == errors.EXIT_OK


def test_structured_tasks_come_from_the_catalog_and_the_tasks_file(tmp_path: Path) -> None:
    from cosmos_reasoner_ros.server.grammar_check import structured_tasks

    shipped = structured_tasks(ServerSettings())
    assert set(shipped) == {
        "trajectory",
        "grounding_2d",
        "region_captions",
        "temporal_localization",
        "temporal_localization_mmss",
        "timestamp_query",
        "plausibility",
        "drive_path",
    }
    assert shipped["trajectory"].reasoning and not shipped["grounding_2d"].reasoning
    user = tmp_path / "tasks.yaml"
    schema = {"type": "object", "properties": {"t": {"type": "string", "pattern": "^x{0,300}$"}}}
    user.write_text(yaml.safe_dump({"tasks": {"mine": {"template": "x", "json_schema": schema}}}))
    with pytest.raises(
        errors.ConfigError, match=r"tasks_file: task mine: json_schema.*repeat \{0,300\}.*#863"
    ):
        structured_tasks(ServerSettings(tasks_file=str(user)))
    chosen = structured_tasks(ServerSettings(structured_tasks=("grounding_2d",)))
    assert list(chosen) == ["grounding_2d"]
    with pytest.raises(errors.ConfigError, match="structured_tasks: caption: not a task with a json_schema"):
        structured_tasks(ServerSettings(structured_tasks=("caption",)))
    with pytest.raises(errors.ConfigError, match="does not exist"):
        structured_tasks(ServerSettings(tasks_file=str(tmp_path / "missing.yaml")))


@pytest.mark.slow
@pytest.mark.grammar
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_a_users_schema_vllms_backend_refuses_stops_the_start(
    tmp_path: Path, start_supervisor: StartSupervisor
) -> None:
    """The stand-in server in the vLLM environment's Python: the supervisor compiles the structured tasks
    with that environment's xgrammar (0.2.8) and vLLM's own front-end check before READY. A schema xgrammar
    does not support stops the start with exit code 2 naming the task; with backend auto vLLM hands it to
    llguidance."""
    fake = tmp_path / "fake-vllm"
    fake.write_text(f"#!{vllm_tier.vllm_python()} -S\n{FAKE_VLLM}")
    fake.chmod(0o755)
    (tmp_path / "config.json").write_text("{}")  # the model directory (tmp_path) is a checkpoint
    user = tmp_path / "tasks.yaml"
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}, "required": ["n"]}
    user.write_text(yaml.safe_dump({"tasks": {"counting": {"template": "How many?", "json_schema": schema}}}))
    xgrammar = {"backend": "xgrammar", "disable_any_whitespace": True}  # the default is guidance
    config = write_config(
        tmp_path, fake, free_port(), tasks_file=str(user), structured_outputs=xgrammar, start_timeout_s=120.0
    )
    proc = start_supervisor(config, fake_env(tmp_path))
    assert proc.finish(timeout_s=180) == errors.EXIT_CONFIG
    assert "vLLM 0.26.0 cannot use the structured output of these tasks" in proc.text
    assert "task counting: its json_schema refused by vLLM's front end with xgrammar 0.2.8" in proc.text
    assert "READY" not in proc.text and "task trajectory" not in proc.text
    config = write_config(
        tmp_path,
        fake,
        free_port(),
        tasks_file=str(user),
        structured_outputs={"backend": "auto"},
        start_timeout_s=120.0,
    )
    proc = start_supervisor(config, fake_env(tmp_path))
    proc.read_until("READY ", timeout_s=180)
    assert (
        "grammar check: the json_schema of trajectory" in proc.text and "counting compile with" in proc.text
    )
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
@pytest.mark.grammar
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_a_grammar_that_accepts_what_its_schema_refuses_is_reported(
    tmp_path: Path, start_supervisor: StartSupervisor
) -> None:
    """The start-up check matches each compiled grammar against answers generated from its schema and their
    mutations (grammar_fidelity.py), as vLLM 0.26.0 compiles it (xgrammar 0.2.8 of the vLLM environment, no
    free whitespace, ", " and ": "): a user's timestamp_query with the clock pattern as it shipped before is
    named with an example answer its schema refuses, and xgrammar's strings that take bytes not UTF-8; the
    start goes on. The shipped schemas hold with the shipped backend (guidance)."""
    fake = tmp_path / "fake-vllm"
    fake.write_text(f"#!{vllm_tier.vllm_python()} -S\n{FAKE_VLLM}")
    fake.chmod(0o755)
    (tmp_path / "config.json").write_text("{}")
    clock = "^([0-9]{1,2}:)?[0-9]{1,2}:[0-9]{1,2}([.][0-9]{1,3})?$"
    time_of_day = {
        "anyOf": [{"type": "number", "minimum": 0, "maximum": 86400}, {"type": "string", "pattern": clock}]
    }
    schema = {
        "type": "object",
        "properties": {"start": time_of_day, "end": time_of_day},
        "required": ["start", "end"],
        "additionalProperties": False,
    }
    user = tmp_path / "tasks.yaml"
    user.write_text(yaml.safe_dump({"tasks": {"timestamp_query": {"json_schema": schema}}}))
    xgrammar = {"backend": "xgrammar", "disable_any_whitespace": True}
    guidance = settings.ServerSettings().structured_outputs  # the shipped default
    for tasks_file, structured in ((str(user), xgrammar), ("", guidance)):
        config = write_config(
            tmp_path,
            fake,
            free_port(),
            tasks_file=tasks_file,
            structured_outputs=structured,
            start_timeout_s=120.0,
        )
        proc = start_supervisor(config, fake_env(tmp_path))
        proc.read_until("READY ", timeout_s=180)
        assert "grammar check: the json_schema of trajectory" in proc.text
        warned = [line for line in proc.text.splitlines() if "grammar check: WARNING" in line]
        if tasks_file:
            assert len(warned) == 2, warned
            clock, utf8 = sorted(warned, key=lambda line: "timestamp_query: xgrammar" not in line)
            assert (
                "task timestamp_query: xgrammar 0.2.8 (none whitespace) accepts answers its json_schema "
                "refuses" in clock
            )
            found = re.search(r"""e\.g\. '\{".*matches none of anyOf \(.* does not match""", clock)
            assert found, clock
            assert "as [0-9][0-9]?" in clock
            # Every xgrammar lets a surrogate's bytes into a free-text string: named once, with its tasks.
            assert (
                "xgrammar 0.2.8 lets the strings of trajectory, grounding_2d, temporal_localization" in utf8
            )
            assert "not UTF-8" in utf8 and "backend guidance refuses them" in utf8
        else:
            assert warned == [], warned
            assert "compile with llguidance" in proc.text
            assert "grammar check: the grammars accept the" in proc.text
        assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_the_reaper_runs_before_the_first_server_starts(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the reaper process was started after vLLM's, on the first guard(): a SIGKILL in between
    (a fork and exec of Python) left that vLLM unguarded."""
    reapers: list[int | None] = []
    popen = subprocess.Popen

    class Recording(popen):  # type: ignore[misc,valid-type]
        def __init__(self, args, *rest, **kwargs) -> None:  # type: ignore[no-untyped-def]
            if args and str(args[0]) == str(fake_vllm):
                reapers.append(run.supervisor._reaper.pid)  # running when vLLM is started
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    with InProcessSupervisor(tmp_path, fake_vllm) as run:
        run.wait_line("READY ")
    assert reapers and reapers[0] is not None


@pytest.mark.slow
def test_a_reaper_killed_during_a_long_start_is_replaced_and_does_its_work(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: a dead reaper was noticed only once the server was ready: during a start (up to
    start_timeout_s, 30 min by default) a reaper killed by the OOM killer left vLLM unguarded."""
    config = write_config(tmp_path, fake_vllm, free_port(), start_timeout_s=600.0)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    server = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    first = wait_for(lambda: running_reaper(proc.proc.pid))
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: running_reaper(proc.proc.pid) not in (None, first))
    assert not any(line.startswith("READY") for line in proc.lines)  # still starting
    proc.proc.kill()
    proc.finish()
    wait_for(lambda: not alive(server["pid"]) and not alive(server["worker"]))


def test_a_reaper_started_again_guards_the_group_before_the_supervisor_writes_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI: a supervisor killed just after it restarted a dead reaper, before it wrote the group to the new
    reaper's pipe, left vLLM running. The group now goes on the new reaper's command line: here no line is
    ever written to it, and the end of its pipe still stops the group and removes the ready file."""
    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"supervisor": "1:2"}))
    with subprocess.Popen(
        [sys.executable, "-S", "-c", "import time; time.sleep(600)"], start_new_session=True
    ) as group:
        reaper = watchdog.Reaper(2.0, "1:2")
        try:
            reaper.guard(group.pid, str(ready))
            first = reaper.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            wait_for(lambda: not alive(first))
            monkeypatch.setattr(watchdog.Reaper, "_send", staticmethod(lambda _proc, _line: None))
            reaper.check()  # restarted; nothing reaches its pipe from now on
            assert reaper.pid not in (None, first)
            reaper.close()  # the pipe ends, as when the supervisor dies
            assert group.wait(timeout=30) is not None
            assert not ready.exists()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group.pid, signal.SIGKILL)


def test_a_reaper_killed_between_restarts_is_replaced_within_seconds(tmp_path: Path, fake_vllm: Path) -> None:
    """Before: the reaper was looked at only while a server started or was watched; one killed during the
    checks and warm-up before READY or the back-off between restarts (here 600 s) stayed dead until then."""
    with in_a_long_backoff(tmp_path, fake_vllm) as run:
        first = run.supervisor._reaper.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: run.supervisor._reaper.pid not in (None, first), 30.0)
        run.stop()
    assert run.error is None


def _has_mark(pid: int, mark: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return True  # gone, or not readable yet: not known to be unmarked
    return f"{watchdog.OWNER_ENV}={mark}".encode() in environ


def test_a_server_started_before_the_reaper_heard_of_it_is_found_by_its_mark() -> None:
    """A supervisor SIGKILLed between a server's start and the line naming its group to the reaper: the
    server's processes carry the supervisor's mark (OWNER_ENV), and the reaper stops every group made of
    marked processes alone. A group of another supervisor's mark, or with an unmarked process in it, is
    left."""
    mark = f"{os.getpid()}:{time.monotonic_ns()}"
    # The leader starts one child: with the leader's environment, or with the one given as NAME=value args.
    leader_code = (
        "import subprocess, sys, time\n"
        "env = dict(a.split('=', 1) for a in sys.argv[1:]) if sys.argv[1:] else None\n"
        "subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(600)'], env=env)\n"
        "time.sleep(600)"
    )

    def group(owner: str, child_env: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, watchdog.OWNER_ENV: owner} if owner else dict(os.environ)
        return subprocess.Popen(
            [sys.executable, "-S", "-c", leader_code, *child_env], env=env, start_new_session=True
        )

    ours = group(mark, [])  # the child inherits the mark
    other = group(mark + "0", [])  # another supervisor's
    mixed = group(mark, ["PATH=/usr/bin"])  # its child has an environment without the mark
    groups = (ours, other, mixed)
    try:
        wait_for(lambda: all(len(watchdog.group_members(g.pid)) == 2 for g in groups))
        # A child is in its group from its fork, with its parent's environment until its exec: wait for the
        # unmarked child's own environment, or the reaper may judge the group by that copy (found in CI: the
        # mixed group was stopped, -15).
        wait_for(lambda: any(not _has_mark(pid, mark) for pid in watchdog.group_members(mixed.pid)))
        reaper = watchdog.Reaper(2.0, mark)
        reaper.start()
        reaper.close()  # the pipe ends with no group ever named: the supervisor died at once
        assert ours.wait(timeout=30) is not None
        wait_for(lambda: not watchdog.group_members(ours.pid))
        assert other.poll() is None and mixed.poll() is None
        assert len(watchdog.group_members(other.pid)) == 2 and len(watchdog.group_members(mixed.pid)) == 2
    finally:
        for g in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(g.pid, signal.SIGKILL)
            g.wait()


def test_the_reaper_removes_only_the_ready_file_of_the_very_supervisor_that_died(tmp_path: Path) -> None:
    """Before: the reaper compared the pid alone: a new supervisor that got the dead one's pid lost its ready
    file to the old supervisor's reaper."""
    from cosmos_reasoner_ros.server import reaper

    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"supervisor_pid": 4242, "supervisor": "4242:777"}))  # the new supervisor's
    reaper.remove_ready_file(str(ready), "4242:555")  # the dead one: same pid, another start time
    assert ready.exists()
    reaper.remove_ready_file(str(ready), "4242:777")
    assert not ready.exists()


# A grammar backend for the probe (grammar_probe.py) on PYTHONPATH, ahead of any installed one: "slow" never
# finishes importing, "refusing" fails every compilation.
FAKE_XGRAMMAR = {
    "slow": "import time\ntime.sleep(600)\n",
    "refusing": textwrap.dedent(
        """
        class VocabType:
            RAW = 0
        class TokenizerInfo:
            def __init__(self, *args, **kwargs):
                pass
        class Grammar:
            @staticmethod
            def from_json_schema(schema):
                return None
        class GrammarCompiler:
            def __init__(self, *args, **kwargs):
                pass
            def compile_json_schema(self, schema, any_whitespace=True):
                raise RuntimeError("the fake backend compiles nothing")
        """
    ),
}


def fake_xgrammar(tmp_path: Path, kind: str) -> Path:
    site = tmp_path / f"xgrammar-{kind}"
    site.mkdir()
    (site / "xgrammar.py").write_text(FAKE_XGRAMMAR[kind])
    fake_dist(site, "xgrammar", "0.0.1")
    return site


def grammar_probe_of(supervisor_pid: int) -> int | None:
    """The grammar probe the supervisor started (from a thread of its: any of its tasks' children)."""
    for children in Path(f"/proc/{supervisor_pid}/task").glob("*/children"):
        for child in map(int, children.read_text().split()):
            with contextlib.suppress(OSError):
                if b"grammar_probe.py" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return child
    return None


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_the_grammar_probe_never_outlives_its_supervisor(
    tmp_path: Path, fake_vllm: Path, how: signal.Signals, start_supervisor: StartSupervisor
) -> None:
    """Before: the probe ran on a daemon thread through subprocess.run (up to 300 s): a SIGTERM or SIGKILL of
    the supervisor during the start left it running, a Python that imports vLLM, several hundred MB."""
    site = fake_xgrammar(tmp_path, "slow")
    config = write_config(
        tmp_path, fake_vllm, free_port(), start_timeout_s=600.0, env={"PYTHONPATH": str(site)}
    )
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    probe = wait_for(lambda: grammar_probe_of(proc.proc.pid))
    server = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    proc.proc.send_signal(how)
    proc.finish()
    wait_for(lambda: not alive(probe))
    wait_for(lambda: not alive(server["pid"]))


@pytest.mark.slow
def test_a_schema_the_backend_cannot_compile_stops_the_start_before_the_server_is_healthy(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: the grammar check's verdict was collected only once /health answered: its exit 2 came after
    the model had loaded (minutes on a GPU; here: never, the server never becomes healthy)."""
    site = fake_xgrammar(tmp_path, "refusing")
    config = write_config(
        tmp_path, fake_vllm, free_port(), start_timeout_s=600.0, env={"PYTHONPATH": str(site)}
    )
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    assert proc.finish() == errors.EXIT_CONFIG, proc.text
    assert "vLLM 0.26.0 cannot use the structured output of these tasks" in proc.text
    assert "the fake backend compiles nothing" in proc.text and "READY" not in proc.text
    server = records(tmp_path / "record.jsonl")[0]
    assert not alive(server["pid"]) and not alive(server["worker"])
