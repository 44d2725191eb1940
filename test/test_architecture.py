"""The architecture of docs/ARCHITECTURE.md, kept by import-linter's contracts (pyproject.toml): data flows
one way (geometry < clips < reasoner < requests < handoff < node, the bag tools beside the node), the core
imports no ROS, another concern is reached through its API, nav2_msgs only in the handoff's ROS edge, and no
import circle exists at any depth."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.paths import ROOT

LINT = shutil.which("lint-imports")
pytestmark = pytest.mark.skipif(LINT is None, reason="needs import-linter (set up by ./run)")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the repository's contracts over the package found first on the path at `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_package_keeps_every_contract() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("clips/clip_buffer.py", "import rclpy", "import no ROS"),
        ("reasoner/parsing.py", "from cosmos_reasoner_ros.requests import Outcome", "Data flows one way"),
        ("requests/pipeline.py", "from cosmos_reasoner_ros.clips.clip_buffer import Clip", "clips: other"),
        ("node/reasoner_node.py", "from cosmos_reasoner_ros.node.main import main", "No import circles"),
        ("server/cli.py", "from cosmos_reasoner_ros.reasoner import TaskCatalog", "The server stands alone"),
        ("bag/labels/draft.py", "from cosmos_reasoner_ros.bag.scores import grade", "bag/ in rooms"),
        ("bag/scores/grading.py", "import rclpy", "Labels, scores and the leaderboard are plain"),
        (
            "bag/runs/scoring.py",
            "from cosmos_reasoner_ros.bag.scores.grading import grade",
            "labels, scores, leaderboard:",
        ),
        ("handoff/decision.py", "import rclpy", "import no ROS"),
        ("requests/outcome.py", "from cosmos_reasoner_ros.handoff import Handoff", "Data flows one way"),
        ("node/outputs.py", "from cosmos_reasoner_ros.handoff.gates import AGE", "handoff: other"),
        ("node/outputs.py", "import nav2_msgs", "nav2_msgs only in the handoff's ROS edge"),
    ],
)
def test_a_violation_breaks_its_contract(tmp_path: Path, module: str, line: str, contract: str) -> None:
    """Each kind of contract catches its violation in a copy of the package (so that a contract that checks
    nothing cannot pass unnoticed)."""
    copy = tmp_path / "cosmos_reasoner_ros"
    shutil.copytree(ROOT / "cosmos_reasoner_ros", copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # injected by the test\n")
    result = lint(tmp_path)
    assert result.returncode != 0, result.stdout
    assert verdict(result.stdout, contract) == "BROKEN", result.stdout
    assert verdict(lint(ROOT).stdout, contract) == "KEPT"


def verdict(report: str, contract: str) -> str:
    """KEPT or BROKEN for the contract whose name starts with `contract` (names wrap across lines)."""
    text = " ".join(report.split())
    start = text.index(contract)
    kept, broken = text.find(" KEPT", start), text.find(" BROKEN", start)
    if broken >= 0 and (kept < 0 or broken < kept):
        return "BROKEN"
    return "KEPT"
