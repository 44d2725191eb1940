"""Load on reasoner_node as a robot integrator applies it, for the storm and soak tests and benchmarks:
`reasoner_node` in a process of its own (`python -m cosmos_reasoner_ros.node`, stopped by a signal),
camera processes, and a probe that calls the trigger service and the Reason action in bursts and counts the
replies, goal states and ~/result messages.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from support.processes import module_cmd, ros_env, wait_until

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class NodeRun:
    """A reasoner_node process: its pid, memory and CPU from /proc, and a signal stop."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float:
        with open(f"/proc/{self.pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20

    def memory_mb(self) -> dict[str, float]:
        """RSS split as the kernel counts it: anonymous (the process's own heap and arrays), file-backed
        (libraries) and shared memory (here: the Fast DDS shared-memory segments of the camera processes,
        mapped to read their images: pages shared with those processes, not the node's own allocations)."""
        values: dict[str, float] = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    values[key] = round(int(rest.split()[0]) / 1024, 1)
        return values

    def cpu_s(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(
        self, signum: int = signal.SIGINT, timeout_s: float = 20.0, repeat: int = 1, gap_s: float = 0.02
    ) -> tuple[int, float]:
        """Send the signal (`repeat` times, `gap_s` apart, while the process lives: an impatient operator or
        a supervisor); (exit code, seconds from the first one until exit). Kills after timeout_s (code then
        < 0)."""
        sent = time.monotonic()
        for i in range(repeat):
            if self.proc.poll() is not None:
                break
            if i:
                time.sleep(gap_s)
            self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return code, time.monotonic() - sent


@contextmanager
def node_process(
    params: dict[str, Any], work_dir: Path, name: str = "reasoner_node", source_root: Path | None = None
) -> Iterator[NodeRun]:
    """`python -m cosmos_reasoner_ros.node` with these parameters (a params file); SIGINT at the end.
    `source_root`: the package's sources from another checkout (a benchmark's before and after side by side;
    the messages come from this environment)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    params_file = work_dir / f"{name}.yaml"
    params_file.write_text(yaml.safe_dump({name: {"ros__parameters": params}}))
    log_path = work_dir / f"{name}.log"
    cmd = module_cmd(
        "cosmos_reasoner_ros.node", "--ros-args", "-r", f"__node:={name}", "--params-file", str(params_file)
    )
    with open(log_path, "wb") as log:
        env = ros_env()
        if source_root is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(source_root), env["PYTHONPATH"]])
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    run = NodeRun(proc, log_path)
    try:
        yield run
    finally:
        run.stop()


class Probe:
    """A client of one reasoner_node: ~/trigger, ~/reason and ~/result, in a private context."""

    def __init__(self, node_name: str = "reasoner_node", depth: int = 1000) -> None:
        import rclpy
        from cosmos_reasoner_ros.action import Reason
        from cosmos_reasoner_ros.msg import ReasonerResult
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.action import ActionClient
        from rclpy.context import Context
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from std_srvs.srv import Trigger

        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("load_probe", context=self.context)
        qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)
        self.results: collections.Counter[str] = collections.Counter()
        self.kinds: dict[str, str] = {}
        self._lock = threading.Lock()
        self.node.create_subscription(ReasonerResult, f"/{node_name}/result", self._on_result, qos)
        self._result_topic = f"/{node_name}/result"
        self._buffered: dict[str, int] = {}
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.trigger = self.node.create_client(Trigger, f"/{node_name}/trigger", qos_profile=qos)
        self.action = ActionClient(
            self.node,
            Reason,
            f"/{node_name}/reason",
            goal_service_qos_profile=qos,
            result_service_qos_profile=qos,
            cancel_service_qos_profile=qos,
        )
        self.Trigger, self.Reason = Trigger, Reason
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def _on_result(self, msg: Any) -> None:
        with self._lock:
            self.results[msg.request_id] += 1
            self.kinds[msg.request_id] = msg.error_kind or "success"

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            if " camera " in status.name:
                values = {kv.key: kv.value for kv in status.values}
                self._buffered[status.hardware_id] = int(values.get("frames_buffered", 0))

    def frames_buffered(self) -> int:
        """Frames the node has buffered over all cameras (from its /diagnostics)."""
        return sum(self._buffered.values())

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        assert self.trigger.wait_for_service(timeout_sec=timeout_s), "no ~/trigger service"
        assert self.action.wait_for_server(timeout_sec=timeout_s), "no ~/reason action"
        wait_until(
            lambda: self.node.count_publishers(self._result_topic) > 0, timeout_s, "the result publisher"
        )

    def close(self) -> None:
        import rclpy

        self.action.destroy()
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self._thread.join(5)

    def flush_results(self, timeout_s: float = 60.0) -> str:
        """Return once every ~/result the node published before now has arrived (a duplicate included): one
        more goal, refused at once (an unknown camera), and its ~/result, which the node's one publisher
        sends after all the earlier ones. Its request id."""
        sent = self.action.send_goal_async(self.Reason.Goal(cameras=["no_such_camera"]))
        handle = wait_until(
            lambda: sent.result() if sent.done() else None, timeout_s, "the marker's acceptance"
        )
        answer = handle.get_result_async()
        result = wait_until(
            lambda: answer.result() if answer.done() else None, timeout_s, "the marker's result"
        )
        request_id = str(result.result.result.request_id)
        wait_until(lambda: self.results[request_id], timeout_s, "the marker's ~/result")
        return request_id

    # -- storms --------------------------------------------------------------------------------------------

    def trigger_storm(self, calls: int, timeout_s: float = 60.0) -> TriggerStorm:
        """`calls` trigger calls at once; every reply, then every result they announce."""
        futures = [self.trigger.call_async(self.Trigger.Request()) for _ in range(calls)]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(f.done() for f in futures):
            time.sleep(0.02)
        replies = [f.result() for f in futures if f.done() and f.result() is not None]
        ids = [str(r.message).split()[0] for r in replies]
        while time.monotonic() < deadline and not all(self.results[i] for i in ids):
            time.sleep(0.02)
        self.flush_results()  # a duplicate, or a result still on its way, has arrived by now
        with self._lock:
            counts = [self.results[i] for i in ids]
            kinds = collections.Counter(self.kinds.get(i, "") for i in ids)
        return TriggerStorm(
            calls=calls,
            replies=len(replies),
            accepted=sum(bool(r.success) for r in replies),
            rejected_with_reason=sum(not r.success and " rejected: " in r.message for r in replies),
            results_missing=sum(c == 0 for c in counts),
            results_duplicated=sum(c > 1 for c in counts),
            result_kinds=dict(kinds),
        )

    def goal_storm(self, goals: int, cancel_every: int = 2, timeout_s: float = 120.0) -> GoalStorm:
        """`goals` goals at once; every `cancel_every`-th is cancelled once its answer is streaming."""
        from action_msgs.msg import GoalStatus

        handles: dict[int, Any] = {}
        cancel_replies: list[Any] = []
        streaming: set[int] = set()
        lock = threading.Lock()

        def feedback(index: int) -> Any:
            def on_feedback(msg: Any) -> None:
                if msg.feedback.stage_name != "streaming" or index % cancel_every:
                    return
                with lock:
                    if index in streaming or index not in handles:
                        return
                    streaming.add(index)
                    cancel_replies.append(handles[index].cancel_goal_async())

            return on_feedback

        sent = [
            self.action.send_goal_async(self.Reason.Goal(), feedback_callback=feedback(i))
            for i in range(goals)
        ]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(f.done() for f in sent):
            time.sleep(0.02)
        for i, f in enumerate(sent):
            if f.done() and f.result() is not None:
                with lock:
                    handles[i] = f.result()
        accepted = {i: h for i, h in handles.items() if h.accepted}
        results = {i: h.get_result_async() for i, h in accepted.items()}
        while time.monotonic() < deadline and not all(f.done() for f in results.values()):
            time.sleep(0.02)
        while time.monotonic() < deadline and not all(f.done() for f in cancel_replies):
            time.sleep(0.02)
        names = {v: k for k, v in vars(GoalStatus).items() if k.startswith("STATUS_")}
        statuses: collections.Counter[str] = collections.Counter()
        cancelled_ok = 0
        ids = []
        for i, f in results.items():
            if not f.done():
                statuses["NO_RESULT"] += 1
                continue
            res = f.result()
            statuses[names.get(res.status, str(res.status))] += 1
            ids.append(res.result.result.request_id)
            if i in streaming and res.status == GoalStatus.STATUS_CANCELED:
                cancelled_ok += res.result.result.error_kind == "cancelled"
        self.flush_results()  # each goal's ~/result (and any duplicate) has arrived by now
        with self._lock:
            counts = [self.results[i] for i in ids]
        return GoalStorm(
            goals=goals,
            acknowledged=len(handles),
            accepted=len(accepted),
            statuses=dict(statuses),
            cancels_sent=len(streaming),
            cancels_accepted=sum(
                f.done() and f.result() is not None and f.result().return_code == 0 for f in cancel_replies
            ),
            cancelled_with_cancelled_result=cancelled_ok,
            results_missing=sum(c == 0 for c in counts) + statuses.get("NO_RESULT", 0),
            results_duplicated=sum(c > 1 for c in counts),
        )


@dataclass
class TriggerStorm:
    calls: int
    replies: int
    accepted: int
    rejected_with_reason: int
    results_missing: int  # replied calls whose request id never came on ~/result
    results_duplicated: int
    result_kinds: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GoalStorm:
    goals: int
    acknowledged: int
    accepted: int
    statuses: dict[str, int]
    cancels_sent: int
    cancels_accepted: int
    cancelled_with_cancelled_result: int
    results_missing: int
    results_duplicated: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_ID = re.compile(r"-(\d+)-[0-9a-f]{8}$")


def sequence_gaps(request_ids: list[str]) -> tuple[int, int]:
    """(missing, duplicated) request numbers among ids `<node>-<n>-<hex>`, numbered in order by the node,
    between the first and the last one seen (a subscriber that joined late misses the first ones)."""
    numbers = [int(m.group(1)) for m in map(_ID.search, request_ids) if m]
    if not numbers:
        return 0, 0
    unique = set(numbers)
    return max(unique) - min(unique) + 1 - len(unique), len(numbers) - len(unique)


def media_usage(media_dir: Path) -> tuple[int, int, int]:
    """(finished files, their bytes, hidden temporaries being written) in the media directory, from one
    listing; a file deleted meanwhile is not counted."""
    files = nbytes = temporaries = 0
    entries = list(os.scandir(media_dir)) if media_dir.is_dir() else []
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if entry.name.startswith("."):
            temporaries += 1
        else:
            files, nbytes = files + 1, nbytes + info.st_size
    return files, nbytes, temporaries
