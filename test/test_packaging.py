"""Packaging: one declaration of the executables (scripts/), and a development environment that imports the
checkout's modules with the generated messages from the install tree, never a stale installed copy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import setuptools
from support.paths import ROOT


def test_setup_py_takes_its_console_scripts_from_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: seen.update(kwargs))
    monkeypatch.chdir(ROOT)
    source = (ROOT / "setup.py").read_text()
    exec(
        compile(source, str(ROOT / "setup.py"), "exec"),
        {"__file__": str(ROOT / "setup.py"), "__name__": "setup"},
    )
    scripts = sorted(p.name for p in (ROOT / "scripts").iterdir())
    declared = seen["entry_points"]["console_scripts"]
    assert sorted(e.split(" = ")[0] for e in declared) == scripts
    for entry in declared:
        module, _, function = entry.split(" = ")[1].partition(":")
        assert function == "main" and callable(__import__(module, fromlist=["main"]).main), entry
    shared = dict(seen["data_files"])
    assert sorted(shared["share/cosmos_reasoner_ros/config"]) == sorted(
        f"config/{p.name}" for p in (ROOT / "config").iterdir() if p.is_file()
    )


def test_cmake_installs_every_script_and_has_the_sources_switch() -> None:
    text = (ROOT / "CMakeLists.txt").read_text()
    assert 'file(GLOB EXECUTABLES CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/scripts/*")' in text
    assert "option(COSMOS_REASONER_INSTALL_PYTHON" in text


def test_modules_come_from_the_checkout_and_messages_from_the_install_tree() -> None:
    pytest.importorskip("rclpy", reason="needs the ROS 2 environment of ./run")
    import cosmos_reasoner_ros.msg

    import cosmos_reasoner_ros
    import cosmos_reasoner_ros.node.reasoner_node

    assert (
        Path(cosmos_reasoner_ros.node.reasoner_node.__file__).resolve().parent
        == ROOT / "cosmos_reasoner_ros" / "node"
    )
    generated = Path(cosmos_reasoner_ros.msg.__file__).resolve().parents[1]
    assert generated != ROOT / "cosmos_reasoner_ros"
    if generated.is_relative_to(ROOT):  # ./run's build (.colcon-<distro>): messages only, no module copied
        assert generated.relative_to(ROOT).parts[0] in (".colcon-jazzy", ".colcon-kilted"), generated
        copies = sorted(
            p.name for p in generated.rglob("*.py") if p.parent.name not in ("msg", "srv", "action")
        )
        assert copies == ["__init__.py"], f"stale module copies in the install tree: {copies}"
    assert sys.modules["cosmos_reasoner_ros"].__path__[0] == str(ROOT / "cosmos_reasoner_ros")
