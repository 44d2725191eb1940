"""The logic behind launch/reasoner.launch.py: its arguments, their resolution, the processes they describe.

No launch import here: the launch file only turns a LaunchPlan into ExecuteProcess / Node actions.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from cosmos_reasoner_ros.model_family import DEFAULT_FAMILY, family_from_mode
from cosmos_reasoner_ros.package_files import PACKAGE, config_file
from cosmos_reasoner_ros.parameters.handoff import HANDOFF_PARAMETERS
from cosmos_reasoner_ros.parameters.node import NODE_PARAMETERS
from cosmos_reasoner_ros.parameters.server_url import local_server_url, server_url_problem
from cosmos_reasoner_ros.parameters.text_values import boolean_text, integer_text, number_text

NODE_EXECUTABLE = "reasoner_node"
NODE_NAME = "reasoner_node"  # the top-level key of config/reasoner.yaml
SUPERVISOR_MODULE = "cosmos_reasoner_ros.server"
MODES = ("plugin", "native", "qwen3vl", "edge")
LIMIT_FLAG = "--limit-mm-per-prompt"
MAX_IMAGE_FRAMES = int((NODE_PARAMETERS["max_image_frames"].range or (1, 1))[1])
# The supervisor stops vLLM within stop_grace_s (20 s by default); launch must not SIGKILL it before that.
SUPERVISOR_SIGTERM_TIMEOUT_S = 30.0
# After Ctrl-C the node ends its requests in flight within shutdown_timeout_s (3 s by default), publishes
# their results and exits; launch's own 5 s before SIGTERM is too short for that on a busy machine (a loaded
# CI runner saw the escalation), and a SIGTERM only repeats the request to stop. Not a delay: a node that is
# done exits at once.
NODE_SIGTERM_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class LaunchArgument:
    name: str
    default: str
    description: str


def _handoff_argument(name: str, parameter: str, before: str = "") -> LaunchArgument:
    """An argument that sets `handoff.<parameter>` when given: its description the record's (what an empty
    value means is params_file's here), empty by default."""
    documentation = HANDOFF_PARAMETERS[parameter].documentation.split("; empty:")[0]
    return LaunchArgument(name, "", f"{before}{documentation}; empty: params_file's")


ARGUMENTS = (
    LaunchArgument("model", "", "checkpoint directory or hub id; empty: the one in server_config"),
    LaunchArgument(
        "mode",
        "",
        "plugin (vLLM 0.19/0.21 + vllm-cosmos3), native (vLLM >= 0.23), qwen3vl or edge (Cosmos3-Edge; the "
        "node then asks with model_family edge); empty: the one in server_config",
    ),
    LaunchArgument("tensor_parallel_size", "", "GPUs per replica; empty: the one in server_config"),
    LaunchArgument("gpus", "", "GPU ids for CUDA_VISIBLE_DEVICES, e.g. 0,1; empty: inherit"),
    LaunchArgument("port", "8000", "port of the vLLM server started here"),
    LaunchArgument("start_server", "true", "true: start and supervise vLLM; false: use server_url"),
    LaunchArgument(
        "server_url", "", "OpenAI-compatible base URL for the node; empty: http://127.0.0.1:<port>/v1"
    ),
    LaunchArgument(
        "media_dir",
        NODE_PARAMETERS["media_dir"].default,
        "clip directory, shared by the node and the server (--allowed-local-media-path)",
    ),
    LaunchArgument("params_file", "", "node parameters; empty: the package's config/reasoner.yaml"),
    LaunchArgument("server_config", "", "server settings; empty: the package's config/server.yaml"),
    LaunchArgument(
        "cameras",
        "",
        "comma-separated camera names; empty: the ones in params_file. Also sizes the server's "
        "--limit-mm-per-prompt (one video or image per camera)",
    ),
    LaunchArgument(
        "lifecycle",
        str(NODE_PARAMETERS["lifecycle"].default).lower(),
        f"reasoner_node's lifecycle parameter: {NODE_PARAMETERS['lifecycle'].documentation}",
    ),
    LaunchArgument(
        "vllm_version",
        "",
        "vLLM version the server command is built for; empty: the one in server_config (auto)",
    ),
    # The Nav2 handoff (README: A robot with Nav2); empty: what params_file says (off by default).
    _handoff_argument("handoff", "mode", "the Nav2 handoff (handoff.mode): "),
    _handoff_argument("camera_height_m", "camera_height_m"),
    _handoff_argument("camera_pitch_deg", "camera_pitch_deg"),
    _handoff_argument("handoff_action", "action_name"),
    _handoff_argument("controller_id", "controller_id"),
    _handoff_argument("goal_checker_id", "goal_checker_id"),
    _handoff_argument("progress_checker_id", "progress_checker_id"),
    _handoff_argument("validate_path", "validate_path", "true: "),
    _handoff_argument("confirm", "confirm", "true: "),
)
ARGUMENT_NAMES = tuple(a.name for a in ARGUMENTS)
HANDOFF_MODES = HANDOFF_PARAMETERS["mode"].choices or ()


