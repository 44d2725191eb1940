"""The one place where the ROS 2 distributions this package runs on differ for it (Jazzy, the long-term
release robots run, and Kilted; Humble's Python 3.10 is the language floor).

- `rclpy.init()` is a context manager only from Kilted on (Jazzy's returns None): `initialized()` is one for
  both (bag/rclpy_compat.py).
- Fast DDS 2 (Jazzy, Humble) reads its XML profile from `FASTRTPS_DEFAULT_PROFILES_FILE` only; Fast DDS 3
  (Kilted on) from `FASTDDS_DEFAULT_PROFILES_FILE`, and from the old name too with a deprecation warning in
  every process: `fastdds_profile_env()` names the file in the variable this distribution reads.
- The message types of a bag: rosbags has a typestore per distribution (Jazzy's and Kilted's differ only in
  nav_msgs/msg/Goals, Humble's in visualization_msgs/msg/Marker and a few more): `ros_distro()` names the one
  this process runs on; the bag tools read a bag with its own distribution's (bag/files/typestore.py).
- An action server keeps a finished goal's result for `result_timeout` seconds: 10 s by default in Kilted,
  900 s in Jazzy; `RESULT_RETENTION_S` (Jazzy's 900 s; a result is small) is passed explicitly so that both
  keep results alike. rclpy counts it on the node's clock: bag time under `use_sim_time` (a lock-step replay
  whose clock stands still keeps results meanwhile; at `--rate 4` 900 s of bag time pass in 225 s).
- A subscription callback of two parameters gets each message's info (its publisher's sequence number, with
  rmw_fastrtps) from rclpy 4 (Iron) on; Humble's rclpy calls with the message only:
  `with_message_info(callback)` is a callback rclpy calls either way, the sequence None where none comes
  (node/rclpy_compat.py).

This module holds the facts that need no rclpy (the distribution, its Fast DDS, the result retention); the two
bridges that call rclpy live with the code that uses them, in node/ and bag/, the only folders that import
rclpy.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

__all__ = [
    "FASTDDS_PROFILE_VARIABLES",
    "RESULT_RETENTION_S",
    "fast_dds_major",
    "fastdds_profile",
    "fastdds_profile_env",
    "ros_distro",
]

# Fast DDS 3 (Kilted on) reads the first, Fast DDS 2 (Jazzy, Humble) only the second.
FASTDDS_PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
_FAST_DDS_2_DISTROS = ("humble", "iron", "jazzy")

# [s] of the node's clock: how long a finished goal's result stays available to get_result (Jazzy's default; a
# planner may ask for it long after the goal ended, e.g. across a deactivate/cleanup cycle on a loaded robot)
RESULT_RETENTION_S = 900.0


def ros_distro(environ: Mapping[str, str] | None = None) -> str:
    """The ROS 2 distribution of this process, lower case: ROS_DISTRO where a setup script set it, else the
    wheels' (Kilted's carry ros-fastdds, Jazzy's ros-fastrtps 2.14)."""
    distro = (os.environ if environ is None else environ).get("ROS_DISTRO", "")
    if distro:
        return distro.strip().lower()
    try:
        metadata.version("ros-fastdds")
    except metadata.PackageNotFoundError:
        return "jazzy"
    return "kilted"


def fast_dds_major(environ: Mapping[str, str] | None = None) -> int:
    """2 or 3: the Fast DDS of this ROS 2."""
    return 2 if ros_distro(environ) in _FAST_DDS_2_DISTROS else 3


def fastdds_profile_env(profile: Path | str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variable that makes this distribution's Fast DDS read `profile` (only that one: Fast
    DDS 3 warns in every process about the old name)."""
    name = FASTDDS_PROFILE_VARIABLES[0] if fast_dds_major(environ) == 3 else FASTDDS_PROFILE_VARIABLES[1]
    return {name: str(profile)}


def fastdds_profile(environ: Mapping[str, str]) -> str:
    """The profile file a process with this environment uses, whichever variable names it ('' if none)."""
    return next((environ[name] for name in FASTDDS_PROFILE_VARIABLES if environ.get(name)), "")
