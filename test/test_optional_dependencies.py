"""The Nav2 handoff's dependencies are optional as package.xml (format 3) can say it: conditional
`exec_depend`s that rosdep and colcon (through catkin_pkg, which both use) leave out unless
COSMOS_REASONER_NAV2=1, so that a robot without Nav2 installs and builds the package unchanged."""

from __future__ import annotations

import pytest
from support.paths import ROOT

OPTIONAL = {"nav2_msgs", "tf2_ros_py"}


def _exec_depends(environment: dict[str, str]) -> set[str]:
    package = pytest.importorskip("catkin_pkg.package", reason="needs catkin_pkg (colcon-ros brings it)")
    parsed = package.parse_package(str(ROOT / "package.xml"))
    parsed.evaluate_conditions(environment)
    return {d.name for d in parsed.exec_depends if d.evaluated_condition}


def test_nav2_is_left_out_by_default_and_taken_with_the_variable() -> None:
    default = _exec_depends({})
    assert not OPTIONAL & default
    assert {"rclpy", "nav_msgs"} <= default  # the rest is unconditional
    assert _exec_depends({"COSMOS_REASONER_NAV2": "1"}) >= OPTIONAL
    assert not OPTIONAL & _exec_depends({"COSMOS_REASONER_NAV2": "0"})
