"""vLLM in a container (docker or podman): the `run` argv around the `vllm serve` command, the containers a
dead supervisor left (found by their owner label and removed at the next start), and the stop with its grace.

The supervisor runs `<runtime> run` attached, as the process it watches: the container's log is that process's
output and its exit code the container's. Health is asked over HTTP as for a process; a frozen or stopped
server is ended with `<runtime> stop -t <grace>` then `<runtime> rm -f`, never by signalling the runtime's
client alone (the container would live on). Variables reach the container by name only (`-e NAME`, the
value from the runtime client's environment): no value, and so no secret, is ever on a command line.

What a SIGKILLed supervisor leaves: its reaper stops the client's process group (SIGTERM, which the client
passes on to the container, then SIGKILL after the grace), so the container is at most stopped, kept under its
name, or still running when it ignored SIGTERM; the next supervisor to start on this host finds it by its
owner label (`cosmos_reasoner_ros.owner=<pid>:<start ticks>@<host>`, a process no longer running) and removes
it before it looks at the port. A container whose owner still runs is never touched.
"""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import watchdog
from .command import ServerCommand, build_command
from .container_settings import OWNER_LABEL, PORT_LABEL, ContainerSettings, mount_problem, parse_container
from .detect import DetectedVersion, resolve_executable
from .errors import ConfigError, ContainerInUse, ExecutableNotFound
from .settings import ServerSettings

CALL_TIMEOUT_S = 60.0  # a runtime command (ps, inspect, rm) that takes longer is given up


def container_settings(settings: ServerSettings) -> ContainerSettings:
    parsed, problems = parse_container(settings.container)
    if parsed is None or problems:
        raise ConfigError("invalid server settings:\n  " + "\n  ".join(problems or ["container: empty"]))
    return parsed


def owner_value(mark: str, host: str | None = None) -> str:
    """The owner label's value: the supervisor's mark (`<pid>:<start ticks>`) and this host's name."""
    return f"{mark}@{host or socket.gethostname()}"


def host_path(path: str) -> str:
    """A host path as mounted: `~` expanded, absolute, symbolic links resolved (a link into /etc is /etc)."""
    return str(Path(path).expanduser().resolve())


def mounts(settings: ServerSettings, c: ContainerSettings) -> list[tuple[str, bool]]:
    """(host path, writable) of every mount, each at the same path inside: the model directory (read-only),
    the media directory (read-only: vLLM only reads clips), the cache directory and the Hugging Face cache
    (read-write), `mounts` (read-only). ConfigError when a resolved path may not be mounted."""
    wanted: list[tuple[str, str, bool]] = []
    if settings.model.startswith(("/", ".", "~")):
        wanted.append(("model", settings.model, False))
    if settings.media_dir:
        wanted.append(("media_dir", settings.media_dir, False))
    if settings.cache_dir:
        wanted.append(("cache_dir", settings.cache_dir, True))
    if c.hf_cache:
        wanted.append(("container.hf_cache", c.hf_cache, True))
    wanted += [("container.mounts", path, False) for path in c.mounts]
    found: dict[str, bool] = {}
    for setting, path, writable in wanted:
        resolved = host_path(path)
        problem = mount_problem(resolved)
        if problem:
            raise ConfigError(f"{setting}: {path} resolves to {resolved}: {problem}")
        found[resolved] = found.get(resolved, False) or writable
    return list(found.items())


def labels(settings: ServerSettings, c: ContainerSettings, owner: str) -> dict[str, str]:
    return {**c.labels, OWNER_LABEL: owner, PORT_LABEL: str(settings.port)}


def server_command(settings: ServerSettings, version: DetectedVersion | str, owner: str) -> ServerCommand:
    """`<runtime> run ... <image> vllm serve ...`: the command build_command makes, run inside the image, with
    the model at its resolved path and, on a bridge network, vLLM listening on every address inside while the
    port is published on `host` only."""
    c = container_settings(settings)
    inner_settings = settings
    if settings.model.startswith(("/", ".", "~")):
        inner_settings = dataclasses.replace(inner_settings, model=host_path(settings.model))
    if c.network == "bridge":
        inner_settings = dataclasses.replace(inner_settings, host="0.0.0.0")  # noqa: S104 (inside only)
    inner = build_command(inner_settings, version)
    if any(arg.split("=", 1)[0] == "--api-key" for arg in inner.argv):
        raise ConfigError("container: this vLLM takes its API key on its command line only: refused")
    env = dict(inner.env)
    if c.hf_cache:
        env["HF_HOME"] = host_path(c.hf_cache)
    argv = run_argv(settings, c, owner, [*env, *c.pass_env], inner.argv)
    notes = (*inner.notes, f"container: {c.runtime} image {c.image} as {c.container_name(settings.port)}")
    return ServerCommand(argv, env, inner.unset, notes, inner.version)


