"""A Supervisor run on a thread of the test's own process, for tests that look inside it (its reaper, the
signals it sends)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from cosmos_reasoner_ros.server import settings, supervisor
from support.processes import free_port
from support.supervisor_process import WAIT_S, wait_for, write_config


class _Lines:
    """A text stream that keeps what is written to it, line by line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._part = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            *done, self._part = (self._part + text).split("\n")
            self.lines.extend(done)
        return len(text)

    def flush(self) -> None:
        pass


class InProcessSupervisor:
    """A Supervisor run on a thread of this process, its output kept: for tests that look inside it."""

    def __init__(self, tmp_path: Path, fake: Path, **overrides) -> None:
        env = {"FAKE_EXTRA": "yes", "FAKE_VLLM_RECORD": str(tmp_path / "record.jsonl")}
        env.update(overrides.pop("env", {}))
        config = write_config(tmp_path, fake, free_port(), env=env, **overrides)
        self.out = _Lines()
        self.supervisor = supervisor.Supervisor(settings.load_settings(config), out=self.out)  # type: ignore[arg-type]
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.supervisor.run()
        except BaseException as exc:  # handed to the test
            self.error = exc

    def __enter__(self) -> InProcessSupervisor:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_line(self, prefix: str, timeout_s: float = WAIT_S) -> str:
        def found() -> str | None:
            assert self.thread.is_alive() or self.error is None, f"the supervisor failed: {self.error!r}"
            return next((line for line in list(self.out.lines) if line.startswith(prefix)), None)

        try:
            return wait_for(found, timeout_s)
        except AssertionError:
            raise AssertionError(f"no line {prefix!r}:\n" + "\n".join(self.out.lines)) from None

    def stop(self, timeout_s: float = 60.0) -> None:
        self.supervisor.stop("the test")
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the supervisor did not stop:\n" + "\n".join(self.out.lines)


@contextlib.contextmanager
def in_a_long_backoff(tmp_path: Path, fake: Path) -> Iterator[InProcessSupervisor]:
    """A supervisor whose server exited (code 3), waiting out a restart back-off of 600 s."""
    with InProcessSupervisor(
        tmp_path,
        fake,
        restart_backoff_s=600.0,
        restart_backoff_max_s=600.0,
        env={"FAKE_VLLM_BEHAVIOUR": "exit"},
    ) as run:
        run.wait_line("[cosmos-reasoner-server] server exit code 3; restart 1/5 after 600.0 s")
        yield run
