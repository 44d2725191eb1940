"""The `container` section of config/server.yaml (documented there): vLLM run by docker or podman, typed and
validated. Every problem names its key (`container.image: ...`); settings.py adds them to its own."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

RUNTIMES = ("docker", "podman")
# How the GPUs reach the container: docker's NVIDIA runtime (JetPack's default on Jetson), docker's --gpus,
# the Container Device Interface (podman; docker 25+), or none (a CPU image).
GPU_FLAGS: dict[str, tuple[str, ...]] = {
    "nvidia-runtime": ("--runtime", "nvidia"),
    "gpus-all": ("--gpus", "all"),
    "cdi": ("--device", "nvidia.com/gpu=all"),
    "none": (),
}
DEFAULT_GPU = {"docker": "nvidia-runtime", "podman": "cdi"}
NETWORKS = ("host", "bridge")
LABEL_PREFIX = "cosmos_reasoner_ros."  # the supervisor's own labels: not settable
OWNER_LABEL = LABEL_PREFIX + "owner"
PORT_LABEL = LABEL_PREFIX + "port"
# Host paths never mounted: the system's own directories and the runtime's socket (a container holding it
# owns the host). A mount is an absolute path without '..', ':' or ',' (they would change -v's meaning).
FORBIDDEN_MOUNTS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containers",
)
_KEYS = (
    *("runtime", "executable", "image", "gpu", "network"),
    *("name", "labels", "mounts", "hf_cache", "pass_env"),
)
# A docker image reference: [registry[:port]/]path[:tag][@sha256:digest], the path lowercase.
_IMAGE = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]{1,5})?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}")
_LABEL_KEY = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,126}[a-z0-9])?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class ContainerSettings:
    """`container:` in server.yaml; empty there: vLLM runs as a process of its own, no container."""

    image: str
    runtime: str = "docker"
    executable: str = ""  # the runtime's program; empty: `runtime` found on PATH
    gpu: str = ""  # a key of GPU_FLAGS; empty: DEFAULT_GPU of the runtime
    network: str = "host"
    name: str = ""  # empty: cosmos-reasoner-vllm-<port>
    labels: dict[str, str] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()  # read-only, at the same path inside
    hf_cache: str = ""  # read-write at the same path, HF_HOME inside; empty: none
    pass_env: tuple[str, ...] = ()  # passed by name from the supervisor's environment (HF_TOKEN)

    @property
    def program(self) -> str:
        return self.executable or self.runtime

    @property
    def gpu_flags(self) -> tuple[str, ...]:
        return GPU_FLAGS[self.gpu or DEFAULT_GPU[self.runtime]]

    def container_name(self, port: int) -> str:
        return self.name or f"cosmos-reasoner-vllm-{port}"


def parse_container(data: Mapping[str, Any]) -> tuple[ContainerSettings | None, list[str]]:
    """The section's settings and its problems (each naming its key); (None, []) for an empty section."""
    if not data:
        return None, []
    known = ", ".join(_KEYS)
    problems = [f"container.{key}: unknown setting (known: {known})" for key in data if key not in _KEYS]
    values: dict[str, Any] = {}
    for key in ("image", "runtime", "executable", "gpu", "network", "name", "hf_cache"):
        if key in data:
            if not isinstance(data[key], str):
                problems.append(f"container.{key}: a string, got {data[key]!r}")
            else:
                values[key] = data[key]
    for key in ("mounts", "pass_env"):
        if key in data:
            items = data[key]
            if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
                problems.append(f"container.{key}: a list of strings, got {items!r}")
            else:
                values[key] = tuple(items)
    if "labels" in data:
        labels = data["labels"]
        if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str | int | float) and not isinstance(v, bool)
            for k, v in labels.items()
        ):
            problems.append(f"container.labels: a mapping of names to strings, got {labels!r}")
        else:
            values["labels"] = {k: str(v) for k, v in labels.items()}
    if "image" not in values and "container.image: a string" not in " ".join(problems):
        problems.append("container.image: needed (e.g. vllm/vllm-openai:cosmos3)")
    if problems:
        return None, problems
    settings = ContainerSettings(**values)
    return settings, _value_problems(settings)


def _value_problems(c: ContainerSettings) -> list[str]:
    problems = []
    if not _IMAGE.fullmatch(c.image):
        problems.append(f"container.image: an image reference (vllm/vllm-openai:cosmos3), got {c.image!r}")
    if c.runtime not in RUNTIMES:
        problems.append(f"container.runtime: docker or podman, got {c.runtime!r}")
    if c.executable and (c.executable.startswith("-") or "\n" in c.executable):
        problems.append(f"container.executable: a program name or path, got {c.executable!r}")
    if c.gpu and c.gpu not in GPU_FLAGS:
        problems.append(f"container.gpu: one of {', '.join(GPU_FLAGS)}, got {c.gpu!r}")
    elif c.gpu == "nvidia-runtime" and c.runtime == "podman":
        problems.append("container.gpu: nvidia-runtime is docker's; podman reaches GPUs through cdi")
    if c.network not in NETWORKS:
        problems.append(f"container.network: host or bridge, got {c.network!r}")
    if c.name and not _NAME.fullmatch(c.name):
        problems.append(f"container.name: letters, digits, _ . - (not first), got {c.name!r}")
    for key, value in c.labels.items():
        if not _LABEL_KEY.fullmatch(key):
            problems.append(f"container.labels: a name of lowercase letters, digits, . _ -, got {key!r}")
        elif key.startswith(LABEL_PREFIX):
            problems.append(f"container.labels: {key!r}: the {LABEL_PREFIX}* labels are the supervisor's own")
        if not value.isprintable() or len(value) > 1024:
            problems.append(f"container.labels: the value of {key!r}: printable text up to 1024 characters")
    for path in c.mounts:
        problem = mount_problem(path)
        if problem:
            problems.append(f"container.mounts: {problem}")
    if c.hf_cache and mount_problem(c.hf_cache):
        problems.append(f"container.hf_cache: {mount_problem(c.hf_cache)}")
    for name in c.pass_env:
        if not _ENV_NAME.fullmatch(name):
            problems.append(f"container.pass_env: the name of an environment variable, got {name!r}")
    return problems


def mount_problem(path: str) -> str:
    """Why a host path may not be mounted ('' when it may): relative, with '..', ':' or ',', the root, or
    in a system directory. `~` stands for the home directory."""
    shown = repr(path)
    text = path if not path.startswith("~") else "/home/x" + path[1:]  # the shape only: ~ is a home
    if not text.startswith("/"):
        return f"an absolute path (or ~/...), got {shown}"
    if any(c in text for c in ":,\n\0") or not text.isprintable():
        return f"no ':', ',' or control characters in a mounted path, got {shown}"
    parts = PurePosixPath(text).parts
    if ".." in parts:
        return f"no '..' in a mounted path, got {shown}"
    normal = "/" + "/".join(p for p in parts[1:] if p != ".")
    if normal == "/":
        return "not the root directory"
    for forbidden in FORBIDDEN_MOUNTS:
        if normal == forbidden or normal.startswith(forbidden + "/"):
            return f"{shown} is in {forbidden}, a system directory never mounted"
    return ""
