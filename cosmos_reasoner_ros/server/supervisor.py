"""Starting, watching, restarting and stopping one `vllm serve` process group.

The server runs in its own process group with its log forwarded line by line; readiness (/health 200, then
the verdict of the grammar check that ran beside the start, the chat template's thinking switch where a
reasoning parser needs it, and the warm-up: grammar_check.py, template_check.py, warmup.py) is printed as
`READY <url>` and optionally written to a ready file; a server that dies is restarted with bounded
exponential backoff, except when restarting cannot help: a command line vLLM refuses (argparse's exit code
2), or two exits in a row before /health with the same output (a death by a signal is never such a
failure). SIGINT/SIGTERM stop the whole group (SIGTERM, then SIGKILL after a grace period). Fatal outcomes
are raised as errors.py types carrying the server's message.

As a watchdog (watchdog.py): the group dies with the supervisor however it ends (the reaper process), a server
or ready file left by a dead supervisor is recognised at start, and a ready server silent on /health for
longer than health_grace_s while making no progress (stopped, or using no CPU) is killed and restarted
(counted in the restart budget); one silent but using CPU is busy, killed only after health_busy_grace_s.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from cosmos_reasoner_ros.schemas.structured_output import TaskGrammar

from . import container, watchdog
from .announce import Announcer
from .command import ServerCommand, build_command, redacted_argv
from .detect import DetectedVersion, environment_python, resolve_executable
from .errors import (
    EXIT_OK,
    GaveUp,
    NotReady,
    ServerStartFailed,
    ServerUsageError,
)
from .exits import exit_status, failure_message, failure_signature, signal_name, usage_error
from .grammar_check import GrammarCheck, structured_tasks
from .http import health_ok
from .serving_watch import ServerWatch
from .settings import ServerSettings
from .start_checks import detect, port_in_use, prepare
from .template_check import check_thinking_switch
from .warmup import Warmup

_TAIL_LINES = 40  # output lines kept per start: the server's message when it fails
REAPER_CHECK_S = 1.0  # how often the reaper is looked at (started again when found dead)


class Supervisor:
    """Starts, watches, restarts and stops one vLLM server; `run()` blocks until stop() or a fatal failure."""

    def __init__(
        self,
        settings: ServerSettings,
        out: TextIO | None = None,
        on_ready: Callable[[str, int], None] | None = None,
        version: DetectedVersion | None = None,
    ) -> None:
        self.settings = settings
        self.version = version
        self.command: ServerCommand | None = None
        self._announce = Announcer(out or sys.stdout, settings.log_prefix, settings.ready_file)
        self._on_ready = on_ready
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self.starts = 0
        self.restarts = 0
        self.last_restart_reason = ""
        self._stop_reason = ""
        self._headless_frozen = ""  # why a headless server was killed while it was watched
        self._owner = watchdog.owner_mark()
        self._reaper = watchdog.Reaper(settings.stop_grace_s, self._owner)  # started in run()
        self._grammar_check: GrammarCheck | None = None
        self._structured: dict[str, TaskGrammar] = {}
        self._container = container.Runtime(settings) if settings.container else None

    def say(self, message: str) -> None:
        self._announce.say(message)

    def stop(self, reason: str = "") -> None:
        """Ask run() to stop the server and return. Never from a signal handler: setting the Event takes a
        lock, which the interrupted code (or a handler interrupted by another signal) may hold."""
        self._stop_reason = reason
        self._stop.set()

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and exit_status(proc) is None else None

    def run(self) -> int:
        """Serve until stop() (returns EXIT_OK); raises a SupervisorError when the server cannot be served."""
        s = self.settings
        if s.mode == "external":
            return self._wait_external()
        command, program, version = self._plan()
        # Before the first server: from its start on, guarding it is only a write to the reaper's pipe. A
        # supervisor SIGKILLed between a server's start and that write leaves a server the reaper still finds,
        # by the mark in its environment.
        self._reaper.start()
        # A reaper found dead (the OOM killer) is started again within a second in every phase: the start,
        # the checks and warm-up before READY (minutes on a GPU), serving, the back-off between restarts.
        keeping = threading.Event()
        keeper = threading.Thread(
            target=self._keep_reaper, args=(keeping,), name="reaper-keeper", daemon=True
        )
        keeper.start()
        failures = 0
        last_signature = ""
        try:
            # The structured tasks' schemas compiled by vLLM's own backend, beside vLLM's start: a failure
            # stops the start as soon as it is known; READY waits for the verdict.
            self._grammar_check = GrammarCheck(
                s,
                self._structured,
                None if self._container else environment_python(program),  # vLLM's Python is in the image
                version,
                command.environment(),
            ).start()
            while not self._stop.is_set():
                started = time.monotonic()
                proc = self._start(command)
                ready = self._wait_ready(proc)
                frozen = self._headless_frozen
                if ready:
                    last_signature = ""
                    frozen = self._watch(proc)
                if self._stop.is_set():
                    break
                code = exit_status(proc)
                self._clear_ready()
                if code is not None:
                    self._end_group(proc)
                if not ready and code is None:
                    self._terminate(proc)
                    raise NotReady(
                        f"the server was not healthy within start_timeout_s={s.start_timeout_s:.0f} s"
                    )
                lines = self._output_of(proc)
                if not ready:
                    self._fail_fast(code, lines, last_signature)
                    # A death by a signal leaves no signature: the next failure is compared with nothing.
                    last_signature = failure_signature(code, lines) if code is None or code >= 0 else ""
                if time.monotonic() - started >= s.restart_reset_s:
                    failures = 0
                failures += 1
                if self._restart_after(failures, code, ready, frozen, lines):
                    break
        finally:
            if self._stop.is_set():
                self.say(f"stopping{' on ' + self._stop_reason if self._stop_reason else ''}")
            if self._grammar_check is not None:
                self._grammar_check.close()  # its probe never outlives the supervisor
            if self._proc is not None:
                self._terminate(self._proc)
            self._clear_ready()
            keeping.set()
            keeper.join()
            self._reaper.clear()
            self._reaper.close()
        return EXIT_OK

    def _plan(self) -> tuple[ServerCommand, Path, str]:
        """The checks before a start, the vLLM version and the command; with the program that runs it and
        the version."""
        s = self.settings
        prepare(s, self.say)
        self.version = version = self.version or detect(s)
        if self._container is not None:
            command = container.server_command(s, version, container.owner_value(self._owner))
        else:
            command = build_command(s, version)
        self.command = command
        self.say(version.describe())
        for note in command.notes:
            self.say(f"note: {note}")
        self._structured = structured_tasks(s)
        program = resolve_executable(command.argv[0], command.environment().get("PATH"))
        return command, program, version.version

    def _restart_after(
        self, failures: int, code: int | None, ready: bool, frozen: str, lines: list[str]
    ) -> bool:
        """The server ended: GaveUp after max_restarts in a row, else the back-off before the next start (and
        the port freed). True when a stop came meanwhile."""
        s = self.settings
        killed = f" ({signal_name(code)})" if code is not None and code < 0 else ""
        reason = frozen or f"exit code {code}{killed}"
        if ready and not frozen and code is not None and code > 0:
            # Why a server that served ended (vLLM: "Engine core process EngineCore_DP1 died
            # unexpectedly", its launcher ending every process when one engine dies).
            reason += f" ({failure_message(lines)})"
        if failures > s.max_restarts:
            raise GaveUp(
                f"the server ended {failures} times in a row, the last time: it {frozen}: giving up"
                if frozen
                else f"the server exited with code {code}{killed} {failures} times in a row: "
                f"giving up (last: {failure_message(lines)})"
            )
        self.restarts += 1
        self.last_restart_reason = reason
        delay = min(s.restart_backoff_s * 2 ** min(failures - 1, 60), s.restart_backoff_max_s)
        self.say(f"server {reason}; restart {failures}/{s.max_restarts} after {delay:.1f} s")
        if self._stop.wait(delay):
            return True
        if not s.headless and port_in_use(s.host, s.port):
            self.say(f"port {s.port} is still taken after the server exited; waiting for it")
            watchdog.wait_port_free(
                lambda: not self._stop.is_set() and port_in_use(s.host, s.port), s.stop_grace_s
            )
        return False

    def _keep_reaper(self, done: threading.Event) -> None:
        while not done.wait(REAPER_CHECK_S):
            self._reaper.check()

    def _fail_fast(self, code: int | None, lines: list[str], last_signature: str) -> None:
        """Raise when restarting cannot help: a refused command line, or the same failure as last time. A
        death by a signal (an outside SIGKILL, the OOM killer) is neither: the server did not fail itself."""
        if code is not None and code < 0:
            return
        version = self.version.version if self.version else "?"
        usage = usage_error(code, lines)
        if usage is not None:
            raise ServerUsageError(
                f"vLLM {version} refused its command line (exit code {code}), not restarting it: {usage}"
            )
        if last_signature and failure_signature(code, lines) == last_signature:
            raise ServerStartFailed(
                f"the server exited twice before answering /health, with the same output (exit code {code}), "
                f"not restarting it: {failure_message(lines)}"
            )

    def _start(self, command: ServerCommand) -> subprocess.Popen[bytes]:
        self.say("starting: " + shlex.join(redacted_argv(command.argv)))
        self._tail.clear()
        env = command.environment()
        env[watchdog.OWNER_ENV] = self._owner  # whose it is, should it outlive this supervisor
        proc = subprocess.Popen(
            list(command.argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopping it also stops its workers
        )
        # Should this supervisor die from now on, however, the reaper stops the group.
        self._reaper.guard(proc.pid, self.settings.ready_file)
        with self._lock:
            self._proc = proc
        self.starts += 1
        self._reader = threading.Thread(target=self._forward, args=(proc,), name="vllm-log", daemon=True)
        self._reader.start()
        return proc

    def _forward(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self._tail.append(line)
            self._announce.forward(line)
        proc.stdout.close()

    def _output_of(self, proc: subprocess.Popen[bytes]) -> list[str]:
        """The last lines the (exited) server wrote, once its log has been read to the end."""
        reader = self._reader
        if reader is not None:
            reader.join(timeout=5.0)
        return list(self._tail)

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> bool:
        """True once /health answers 200; False when the process exits, the time is up or stop() is called.
        A headless host (multi-node data parallelism) has no API server: it is watched until it exits, or is
        killed when a process of its group stays stopped for longer than health_grace_s (the reason in
        self._headless_frozen)."""
        s = self.settings
        stopped = watchdog.StoppedMembers(s.health_grace_s) if s.headless else None
        self._headless_frozen = ""
        if s.headless:
            self.say("headless: no API server on this host, watching its processes only")
        deadline = time.monotonic() + s.start_timeout_s
        started = time.monotonic()
        while (s.headless or time.monotonic() < deadline) and not self._stop.is_set():
            if exit_status(proc) is not None:
                return False
            self._grammar_verdict_if_done()  # a schema vLLM cannot compile stops the start at once
            if stopped is not None:
                stopped.observe(time.monotonic(), watchdog.group_activity(proc.pid))
                why = stopped.frozen(time.monotonic())
                if why:
                    self._headless_frozen = self._kill_frozen(proc, why)
                    return False
            if not s.headless and health_ok(s.url):
                self._before_ready()
                if self._stop.is_set() or exit_status(proc) is not None:
                    return False  # stopped, or died, while being checked and warmed up: no READY
                if health_ok(s.url):
                    self._ready(proc.pid, time.monotonic() - started)
                    return True
                # Frozen during the checks and the warm-up (every request unanswered): not READY; the start
                # goes on (within start_timeout_s) until the server answers again.
                self.say(
                    "the server stopped answering /health during the checks before READY; waiting for it"
                )
            self._stop.wait(s.health_period_s)
        return False

    def _grammar_verdict_if_done(self) -> None:
        """The grammar check's notes once it has finished; its ConfigError (raised) ends the start now, not
        after minutes of model loading."""
        check = self._grammar_check
        if check is not None and check.done:
            self._grammar_check = None
            for note in check.result(self._stop):
                self.say(note)

    def _before_ready(self) -> None:
        """What must hold before READY: the grammar check's verdict (once), a chat template that can turn
        thinking off where a reasoning parser needs it (a ConfigError stops the server)."""
        check, self._grammar_check = self._grammar_check, None
        if check is not None:
            for note in check.result(self._stop):
                self.say(note)
        version = self.version.version if self.version else "?"
        for note in check_thinking_switch(self.settings, version, self._structured, self._stop):
            self.say(note)
        if self.settings.warmup and self.version is not None and self.command is not None:
            # Kernels and grammars compile now, not at a robot's first question (H200: 1.48 s, later 0.2 s).
            trust = "--trust-request-mm-kwargs"
            media_kwargs = trust not in self.version.row.info.flags or trust in self.command.argv
            Warmup(
                self.settings,
                version,
                self._structured,
                media_kwargs,
                self.say,
                self.settings.warmup_timeout_s,
                self._stop,
            ).run()

    def _watch(self, proc: subprocess.Popen[bytes]) -> str:
        """Until the server exits, freezes or stop(). Returns why a live server was killed, or '' when it
        exited by itself or on stop(). Frozen: a process of its group stopped for longer than health_grace_s;
        silent on /health for longer than that and making no progress; an engine core that makes no progress
        while it has work (engines.py); or busy (using CPU) that way for longer than health_busy_grace_s."""
        s = self.settings
        watch = ServerWatch(s, proc.pid, self.say, self._stop)
        while not self._stop.wait(s.health_period_s) and exit_status(proc) is None:
            if s.health_grace_s == 0:
                continue
            why = watch.check()
            if why is None:
                break
            if why and exit_status(proc) is None and not self._stop.is_set():
                return self._kill_frozen(proc, why)
        return ""

    def _kill_frozen(self, proc: subprocess.Popen[bytes], why: str) -> str:
        """Stop a frozen server's group; the restart's reason."""
        reason = f"{why}, killed"
        self.say(f"the server (pid {proc.pid}) {reason}; stopping its process group to restart it")
        self._clear_ready()
        self._terminate(proc)
        return reason

    def _ready(self, pid: int, elapsed_s: float) -> None:
        url = self.settings.url
        self.say(f"healthy after {elapsed_s:.1f} s (pid {pid})")
        record = {
            "url": url,
            "base_url": url + "/v1",
            "pid": pid,
            "starts": self.starts,
            "start_s": round(elapsed_s, 2),
            "supervisor_pid": os.getpid(),
            "supervisor": self._owner,  # pid and start time: a stale file is told from a live one
            "restarts": self.restarts,
            "last_restart_reason": self.last_restart_reason,
            "vllm_version": self.version.version if self.version else None,
        }
        self._announce.ready(url, record)
        if self._on_ready is not None:
            self._on_ready(url, pid)

    def _clear_ready(self) -> None:
        self._announce.not_ready()

    def _end_group(self, proc: subprocess.Popen[bytes]) -> None:
        """The leader exited by itself; its workers (the engine core) may live on, holding the port and
        memory. They are killed while the leader's zombie, not yet reaped, keeps the group's id from being
        reused."""
        if proc.returncode is not None:
            return  # stopped and reaped already (a frozen server): its id may be another group's by now
        if self._container is not None:
            self._container.stop(self.settings.stop_grace_s)  # the client died, the container may not have
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        # SIGKILL is delivered, not yet acted on: the workers are waited for (bounded) so that none still
        # holds the port or memory when the next server starts.
        deadline = time.monotonic() + self.settings.stop_grace_s
        while watchdog.group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._reap(proc)

    def _terminate(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the whole process group, SIGKILL after stop_grace_s; also stops leftover workers."""
        if proc.returncode is not None:
            return  # reaped, its group stopped before: the id may be another process group's by now

        def running(pgid: int) -> bool:  # the leader (not reaped meanwhile: it keeps the id) or a worker
            return exit_status(proc) is None or bool(watchdog.group_members(pgid))

        started = time.monotonic()
        if self._container is not None:
            # Signals to the client would not reach a stopped container: the runtime stops it first.
            self._container.stop(self.settings.stop_grace_s)
        if not watchdog.stop_group(proc.pid, self.settings.stop_grace_s, running):
            self.say(f"still running {self.settings.stop_grace_s:.0f} s after SIGTERM: SIGKILL")
        self._reap(proc)
        self.say(f"the server's process group (pid {proc.pid}) stopped in {time.monotonic() - started:.1f} s")

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        """The group is gone: the reaper forgets it first, then the leader is reaped (its id is free from then
        on, so nothing may signal it any more)."""
        self._reaper.clear()
        proc.wait()
        with self._lock:
            if self._proc is proc:
                self._proc = None

    def _wait_external(self) -> int:
        s = self.settings
        self.say(f"waiting up to {s.start_timeout_s:.0f} s for the external server {s.url}")
        deadline = time.monotonic() + s.start_timeout_s
        started = time.monotonic()
        while time.monotonic() < deadline and not self._stop.is_set():
            if health_ok(s.url):
                self._ready(0, time.monotonic() - started)
                return EXIT_OK
            self._stop.wait(s.health_period_s)
        if self._stop.is_set():
            return EXIT_OK
        raise NotReady(f"the external server {s.url} did not answer /health within {s.start_timeout_s:.0f} s")