def run_argv(
    settings: ServerSettings, c: ContainerSettings, owner: str, env_names: list[str], inner: tuple[str, ...]
) -> tuple[str, ...]:
    """The runtime's argv: no shell, every variable by name only, `inner` run as it is."""
    argv = [c.program, "run", "--name", c.container_name(settings.port)]
    for key, value in labels(settings, c, owner).items():
        argv += ["--label", f"{key}={value}"]
    argv += ["--ipc", "host", *c.gpu_flags]
    if c.network == "host":
        argv += ["--network", "host"]
    else:
        argv += ["--network", "bridge", "--publish", f"{settings.host}:{settings.port}:{settings.port}"]
    for path, writable in mounts(settings, c):
        argv += ["--volume", f"{path}:{path}" + ("" if writable else ":ro")]
    for name in dict.fromkeys(env_names):  # once each, in order
        argv += ["--env", name]
    # The image's own entrypoint differs between images (vllm/vllm-openai: `vllm serve`): replaced by the
    # command's program, so that the container runs exactly the argv build_command made.
    return (*argv, "--entrypoint", inner[0], c.image, *inner[1:])


class Runtime:
    """The runtime's commands the supervisor uses besides `run`: ps, inspect, stop, rm."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.c = container_settings(settings)
        self.name = self.c.container_name(settings.port)

    def program(self) -> str:
        try:
            return str(resolve_executable(self.c.program))
        except ExecutableNotFound:
            raise ExecutableNotFound(
                f"the container runtime {self.c.program!r} was not found (container.runtime, "
                "container.executable)"
            ) from None

    def call(self, *args: str, timeout_s: float = CALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.program(), *args],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            late = f"no answer in {timeout_s:g} s"
            return subprocess.CompletedProcess([self.c.program, *args], 124, "", late)

    def owned(self) -> list[dict[str, Any]]:
        """Every container (running or not) that carries an owner label: the runtime's inspect records."""
        listed = self.call("ps", "-a", "-q", "--no-trunc", "--filter", f"label={OWNER_LABEL}")
        ids = listed.stdout.split()
        if listed.returncode != 0 or not ids:
            return []
        found = self.call("inspect", *ids)
        try:
            records = json.loads(found.stdout or "[]")
        except json.JSONDecodeError:
            return []
        return [r for r in records if isinstance(r, dict)]

    def remove_stale(self, say: Callable[[str], None]) -> None:
        """Remove the containers of supervisors of this host that are no longer running; refuse to start when
        a live supervisor's container has our name."""
        host = socket.gethostname()
        for record in self.owned():
            name = str(record.get("Name", "")).lstrip("/")
            owner = ((record.get("Config") or {}).get("Labels") or {}).get(OWNER_LABEL, "")
            mark, _, owner_host = str(owner).rpartition("@")
            if owner_host != host:
                continue  # another host's (a shared daemon): its liveness cannot be read here
            if watchdog.owner_alive(mark):
                if name == self.name:
                    raise ContainerInUse(
                        f"container {name} belongs to a running supervisor (pid {mark.partition(':')[0]}): "
                        "choose another port or container.name"
                    )
                continue
            running = bool((record.get("State") or {}).get("Running"))
            say(
                f"removing container {name} ({'running' if running else 'not running'}) of supervisor pid "
                f"{mark.partition(':')[0]}, which is no longer running"
            )
            self.remove(name or str(record.get("Id", "")))

    def stop(self, grace_s: float) -> None:
        """`stop -t <grace>` (the image's stop signal, SIGKILL after the grace), then `rm -f`."""
        seconds = max(1, math.ceil(grace_s))
        self.call("stop", "-t", str(seconds), self.name, timeout_s=seconds + CALL_TIMEOUT_S)
        self.remove(self.name)

    def remove(self, name: str) -> None:
        self.call("rm", "-f", name)


def prepare(settings: ServerSettings, say: Callable[[str], None]) -> None:
    """Before the first start: the runtime is found, `mounts` exist (a missing one would be created by docker
    as root, refused by podman; the media and cache directories are created by the supervisor's prepare), the
    Hugging Face cache is created, the stale containers are removed."""
    runtime = Runtime(settings)
    runtime.program()
    c = runtime.c
    for path in c.mounts:
        if not Path(host_path(path)).exists():
            raise ConfigError(f"container.mounts: {path} does not exist")
    if c.hf_cache:
        Path(host_path(c.hf_cache)).mkdir(parents=True, exist_ok=True, mode=0o700)
    runtime.remove_stale(say)


def environment_names(command: ServerCommand) -> list[str]:
    """The names the run argv passes (`--env NAME`), for tests and --print-command readers."""
    argv = list(command.argv)
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--env"]


__all__ = ["Runtime", "environment_names", "owner_value", "prepare", "server_command"]
