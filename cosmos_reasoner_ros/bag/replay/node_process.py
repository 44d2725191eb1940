"""The reasoner_node a replay starts: its parameters for the bag (camera topic, depth, media folder, lock-step
diagnostics), its command line (with a namespace when several bags play at once), and the child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, server_url_problem
from cosmos_reasoner_ros.package_files import package_file

__all__ = [
    "NodeCamera",
    "NodeHandle",
    "NodeProcess",
    "NodeStarter",
    "camera_names",
    "check_params_file",
    "default_params_file",
    "namespaced_params_file",
    "node_command",
    "node_parameters",
    "yaml_string",
]


def default_params_file() -> Path | None:
    return package_file("config", "reasoner.yaml")


def yaml_string(text: str | Path) -> str:
    """`text` as one YAML string for `-p name:=value` (rcl parses the value as YAML): a JSON string, which
    YAML reads as written. Raw, `out/run #1` was `out/run` (the rest a comment), `a: b` a mapping, an empty
    value nothing (rcl rejects `name:=` with nothing after it), `true` a bool."""
    return json.dumps(str(text))


def _simultaneous(options: EvalOptions) -> int:
    return max(1, len(options.goal_list()))


@dataclass(frozen=True)
class NodeCamera:
    """One camera of the replayed node: its name, the topics it subscribes to (after remapping)."""

    name: str
    topic: str
    compressed: bool = False
    depth_topic: str = ""
    info_topic: str = ""


def camera_names(count: int) -> list[str]:
    """camera, camera2, camera3, ...: the node's camera names for a replay."""
    return ["camera" if i == 0 else f"camera{i + 1}" for i in range(count)]


def node_parameters(options: EvalOptions, cameras: Sequence[NodeCamera], media_dir: Path) -> list[str]:
    """The node's parameters for a replay of the bag, as `name:=value` (YAML values, as `-p` takes them); they
    override the parameter file. The node runs on the bag's clock (use_sim_time; the player publishes
    /clock), so that stamps, ages and max_result_age_s are in the bag's time."""
    from cosmos_reasoner_ros.bag.replay.lockstep import DIAGNOSTICS_PERIOD_S

    in_flight = max(_simultaneous(options), options.in_flight)
    params = [
        "use_sim_time:=true",
        f"server_url:={yaml_string(options.server_url)}",
        f"cameras:=[{','.join(c.name for c in cameras)}]",
    ]
    for c in cameras:
        params += [
            f"camera.{c.name}.topic:={yaml_string(c.topic)}",
            f"camera.{c.name}.compressed:={'true' if c.compressed else 'false'}",
            f"camera.{c.name}.depth_topic:={yaml_string(c.depth_topic)}",
            f"camera.{c.name}.camera_info_topic:={yaml_string(c.info_topic)}",
        ]
    return [
        *params,
        f"media_dir:={yaml_string(media_dir)}",
        "trigger_period_s:=0.0",
        "image_qos:=reliable",
        f"max_in_flight:={in_flight}",
        "wait_for_server_s:=10.0",
        *([f"diagnostics_period_s:={DIAGNOSTICS_PERIOD_S}"] if options.lock_step else []),
        *options.params,
    ]


def check_params_file(path: Path) -> None:
    """A node parameter file as rcl reads it: a mapping of node names to `ros__parameters` mappings. Checked
    before any node starts, so that a bad file is one line, not the node's traceback."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BagError(f"cannot read node parameters {path}: {str(exc)[:200]}") from None
    if not isinstance(data, dict) or not data:
        raise BagError(f"node parameters {path} must map node names to {{ros__parameters: ...}}")
    for node, block in data.items():
        if not isinstance(block, dict) or not isinstance(block.get("ros__parameters"), dict):
            raise BagError(f"node parameters {path}: {str(node)[:80]!r} needs a ros__parameters mapping")
        problem = server_url_problem(block["ros__parameters"].get("server_url"), f"{path}: server_url")
        if problem:
            raise BagError(problem)


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
    cameras: Sequence[NodeCamera],
    media_dir: Path,
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
        # /diagnostics and /clock are absolute: each replay's node gets its own.
        cmd += ["-r", f"__ns:={namespace}", "-r", f"/diagnostics:={namespace}/diagnostics"]
        cmd += ["-r", f"/clock:={namespace}/clock"]
    if params_file is not None:
        cmd += ["--params-file", str(params_file)]
    for value in node_parameters(options, cameras, media_dir):
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
