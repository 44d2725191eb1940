"""The grammar backend versions the project supports (requirements-grammar.txt), each run by grammar_probe.py
in .venv-vllm's Python with .cache/grammar-backends/<name>-<version> ahead on its path
(tools/setup_grammar_envs.py installs them), and a probe kept running between requests: a test sends it many
batches without paying for xgrammar's import (torch, about 2.5 s) each time."""

from __future__ import annotations

import json
import select
import subprocess
import tempfile
import time
from typing import Any

import pytest

from cosmos_reasoner_ros.schemas.structured_output import PROBE
from support import vllm_tier
from support.paths import CACHE, ROOT

BACKEND_DIR = CACHE / "grammar-backends"


def pins() -> list[str]:
    """requirements-grammar.txt's pins ("xgrammar==0.2.8"), in its order."""
    lines = (ROOT / "requirements-grammar.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def backend_env(pin: str) -> tuple[str, dict[str, str]]:
    """The backend's name and the environment that puts its pinned version first; skips when not set up."""
    reason = vllm_tier.missing_reason()
    if reason:
        pytest.skip(reason)
    name, version = pin.split("==")
    where = BACKEND_DIR / f"{name}-{version}"
    if not (where / ".cosmos-reasoner-stamp").exists():
        pytest.skip(
            f"{pin} is not set up in {where} (python tools/setup_grammar_envs.py; ./run test does it)"
        )
    return name, vllm_tier.clean_env({"PYTHONPATH": str(where)})


class ProbeSession:
    """grammar_probe.py for one pinned backend, answering one request a line until closed."""

    def __init__(self, pin: str) -> None:
        self.backend, env = backend_env(pin)
        self.version = pin.split("==")[1]
        # A file, not a pipe: a pipe nobody reads would fill and stall the probe. Closed by close().
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._proc = subprocess.Popen(
            [str(vllm_tier.vllm_python()), str(PROBE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env=env,
        )

    def ask(self, request: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({**request, "parent": None}) + "\n")
        self._proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while not select.select([self._proc.stdout], [], [], 0.5)[0]:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._stderr.seek(0)
                tail = self._stderr.read().decode(errors="replace")[-1500:]
                raise AssertionError(f"the probe for {self.backend} {self.version} did not answer: {tail}")
        line = self._proc.stdout.readline()
        report: dict[str, Any] = json.loads(line)
        assert report["backends"].get(self.backend, {}).get("version") == self.version, report
        return report

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()


def separator_variants(backend: str) -> list[bool | None]:
    """xgrammar without whitespace writes the separators vLLM passes it: compact from vLLM 0.32, ", " and ": "
    before (server/versions.py): both are checked. llguidance is compact either way."""
    return [True, False] if backend == "xgrammar" else [None]
