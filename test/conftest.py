"""Shared fixtures: test data locations and an isolated ROS 2 domain per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "cosmos_reasoner_ros" / "data"
SHARED_MEDIA = ROOT.parent / "shared" / "media"

# Isolate DDS traffic: only this machine, and a domain no other concurrent test session uses.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(10 + os.getpid() % 200))
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


@pytest.fixture(scope="session")
def robot_clip() -> Path:
    """The small real robot clip shipped with the package (see cosmos_reasoner_ros/data/README.md)."""
    return DATA / "robotics_next_action.mp4"


@pytest.fixture(scope="session")
def shared_media() -> Path:
    """The cookbook media beside the repository (../shared/media); skips when a checkout has none."""
    if not SHARED_MEDIA.is_dir():
        pytest.skip(f"needs the cookbook media at {SHARED_MEDIA}, absent in this checkout")
    return SHARED_MEDIA
