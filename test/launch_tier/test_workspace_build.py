"""The package as a robot builds it: cloned into a workspace's src/, `colcon build` with default options,
`source install/setup.bash`, and everything started from the install space with this checkout off the
Python path.

The robot's ROS 2 install is stood in for by this environment's ROS wheels (AMENT_PREFIX_PATH = the venv, as
/opt/ros/<distro>/setup.bash would set it) and `composition_interfaces`, which ./run builds beside its own
messages (a robot has it from apt). Nothing of ./run's build of this package is on any path.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import launch_tools
from support.camera_publisher import camera_process
from support.paths import ROOT
from support.processes import wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

pytestmark = [pytest.mark.launch, pytest.mark.slow]

DISTRO = os.environ.get("COSMOS_REASONER_DISTRO", "jazzy")
VENV = Path(sys.prefix)
UNDERLAY = ROOT / f".colcon-{DISTRO}" / "install" / "composition_interfaces"
EXECUTABLES = ("reasoner_node", "cosmos-reasoner-server", "cosmos-reasoner-bag", "cosmos-reasoner-parse")
_MISSING = launch_tools.missing_reason()


def _tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _robot_env(ros_domain: str) -> dict[str, str]:
    """A shell environment as on a robot before the workspace is sourced: no PYTHONPATH of this checkout, no
    variable of ./run's environment."""
    keep = ("HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env.update(
        PATH=f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        ROS_DOMAIN_ID=ros_domain,
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        RMW_IMPLEMENTATION="rmw_fastrtps_cpp",
    )
    return env


def _in_workspace(ws: Path, command: str) -> str:
    """A bash script: the robot's ROS 2 (the venv and the underlay), then `command` in the workspace."""
    return "\n".join(
        [
            "set -eo pipefail",
            f"source {VENV / 'bin' / 'activate'}",
            'export AMENT_PREFIX_PATH="$VIRTUAL_ENV"',
            f"source {UNDERLAY / 'share' / 'composition_interfaces' / 'local_setup.bash'}",
            f"cd {ws}",
            command,
        ]
    )


def _bash(script: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
@pytest.mark.skipif(
    not UNDERLAY.is_dir(), reason=f"needs ./run's build of composition_interfaces ({UNDERLAY})"
)
def test_a_robot_workspace_builds_and_runs_from_its_install_space(tmp_path: Path, ros_domain: str) -> None:
    ws = tmp_path / "ros_ws"
    src = ws / "src" / "cosmos_reasoner_ros"
    for name in _tracked_files():  # what `git clone` of this revision gives (with uncommitted changes)
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    env = _robot_env(ros_domain)

    built = _bash(_in_workspace(ws, "colcon build"), env, timeout_s=900)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]

    sourced = "source install/setup.bash\n"
    where = _bash(
        _in_workspace(
            ws,
            sourced + "python -c 'import cosmos_reasoner_ros.node, cosmos_reasoner_ros.msg as m; "
            "print(cosmos_reasoner_ros.node.__file__); print(m.__file__)'; echo PYTHONPATH=$PYTHONPATH",
        ),
        env,
        timeout_s=120,
    )
    assert where.returncode == 0, where.stderr
    node_file, msg_file, pythonpath = where.stdout.strip().splitlines()[-3:]
    install = ws / "install" / "cosmos_reasoner_ros"
    assert Path(node_file).is_relative_to(install), node_file  # the modules and the messages, side by side
    assert Path(msg_file).is_relative_to(install), msg_file
    assert str(ROOT) not in pythonpath.split("=", 1)[1].split(":"), pythonpath

    for executable in EXECUTABLES:
        helped = _bash(
            _in_workspace(ws, sourced + f"ros2 run cosmos_reasoner_ros {executable} --help"), env, 120
        )
        assert helped.returncode == 0, f"{executable}: {helped.stdout}{helped.stderr}"
        assert "usage" in helped.stdout.lower(), f"{executable}: {helped.stdout}"

    # ros2 launch from the install space answers a Reason goal sent with `ros2 action send_goal`.
    params = tmp_path / "robot.yaml"
    with ScriptedServer(
        default=ScriptedReply(text="<think>\nclear path\n</think>\n\nmove forward")
    ) as server:
        params.write_text(
            yaml.safe_dump({"reasoner_node": {"ros__parameters": {"media_dir": str(tmp_path / "media")}}})
        )
        launch = subprocess.Popen(
            [
                "bash",
                "-c",
                _in_workspace(
                    ws,
                    sourced + "exec ros2 launch cosmos_reasoner_ros reasoner.launch.py start_server:=false "
                    f"server_url:={server.base_url} params_file:={params}",
                ),
            ],
            env={**env, "ROS_LOG_DIR": str(tmp_path / "log")},
            stdout=(tmp_path / "launch.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            with camera_process("/camera/image_raw", 320, 240):  # the camera of config/reasoner.yaml
                wait_until(
                    lambda: "is healthy" in (tmp_path / "launch.log").read_text(),
                    120.0,
                    "the node's server check",
                )
                # The node answers at once, with no_frames, until the camera's first frames have come (the
                # camera process may start after the node on a busy machine): ask again until they have.
                send_goal = _in_workspace(
                    ws,
                    sourced + "ros2 action send_goal /reasoner_node/reason "
                    "cosmos_reasoner_ros/action/Reason '{task: next_action}'",
                )
                deadline = time.monotonic() + 300
                while True:
                    goal = _bash(send_goal, env, timeout_s=180)
                    if "no_frames" not in goal.stdout or time.monotonic() > deadline:
                        break
                    time.sleep(1.0)
        finally:
            os.killpg(launch.pid, signal.SIGINT)
            try:
                launch.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(launch.pid, signal.SIGKILL)
                launch.wait(timeout=30)
    log = (tmp_path / "launch.log").read_text()
    assert goal.returncode == 0, goal.stdout + goal.stderr + log[-3000:]
    assert "SUCCEEDED" in goal.stdout and "move forward" in goal.stdout, goal.stdout + log[-3000:]
    assert server.requests, "the scripted server was never asked"
    assert launch.returncode == 0, log[-3000:]  # Ctrl-C stopped the launch and the node cleanly
