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
    """The server cannot be started or supervised; `exit_code` is what the command returns for it. A subclass
    names its code in its header: `class PortInUse(SupervisorError, exit_code=EXIT_PORT_IN_USE)`."""

    exit_code = EXIT_CONFIG

    def __init_subclass__(cls, *, exit_code: int | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code


class ConfigError(SupervisorError, exit_code=EXIT_CONFIG):
    """Invalid settings, or settings the detected vLLM cannot honour."""


class ExecutableNotFound(SupervisorError, exit_code=EXIT_NO_EXECUTABLE):
    """The vLLM executable (or the container runtime) is not on the PATH."""


class PortInUse(SupervisorError, exit_code=EXIT_PORT_IN_USE):
    """Something else listens on the server's port."""


class ContainerInUse(SupervisorError, exit_code=EXIT_PORT_IN_USE):
    """The container's name is taken by a running supervisor's container (like a port in use)."""


class ModelNotFound(SupervisorError, exit_code=EXIT_NO_MODEL):
    """A local model path does not exist or is not a checkpoint directory."""


class NotReady(SupervisorError, exit_code=EXIT_NOT_READY):
    """The server (or the external server) did not answer /health within start_timeout_s."""


class GaveUp(SupervisorError, exit_code=EXIT_GAVE_UP):
    """The server died max_restarts + 1 times in a row."""


class UnknownVersion(SupervisorError, exit_code=EXIT_UNKNOWN_VERSION):
    """The vLLM version could not be detected, or is older than every release in the flag table."""


class ServerUsageError(SupervisorError, exit_code=EXIT_SERVER_USAGE):
    """vLLM refused its command line (argparse's exit code 2): restarting cannot help."""


class ServerStartFailed(SupervisorError, exit_code=EXIT_SERVER_START_FAILED):
    """vLLM exited twice in a row before answering /health, with the same output both times."""
