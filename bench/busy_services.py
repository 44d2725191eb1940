"""Services while the node is busy (issue 27): how long a managed reasoner_node takes to answer its lifecycle,
parameter and trigger services, idle and saturated, and how long a deactivate takes with goals in flight.

Saturated: `--goals` Reason goals kept in flight (each answered by the scripted server as 200 streamed words,
10 ms apart: feedback at the node's rate for every goal), a 640x480 camera at 30 Hz; then the same beside
`--burners` CPU-burning processes (the busy robot computer). Meanwhile a probe asks get_state,
get_parameters and ~/trigger every 0.2 s and times each answer (send to answer). At the end of each phase,
deactivate with the goals in flight, then activate again: the transitions' round trips.

`--before PATH` runs the same phases, alternating, against the package's sources at PATH (a checkout of an
earlier commit; the messages come from this environment), so that before and after are measured side by side
in one run. Writes bench/results/busy_services.json.
    ./run exec python bench/busy_services.py [--seconds 15] [--goals 40] [--burners 2] [--before /tmp/base]
Goal: every answer within a second at p95 while saturated, none lost.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from figures import latency_ms
from support.camera_publisher import camera_process
from support.load import node_process
from support.paths import BENCH_RESULTS, SHM_PROFILE
from support.processes import bench_domain, wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.ros_compat import fastdds_profile_env

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", bench_domain())
os.environ.update({k: os.environ.get(k, v) for k, v in fastdds_profile_env(SHM_PROFILE).items()})

TOPIC = "/busy_cam/image_raw"
WORDS = " ".join(f"w{i}" for i in range(200))


def burn(parent: int) -> None:
    while os.getppid() == parent:
        for _ in range(1_000_000):
            pass


class Client:
    """The probe: lifecycle, parameters, trigger and the action, on a private context."""

    def __init__(self, name: str) -> None:
        import rclpy
        from cosmos_reasoner_ros.action import Reason
        from lifecycle_msgs.srv import ChangeState, GetState
        from rcl_interfaces.srv import GetParameters
        from rclpy.action import ActionClient
        from rclpy.context import Context
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from std_srvs.srv import Trigger

        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("busy_probe", context=self.context)
        deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.change = self.node.create_client(ChangeState, f"/{name}/change_state")
        self.get_state = self.node.create_client(GetState, f"/{name}/get_state")
        self.get_parameters = self.node.create_client(GetParameters, f"/{name}/get_parameters")
        self.trigger = self.node.create_client(Trigger, f"/{name}/trigger", qos_profile=deep)
        self.action = ActionClient(
            self.node,
            Reason,
            f"/{name}/reason",
            goal_service_qos_profile=deep,
            result_service_qos_profile=deep,
        )
        self.types = {"ChangeState": ChangeState, "GetState": GetState, "GetParameters": GetParameters}
        self.Trigger, self.Reason = Trigger, Reason
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()
        for client in (self.change, self.get_state, self.get_parameters):
            assert client.wait_for_service(timeout_sec=60)

    def close(self) -> None:
        import rclpy

        self.action.destroy()
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)

    def timed(self, client: Any, request: Any, out: list[float], lost: list[int]) -> None:
        sent = time.monotonic()
        future = client.call_async(request)
        future.add_done_callback(lambda _f: out.append(time.monotonic() - sent))

        def check() -> None:
            if not future.done():
                lost.append(1)

        threading.Timer(60.0, check).start()

    def transition(self, transition_id: int) -> float:
        from lifecycle_msgs.msg import Transition

        sent = time.monotonic()
        future = self.change.call_async(
            self.types["ChangeState"].Request(transition=Transition(id=transition_id))
        )
        wait_until(future.done, 120.0, f"transition {transition_id}")
        assert future.result().success, transition_id
        return time.monotonic() - sent


def _keep_goals(name: str, count: int, stop: Any, ended: Any) -> None:
    """In a process of its own (so that the goals' feedback and results do not slow the measuring probe):
    `count` goals in flight, each one's end sending the next, until `stop` is set."""
    import rclpy
    from cosmos_reasoner_ros.action import Reason
    from rclpy.action import ActionClient
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    rclpy.init()
    node = rclpy.create_node("busy_goals")
    deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    action = ActionClient(
        node, Reason, f"/{name}/reason", goal_service_qos_profile=deep, result_service_qos_profile=deep
    )
    assert action.wait_for_server(timeout_sec=60)

    def send() -> None:
        if not stop.is_set():
            action.send_goal_async(Reason.Goal(task="next_action")).add_done_callback(accepted)

    def accepted(future: Any) -> None:
        handle = future.result()
        if handle is not None and handle.accepted:
            handle.get_result_async().add_done_callback(done)

    def done(_future: Any) -> None:
        with ended.get_lock():
            ended.value += 1
        send()

    for _ in range(count):
        send()
    while not stop.is_set():
        rclpy.spin_once(node, timeout_sec=0.1)
    action.destroy()
    node.destroy_node()
    rclpy.try_shutdown()


class GoalLoad:
    """`count` goals kept in flight by a process of its own."""

    def __init__(self, name: str, count: int) -> None:
        self.name, self.count = name, count
        self._context = multiprocessing.get_context("spawn")
        self._stop = self._context.Event()
        self._ended = self._context.Value("i", 0)
        self._process: Any = None

    @property
    def ended(self) -> int:
        return int(self._ended.value)

    def start(self) -> None:
        self._process = self._context.Process(
            target=_keep_goals, args=(self.name, self.count, self._stop, self._ended), daemon=True
        )
        self._process.start()

    def stop(self) -> None:
        self._stop.set()
        self._process.join(60)


def phase(client: Client, server: ScriptedServer, seconds: float, load: GoalLoad | None) -> dict[str, Any]:
    latencies: dict[str, list[float]] = {"get_state": [], "get_parameters": [], "trigger": []}
    lost: list[int] = []
    assert client.trigger.wait_for_service(timeout_sec=60)  # (before issue 27 it went at every deactivate)
    if load is not None:
        seen = len(server.requests)
        load.start()
        assert server.wait_requests(seen + load.count, 60.0), "the goals never reached the server"
    start = time.monotonic()
    i = 0
    while time.monotonic() < start + seconds:
        time.sleep(max(0.0, start + 0.2 * i - time.monotonic()))
        i += 1
        client.timed(client.get_state, client.types["GetState"].Request(), latencies["get_state"], lost)
        request = client.types["GetParameters"].Request(names=["clip_seconds", "task"])
        client.timed(client.get_parameters, request, latencies["get_parameters"], lost)
        client.timed(client.trigger, client.Trigger.Request(), latencies["trigger"], lost)
    wait_until(lambda: all(len(v) >= i for v in latencies.values()), 60.0, "every answer")
    figures: dict[str, Any] = {k: latency_ms(v) for k, v in latencies.items()}
    figures["unanswered_after_60_s"] = len(lost)
    figures["deactivate_s"] = round(client.transition(4), 3)  # with the goals (if any) in flight
    if load is not None:
        load.stop()
        figures["goals_ended"] = load.ended
    figures["activate_s"] = round(client.transition(3), 3)
    return figures


def measure(source: Path | None, seconds: float, goals: int, burners: int) -> dict[str, Any]:
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="busy-")))
        server = stack.enter_context(ScriptedServer(default=ScriptedReply(text=WORDS, chunk_delay_s=0.01)))
        stack.enter_context(camera_process(TOPIC, 640, 480, rate=30.0))
        name = "busy_node"
        params = {
            "lifecycle": True,
            "cameras": ["front"],
            "camera": {"front": {"topic": TOPIC}},
            "server_url": server.base_url,
            "media_dir": str(work / "media"),
            "clip_seconds": 1.0,
            "max_retries": 0,
            "request_timeout_s": 60.0,
            "task": "next_action",
            "max_in_flight": goals + 1,
            "request_queue_depth": 1024,
        }
        node = stack.enter_context(node_process(params, work, name, source_root=source))
        client = Client(name)
        stack.callback(client.close)
        client.transition(1)
        client.transition(3)
        figures = {
            "idle": phase(client, server, seconds, None),
            "saturated": phase(client, server, seconds, GoalLoad(name, goals)),
        }
        processes = [
            multiprocessing.Process(target=burn, args=(os.getpid(),), daemon=True) for _ in range(burners)
        ]
        for process in processes:
            process.start()
        try:
            busy = phase(client, server, seconds, GoalLoad(name, goals))
            figures[f"saturated_beside_{burners}_burners"] = busy
        finally:
            for process in processes:
                process.kill()
                process.join()
        figures["deactivate_with_goals_held_at_the_server"] = held_deactivate(client, server, goals)
        figures["node_exit_code"], _ = node.stop()
        return figures


