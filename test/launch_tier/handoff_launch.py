"""launch_testing: a drive_path answer walked through the Nav2 handoff's gates to the stand-in controller
server and back, with the package's installed reasoner.launch.py and its handoff arguments.

Launched: reasoner.launch.py (start_server:=false, handoff:=follow_path camera_height_m:=0.5
camera_pitch_deg:=20 controller_id:=FollowPath goal_checker_id:=goal_checker
progress_checker_id:=progress_checker, a params file asking drive_path), the scripted server answering a
path on the floor, a camera process with CameraInfo, and the stand-in Nav2 servers (support.nav2_standins,
republishing each goal's path). Checked while running: the handoff sees Nav2 (/diagnostics), a ~/trigger
gets one ~/result whose handoff decision is `sent` with every gate passed, the controller server receives
exactly that path (frame, stamp, poses), and the goal's end comes back on ~/handoff/decision. After shutdown:
every process exited with 0, no traceback.

  ./run exec python -m launch_testing.launch_test test/launch_tier/handoff_launch.py
(test/launch_tier/test_launch_tier.py runs it in the test suite.)
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import launch_testing
import launch_testing.actions
import launch_testing.asserts
import yaml
from cosmos_reasoner_ros.msg import HandoffDecision, ReasonerResult
from diagnostic_msgs.msg import DiagnosticArray
from launch import LaunchDescription
from launch.actions import ExecuteProcess
from nav_msgs.msg import Path as PathMsg
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger
from support import launch_tools
from support.handoff_answers import AHEAD, points_text
from support.nav2_standins import LATCHED
from support.paths import REASONER_YAML
from support.processes import module_cmd
from support.vllm_tier import free_port

from cosmos_reasoner_ros import launch_config

NODE = "/reasoner_node"
CAMERA_TOPIC, INFO_TOPIC, FRAME = "/camera/image_raw", "/camera/camera_info", "front_optical"
_WORK = tempfile.TemporaryDirectory(prefix="crr-handoff-launch-")  # removed when the runner exits
HELPER_SIGTERM_TIMEOUT_S = str(launch_config.NODE_SIGTERM_TIMEOUT_S)


def _files() -> tuple[Path, Path]:
    """A params file asking drive_path of the shipped one's camera, and the scripted server's reply file."""
    work = Path(_WORK.name)
    params = yaml.safe_load(REASONER_YAML.read_text())
    node = params["reasoner_node"]["ros__parameters"]
    node.update({"task": "drive_path", "instruction": "go to the door"})
    node["camera"]["camera"]["frame_id"] = FRAME
    node["handoff"].update({"camera_info_topic": INFO_TOPIC, "max_age_s": 10.0, "server_timeout_s": 1.0})
    params_file = work / "reasoner.yaml"
    params_file.write_text(yaml.safe_dump(params))
    replies = work / "replies.json"
    replies.write_text(json.dumps({"default": {"text": points_text(AHEAD)}}))
    return params_file, replies


def generate_test_description() -> tuple[LaunchDescription, dict[str, Any]]:
    port = free_port()
    params_file, replies = _files()

    def helper(name: str, cmd: list[str]) -> ExecuteProcess:
        return ExecuteProcess(cmd=cmd, name=name, output="screen", sigterm_timeout=HELPER_SIGTERM_TIMEOUT_S)

    server = helper(
        "scripted_server",
        module_cmd("support.scripted_server", "--port", str(port), "--reply-file", str(replies)),
    )
    camera = helper(
        "camera",
        module_cmd(
            "support.camera_publisher",
            *("--topic", CAMERA_TOPIC, "--info-topic", INFO_TOPIC, "--frame-id", FRAME),
            *("--width", "640", "--height", "480", "--rate", "8"),
        ),
    )
    nav2 = helper(
        "nav2_standins",
        module_cmd("support.nav2_standins", "--follow-path", "/follow_path", "--duration", "0.5"),
    )
    reasoner = launch_tools.include_reasoner(
        f"http://127.0.0.1:{port}/v1",
        Path(_WORK.name) / "media",
        params_file=str(params_file),
        handoff="follow_path",
        camera_height_m="0.5",
        camera_pitch_deg="20",
        controller_id="FollowPath",
        goal_checker_id="goal_checker",
        progress_checker_id="progress_checker",
    )
    return (
        LaunchDescription([server, camera, nav2, reasoner, launch_testing.actions.ReadyToTest()]),
        {"server": server, "camera": camera, "nav2": nav2},
    )


def _handoff_values(messages: list[DiagnosticArray]) -> dict[str, str] | None:
    for msg in reversed(messages):
        for status in msg.status:
            if status.name == "reasoner_node: handoff":
                return {kv.key: kv.value for kv in status.values}
    return None


class TestHandoff(launch_tools.ProbeCase):
    probe_name = "handoff_launch_probe"

    def test_a_trajectory_answer_walks_through_the_gates_to_the_controller_server_and_back(self) -> None:
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        diagnostics: list[DiagnosticArray] = []
        results: list[ReasonerResult] = []
        decisions: list[HandoffDecision] = []
        received: list[PathMsg] = []
        self.node.create_subscription(DiagnosticArray, "/diagnostics", diagnostics.append, 10)
        self.node.create_subscription(ReasonerResult, f"{NODE}/result", results.append, reliable)
        self.node.create_subscription(HandoffDecision, f"{NODE}/handoff/decision", decisions.append, reliable)
        self.node.create_subscription(PathMsg, "/nav2_standin/received", received.append, LATCHED)

        def ready() -> bool:
            values = _handoff_values(diagnostics)
            return (
                values is not None
                and values["nav2"] == "on the graph"
                and values["camera_info"] == "received"
            )

        self.spin_until(ready, 90.0, "the handoff seeing Nav2 and CameraInfo (/diagnostics)")
        client = self.node.create_client(Trigger, f"{NODE}/trigger")
        self.assertTrue(client.wait_for_service(timeout_sec=30.0), "~/trigger never appeared")
        future = client.call_async(Trigger.Request())
        self.spin_until(future.done, 30.0, "the ~/trigger response")
        request_id = future.result().message.split()[0]
        self.spin_until(
            lambda: any(r.request_id == request_id for r in results), 60.0, f"result {request_id}"
        )
        (result,) = [r for r in results if r.request_id == request_id]
        self.assertTrue(result.success, result.error)
        sent = result.handoff
        self.assertEqual(sent.decision, "sent", sent.reason)
        self.assertEqual(
            [(g.name, g.passed) for g in sent.gates],
            [(n, True) for n in ("answer", "checks", "ground_path", "age", "newer", "server")],
        )
        self.spin_until(lambda: bool(received), 30.0, "the path at the stand-in controller server")
        path = received[0]
        self.assertEqual(path.header, sent.path.header)
        self.assertEqual(path.header.frame_id, FRAME)
        self.assertEqual(path.header.stamp, result.clip_end)
        self.assertEqual([p.pose for p in path.poses], [p.pose for p in sent.path.poses])
        self.assertGreater(len(path.poses), 5)

        def ended() -> bool:
            return any(
                d.request_id == request_id
                and d.decision.startswith("goal_")
                and d.decision not in ("goal_accepted", "goal_feedback")
                for d in decisions
            )

        self.spin_until(ended, 30.0, "the goal's end on ~/handoff/decision")
        kinds = [d.decision for d in decisions if d.request_id == request_id]
        # The goal's feedback comes back too, as goal_feedback decisions at most 2 a second.
        self.assertEqual(
            [k for k in kinds if k != "goal_feedback"], ["sent", "goal_accepted", "goal_succeeded"]
        )
        self.assertIn("goal_feedback", kinds)


@launch_testing.post_shutdown_test()
class TestShutdown(launch_tools.CleanShutdown):
    """Every process exited cleanly; none logged a traceback."""
