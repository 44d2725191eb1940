"""The reasoner_node a replay starts: its parameters for the bag (camera topic, depth, media folder, lock-step
diagnostics), its command line (under the run's namespace, /eval<k> in it when several bags play at once), and
the child process."""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, server_url_problem
from cosmos_reasoner_ros.bag.safe_paths import printable
from cosmos_reasoner_ros.bag.yaml_files import load_yaml
from cosmos_reasoner_ros.handoff import HandoffSettings, read_settings
from cosmos_reasoner_ros.package_files import package_file
from cosmos_reasoner_ros.parameters.cameras import CAMERA_RECORDS
from cosmos_reasoner_ros.parameters.handoff import HANDOFF_PREFIX, HANDOFF_RECORDS
from cosmos_reasoner_ros.parameters.node import NODE_RECORDS
from cosmos_reasoner_ros.parameters.record import KINDS, Parameter

__all__ = [
    "REPLAY_WAIT_FOR_SERVER_S",
    "NodeCamera",
    "NodeHandle",
    "NodeProcess",
    "NodeStarter",
    "camera_names",
    "check_parameters",
    "check_params_file",
    "default_params_file",
    "handoff_rehearsal",
    "handoff_settings",
    "namespaced_params_file",
    "node_command",
    "node_parameter",
    "node_parameters",
    "parameter_problem",
    "yaml_string",
]


# [s] the replayed node's wait for its server before each request (unless -p wait_for_server_s says); the
# check before the replay (reachability.py) waits as long.
REPLAY_WAIT_FOR_SERVER_S = 10.0


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
    bag_info_topic: str = ""  # its CameraInfo in the bag, also without depth (the handoff's ground plane)


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
        f"wait_for_server_s:={REPLAY_WAIT_FOR_SERVER_S}",
        *([f"diagnostics_period_s:={DIAGNOSTICS_PERIOD_S}"] if options.lock_step else []),
        *options.params,
        *handoff_rehearsal(options, cameras),
    ]


# Every ROS node's own parameter, besides the records of reasoner_node's.
_USE_SIM_TIME = Parameter("use_sim_time", bool, False, "run on /clock")


@functools.lru_cache(maxsize=1)
def _node_records() -> dict[str, Parameter]:
    """reasoner_node's parameters by dotted name (cosmos_reasoner_ros/parameters/): its own, `handoff.<name>`
    and a camera's `camera.*.<key>` (any camera's block has the same keys)."""
    return {
        _USE_SIM_TIME.name: _USE_SIM_TIME,
        **{r.name: r for r in NODE_RECORDS},
        **{HANDOFF_PREFIX + r.name: r for r in HANDOFF_RECORDS},
        **{f"camera.*.{r.name}": r for r in CAMERA_RECORDS},
    }


def parameter_problem(name: str, value: Any) -> str:
    """Why `value` cannot be reasoner_node's parameter `name` ("" when it can): an unknown name (the node
    would ignore it: a sweep over a misspelt name runs the same node N times), or a value of another type
    than the parameter's record (the node would stop at its start, after the runs before it). Ranges and how
    values go together are the node's to check."""
    parts = name.split(".")
    key = f"camera.*.{parts[2]}" if len(parts) == 3 and parts[0] == "camera" else name
    record = _node_records().get(key)
    if record is None:
        return f"{name} is not a parameter of reasoner_node (config/reasoner.yaml lists them)"
    finite = not (isinstance(value, float) and not math.isfinite(value))
    if record.type_problem(value) is None and (record.type is not float or finite):
        return ""
    got = "null" if value is None else type(value).__name__
    return f"{name} must be {KINDS[record.type]}{' (finite)' if record.type is float else ''}, got {got}"


def check_parameters(params: Sequence[str]) -> None:
    """`name:=value` node parameters (`-p`, a scenario's, a sweep's) checked before any node starts:
    BagError naming the first problem (parameter_problem)."""
    for item in params:
        name, sep, text = item.partition(":=")
        if not sep or not name.strip():
            raise BagError(f"-p {item[:80]!r} is not NAME:=VALUE")
        try:
            value = yaml.safe_load(text)  # as rcl reads a `-p` value
        except yaml.YAMLError:
            value = text
        if problem := parameter_problem(name.strip(), value):
            raise BagError(f"node parameter {problem}")


