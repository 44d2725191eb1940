"""launch/reasoner.launch.py: loaded with launch/launch_ros where they are importable (a ROS 2 install, or the
wheels ./run installs from ../shared/ros2-python), and checked for staying declarative everywhere. The launch
tier (test/launch_tier) runs it with `ros2 launch` and launch_testing."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from cosmos_reasoner_ros import launch_config

LAUNCH_FILE = Path(__file__).resolve().parents[1] / "launch" / "reasoner.launch.py"


def test_launch_file_is_thin_and_declarative() -> None:
    tree = ast.parse(LAUNCH_FILE.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    assert {m.split(".")[0] for m in imported if m} <= {"launch", "launch_ros", "cosmos_reasoner_ros"}
    functions = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert functions == ["_processes", "generate_launch_description"]
    # No decisions in the launch file: conditions and command building belong in launch_config.
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.While, ast.Try, ast.IfExp))]
    assert len([n for n in ast.walk(tree) if isinstance(n, ast.If)]) <= 1


def _require_launch() -> None:
    # `launch` alone may resolve to this repository's launch/ directory (a namespace package).
    for module in ("launch.actions", "launch_ros.actions"):
        pytest.importorskip(
            module,
            reason=f"needs ROS 2 `{module.split('.')[0]}` (not on PyPI: ./run installs it from "
            "../shared/ros2-python when that folder is beside the repository; a robot has it from ROS 2)",
        )


def _load_launch_module():
    _require_launch()
    spec = importlib.util.spec_from_file_location("reasoner_launch", LAUNCH_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _described(arguments: dict[str, str]):
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    description = _load_launch_module().generate_launch_description()
    context = LaunchContext()
    declared = [e for e in description.entities if isinstance(e, DeclareLaunchArgument)]
    for arg in declared:
        context.launch_configurations[arg.name] = arguments.get(
            arg.name, arg.default_value[0].perform(context)
        )
    opaque = [e for e in description.entities if isinstance(e, OpaqueFunction)]
    processes = [a for o in opaque for a in o.execute(context)]
    return declared, processes, context


@pytest.mark.launch
def test_launch_file_declares_the_arguments_and_both_processes() -> None:
    _require_launch()
    from launch.actions import ExecuteProcess
    from launch_ros.actions import Node

    declared, processes, context = _described({"port": "8100", "cameras": "front,wrist"})
    assert [a.name for a in declared] == list(launch_config.ARGUMENT_NAMES)
    server = [p for p in processes if isinstance(p, ExecuteProcess) and not isinstance(p, Node)]
    nodes = [p for p in processes if isinstance(p, Node)]
    assert len(server) == 1 and len(nodes) == 1
    cmd = [c.perform(context) if hasattr(c, "perform") else str(c) for part in server[0].cmd for c in part]
    assert "cosmos_reasoner_ros.server" in cmd and "8100" in cmd
    assert nodes[0].node_package == "cosmos_reasoner_ros" and nodes[0].node_executable == "reasoner_node"


@pytest.mark.launch
def test_launch_file_without_server_starts_only_the_node() -> None:
    _require_launch()
    from launch_ros.actions import Node

    _, processes, _ = _described({"start_server": "false", "server_url": "http://gpu:8000/v1"})
    assert len(processes) == 1 and isinstance(processes[0], Node)


def test_launch_gives_the_node_time_to_publish_what_is_in_flight_before_sigterm() -> None:
    """After Ctrl-C, launch waits longer than the node's own shutdown budget before escalating to SIGTERM
    (launch's default, 5 s, escalated on a busy machine): the launch file passes the plan's value."""
    calls = [
        node
        for node in ast.walk(ast.parse(LAUNCH_FILE.read_text()))
        if isinstance(node, ast.Call) and any(k.arg == "parameters" for k in node.keywords)
    ]
    assert len(calls) == 1  # the node's action
    given = {k.arg: ast.unparse(k.value) for k in calls[0].keywords}
    assert given.get("sigterm_timeout") == "str(plan.node.sigterm_timeout_s)"
    plan = launch_config.plan({"start_server": "false", "server_url": "http://gpu:8000/v1"})
    shutdown_budget = 3.0  # config/reasoner.yaml shutdown_timeout_s
    assert plan.node.sigterm_timeout_s == launch_config.NODE_SIGTERM_TIMEOUT_S >= 5 * shutdown_budget
