"""Checks before `vllm serve` starts (a clear message now, not a failing server minutes later): the model
path, a stale ready file, the port (a server left by a dead supervisor is stopped, anything else named), the
media and cache directories, and the vLLM version of the executable."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

from . import container, watchdog
from .command import base_environment
from .detect import DetectedVersion, detect_version, resolve_executable
from .errors import ModelNotFound, PortInUse
from .settings import ServerSettings

__all__ = ["detect", "port_in_use", "prepare"]


def prepare(settings: ServerSettings, say: Callable[[str], None] | None = None) -> None:
    """Checks before starting (a clear message now, not a failing server minutes later); creates dirs. A
    ready file or a server left by a supervisor that died is recognised: the file is removed, the server's
    process group stopped (said through `say`)."""
    tell = say or (lambda _message: None)
    if settings.container:
        container.prepare(settings, tell)  # the runtime, not vLLM, runs here; dead owners' containers go
    else:
        resolve_executable(settings.executable[0])
    model = Path(settings.model).expanduser()
    if _looks_local(settings.model):
        if not model.exists():
            raise ModelNotFound(f"model path {settings.model} does not exist")
        # A Hugging Face checkpoint has config.json, a Mistral-format one params.json; vLLM refuses a
        # directory with neither only after a minute of loading, in a message naming a pydantic web page.
        if model.is_dir() and not any((model / name).exists() for name in ("config.json", "params.json")):
            raise ModelNotFound(f"model path {settings.model} has no config.json: not a checkpoint directory")
    if settings.ready_file:
        ready = Path(settings.ready_file)
        stale = watchdog.stale_ready_file(ready)
        if stale:
            ready.unlink(missing_ok=True)
            tell(f"removed the stale ready file {ready}: {stale}")
    if not settings.headless and port_in_use(settings.host, settings.port):
        _reclaim_port(settings, tell)
    if settings.media_dir:
        media = Path(settings.media_dir).expanduser()
        if not media.exists():
            # Only the node and the server need to read it: private to this user.
            media.mkdir(parents=True, mode=0o700)
    if settings.cache_dir:
        root = Path(settings.cache_dir).expanduser()
        for sub in ("tmp", "vllm", "inductor"):
            (root / sub).mkdir(parents=True, exist_ok=True)


def _reclaim_port(settings: ServerSettings, tell: Callable[[str], None]) -> None:
    """The port is taken. A server left by a dead supervisor is stopped (nobody watches it, it only holds the
    port and memory); anything else is named in the error."""
    holder = watchdog.port_holder(settings.port)
    message = f"port {settings.port} on {settings.host} is already in use"
    refusal = holder.group_refusal(os.getpgid(0)) if holder is not None and holder.stale else ""
    if holder is not None and holder.stale and not refusal:
        tell(f"{message} by a server nobody supervises: {holder.describe()}; stopping its process group")
        watchdog.stop_group(holder.pgid, settings.stop_grace_s)
        if watchdog.wait_port_free(lambda: port_in_use(settings.host, settings.port), 10.0):
            return
        message += " (still, after stopping the stale server)"
    held = f" by {holder.describe()}" if holder is not None else ""
    if refusal:
        held += f"; its process group was left alone: {refusal}"
    raise PortInUse(
        f"{message}{held} (another server? choose another port or use mode external with its URL)"
    )


def detect(settings: ServerSettings) -> DetectedVersion:
    """The vLLM version of the configured executable, asked in the environment the server will get."""
    added, unset = base_environment(settings)
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(added)
    return detect_version(settings.executable, settings.vllm_version, env)


def _looks_local(model: str) -> bool:
    # "org/name" is a hub id; a path starts with /, . or ~ (a relative local org/name is written ./org/name).
    return model.startswith(("/", ".", "~"))


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False
