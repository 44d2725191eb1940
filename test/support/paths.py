"""Locations in the repository that tests, benchmarks and the demo share (defined once)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_DIR = ROOT / "test"
DATA = ROOT / "cosmos_reasoner_ros" / "data"
ROBOT_CLIP = DATA / "robotics_next_action.mp4"
CONFIG = ROOT / "config"
REASONER_YAML = CONFIG / "reasoner.yaml"
SHM_PROFILE = CONFIG / "fastdds_shm.xml"
TOOLS = ROOT / "tools"
CACHE = ROOT / ".cache"
# The workspace's shared folder (media, the launch tools' wheels, Nav2's interfaces): beside the repository,
# or where COSMOS_REASONER_SHARED says (./run exports it; a git worktree lies away from the checkout).
SHARED = Path(os.environ.get("COSMOS_REASONER_SHARED") or ROOT.parent / "shared")
SHARED_MEDIA = SHARED / "media"
BENCH_RESULTS = ROOT / "bench" / "results"
