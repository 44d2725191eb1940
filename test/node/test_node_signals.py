"""reasoner_node's signals (issue 37, finding 9): SIGINT and SIGTERM in any order, number and spacing, sent at
any moment from the time the process has its own handlers (a few tens of milliseconds after it starts, before
its heavy imports) to after it is ready, end it with exit code 0 and no traceback.

Before: SIGINT and SIGTERM alternating after ready gave exit 0 with `OSError: Signal 15 ignored due to race
condition` and its traceback (the first signal's handler had set both to SIG_IGN while the other was pending);
a storm before the handlers existed (they came after rclpy.init) killed the process, -15."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.paths import REASONER_YAML
from support.processes import module_cmd, ros_env, wait_until

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXAMPLES = int(os.environ.get("COSMOS_GENERATED_EXAMPLES", "6"))
READY = "ready: cameras"


@dataclass(frozen=True)
class Storm:
    """When the first signal goes (`moment`: "handlers", as soon as the process catches SIGTERM; "ready",
    once it logged that it is ready; then `after_s` more), and each signal with the gap before it."""

    moment: str
    after_s: float
    signals: tuple[tuple[int, float], ...]


def _caught(pid: int) -> int:
    """The signals the process catches now (SigCgt of /proc/<pid>/status): a handler of its own."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return int(line.split()[1], 16)
    except OSError:  # gone
        pass
    return 0


def _handles_sigterm(pid: int) -> bool:
    return bool(_caught(pid) & (1 << (signal.SIGTERM - 1)))


def run_storm(storm: Storm, work: Path) -> tuple[int, str]:
    """Start the node with the shipped parameters (no server, no camera), send the storm; its exit code and
    output."""
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "node.log"
    cmd = module_cmd(
        "cosmos_reasoner_ros.node",
        "--ros-args",
        "--params-file",
        str(REASONER_YAML),
        "-p",
        f"media_dir:={work}",
        "-p",
        "server_url:=http://127.0.0.1:9/v1",
        "-p",
        "camera.camera.topic:=/no_camera_here",
    )
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=ros_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        if storm.moment == "handlers":
            wait_until(
                lambda: _handles_sigterm(proc.pid) or proc.poll() is not None,
                60,
                "the node's handlers",
                0.001,
            )
        else:
            wait_until(
                lambda: READY in log_path.read_text(errors="replace") or proc.poll() is not None,
                60,
                "the node to be ready",
            )
        time.sleep(storm.after_s)
        for signum, gap_s in storm.signals:
            if proc.poll() is not None:
                break
            time.sleep(gap_s)
            proc.send_signal(signum)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, log_path.read_text(errors="replace")


# Imported first by a child whose PYTHONPATH leads with its folder: notes SIGTERM's handler when rclpy's
# import begins (the interpreter reports each import to audit hooks).
_AT_RCLPY = """
import os, signal, sys
def _hook(event, args):
    if event == "import" and args[0] == "rclpy" and not os.path.exists(os.environ["AT_RCLPY"]):
        with open(os.environ["AT_RCLPY"], "w") as f:
            f.write(repr(signal.getsignal(signal.SIGTERM)))
sys.addaudithook(_hook)
"""


def test_the_handlers_come_before_the_heavy_imports(tmp_path: Path) -> None:
    """A signal while the node imports rclpy, the SDK and numpy (about a second) stops it: before, the
    handlers came after rclpy.init, and SIGTERM then had its default action (exit -15)."""
    (tmp_path / "sitecustomize.py").write_text(_AT_RCLPY)
    env = ros_env(AT_RCLPY=str(tmp_path / "at_rclpy"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    done = subprocess.run(
        module_cmd("cosmos_reasoner_ros.node", "--help"), env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "_on_signal" in (tmp_path / "at_rclpy").read_text()


storms = st.builds(
    Storm,
    moment=st.sampled_from(["handlers", "ready"]),
    after_s=st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0, 2.0]),
    signals=st.lists(
        st.tuples(st.sampled_from(SIGNALS), st.sampled_from([0.0, 0.0, 0.001, 0.02, 0.2])),
        min_size=1,
        max_size=30,
    ).map(tuple),
)
ALTERNATING = tuple((SIGNALS[i % 2], 0.02) for i in range(20))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(storm=storms)
@example(storm=Storm("ready", 0.0, ALTERNATING))  # the finding: a traceback in 2 of 2 runs
@example(storm=Storm("ready", 0.0, ((signal.SIGINT, 0.0), (signal.SIGTERM, 0.0))))
@example(storm=Storm("handlers", 0.0, tuple((signal.SIGTERM, 0.02) for _ in range(30))))  # exit -15
@example(storm=Storm("handlers", 0.0, ALTERNATING))
@example(  # hung in CI (never exited): a handler's Event.set interrupted by the next signal's handler
    storm=Storm(
        "handlers",
        0.3,
        tuple(
            zip(
                (2, 15, 15, 2, 15, 15, 2, 2, 2),
                (0.02, 0.001, 0.02, 0.0, 0.001, 0.02, 0.0, 0.2, 0.0),
                strict=True,
            )
        ),
    )
)
def test_signals_at_any_moment_end_the_node_cleanly(
    tmp_path_factory: pytest.TempPathFactory, storm: Storm
) -> None:
    code, output = run_storm(storm, tmp_path_factory.mktemp("signals"))
    assert code == 0, output[-3000:]
    assert "Traceback" not in output and "race condition" not in output, output[-3000:]


FLOOD = tuple((SIGNALS[i % 2], 0.0) for i in range(3000))


@pytest.mark.parametrize("moment", ["handlers", "ready"])
def test_a_flood_of_signals_never_hangs_the_node(tmp_path: Path, moment: str) -> None:
    """3000 SIGINT/SIGTERM alternating as fast as they can be sent: a handler runs inside another handler, and
    one that took a lock (threading.Event.set) deadlocked on the lock its interrupted self held (CI: the node
    never exited; a plain loop with that handler: 10 hangs in 20 floods). run_storm fails on a hang."""
    code, output = run_storm(Storm(moment, 0.0, FLOOD), tmp_path)
    assert code == 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
