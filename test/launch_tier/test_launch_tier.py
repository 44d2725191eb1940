"""The launch tier: the package through a robot's tools (`ros2 launch`, launch_testing, the `ros2` command).

The launch tests (scripted_server_launch.py, bad_parameter_launch.py) run through launch_testing's runner,
`python -m launch_testing.launch_test`, in a process of their own: launch_testing's pytest plugin cannot load
under pytest 9 (pyproject.toml), and the runner is how ROS 2 runs them anyway (`launch_test`). Each test here
asserts the runner's exit code and that every named test case of the file ran and passed. The vLLM case drives
`ros2 launch` itself, because it sends the launch SIGINT as a user's Ctrl-C or a service manager would.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import launch_tools, vllm_tier
from support.camera_publisher import camera_process
from support.paths import CACHE, REASONER_YAML, ROOT
from support.processes import ros_env, wait_until

from cosmos_reasoner_ros import launch_config
from cosmos_reasoner_ros.server import ServerSettings

pytestmark = pytest.mark.launch

HERE = Path(__file__).resolve().parent
README = ROOT / "README.md"
_MISSING = launch_tools.missing_reason()


def _nav2_missing() -> str | None:
    try:
        from support.nav2_standins import missing_reason
    except ImportError as exc:  # no rclpy
        return f"needs rclpy: {exc}"
    return missing_reason()


nav2_standins_missing = _nav2_missing()
needs_launch = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


def _run(path: Path, tmp_path: Path, timeout_s: float) -> launch_tools.LaunchTestRun:
    run = launch_tools.run_launch_test(path, tmp_path, timeout_s, env={"ROS_LOG_DIR": str(tmp_path / "log")})
    return run


def _assert_cases_passed(run: launch_tools.LaunchTestRun, expected: set[str]) -> None:
    outcomes = run.outcomes()
    assert expected <= set(outcomes), (
        f"cases missing from the JUnit report: {expected - set(outcomes)}\n{run.report()}"
    )
    failed = {c.name: c.message for c in run.cases if c.outcome != "passed"}
    assert not failed, f"{failed}\n{run.report()}"
    assert run.returncode == 0, run.report()


@needs_launch
def test_reasoner_launch_against_the_scripted_server(tmp_path: Path) -> None:
    run = _run(HERE / "scripted_server_launch.py", tmp_path, timeout_s=300)
    _assert_cases_passed(
        run,
        {
            "test_diagnostics_flow",
            "test_trigger_gets_one_result",
            "test_param_dump_has_the_keys_of_reasoner_yaml",
            "test_every_process_exited_cleanly",
            "test_the_node_logged_no_traceback",
        },
    )
    # Every process was stopped by launch's SIGINT (Ctrl-C), not escalated to SIGTERM or SIGKILL: launch says
    # so when a process overruns its sigterm_timeout (the node's NODE_SIGTERM_TIMEOUT_S).
    for escalation in ("sending signal 'SIGTERM'", "sending signal 'SIGKILL'"):
        assert escalation not in run.output, run.report()


@needs_launch
@pytest.mark.skipif(nav2_standins_missing is not None, reason=nav2_standins_missing or "")
def test_a_trajectory_answer_walks_through_the_handoff_to_the_stand_in_controller(tmp_path: Path) -> None:
    """reasoner.launch.py with handoff:=follow_path and the stand-in Nav2 servers (handoff_launch.py)."""
    run = _run(HERE / "handoff_launch.py", tmp_path, timeout_s=300)
    _assert_cases_passed(
        run,
        {
            "test_a_trajectory_answer_walks_through_the_gates_to_the_controller_server_and_back",
            "test_every_process_exited_cleanly",
            "test_the_node_logged_no_traceback",
        },
    )


@needs_launch
def test_a_managed_node_walks_every_transition_with_ros2_lifecycle(tmp_path: Path) -> None:
    run = _run(HERE / "lifecycle_launch.py", tmp_path, timeout_s=300)
    _assert_cases_passed(
        run,
        {
            "test_walk_every_transition",
            "test_every_process_exited_cleanly",
            "test_the_node_logged_no_traceback",
        },
    )


@needs_launch
def test_a_bad_parameter_stops_the_node_and_launch_reports_its_death(tmp_path: Path) -> None:
    run = _run(HERE / "bad_parameter_launch.py", tmp_path, timeout_s=120)
    _assert_cases_passed(
        run,
        {
            "test_the_node_names_the_parameter_and_stops",
            "test_the_node_exited_non_zero",
            "test_the_message_says_what_is_wrong",
        },
    )
    died = re.search(
        r"\[ERROR\] \[reasoner_node-\d+\]: process has died \[pid \d+, exit code (-?\d+)", run.output
    )
    assert died is not None, f"launch did not report the node's death:\n{run.report()}"
    assert int(died.group(1)) > 0


# ------------------------------------------------------------------------------------------ the ros2 command


def _show_args() -> list[tuple[str, str, str]]:
    """(name, description, default) of every argument `ros2 launch ... --show-args` prints."""
    out = subprocess.run(
        launch_tools.launch_command("--show-args"), capture_output=True, text=True, env=ros_env(), timeout=120
    )
    assert out.returncode == 0, out.stderr
    blocks = [b.strip().splitlines() for b in out.stdout.split("\n\n")]
    shown = []
    for block in blocks:
        head = re.fullmatch(r"'(\w+)':", block[0].strip()) if block else None
        if head is None:
            continue
        default = re.fullmatch(r"\(default: '(.*)'\)", block[-1].strip())
        assert default is not None, block
        shown.append((head.group(1), " ".join(line.strip() for line in block[1:-1]), default.group(1)))
    return shown


@needs_launch
def test_show_args_lists_exactly_the_documented_arguments() -> None:
    # launch_config.ARGUMENTS is where the arguments are documented (names, defaults, descriptions); the
    # README points at --show-args.
    documented = [(a.name, a.description, a.default) for a in launch_config.ARGUMENTS]
    assert _show_args() == documented


def test_readme_launch_commands_use_only_declared_arguments() -> None:
    text = README.read_text().replace("\\\n", " ")  # shell continuation lines: one command
    commands = [line for line in text.splitlines() if "reasoner.launch.py" in line]
    used = {name for line in commands for name in re.findall(r"\b(\w+):=", line)}
    assert commands and used, "the README shows no launch command with arguments"
    assert used <= set(launch_config.ARGUMENT_NAMES), used - set(launch_config.ARGUMENT_NAMES)


def _interfaces() -> dict[str, Path]:
    found = {f"{launch_tools.PACKAGE}/msg/{p.stem}": p for p in (ROOT / "msg").glob("*.msg")}
    found |= {f"{launch_tools.PACKAGE}/srv/{p.stem}": p for p in (ROOT / "srv").glob("*.srv")}
    found |= {f"{launch_tools.PACKAGE}/action/{p.stem}": p for p in (ROOT / "action").glob("*.action")}
    return found


@needs_launch
def test_interface_show_prints_the_package_messages_and_action() -> None:
    sources = _interfaces()
    assert any("/action/" in name for name in sources) and any("/msg/" in name for name in sources)
    listed = subprocess.run(
        launch_tools.ros2("interface", "package", launch_tools.PACKAGE),
        capture_output=True,
        text=True,
        env=ros_env(),
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.split()) == sorted(sources)
    for name, source in sources.items():
        shown = subprocess.run(
            launch_tools.ros2("interface", "show", name),
            capture_output=True,
            text=True,
            env=ros_env(),
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        # Nested types are expanded below their field, indented with tabs; the top level is the definition.
        top = [line.rstrip() for line in shown.stdout.splitlines() if not line.startswith("\t")]
        assert top == [line.rstrip() for line in source.read_text().splitlines()], name


# ------------------------------------------------------------------------------- the supervisor and vLLM


@pytest.fixture
def vllm_work_dir() -> Iterator[Path]:
    reason = vllm_tier.missing_reason()
    if reason:
        pytest.skip(reason)
    CACHE.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="crr-launch-vllm-", dir=CACHE))
    yield work
    shutil.rmtree(work, ignore_errors=True)


class _Probe:
    """rclpy in a context of its own, spun on a thread: sends one Reason goal and collects its feedback."""

    def __init__(self) -> None:
        import rclpy
        from cosmos_reasoner_ros.action import Reason
        from rclpy.action import ActionClient
        from rclpy.executors import SingleThreadedExecutor

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("launch_tier_vllm_probe", context=self.context)
        self.client: Any = ActionClient(self.node, Reason, "/reasoner_node/reason")
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()
        self.feedback: list[Any] = []

    def reason(self, task: str, timeout_s: float) -> Any:
        from cosmos_reasoner_ros.action import Reason

        assert self.client.wait_for_server(timeout_sec=60.0), "the ~/reason action server never appeared"
        sent = self.client.send_goal_async(Reason.Goal(task=task), feedback_callback=self.feedback.append)
        handle = wait_until(lambda: sent.done() and sent.result(), 30.0, "the goal to be accepted")
        assert handle.accepted
        done = handle.get_result_async()
        return wait_until(lambda: done.done() and done.result(), timeout_s, "the goal's result").result.result

    def close(self) -> None:
        import rclpy

        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
        self.thread.join(timeout=5)


@needs_launch
@pytest.mark.vllm
@pytest.mark.slow
def test_launch_with_the_supervisor_stops_everything_on_sigint(vllm_work_dir: Path) -> None:
    work = vllm_work_dir
    checkpoint = vllm_tier.tiny_checkpoint("qwen3vl")
    port = vllm_tier.free_port()
    media = work / "media"
    # The shipped stop budget for vLLM (server.yaml's stop_grace_s), which launch's
    # SUPERVISOR_SIGTERM_TIMEOUT_S covers; the tier's own 10 s is for tests that want a SIGKILL soon.
    shipped_grace = ServerSettings().stop_grace_s
    settings = vllm_tier.tiny_server_settings(
        checkpoint, "qwen3vl", port, media, work, stop_grace_s=shipped_grace
    )
    server_yaml = work / "server.yaml"
    server_yaml.write_text(yaml.safe_dump(settings))
    ready_file = Path(settings["ready_file"])
    # The shipped node parameters, with answers long enough for the random model to end (see test_node_vllm).
    params = yaml.safe_load(REASONER_YAML.read_text())
    params["reasoner_node"]["ros__parameters"].update({"max_tokens": 2048, "clip_seconds": 2.0})
    params_file = work / "reasoner.yaml"
    params_file.write_text(yaml.safe_dump(params))
    cmd = launch_tools.launch_command(
        f"server_config:={server_yaml}",
        f"model:={checkpoint}",
        "mode:=qwen3vl",
        f"port:={port}",
        f"media_dir:={media}",
        f"params_file:={params_file}",
    )
    log_path = work / "launch.log"
    vllm_pgid = 0
    with open(log_path, "wb") as log, camera_process("/camera/image_raw", 320, 240, rate=8.0):
        launch = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=ros_env(ROS_LOG_DIR=str(work / "log")),
            start_new_session=True,
        )
        probe = None
        try:

            def ready() -> Any:
                assert launch.poll() is None, f"ros2 launch exited early:\n{_tail(log_path)}"
                return ready_file.exists() and "READY" in log_path.read_text(errors="replace")

            wait_until(ready, 600.0, "the supervisor's READY", poll_s=0.5)
            record = yaml.safe_load(ready_file.read_text())
            vllm_pgid = int(record["pid"])
            assert launch_tools.group_members(vllm_pgid), "the ready file names no running vLLM process group"
            probe = _Probe()
            result = probe.reason("next_action", timeout_s=300.0)
            # The model answered through launch. The random model's words are random and sampled (the
            # reasoning profile's temperature): an answer that is empty or not the task's form ends as
            # unparseable, which is the parser's verdict on an answer the server gave (CI: "the answer is
            # empty" once), not a fault of the pipeline this test is about.
            answered = result.success or result.error_kind in ("unparseable", "truncated")
            assert answered, f"{result.error_kind}: {result.error}\n{_tail(log_path)}"
            assert result.model == vllm_tier.SERVED_NAME and result.completion_tokens > 0
            assert probe.feedback, "no feedback for the goal"
            stages = {f.feedback.stage_name for f in probe.feedback}
            assert stages & {"querying", "streaming"}, stages
            probe.close()
            probe = None

            # SIGINT to the launch process, as a service manager sends it (or `kill -INT`).
            sent = time.monotonic()
            launch.send_signal(signal.SIGINT)
            grace = launch_config.SUPERVISOR_SIGTERM_TIMEOUT_S
            # Launch escalates by itself when a process overruns its budget (SIGTERM after sigterm_timeout,
            # SIGKILL 5 s later) and says so in its log: the wait is only for it to end, however busy the
            # machine; whether the budgets were kept is read from launch's own log below.
            try:
                code = launch.wait(timeout=grace + 120.0)
            except subprocess.TimeoutExpired:
                pytest.fail(f"ros2 launch still running {grace + 120.0} s after SIGINT:\n{_tail(log_path)}")
            took = time.monotonic() - sent
            started = record["start_s"]
            print(f"ros2 launch stopped {took:.1f} s after SIGINT; vLLM was ready after {started:.0f} s")
            text = log_path.read_text(errors="replace")
            # Neither the node (NODE_SIGTERM_TIMEOUT_S) nor the supervisor (SUPERVISOR_SIGTERM_TIMEOUT_S,
            # which covers its stop_grace_s for vLLM) overran the budget launch gives it after the SIGINT.
            for escalation in ("sending signal 'SIGTERM'", "sending signal 'SIGKILL'"):
                assert escalation not in text, f"launch escalated ({escalation}):\n{_tail(log_path)}"
            # vLLM itself ended on the supervisor's SIGTERM, within stop_grace_s, without a SIGKILL.
            assert "after SIGTERM: SIGKILL" not in text, _tail(log_path)
            assert code == 0, f"ros2 launch exited with {code}:\n{_tail(log_path)}"
            for name in ("reasoner_node", "cosmos_reasoner_server"):
                assert re.search(rf"\[INFO\] \[{name}-\d+\]: process has finished cleanly", text), (
                    f"{name} did not exit cleanly:\n{_tail(log_path)}"
                )
            assert launch_tools.group_members(launch.pid) == [], "processes of the launch are left"
            assert launch_tools.group_members(vllm_pgid) == [], "processes of the vLLM server are left"
        finally:
            if probe is not None:
                probe.close()
            for pgid in (launch.pid, vllm_pgid):
                if pgid and launch_tools.group_members(pgid):
                    os.killpg(pgid, signal.SIGKILL)
            launch.wait(timeout=30)


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
