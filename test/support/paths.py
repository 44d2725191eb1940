"""Locations in the repository that tests, benchmarks and the demo share (defined once)."""

from __future__ import annotations

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
SHARED_MEDIA = ROOT.parent / "shared" / "media"
BENCH_RESULTS = ROOT / "bench" / "results"
