"""What the supervisor tells the world, one writer at a time: its own lines (`[cosmos-reasoner-server]`),
the server's log forwarded line by line, the machine-readable `READY <url>` line (the demo, the launch file
and the tests wait for it), and the ready file, written atomically before that line and removed when the
server is no longer ready."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, TextIO

__all__ = ["Announcer"]


class Announcer:
    def __init__(self, out: TextIO, log_prefix: str, ready_file: str) -> None:
        self._out = out
        self._log_prefix = log_prefix
        self._ready_file = Path(ready_file) if ready_file else None
        self._lock = threading.Lock()

    def _write(self, line: str) -> None:
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def say(self, message: str) -> None:
        self._write(f"[cosmos-reasoner-server] {message}")

    def forward(self, line: str) -> None:
        """A line of the server's own output."""
        self._write(f"{self._log_prefix}{line}")

    def ready(self, url: str, record: dict[str, Any]) -> None:
        """The ready file (atomic: a reader never sees half a file), then the READY line."""
        if self._ready_file is not None:
            self._ready_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._ready_file.with_name(self._ready_file.name + ".tmp")
            tmp.write_text(json.dumps(record) + "\n")
            tmp.replace(self._ready_file)
        self._write(f"READY {url}")

    def not_ready(self) -> None:
        if self._ready_file is not None:
            self._ready_file.unlink(missing_ok=True)