def held_deactivate(client: Client, server: ScriptedServer, goals: int) -> dict[str, Any]:
    """The lifecycle test that failed on a busy machine: `goals` goals held by the server (it answers after
    30 s), then deactivate; its round trip, and every goal's result asked after it."""

    def frames_buffered() -> bool:  # after the last activate: a request reaches the server
        seen = len(server.requests)
        client.trigger.call_async(client.Trigger.Request())
        return server.wait_requests(seen + 1, 1.0)

    wait_until(frames_buffered, 60.0, "frames in the node again")
    server.default = ScriptedReply(text="late", delay_s=30.0)
    seen = len(server.requests)
    sent = [client.action.send_goal_async(client.Reason.Goal(task="next_action")) for _ in range(goals)]
    wait_until(lambda: all(f.done() for f in sent), 60.0, "every goal's acceptance")
    assert server.wait_requests(seen + goals, 60.0), "the goals never reached the server"
    took = client.transition(4)
    results = [f.result().get_result_async() for f in sent if f.result().accepted]
    start = time.monotonic()
    wait_until(lambda: all(r.done() for r in results), 120.0, "every goal's result")
    return {
        "goals": goals,
        "deactivate_s": round(took, 3),
        "results_after_deactivate_s": round(time.monotonic() - start, 3),
        "results": len(results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--goals", type=int, default=40)
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--before", type=Path, help="the package's sources of an earlier commit")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS / "busy_services.json")
    args = parser.parse_args()
    figures: dict[str, Any] = {"benchmark": "busy_services", "goals": args.goals, "seconds": args.seconds}
    for round_number in range(args.rounds):
        if args.before is not None:
            figures[f"before_round_{round_number + 1}"] = measure(
                args.before, args.seconds, args.goals, args.burners
            )
        figures[f"now_round_{round_number + 1}"] = measure(None, args.seconds, args.goals, args.burners)
        print(json.dumps(figures), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
