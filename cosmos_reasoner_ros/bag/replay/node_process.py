"""The reasoner_node a replay starts: its parameters for the bag (camera topic, depth, media folder, lock-step
diagnostics), its command line (with a namespace when several bags play at once), and the child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
from cosmos_reasoner_ros.package_files import package_file

__all__ = [
    "NodeHandle",
    "NodeProcess",
    "NodeStarter",
    "default_params_file",
    "depth_topics",
    "namespaced_params_file",
    "node_command",
    "node_parameters",
]


def default_params_file() -> Path | None:
    return package_file("config", "reasoner.yaml")


_EMPTY = "''"  # a YAML empty string: rcl rejects `name:=` with nothing after it


def depth_topics(reader: Any) -> tuple[str, str]:
    """(depth image topic, CameraInfo topic) of a bag, or empty strings when it lacks either."""
    depth = next(
        (c.topic for c in reader.connections if c.msgtype == "sensor_msgs/msg/Image" and "depth" in c.topic),
        "",
    )
    info = next((c.topic for c in reader.connections if c.msgtype == "sensor_msgs/msg/CameraInfo"), "")
    return (depth, info) if depth and info else ("", "")


def _simultaneous(options: EvalOptions) -> int:
    return max(1, len(options.goal_list()))


def node_parameters(
    options: EvalOptions,
    image_topic: str,
    compressed: bool,
    media_dir: Path,
    depth_topic: str = "",
    info_topic: str = "",
) -> list[str]:
    """The node's parameters for a replay of the bag, as `name:=value` (YAML values, as `-p` takes them); they
    override the parameter file."""
    from cosmos_reasoner_ros.bag.replay.lockstep import DIAGNOSTICS_PERIOD_S

    in_flight = max(_simultaneous(options), options.in_flight)
    return [
        f"server_url:={options.server_url}",
        "cameras:=[camera]",
        f"camera.camera.topic:={image_topic}",
        f"camera.camera.compressed:={'true' if compressed else 'false'}",
        f"camera.camera.depth_topic:={depth_topic or _EMPTY}",
        f"camera.camera.camera_info_topic:={info_topic or _EMPTY}",
        f"media_dir:={media_dir}",
        "trigger_period_s:=0.0",
        "image_qos:=reliable",
        f"max_in_flight:={in_flight}",
        "wait_for_server_s:=10.0",
        *([f"diagnostics_period_s:={DIAGNOSTICS_PERIOD_S}"] if options.lock_step else []),
        *options.params,
    ]


def namespaced_params_file(params_file: Path, namespace: str, node_name: str, out: Path) -> Path:
    """A copy of a parameter file whose block for the node is keyed by its namespaced name (a relative key
    such as `reasoner_node:` does not match /eval1/reasoner_node)."""
    try:
        data = yaml.safe_load(params_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BagError(f"cannot read node parameters {params_file}: {exc}") from None
    if not isinstance(data, dict):
        raise BagError(f"node parameters {params_file} must be a mapping")
    fqn = f"{namespace}/{node_name}"
    renamed = {(fqn if k in (node_name, "/" + node_name) else k): v for k, v in data.items()}
    out.write_text(yaml.safe_dump(renamed, sort_keys=False), encoding="utf-8")
    return out


def node_command(
    options: EvalOptions,
    image_topic: str,
    compressed: bool,
    media_dir: Path,
    depth_topic: str = "",
    info_topic: str = "",
    namespace: str = "",
    params_file: Path | None = None,
) -> list[str]:
    params_file = params_file or options.params_file or default_params_file()
    cmd = [
        sys.executable,
        "-m",
        "cosmos_reasoner_ros.node",
        "--ros-args",
        "-r",
        f"__node:={options.node_name}",
    ]
    if namespace:
        cmd += ["-r", f"__ns:={namespace}", "-r", f"/diagnostics:={namespace}/diagnostics"]
    if params_file is not None:
        cmd += ["--params-file", str(params_file)]
    for value in node_parameters(options, image_topic, compressed, media_dir, depth_topic, info_topic):
        cmd += ["-p", value]
    return cmd


class NodeHandle(Protocol):
    """A running reasoner_node (and whatever was started with it)."""

    def check_alive(self) -> None:
        """Raise BagError (with the log's tail) when the node has exited."""

    def stop(self) -> None:
        """Stop it and everything started with it."""


# Starts the node for a replay: (parameter file or None, parameters as `name:=value`, log path) -> handle.
NodeStarter = Callable[[Path | None, Sequence[str], Path], NodeHandle]


class NodeProcess:
    """`python -m cosmos_reasoner_ros.node` as a child process, its output in a log file; SIGINT stops it."""

    def __init__(self, cmd: list[str], log_path: Path) -> None:
        env = dict(os.environ)
        env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)  # let the child set up its own library paths
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.log_path = log_path

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise BagError(f"reasoner_node exited with code {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