class LaunchArgumentError(ValueError):
    """A launch argument has an invalid value; the message names it."""


@dataclass(frozen=True)
class ProcessSpec:
    """A plain process (ExecuteProcess)."""

    name: str
    cmd: tuple[str, ...]
    sigterm_timeout_s: float = SUPERVISOR_SIGTERM_TIMEOUT_S


@dataclass(frozen=True)
class NodeSpec:
    """The reasoner node (launch_ros Node): its parameter file first, then the overrides."""

    package: str
    executable: str
    name: str
    params_file: str
    overrides: dict[str, Any] = field(default_factory=dict)
    lifecycle: bool = False  # start it as a launch_ros LifecycleNode (a managed node)
    sigterm_timeout_s: float = NODE_SIGTERM_TIMEOUT_S

    @property
    def action(self) -> str:
        """The launch_ros action that starts it: "lifecycle_node" or "node"."""
        return "lifecycle_node" if self.lifecycle else "node"

    @property
    def parameters(self) -> list[str | dict[str, Any]]:
        return [self.params_file, dict(self.overrides)]


@dataclass(frozen=True)
class LaunchPlan:
    supervisor: ProcessSpec | None
    node: NodeSpec


_T = TypeVar("_T")


def _read(name: str, read: Callable[[str], _T], value: str) -> _T:
    """The launch argument `name:=value` read by one of parameters/text_values.py's rules."""
    try:
        return read(value)
    except ValueError as exc:
        raise LaunchArgumentError(f"{name}: {exc}") from None


def _positive_int(name: str, value: str) -> int:
    number = _read(name, integer_text, value)
    if number < 1:
        raise LaunchArgumentError(f"{name}: must be >= 1, got {number}")
    return number


def _handoff_overrides(args: Mapping[str, str]) -> dict[str, Any]:
    """The handoff's parameters the launch arguments set (only those given); the node validates the rest."""
    out: dict[str, Any] = {}
    if args["handoff"]:
        if args["handoff"] not in HANDOFF_MODES:
            raise LaunchArgumentError(f"handoff: one of {', '.join(HANDOFF_MODES)}, got {args['handoff']!r}")
        out["handoff.mode"] = args["handoff"]
    for name in ("camera_height_m", "camera_pitch_deg"):
        if args[name]:
            out[f"handoff.{name}"] = _read(name, number_text, args[name])
    for argument, parameter in (
        ("handoff_action", "action_name"),
        ("controller_id", "controller_id"),
        ("goal_checker_id", "goal_checker_id"),
        ("progress_checker_id", "progress_checker_id"),
    ):
        if args[argument]:
            out[f"handoff.{parameter}"] = args[argument]
    for name in ("validate_path", "confirm"):
        if args[name]:
            out[f"handoff.{name}"] = _read(name, boolean_text, args[name])
    return out


