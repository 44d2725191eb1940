"""launch_testing: `reasoner.launch.py lifecycle:=true start_server:=false` against the scripted server,
driven with `ros2 lifecycle` as an operator (or a lifecycle manager) would.

Walked: unconfigured -> configure -> inactive -> activate -> active (a ~/trigger call gets its result) ->
deactivate -> inactive (~/trigger refused) -> cleanup -> unconfigured -> shutdown -> finalized; `ros2
lifecycle get` after each step, and what is served in each state. After shutdown every process exited cleanly.

  ./run exec python -m launch_testing.launch_test test/launch_tier/lifecycle_launch.py
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
from cosmos_reasoner_ros.msg import ReasonerResult
from diagnostic_msgs.msg import DiagnosticArray
from launch import LaunchDescription
from launch.actions import ExecuteProcess
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger
from support import launch_tools
from support.processes import module_cmd
from support.vllm_tier import free_port

NODE = "/reasoner_node"
CAMERA_TOPIC = "/camera/image_raw"  # the camera of config/reasoner.yaml
_WORK = tempfile.TemporaryDirectory(prefix="crr-lifecycle-")


def generate_test_description() -> tuple[LaunchDescription, dict[str, Any]]:
    port = free_port()
    server = ExecuteProcess(
        cmd=module_cmd("support.scripted_server", "--port", str(port)),
        name="scripted_server",
        output="screen",
    )
    camera = ExecuteProcess(
        cmd=module_cmd(
            "support.camera_publisher", "--topic", CAMERA_TOPIC, "--width", "320", "--height", "240"
        ),
        name="camera",
        output="screen",
    )
    reasoner = launch_tools.include_reasoner(
        f"http://127.0.0.1:{port}/v1",
        Path(_WORK.name) / "media",
        lifecycle="true",
    )
    return LaunchDescription([server, camera, reasoner, launch_testing.actions.ReadyToTest()]), {}


def lifecycle(*args: str) -> str:
    """`ros2 lifecycle ARGS --no-daemon`, retried: a fresh CLI process may not have discovered the node.

    Without a daemon the CLI spins only `--spin-time` (0.5 s by default) for discovery before it lists nodes;
    on a busy machine (CI runs two suites side by side on 2 cores) that is too short often enough that 30 s of
    retries all said "Node not found". Each try spins 3 s, and the tries go on for 90 s."""
    deadline = time.monotonic() + 90.0
    while True:
        done = subprocess.run(
            launch_tools.ros2("lifecycle", *args, "--no-daemon", "--spin-time", "3"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode == 0 and "not found" not in done.stdout + done.stderr:
            return done.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"ros2 lifecycle {' '.join(args)}: {done.stdout}{done.stderr}")
        time.sleep(0.5)


class TestTransitions(launch_tools.ProbeCase):
    probe_name = "lifecycle_probe"

    def state(self) -> str:
        return lifecycle("get", NODE).split()[0]

    def trigger_refused(self, state: str) -> None:
        """~/trigger is there in every state; unless the node is active it makes no request and says why."""
        client = self.node.create_client(Trigger, f"{NODE}/trigger")
        self.assertTrue(client.wait_for_service(timeout_sec=30))
        future = client.call_async(Trigger.Request())
        self.spin_until(future.done, 30, "the trigger reply")
        reply = future.result()
        self.assertFalse(reply.success)
        self.assertIn(f"not active (lifecycle state {state})", reply.message)
        self.node.destroy_client(client)

    def test_walk_every_transition(self) -> None:
        self.spin_until(
            lambda: self.node.count_services(f"{NODE}/get_state") > 0, 60, "the lifecycle services"
        )
        self.assertEqual(self.state(), "unconfigured")
        self.trigger_refused("unconfigured")

        lifecycle("set", NODE, "configure")
        self.assertEqual(self.state(), "inactive")
        self.spin_until(lambda: self.node.count_publishers(f"{NODE}/result") > 0, 20, "the result publisher")
        self.trigger_refused("inactive")

        buffered: list[int] = []  # the node's frames_buffered, from its /diagnostics (published while active)

        def on_diagnostics(msg: DiagnosticArray) -> None:
            for status in msg.status:
                if " camera " in status.name:
                    buffered.append(int({kv.key: kv.value for kv in status.values}.get("frames_buffered", 0)))

        self.node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
        lifecycle("set", NODE, "activate")
        self.assertEqual(self.state(), "active")
        results: list[ReasonerResult] = []
        qos = QoSProfile(depth=20, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(ReasonerResult, f"{NODE}/result", results.append, qos)
        client = self.node.create_client(Trigger, f"{NODE}/trigger")
        self.assertTrue(client.wait_for_service(timeout_sec=30))
        # Frames at the activated subscription (on a busy machine the camera may start after the node).
        self.spin_until(lambda: bool(buffered) and buffered[-1] > 2, 60, "frames buffered by the node")
        future = client.call_async(Trigger.Request())
        self.spin_until(future.done, 30, "the trigger reply")
        request_id = future.result().message.split()[0]
        self.spin_until(
            lambda: any(r.request_id == request_id for r in results), 60, "the result while active"
        )
        result = next(r for r in results if r.request_id == request_id)
        self.assertTrue(result.success, (result.error_kind, result.error))

        lifecycle("set", NODE, "deactivate")
        self.assertEqual(self.state(), "inactive")
        self.trigger_refused("inactive")

        lifecycle("set", NODE, "cleanup")
        self.assertEqual(self.state(), "unconfigured")
        self.spin_until(lambda: self.node.count_publishers(f"{NODE}/result") == 0, 20, "the publishers gone")

        lifecycle("set", NODE, "shutdown")
        self.assertEqual(self.state(), "finalized")


@launch_testing.post_shutdown_test()
class TestShutdown(launch_tools.CleanShutdown):
    """Every process exited cleanly; none logged a traceback."""
