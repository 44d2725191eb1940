"""The supervisor's failures. Each type carries the exit code `cosmos-reasoner-server` returns for it, so that
a launcher or script can tell them apart (the codes are listed in config/server.yaml)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_NO_EXECUTABLE = 3
EXIT_PORT_IN_USE = 4
EXIT_NO_MODEL = 5
EXIT_NOT_READY = 6
EXIT_GAVE_UP = 7
EXIT_UNKNOWN_VERSION = 8
EXIT_SERVER_USAGE = 9
EXIT_SERVER_START_FAILED = 10


class SupervisorError(Exception):
    """The server cannot be started or supervised; `exit_code` is what the command returns for it."""

    exit_code = EXIT_CONFIG


class ConfigError(SupervisorError):
    """Invalid settings, or settings the detected vLLM cannot honour."""

    exit_code = EXIT_CONFIG


class ExecutableNotFound(SupervisorError):
    exit_code = EXIT_NO_EXECUTABLE


class PortInUse(SupervisorError):
    exit_code = EXIT_PORT_IN_USE


class ContainerInUse(SupervisorError):
    """The container's name is taken by a running supervisor's container (like a port in use)."""

    exit_code = EXIT_PORT_IN_USE


class ModelNotFound(SupervisorError):
    exit_code = EXIT_NO_MODEL


class NotReady(SupervisorError):
    """The server (or the external server) did not answer /health within start_timeout_s."""

    exit_code = EXIT_NOT_READY


class GaveUp(SupervisorError):
    """The server died max_restarts + 1 times in a row."""

    exit_code = EXIT_GAVE_UP


class UnknownVersion(SupervisorError):
    """The vLLM version could not be detected, or is older than every release in the flag table."""

    exit_code = EXIT_UNKNOWN_VERSION


class ServerUsageError(SupervisorError):
    """vLLM refused its command line (argparse's exit code 2): restarting cannot help."""

    exit_code = EXIT_SERVER_USAGE


class ServerStartFailed(SupervisorError):
    """vLLM exited twice in a row before answering /health, with the same output both times."""

    exit_code = EXIT_SERVER_START_FAILED