def _handoff_setting(options: EvalOptions, name: str) -> object:
    """A `handoff.<name>` parameter as the replayed node will read it (node_parameter)."""
    return node_parameter(options, f"handoff.{name}")


def node_parameter(options: EvalOptions, full_name: str) -> object:
    """A node parameter as the replayed node will read it: the last `-p`, else the parameter file's (for a
    dotted name, nested `a: {b: ...}` or flat `a.b`), else None."""
    group, dot, name = full_name.rpartition(".")
    for item in reversed(options.params):
        key, _, value = item.partition(":=")
        if key.strip() == full_name:
            try:
                return yaml.safe_load(value)
            except yaml.YAMLError:
                return value
    params_file = options.params_file or default_params_file()
    if params_file is None:
        return None
    try:
        data = yaml.safe_load(params_file.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # check_params_file names a bad file
    block = (
        data.get(options.node_name) or data.get(f"/{options.node_name}") if isinstance(data, dict) else None
    )
    values = block.get("ros__parameters") if isinstance(block, dict) else None
    if not isinstance(values, dict):
        return None
    nested = values.get(group) if dot else None
    if isinstance(nested, dict) and name in nested:
        return nested[name]
    return values.get(full_name)


def handoff_settings(options: EvalOptions) -> HandoffSettings:
    """The run's `handoff.*` parameters as the replayed node reads them (defaults for those not given), for
    what scoring needs of them: the ground plane and the path limits. The node checks them when it starts."""

    def given(name: str, default: Any, _doc: str) -> Any:
        value = _handoff_setting(options, name.removeprefix("handoff."))
        return default if value is None else value

    return read_settings(given)


def handoff_rehearsal(options: EvalOptions, cameras: Sequence[NodeCamera]) -> list[str]:
    """The Nav2 handoff in a replay: it runs dry, whatever the parameters say (a replay never sends a goal to
    a robot); each result then records the path that would have been sent and every gate's verdict. Without
    a CameraInfo topic of its own, it reads the bag's, of its camera (the first unless handoff.camera names
    another). Nothing when the handoff is off."""
    mode = _handoff_setting(options, "mode")
    if mode in (None, "none"):
        return []
    params = ["handoff.mode:=dry_run"]
    if not _handoff_setting(options, "camera_info_topic"):
        wanted = _handoff_setting(options, "camera")
        camera = next((c for c in cameras if c.name == wanted), cameras[0] if cameras else None)
        topic = camera.bag_info_topic or camera.info_topic if camera is not None else ""
        if topic:
            params.append(f"handoff.camera_info_topic:={yaml_string(topic)}")
    return params


def check_params_file(path: Path) -> None:
    """A node parameter file as rcl reads it: a mapping of node names to `ros__parameters` mappings. Checked
    before any node starts, so that a bad file is one line, not the node's traceback. The file may be anything
    a scenario named: a problem is said by its place (entry n, line and column), never with the file's
    text."""
    data = load_yaml(path, "node parameters")
    shown = printable(str(path))
    if not isinstance(data, dict) or not data:
        raise BagError(f"node parameters {shown} must map node names to {{ros__parameters: ...}}")
    for n, block in enumerate(data.values(), start=1):
        if not isinstance(block, dict) or not isinstance(block.get("ros__parameters"), dict):
            raise BagError(f"node parameters {shown}: entry {n} needs a ros__parameters mapping")
        problem = server_url_problem(block["ros__parameters"].get("server_url"), f"{shown}: server_url")
        if problem:
            raise BagError(problem)


def namespaced_params_file(params_file: Path, namespace: str, node_name: str, out: Path) -> Path:
    """A copy of a parameter file whose block for the node is keyed by its namespaced name (a relative key
    such as `reasoner_node:` does not match /eval1/reasoner_node)."""
    data = load_yaml(params_file, "node parameters") or {}
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
    remap: Mapping[str, str] | None = None,
) -> list[str]:
    """remap: the bag's topics as the player publishes them (under `namespace`): a topic a parameter names
    absolutely (`-p handoff.camera_info_topic:=/camera/camera_info`) is remapped to where it is played."""
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
    for topic, played in (remap or {}).items():
        if topic != played:
            cmd += ["-r", f"{topic}:={played}"]
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
