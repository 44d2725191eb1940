"""The one place where the ROS 2 distributions this package runs on differ for it (Jazzy, the long-term
release robots run, and Kilted; Humble's Python 3.10 is the language floor).

- `rclpy.init()` is a context manager only from Kilted on (Jazzy's returns None): `initialized()` is one for
  both.
- Fast DDS reads its XML profile from `FASTRTPS_DEFAULT_PROFILES_FILE` up to 2.x (Jazzy, Humble) and from
  `FASTDDS_DEFAULT_PROFILES_FILE` from 3.0 on (Kilted): `fastdds_profile_env()` names the file for both.
- An action server keeps a finished goal's result for `result_timeout` seconds: 10 s by default in Kilted,
  900 s in Jazzy; `RESULT_RETENTION_S` is passed explicitly so that both keep results alike.

Used by the ROS edge (node/) and the bag tools only; the core never imports it (import-linter's contract).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "FASTDDS_PROFILE_VARIABLES",
    "RESULT_RETENTION_S",
    "fastdds_profile",
    "fastdds_profile_env",
    "initialized",
]

# Fast DDS 3 (Kilted on) reads the first, Fast DDS 2 (Jazzy, Humble) the second; each ignores the other.
FASTDDS_PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")

RESULT_RETENTION_S = 10.0  # [s] a finished goal's result stays available to get_result (Kilted's default)


def fastdds_profile_env(profile: Path | str) -> dict[str, str]:
    """The environment variables that make any Fast DDS version read `profile`."""
    return {name: str(profile) for name in FASTDDS_PROFILE_VARIABLES}


def fastdds_profile(environ: Mapping[str, str]) -> str:
    """The profile file a process with this environment uses, whichever variable names it ('' if none)."""
    return next((environ[name] for name in FASTDDS_PROFILE_VARIABLES if environ.get(name)), "")


@contextmanager
def initialized(**kwargs: Any) -> Iterator[None]:
    """`rclpy.init(**kwargs)` for the block, and its shutdown after it (Kilted's `with rclpy.init():`)."""
    import rclpy
    from rclpy.utilities import try_shutdown

    rclpy.init(**kwargs)
    try:
        yield
    finally:
        try_shutdown(context=kwargs.get("context"))
