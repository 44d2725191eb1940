"""`cosmos-reasoner-server`: the command line of the supervisor (settings from config/server.yaml, flags and
--set overrides on top); `--print-command` shows the detected vLLM and the command without starting it."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import container, watchdog
from .command import build_command
from .errors import EXIT_OK, ConfigError, SupervisorError
from .settings import MODES, ServerSettings, load_settings
from .start_checks import detect
from .supervisor import Supervisor

# Settings with a flag of their own; every other one through --set KEY=VALUE.
_FLAGS = (
    "mode",
    "model",
    "served_model_name",
    "vllm_version",
    "port",
    "host",
    "server_url",
    "tensor_parallel_size",
    "data_parallel_size",
    "gpus",
    "cameras",
    "media_dir",
    "ready_file",
    "start_timeout_s",
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cosmos-reasoner-server",
        description="Start and supervise the vLLM server of the Cosmos 3 Reasoner (config/server.yaml).",
    )
    parser.add_argument(
        "--config", type=Path, help="settings file (default: the package's config/server.yaml)"
    )
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--model", help="checkpoint directory or hub id")
    parser.add_argument("--served-model-name")
    parser.add_argument("--vllm-version", help="the vLLM version to build the command for; default: detected")
    parser.add_argument("--port", type=int)
    parser.add_argument("--host")
    parser.add_argument("--server-url", help="mode external: the server to wait for")
    parser.add_argument("--tensor-parallel-size", type=int)
    parser.add_argument("--data-parallel-size", type=int)
    parser.add_argument("--gpus", help="GPU ids for CUDA_VISIBLE_DEVICES, e.g. 0,1")
    parser.add_argument("--cameras", type=int, help="cameras per request: sizes --limit-mm-per-prompt")
    parser.add_argument("--media-dir", help="--allowed-local-media-path, shared with the node")
    parser.add_argument("--ready-file", help="write {url, pid, ...} as JSON here once /health answers")
    parser.add_argument("--start-timeout-s", type=float)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other setting of server.yaml (repeatable; JSON for lists and mappings)",
    )
    parser.add_argument(
        "--print-command",
        action="store_true",
        help="print the detected vLLM, the command and its environment (secrets redacted) as JSON",
    )
    return parser.parse_args(argv)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value
    for name in _FLAGS:
        value = getattr(args, name)
        if value is not None and value != "":
            overrides[name] = value
    return load_settings(args.config, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = settings_from_args(args)
        if args.print_command:
            if settings.mode == "external":
                raise ConfigError("mode external starts no server: there is no command to print")
            version = detect(settings)
            command = (
                container.server_command(settings, version, container.owner_value(watchdog.owner_mark()))
                if settings.container
                else build_command(settings, version)
            )
            print(json.dumps(command.shown(), indent=1))
            return EXIT_OK
        return _serve(Supervisor(settings))
    except SupervisorError as exc:
        print(f"cosmos-reasoner-server: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code


def _serve(supervisor: Supervisor) -> int:
    """supervisor.run() on a thread of its own until it returns; SIGTERM and SIGINT stop it.

    Python runs signal handlers on the main thread, between its bytecodes. stop() sets a threading.Event,
    which takes the Event's lock: had the main thread been inside one of run()'s many waits on that very
    Event (holding the lock for a moment), the handler would have waited for itself for ever. A supervisor
    stopped by SIGTERM on a busy machine hung so once (a CI run: no exit within 120 s). Here the main thread
    only joins run()'s thread, so the handler's set() waits at most for that thread to let go of the lock."""
    result: list[int] = []
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            result.append(supervisor.run())
        except BaseException as exc:  # handed to the main thread: raised there as before
            failure.append(exc)

    # The handler only appends (no lock): it runs between any two bytecodes of this thread, also inside
    # itself, and one that set the supervisor's Event (which takes a lock) deadlocked when a second signal
    # came while the first held it. This loop passes the first signal on.
    signalled: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        signalled.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker = threading.Thread(target=serve, name="supervisor", daemon=True)
        worker.start()
        passed_on = False
        while worker.is_alive():
            if signalled and not passed_on:
                supervisor.stop(signal.Signals(signalled[0]).name)
                passed_on = True
            worker.join(0.05)
    finally:
        # Stopped by a signal, the process is exiting: later signals are ignored. Put back, the default
        # action killed it when one more came before the end (30 SIGTERMs 20 ms apart: exit -15, not 0).
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if signalled else handler)
    if failure:
        raise failure[0]
    return result[0]
