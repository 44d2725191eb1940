"""The ROS 2 distribution ./run set up (COSMOS_REASONER_DISTRO: jazzy, the default, or kilted) is the one the
tests run on, and the compatibility point (cosmos_reasoner_ros/ros_compat.py) works on it."""

from __future__ import annotations

import os
import subprocess
from importlib import metadata

import pytest
from support.paths import ROOT

from cosmos_reasoner_ros.bag.rclpy_compat import initialized
from cosmos_reasoner_ros.ros_compat import (
    FASTDDS_PROFILE_VARIABLES,
    fast_dds_major,
    fastdds_profile,
    fastdds_profile_env,
)

RCLPY_MAJOR = {"jazzy": 7, "kilted": 9}  # ros-rclpy 7.1.6 (Jazzy), 9.1.2 (Kilted)
DISTRO = os.environ.get("COSMOS_REASONER_DISTRO")


@pytest.mark.skipif(DISTRO is None, reason="needs the environment of ./run (COSMOS_REASONER_DISTRO)")
def test_the_environment_is_the_distribution_that_run_set_up() -> None:
    assert DISTRO in RCLPY_MAJOR
    assert int(metadata.version("ros-rclpy").split(".")[0]) == RCLPY_MAJOR[DISTRO or ""]
    pinned = (ROOT / f"requirements-{DISTRO}.txt").read_text()
    assert f"ros-{DISTRO}-rclpy==" in pinned or "ros-rclpy==" in pinned


def test_an_unknown_distribution_is_refused_before_anything_is_made() -> None:
    env = {**os.environ, "COSMOS_REASONER_DISTRO": "humble"}
    done = subprocess.run(
        ["bash", str(ROOT / "run"), "setup"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "jazzy (default) and kilted" in done.stderr
    assert not (ROOT / ".venv-humble").exists()


@pytest.mark.ros
def test_initialized_is_a_context_manager_on_this_distribution() -> None:
    pytest.importorskip("rclpy", reason="needs the ROS 2 environment of ./run")
    from rclpy.context import Context

    context = Context()
    with initialized(context=context):
        assert context.ok()
    assert not context.ok()  # shut down after the block, as Kilted's `with rclpy.init():`
    with pytest.raises(RuntimeError), initialized(context=(second := Context())):
        raise RuntimeError("the block fails")
    assert not second.ok()  # shut down on the way out of a failing block too


def test_the_fast_dds_profile_goes_in_the_variable_the_distribution_reads() -> None:
    assert set(FASTDDS_PROFILE_VARIABLES) == {
        "FASTDDS_DEFAULT_PROFILES_FILE",
        "FASTRTPS_DEFAULT_PROFILES_FILE",
    }
    assert fastdds_profile({"FASTRTPS_DEFAULT_PROFILES_FILE": "/a.xml"}) == "/a.xml"
    assert fastdds_profile({"FASTDDS_DEFAULT_PROFILES_FILE": "/b.xml"}) == "/b.xml"
    assert fastdds_profile({}) == ""
    wanted = {"humble": "FASTRTPS", "jazzy": "FASTRTPS", "kilted": "FASTDDS", "lyrical": "FASTDDS"}
    for distro, name in wanted.items():
        got = fastdds_profile_env("/p.xml", {"ROS_DISTRO": distro})
        assert got == {f"{name}_DEFAULT_PROFILES_FILE": "/p.xml"}, distro
    if DISTRO is not None:  # the wheels of this environment, without a ROS_DISTRO (no setup script sourced)
        assert fast_dds_major({}) == (2 if DISTRO == "jazzy" else 3)
        variable = f"{wanted[DISTRO]}_DEFAULT_PROFILES_FILE"
        assert os.environ.get(variable, "").endswith("fastdds_shm.xml")  # set by conftest
