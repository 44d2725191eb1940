"""How a `vllm serve` process ended, in words: its exit status (without reaping it), whether it refused its
command line, the signature two alike failed starts share, and the line that says most about a failure."""

from __future__ import annotations

import os
import re
import signal
import subprocess

__all__ = ["exit_status", "failure_message", "failure_signature", "signal_name", "usage_error"]

_SIGNATURE_LINES = 12  # lines compared between two failed starts
_LOG_PREFIX = re.compile(
    r"^(?:\([^)]*\)\s*)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:.]+\s+(?:\[[^\]]*\]\s*)?"
)
_ARGPARSE_ERROR = re.compile(r"^\S.*?: error: (?:unrecognized arguments|argument |the following arguments)")


def exit_status(proc: subprocess.Popen[bytes]) -> int | None:
    """The server leader's exit code (negative: the signal), None while it runs. A process that exited is not
    reaped here: until the supervisor reaps it (_reap), its zombie keeps its pid, and so its process group's
    id, from being given to another process, and the group can be signalled safely."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped elsewhere
        return proc.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def signal_name(code: int) -> str:
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def usage_error(code: int | None, lines: list[str]) -> str | None:
    """The server's message when it exited because it refused its command line, else None."""
    message = next((line for line in reversed(lines) if _ARGPARSE_ERROR.match(line.strip())), "")
    if code == 2 or message:
        return message.strip() or f"exit code {code} (argparse's usage error)"
    return None


def failure_signature(code: int | None, lines: list[str]) -> str:
    """The last lines of a failed start with what changes between runs (log times, pids, addresses,
    numbers) taken out: two starts that failed alike have the same signature."""
    kept = [line for line in lines if line.strip()][-_SIGNATURE_LINES:]
    normal = [re.sub(r"0x[0-9a-fA-F]+|\d+", "#", _LOG_PREFIX.sub("", line.strip())) for line in kept]
    return f"exit {code}\n" + "\n".join(normal)


def failure_message(lines: list[str]) -> str:
    """The line that says most about a failed start: the last error line, else the last line. pydantic's
    pointer to its web page ("For further information visit https://errors.pydantic.dev/...") is not it: the
    validation error above it is (an empty model directory: "... ensure the presence of a config.json")."""
    kept = [_LOG_PREFIX.sub("", line.strip()) for line in lines if line.strip()]
    kept = [line for line in kept if not line.startswith("For further information visit")]
    errors = [line for line in kept if re.search(r"error|exception|failed", line, re.I)]
    return (errors or kept or ["(no output)"])[-1]
