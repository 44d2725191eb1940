"""launch_testing: `reasoner.launch.py start_server:=false` against the scripted OpenAI-compatible server.

Launched: the package's installed reasoner.launch.py (what `ros2 launch` reads) pointed at the scripted
server, the scripted server and a camera process. Checked while running: /diagnostics flows (WaitForTopics), a
~/trigger call gets exactly one ~/result, `ros2 param dump` of the node has exactly the keys of
config/reasoner.yaml. After shutdown (launch sends SIGINT to every process, as on Ctrl-C): every process
exited with 0.

  ./run exec python -m launch_testing.launch_test test/launch_tier/scripted_server_launch.py
(test/launch_tier/test_launch_tier.py runs it in the test suite.)
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import launch_testing
import launch_testing.actions
import launch_testing.asserts
import yaml
from cosmos_reasoner_ros.msg import ReasonerResult
from diagnostic_msgs.msg import DiagnosticArray
from launch import LaunchDescription
from launch.actions import ExecuteProcess
from launch_testing_ros import WaitForTopics
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger
from support import launch_tools
from support.paths import REASONER_YAML
from support.processes import module_cmd
from support.vllm_tier import free_port

from cosmos_reasoner_ros import launch_config

NODE = "/reasoner_node"
CAMERA_TOPIC = "/camera/image_raw"  # the camera of config/reasoner.yaml
SCRIPTED_ANSWER = "scripted answer"  # the scripted server's default reply ends with it
_WORK = tempfile.TemporaryDirectory(prefix="crr-launch-")  # removed when the runner exits
# The test's own stand-ins (the server, the camera: rclpy and numpy in a Python of their own) get the node's
# budget after Ctrl-C too: launch's 5 s escalated to SIGTERM on a loaded machine, which no product code ran.
HELPER_SIGTERM_TIMEOUT_S = str(launch_config.NODE_SIGTERM_TIMEOUT_S)


def generate_test_description() -> tuple[LaunchDescription, dict[str, Any]]:
    port = free_port()
    server = ExecuteProcess(
        cmd=module_cmd("support.scripted_server", "--port", str(port)),
        name="scripted_server",
        output="screen",
        sigterm_timeout=HELPER_SIGTERM_TIMEOUT_S,
    )
    camera = ExecuteProcess(
        cmd=module_cmd(
            "support.camera_publisher",
            "--topic",
            CAMERA_TOPIC,
            "--width",
            "320",
            "--height",
            "240",
            "--rate",
            "8",
        ),
        name="camera",
        output="screen",
        sigterm_timeout=HELPER_SIGTERM_TIMEOUT_S,
    )
    reasoner = launch_tools.include_reasoner(
        f"http://127.0.0.1:{port}/v1",
        Path(_WORK.name) / "media",
    )
    return (
        LaunchDescription([server, camera, reasoner, launch_testing.actions.ReadyToTest()]),
        {"server": server, "camera": camera},
    )


def _status_values(msg: DiagnosticArray, name_part: str) -> dict[str, str] | None:
    for status in msg.status:
        if name_part in status.name:
            return {kv.key: kv.value for kv in status.values}
    return None


class TestRunning(launch_tools.ProbeCase):
    probe_name = "launch_tier_probe"

    def test_diagnostics_flow(self) -> None:
        with WaitForTopics([("/diagnostics", DiagnosticArray)], timeout=30.0) as wait:
            messages = wait.received_messages("/diagnostics")
        names = {s.name for m in messages for s in m.status}
        self.assertTrue(
            [n for n in names if n.startswith("reasoner_node")], f"statuses seen: {sorted(names)}"
        )

    def test_trigger_gets_one_result(self) -> None:
        latest: list[DiagnosticArray] = []
        results: list[ReasonerResult] = []
        self.node.create_subscription(DiagnosticArray, "/diagnostics", latest.append, 10)
        self.node.create_subscription(
            ReasonerResult,
            f"{NODE}/result",
            results.append,
            QoSProfile(depth=20, reliability=ReliabilityPolicy.RELIABLE),
        )

        def frames_buffered() -> bool:
            values = next((v for m in reversed(latest) if (v := _status_values(m, "camera"))), None)
            return values is not None and int(values.get("buffer_frames", "0")) >= 2

        self.spin_until(frames_buffered, 60.0, "camera frames in the node's buffer (/diagnostics)")
        client = self.node.create_client(Trigger, f"{NODE}/trigger")
        self.assertTrue(client.wait_for_service(timeout_sec=30.0), "~/trigger never appeared")
        future = client.call_async(Trigger.Request())
        self.spin_until(future.done, 30.0, "the ~/trigger response")
        response = future.result()
        self.assertTrue(response.success, response.message)
        request_id = response.message
        self.spin_until(
            lambda: any(r.request_id == request_id for r in results), 60.0, f"result {request_id}"
        )
        end = time.monotonic() + 2.0  # a second result for the same request would arrive by now
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.1)
        mine = [r for r in results if r.request_id == request_id]
        self.assertEqual(len(mine), 1, f"{len(mine)} results for {request_id}")
        self.assertTrue(mine[0].success, f"{mine[0].error_kind}: {mine[0].error}")
        self.assertTrue(mine[0].answer.endswith(SCRIPTED_ANSWER), mine[0].answer)
        self.assertGreater(mine[0].clip_frames, 0)

    def test_param_dump_has_the_keys_of_reasoner_yaml(self) -> None:
        dump = subprocess.run(
            launch_tools.ros2("param", "dump", NODE, "--no-daemon", "--timeout", "20"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(dump.returncode, 0, dump.stderr)
        dumped = launch_tools.flatten(yaml.safe_load(dump.stdout)[NODE]["ros__parameters"])
        documented = launch_tools.flatten(
            yaml.safe_load(REASONER_YAML.read_text())["reasoner_node"]["ros__parameters"]
        )
        # Every rclpy node has a few parameters of its own (use_sim_time, ...): not the package's to document.
        own = set(self.node.list_parameters([], 0).names)
        self.assertTrue(own, "a bare rclpy node lists no parameters")
        declared = set(dumped) - own
        self.assertEqual(
            (sorted(declared - set(documented)), sorted(set(documented) - declared)),
            ([], []),
            "(declared by the node but not in config/reasoner.yaml, "
            "in config/reasoner.yaml but not declared by the node)",
        )


@launch_testing.post_shutdown_test()
class TestShutdown(launch_tools.CleanShutdown):
    """Every process exited cleanly; none logged a traceback."""
