"""The ROS 2 launch tools in tests: whether they are here, their command lines, and reading their output.

`launch`, `launch_ros`, `launch_testing` and the `ros2` command are not on PyPI; `./run` installs them from
the wheels in ../shared/ros2-python when that folder is beside the repository (a robot has them from its ROS 2
install). Launch tests (files with generate_test_description) run through launch_testing's own runner,
`python -m launch_testing.launch_test FILE`: its pytest plugin cannot load under pytest 9 (pyproject.toml).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros import server
from support.paths import SHARED
from support.processes import ros_env

PACKAGE = "cosmos_reasoner_ros"
SHARED_WHEELS = SHARED / "ros2-python" / "wheels"
# `launch` alone may resolve to this repository's launch/ folder (a namespace package): look for submodules.
MODULES = (
    "launch.actions",
    "launch_ros.actions",
    "launch_testing.launch_test",
    "launch_testing_ros.wait_for_topics",
    "ros2cli.cli",
    "ros2launch.command",
    "composition_interfaces.srv",
)


def missing_reason() -> str | None:
    """Why the launch tier cannot run here (for pytest.skip), or None."""
    where = (
        f"./run installs them from {SHARED_WHEELS}"
        if SHARED_WHEELS.is_dir()
        else f"they are not on PyPI, and {SHARED_WHEELS.parent} (their wheels) is absent beside this checkout"
    )
    for module in MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"needs the ROS 2 launch tools (`{module.split('.')[0]}` is missing): {where}"
    if shutil.which("ros2") is None:
        return f"needs the `ros2` command on PATH: {where}"
    try:
        share_dir()
    except LookupError as exc:
        return str(exc)
    return None


def share_dir() -> Path:
    """The package's installed share directory (what `ros2 launch` reads), from the ament index."""
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        return Path(get_package_share_directory(PACKAGE))
    except PackageNotFoundError:
        raise LookupError(
            f"{PACKAGE} is not installed in AMENT_PREFIX_PATH (run through ./run exec)"
        ) from None


def reasoner_launch_file() -> Path:
    return share_dir() / "launch" / "reasoner.launch.py"


def include_reasoner(server_url: str, media_dir: Path, **arguments: str) -> Any:
    """reasoner.launch.py included with no server of its own (`start_server:=false`), asking `server_url`,
    clips in `media_dir`, and these further launch arguments."""
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import PythonLaunchDescriptionSource

    return IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(reasoner_launch_file())),
        launch_arguments={
            "start_server": "false",
            "server_url": server_url,
            "media_dir": str(media_dir),
            **arguments,
        }.items(),
    )


def ros2(*args: str) -> list[str]:
    """A `ros2 ...` command line (the command users type)."""
    exe = shutil.which("ros2")
    assert exe is not None, "ros2 is not on PATH"
    return [exe, *args]


def launch_command(*arguments: str) -> list[str]:
    """`ros2 launch cosmos_reasoner_ros reasoner.launch.py name:=value ...`"""
    return ros2("launch", PACKAGE, "reasoner.launch.py", *arguments)


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameters as ROS names them: {"a": {"b": {"c": 1}}} -> {"a.b.c": 1}."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


@dataclass(frozen=True)
class CaseResult:
    name: str
    outcome: str  # "passed", "failure", "error" or "skipped"
    message: str = ""


@dataclass(frozen=True)
class LaunchTestRun:
    returncode: int
    output: str  # the runner's stdout and stderr: launch's own log lines and every process's output
    cases: tuple[CaseResult, ...]

    def outcomes(self) -> dict[str, str]:
        return {c.name: c.outcome for c in self.cases}

    def report(self) -> str:
        return f"launch_test exited {self.returncode}:\n{self.output[-6000:]}"


def read_junit(path: Path) -> tuple[CaseResult, ...]:
    if not path.exists():
        return ()
    cases = []
    for case in ET.parse(path).iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            child = case.find(kind)
            if child is not None:
                outcome, message = kind, (child.get("message") or child.text or "")
                break
        cases.append(CaseResult(case.get("name", ""), outcome, message))
    return tuple(cases)


def run_launch_test(
    path: Path,
    work_dir: Path,
    timeout_s: float,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> LaunchTestRun:
    """`python -m launch_testing.launch_test PATH args...`, with a JUnit report; killed on timeout."""
    junit = work_dir / f"{path.stem}.junit.xml"
    cmd = [sys.executable, "-m", "launch_testing.launch_test", str(path), "--junit-xml", str(junit), *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=ros_env(**dict(env or {})),
        start_new_session=True,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError(
            f"launch_test {path.name} ran longer than {timeout_s} s:\n{output[-6000:]}"
        ) from None
    return LaunchTestRun(proc.returncode, output, read_junit(junit))


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) of process group `pgid`, from /proc."""
    return server.group_members(pgid)


class ProbeCase(unittest.TestCase):
    """A launch test case with a probe node of its own (private context, single-threaded executor) and a
    spinning wait; the launched processes are reached over DDS like any client would."""

    probe_name = "launch_probe"

    @classmethod
    def setUpClass(cls) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        cls.context = rclpy.Context()
        rclpy.init(context=cls.context)
        cls.node = rclpy.create_node(cls.probe_name, context=cls.context)
        cls.executor = SingleThreadedExecutor(context=cls.context)
        cls.executor.add_node(cls.node)

    @classmethod
    def tearDownClass(cls) -> None:
        import rclpy

        cls.executor.shutdown()
        cls.node.destroy_node()
        rclpy.shutdown(context=cls.context)

    def spin_until(self, predicate: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout_s} s waiting for {what}")
            self.executor.spin_once(timeout_sec=0.1)


class CleanShutdown(unittest.TestCase):
    """The post-shutdown checks of a launch test: every process exited cleanly, and none logged a traceback.
    A launch file subclasses it under `@launch_testing.post_shutdown_test()`, naming it as
    `launch_tools.CleanShutdown`: a class imported into the file itself would be run as a test while the
    processes are up."""

    def test_every_process_exited_cleanly(self, proc_info: Any) -> None:
        import launch_testing.asserts

        launch_testing.asserts.assertExitCodes(proc_info)

    def test_the_node_logged_no_traceback(self, proc_output: Any) -> None:
        text = "\n".join(o.text.decode(errors="replace") for o in proc_output)
        self.assertNotIn("Traceback", text)