def plan(values: Mapping[str, str], python: str = sys.executable) -> LaunchPlan:
    """Resolve the launch arguments (missing ones take their defaults) into the processes to start."""
    unknown = sorted(set(values) - set(ARGUMENT_NAMES))
    if unknown:
        raise LaunchArgumentError(f"unknown launch arguments: {', '.join(unknown)}")
    args = {a.name: str(values.get(a.name, a.default)).strip() for a in ARGUMENTS}
    start_server = _read("start_server", boolean_text, args["start_server"])
    lifecycle = _read("lifecycle", boolean_text, args["lifecycle"])
    port = _positive_int("port", args["port"])
    if port > 65535:
        raise LaunchArgumentError(f"port: must be <= 65535, got {port}")
    if args["mode"] and args["mode"] not in MODES:
        raise LaunchArgumentError(f"mode: one of {', '.join(MODES)}, got {args['mode']!r}")
    if args["gpus"] and not all(g.strip().isdigit() for g in args["gpus"].split(",")):
        raise LaunchArgumentError(f"gpus: comma-separated GPU ids such as 0,1, got {args['gpus']!r}")
    server_url = args["server_url"] or local_server_url(port)
    if problem := server_url_problem(server_url):
        raise LaunchArgumentError(f"server_url: {problem}")
    cameras = [c.strip() for c in args["cameras"].split(",") if c.strip()]
    supervisor = None
    if start_server:
        cmd = [
            python,
            "-m",
            SUPERVISOR_MODULE,
            "--config",
            args["server_config"] or str(config_file("server.yaml")),
            "--port",
            str(port),
        ]
        if args["media_dir"]:
            cmd += ["--media-dir", args["media_dir"]]
        for name in ("model", "mode", "gpus"):
            if args[name]:
                cmd += [f"--{name.replace('_', '-')}", args[name]]
        if args["tensor_parallel_size"]:
            tp = _positive_int("tensor_parallel_size", args["tensor_parallel_size"])
            cmd += ["--tensor-parallel-size", str(tp)]
        if args["vllm_version"]:
            cmd += ["--vllm-version", args["vllm_version"]]
        if cameras:
            # Each request carries one video (or image) per camera: vLLM need not accept or reserve more.
            cmd += ["--cameras", str(len(cameras))]
        supervisor = ProcessSpec(name="cosmos_reasoner_server", cmd=tuple(cmd))
    overrides: dict[str, Any] = {"server_url": server_url}
    if start_server:
        overrides.update(server_facts(args["server_config"], args["mode"]))
    if args["media_dir"]:
        overrides["media_dir"] = args["media_dir"]
    if cameras:
        overrides["cameras"] = cameras
    if lifecycle:
        overrides["lifecycle"] = True
    overrides.update(_handoff_overrides(args))
    node = NodeSpec(
        package=PACKAGE,
        executable=NODE_EXECUTABLE,
        name=NODE_NAME,
        params_file=args["params_file"] or str(config_file("reasoner.yaml")),
        overrides=overrides,
        lifecycle=lifecycle,
    )
    return LaunchPlan(supervisor=supervisor, node=node)


def server_facts(server_config: str, mode: str = "") -> dict[str, Any]:
    """The node parameters that follow from the server the launch file starts (`server_config`, empty: the
    shipped config/server.yaml; `mode`: the mode argument over the file's): model_family for a mode that
    serves a family other than the default (edge), and media_form frames (max_image_frames its image limit)
    for a server whose extra_args say `--limit-mm-per-prompt` with "video": 0, which refuses every video.
    A file that cannot be read gives none: the supervisor reports it."""
    try:
        path = Path(server_config) if server_config else config_file("server.yaml")
        loaded = yaml.safe_load(path.expanduser().read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(loaded, Mapping):
        return {}
    out: dict[str, Any] = {}
    found = family_from_mode(mode or str(loaded.get("mode", "plugin")))
    if found is not None and found.name != DEFAULT_FAMILY:
        out["model_family"] = found.name
    extra = loaded.get("extra_args") or ()
    limits = media_limits(extra if isinstance(extra, Sequence) and not isinstance(extra, str) else ())
    if limits.get("video") == 0:
        out["media_form"] = "frames"
        images = limits.get("image")
        if isinstance(images, int) and not isinstance(images, bool) and images >= 1:
            out["max_image_frames"] = min(images, MAX_IMAGE_FRAMES)
    return out


def media_limits(extra_args: Sequence[Any]) -> dict[str, Any]:
    """The last `--limit-mm-per-prompt` of vLLM arguments (`FLAG VALUE` or `FLAG=VALUE`, VALUE a JSON
    mapping such as '{"image": 1, "video": 0}') as a mapping; empty when none is given or readable."""
    args = [str(a) for a in extra_args]
    found: str | None = None
    for i, arg in enumerate(args):
        if arg == LIMIT_FLAG and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(LIMIT_FLAG + "="):
            found = arg.split("=", 1)[1]
    if found is None:
        return {}
    try:
        value = json.loads(found)
    except ValueError:
        return {}
    return dict(value) if isinstance(value, dict) else {}
