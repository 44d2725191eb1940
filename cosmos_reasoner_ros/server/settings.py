"""The settings of `cosmos-reasoner-server` (config/server.yaml, documented there): typed, validated, loaded
from YAML with command-line overrides on top."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from cosmos_reasoner_ros.package_files import config_file
from cosmos_reasoner_ros.parameters.node_clips import DEFAULT_MEDIA_DIR
from cosmos_reasoner_ros.parameters.server_url import server_root, server_url_problem
from cosmos_reasoner_ros.parameters.text_values import boolean_text, integer_text, number_text

from .container_settings import mount_problem, parse_container
from .errors import ConfigError

# Architecture each mode asks vLLM for (--hf-overrides); external starts nothing.
ARCHITECTURES = {
    "plugin": "Cosmos3ReasonerForConditionalGeneration",  # vLLM 0.19/0.21 with the vllm-cosmos3 plugin
    "native": "Cosmos3ForConditionalGeneration",  # vLLM >= 0.23, no plugin
    "qwen3vl": "Qwen3VLForConditionalGeneration",  # the tiny test checkpoint (or any Qwen3-VL model)
    "edge": "Cosmos3EdgeForConditionalGeneration",  # Cosmos3-Edge, native in vLLM's cosmos3_edge.py
}
MODES = (*ARCHITECTURES, "external")
PREFIX_CACHING = ("default", "on", "off")
SCHEDULING_POLICIES = ("fcfs", "priority")
DATA_PARALLEL_BACKENDS = ("", "mp", "ray")
# vLLM's StructuredOutputsConfig (the same fields in 0.19.1-0.34.0; read from each release's
# vllm/config/structured_outputs.py), as --structured-outputs-config takes them.
STRUCTURED_OUTPUT_BACKENDS = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")
STRUCTURED_OUTPUT_KEYS = {
    "backend": str,
    "disable_fallback": bool,
    "disable_any_whitespace": bool,
    "disable_additional_properties": bool,
    "enable_in_reasoning": bool,
}


@dataclass(frozen=True)
class ServerSettings:
    """Every setting of config/server.yaml (documented there)."""

    mode: str = "plugin"
    model: str = "nvidia/Cosmos3-Nano"
    served_model_name: str = ""
    executable: tuple[str, ...] = ("vllm",)
    vllm_version: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8000
    server_url: str = ""
    api_key_env: str = "COSMOS_REASONER_API_KEY"
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_size_local: int = 0
    data_parallel_start_rank: int = 0
    data_parallel_address: str = ""
    data_parallel_rpc_port: int = 0
    data_parallel_backend: str = ""
    headless: bool = False
    api_server_count: int = 0
    gpus: str = ""
    gpu_memory_utilization: float = 0.0
    max_num_seqs: int = 0
    scheduling_policy: str = "fcfs"
    mm_encoder_tp_mode: str = "data"
    async_scheduling: bool = True
    prefix_caching: str = "default"
    mm_processor_cache_gb: float = -1.0
    cameras: int = 0
    max_model_len: int = 0
    enforce_eager: bool = False
    reasoning_parser: str = ""
    structured_outputs: dict[str, Any] = field(
        default_factory=lambda: {
            "backend": "guidance",
            "disable_any_whitespace": True,
            "disable_additional_properties": True,
        }
    )
    tasks_file: str = ""
    structured_tasks: tuple[str, ...] = ()
    warmup: bool = True
    warmup_timeout_s: float = 120.0
    media_dir: str = DEFAULT_MEDIA_DIR
    media_io_kwargs: dict[str, Any] = field(default_factory=lambda: {"video": {"num_frames": -1}})
    trust_request_mm_kwargs: bool = True
    extra_args: tuple[str, ...] = ()
    cache_dir: str = ""
    env: dict[str, str] = field(default_factory=lambda: {"VLLM_NO_USAGE_STATS": "1"})
    unset_env: tuple[str, ...] = ("_ROS_WHEELS_BOOTSTRAP_COMPLETE",)
    start_timeout_s: float = 1800.0
    health_period_s: float = 1.0
    health_grace_s: float = 30.0
    health_busy_grace_s: float = 300.0
    max_restarts: int = 5
    restart_backoff_s: float = 2.0
    restart_backoff_max_s: float = 60.0
    restart_reset_s: float = 600.0
    stop_grace_s: float = 20.0
    ready_file: str = ""
    log_prefix: str = "[vllm] "
    container: dict[str, Any] = field(default_factory=dict)  # empty: no container (container_settings.py)

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode: one of {', '.join(MODES)}, got {self.mode!r}")
        if not 0 < self.port < 65536:
            problems.append(f"port: 1-65535, got {self.port}")
        problems += _parallel_problems(self)
        if not (self.gpu_memory_utilization == 0 or 0 < self.gpu_memory_utilization <= 1):
            problems.append(
                f"gpu_memory_utilization: 0 (vLLM's default) or in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.max_num_seqs < 0 or self.cameras < 0 or self.max_model_len < 0:
            problems.append("max_num_seqs, cameras, max_model_len: >= 0 (0: vLLM's default)")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            problems.append(f"scheduling_policy: fcfs or priority, got {self.scheduling_policy!r}")
        if self.prefix_caching not in PREFIX_CACHING:
            problems.append(f"prefix_caching: default, on or off, got {self.prefix_caching!r}")
        if not math.isfinite(self.mm_processor_cache_gb) or (
            self.mm_processor_cache_gb < 0 and self.mm_processor_cache_gb != -1
        ):
            problems.append(
                f"mm_processor_cache_gb: -1 (vLLM's default) or >= 0, got {self.mm_processor_cache_gb}"
            )
        problems.extend(structured_outputs_problems(self.structured_outputs))
        if any(arg.split("=", 1)[0] == "--structured-outputs-config" for arg in self.extra_args):
            problems.append(
                "extra_args: --structured-outputs-config is the setting structured_outputs (a mapping); "
                "set it there, once"
            )
        if not (math.isfinite(self.warmup_timeout_s) and self.warmup_timeout_s > 0):
            problems.append(f"warmup_timeout_s: > 0, got {self.warmup_timeout_s}")
        if self.reasoning_parser and not self.reasoning_parser.replace("_", "").isalnum():
            problems.append(f"reasoning_parser: a parser name such as qwen3, got {self.reasoning_parser!r}")
        if self.api_key_env and not self.api_key_env.replace("_", "").isalnum():
            problems.append(f"api_key_env: the name of an environment variable, got {self.api_key_env!r}")
        if self.mode != "external" and not self.model:
            problems.append("model: a local checkpoint directory or a hub id is needed")
        if self.mode != "external" and not self.executable:
            problems.append("executable: empty")
        if self.mode == "external" and not self.server_url:
            problems.append("server_url: needed in mode external")
        if self.server_url and (problem := server_url_problem(self.server_url)):
            problems.append(f"server_url: {problem}")
        problems += _number_problems(self)
        problems += _container_problems(self)
        if self.gpus and not all(g.strip().isdigit() for g in self.gpus.split(",")):
            problems.append(f"gpus: comma-separated GPU ids such as 0,1, got {self.gpus!r}")
        elif self.gpus and self.mode != "external":
            problems += _gpu_count_problems(self)
        if problems:
            raise ConfigError("invalid server settings:\n  " + "\n  ".join(problems))

    @property
    def url(self) -> str:
        """Root URL of the server (where /health lives)."""
        if self.server_url:
            return server_root(self.server_url)
        return f"http://{self.host}:{self.port}"


# The supervisor's numbers, [low, high] and whether 0 is allowed besides (off / none): a NaN once spun the
# supervisor at 85 % CPU deaf to SIGTERM, an infinity raised an OverflowError from a wait.
SUPERVISION_RANGES: dict[str, tuple[float, float, bool]] = {
    "start_timeout_s": (0.1, 7 * 86400.0, False),
    "health_period_s": (0.05, 600.0, False),
    "health_grace_s": (1.0, 86400.0, True),
    "health_busy_grace_s": (1.0, 7 * 86400.0, True),
    "max_restarts": (0, 1000, False),
    "restart_backoff_s": (0.0, 3600.0, False),
    "restart_backoff_max_s": (0.0, 86400.0, False),
    "restart_reset_s": (1.0, 7 * 86400.0, False),
    "stop_grace_s": (0.1, 3600.0, False),
}


def _parallel_problems(s: ServerSettings) -> list[str]:
    """Tensor and data parallelism, headless hosts and the API servers in front of them."""
    problems = []
    if s.tensor_parallel_size < 1:
        problems.append(f"tensor_parallel_size: >= 1, got {s.tensor_parallel_size}")
    if s.data_parallel_size < 1:
        problems.append(f"data_parallel_size: >= 1, got {s.data_parallel_size}")
    if not 0 <= s.data_parallel_size_local <= s.data_parallel_size:
        problems.append(
            f"data_parallel_size_local: 0 (all on this host) to data_parallel_size, "
            f"got {s.data_parallel_size_local}"
        )
    if not 0 <= s.data_parallel_start_rank < s.data_parallel_size:
        problems.append(
            f"data_parallel_start_rank: 0 to data_parallel_size - 1, got {s.data_parallel_start_rank}"
        )
    if not 0 <= s.data_parallel_rpc_port < 65536:
        problems.append(
            f"data_parallel_rpc_port: 0 (vLLM's default) or 1-65535, got {s.data_parallel_rpc_port}"
        )
    if s.data_parallel_backend not in DATA_PARALLEL_BACKENDS:
        problems.append(f"data_parallel_backend: empty, mp or ray, got {s.data_parallel_backend!r}")
    if s.headless and s.data_parallel_size_local in (0, s.data_parallel_size):
        problems.append(
            "headless: only for a secondary host of multi-node data parallelism "
            "(data_parallel_size_local below data_parallel_size)"
        )
    if not 0 <= s.api_server_count <= 64:
        problems.append(f"api_server_count: 0 (vLLM's default) to 64, got {s.api_server_count}")
    elif s.api_server_count and s.headless:
        problems.append("api_server_count: a headless host runs no API server (leave it 0)")
    return problems


def _gpu_count_problems(s: ServerSettings) -> list[str]:
    """The GPUs listed against what this host's replicas use (tensor_parallel_size each): vLLM gives each
    replica the next tensor_parallel_size of them, and a replica without its GPUs fails after the model load
    began (data_parallel_size 2 on one GPU: the second engine finds no device)."""
    ids = [g.strip() for g in s.gpus.split(",")]
    if len(set(ids)) != len(ids):
        return [f"gpus: each GPU once, got {s.gpus!r}"]
    replicas = s.data_parallel_size_local or s.data_parallel_size
    needed = s.tensor_parallel_size * replicas
    if len(ids) < needed:
        return [
            f"gpus: {len(ids)} listed ({s.gpus}) for {replicas} replica(s) of tensor_parallel_size "
            f"{s.tensor_parallel_size} on this host: {needed} needed"
        ]
    return []


def _container_problems(s: ServerSettings) -> list[str]:
    """The container section's own problems, and what it needs of the other settings: a stated vLLM
    version (the image's, not detected here) and host paths it may mount at the same place inside."""
    if not s.container:
        return []
    _, problems = parse_container(s.container)
    if s.mode == "external":
        problems.append("container: mode external starts no server (leave container empty)")
    if s.vllm_version in ("", "auto"):
        problems.append("vllm_version: the image's vLLM version is needed with a container (e.g. 0.26.0)")
    for name in ("media_dir", "cache_dir"):
        value = getattr(s, name)
        if value and mount_problem(value):
            problems.append(f"{name}: mounted into the container: {mount_problem(value)}")
    if s.model.startswith(("/", "~")) and mount_problem(s.model):
        problems.append(f"model: mounted into the container: {mount_problem(s.model)}")
    return problems


def _number_problems(s: ServerSettings) -> list[str]:
    problems = []
    for name, (low, high, zero_ok) in SUPERVISION_RANGES.items():
        value = getattr(s, name)
        if not math.isfinite(value) or not (low <= value <= high or (zero_ok and value == 0)):
            zero = "0 (off) or " if zero_ok else ""
            problems.append(f"{name}: {zero}a finite number in [{low:g}, {high:g}], got {value}")
    graces = (s.health_grace_s, s.health_busy_grace_s)
    if all(math.isfinite(g) and g > 0 for g in graces) and s.health_busy_grace_s < s.health_grace_s:
        problems.append(
            f"health_busy_grace_s ({s.health_busy_grace_s}) must not be below health_grace_s "
            f"({s.health_grace_s})"
        )
    finite = math.isfinite(s.restart_backoff_s) and math.isfinite(s.restart_backoff_max_s)
    if finite and s.restart_backoff_max_s < s.restart_backoff_s:
        problems.append(
            f"restart_backoff_max_s ({s.restart_backoff_max_s}) must not be below restart_backoff_s "
            f"({s.restart_backoff_s})"
        )
    return problems


def structured_outputs_problems(config: Mapping[str, Any]) -> list[str]:
    """What vLLM 0.19-0.34 would refuse in --structured-outputs-config, said before it starts."""
    problems = []
    for key, value in config.items():
        kind = STRUCTURED_OUTPUT_KEYS.get(key)
        if kind is None:
            problems.append(
                f"structured_outputs: unknown key {key!r} (known: {', '.join(STRUCTURED_OUTPUT_KEYS)}; "
                "reasoning_parser is its own setting)"
            )
        elif not isinstance(value, kind):
            problems.append(f"structured_outputs.{key}: expected {kind.__name__}, got {value!r}")
    backend = config.get("backend", "auto")
    if isinstance(backend, str) and backend not in STRUCTURED_OUTPUT_BACKENDS:
        problems.append(
            f"structured_outputs.backend: one of {', '.join(STRUCTURED_OUTPUT_BACKENDS)}, got {backend!r}"
        )
    if config.get("disable_any_whitespace") is True and backend not in ("xgrammar", "guidance"):
        problems.append(
            "structured_outputs.disable_any_whitespace needs backend xgrammar or guidance: vLLM 0.19-0.34 "
            f"refuse it with backend {backend!r} at start (set backend: guidance or xgrammar)"
        )
    return problems


def load_settings(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> ServerSettings:
    """Settings from a YAML file (default: the shipped config/server.yaml, wherever the package is installed)
    with overrides applied on top."""
    data: dict[str, Any] = {}
    if path is not None and not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        source = path or config_file("server.yaml")
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from None
    try:
        loaded = yaml.safe_load(source.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{source}: expected a mapping of settings")
    data.update(loaded)
    data.update(overrides or {})
    return settings_from_mapping(data)


def settings_from_mapping(data: Mapping[str, Any]) -> ServerSettings:
    """Typed settings from plain values (YAML or command line); unknown keys are an error."""
    known = {f.name for f in fields(ServerSettings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown server settings: {', '.join(unknown)}")
    defaults = ServerSettings()
    values: dict[str, Any] = {}
    for name, value in data.items():
        try:
            values[name] = _coerce(value, getattr(defaults, name))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"setting {name}: {exc}") from exc
    return ServerSettings(**values)


def _coerce(value: Any, default: Any) -> Any:
    """A YAML value or a command-line string as the type of the setting's default. Strings that look like
    JSON lists or mappings are parsed as JSON (`--set 'executable=["/venv/bin/python", "-m", "vllm..."]'`)."""
    if isinstance(default, bool):
        return boolean_text(value) if isinstance(value, str) else bool(value)
    if isinstance(default, int):
        if isinstance(value, str):
            return integer_text(value)
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, str):
            return number_text(value)
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)
    if isinstance(default, tuple):
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                value = json.loads(value)
            else:
                return tuple(value.split())
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected a list, got {value!r}")
        return tuple(str(v) for v in value)
    if isinstance(default, dict):
        parsed = json.loads(value) if isinstance(value, str) else value
        if not isinstance(parsed, dict):
            raise ValueError(f"expected a mapping, got {value!r}")
        return dict(parsed)
    if isinstance(default, str):
        # YAML reads `gpus: 0` as an int and `gpus: [0, 1]` as a list, `vllm_version: 0.26` as a float.
        return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
    return value
