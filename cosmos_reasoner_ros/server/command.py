"""The `vllm serve` command line and environment for given settings and a given vLLM release.

Only flags the release has are emitted (versions.RELEASES, derived from each release's own argument
definitions): a setting whose flag the release lacks is left out with a note when vLLM does the same without
it (--trust-request-mm-kwargs before 0.31: per-request media kwargs need no trust there), and is an error
when leaving it out would change what the user asked for. The API key travels in the server's environment
(VLLM_API_KEY), never on its command line, which any local user can read in /proc; anything shown or logged
goes through redacted_argv / redacted_env.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .detect import DetectedVersion, resolve_version
from .errors import ConfigError
from .settings import ARCHITECTURES, ServerSettings
from .versions import KNOWN_ENV, KNOWN_FLAGS, KNOWN_REASONING_PARSERS, RELEASES, sort_key

REDACTED = "<redacted>"
# A secret's name has a word ending in one of these (HF_TOKEN, VLLM_API_KEY, AWS_SECRET_ACCESS_KEY, MY_APIKEY,
# DB_PASSWORD): TOKENIZERS_PARALLELISM or VLLM_CPU_KVCACHE_SPACE are settings, shown as they are.
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:[A-Z0-9]*(?:KEYS?|TOKENS?|SECRETS?|PASSWORDS?|PASSWD|CREDENTIALS?)|PASS|AUTH|PAT)(?:_|$)",
    re.I,
)
# Greedy to the last '@' before the path: a password may hold '@' (`http://u:p@ss@host` keeps nothing of it),
# as parameters.server_url.shown_url splits at the last one.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s]+@")
_SECRET_FLAGS = ("--api-key",)


@dataclass(frozen=True)
class ServerCommand:
    """What to run: argv (never a shell string), the variables set on top of the inherited environment (the
    API key among them), the variables removed from it, and notes on settings left out for this release."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    version: DetectedVersion | None = None

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The server's whole environment: `base` (default: this process's) minus `unset`, plus `env`."""
        inherited = os.environ if base is None else base
        env = {k: v for k, v in inherited.items() if k not in self.unset}
        env.update(self.env)
        return env

    def shown(self) -> dict[str, object]:
        """What --print-command prints and the log shows: secrets redacted."""
        return {
            "vllm_version": self.version.version if self.version else None,
            "detected": self.version.source if self.version else None,
            "flag_table_row": self.version.row.release if self.version else None,
            "command": redacted_argv(self.argv),
            "env": redacted_env(self.env),
            "unset_env": list(self.unset),
            "notes": list(self.notes),
        }


def redacted_argv(argv: Sequence[str]) -> list[str]:
    """argv with the values of secret flags (--api-key X, --api-key=X) replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif arg in _SECRET_FLAGS:
            out.append(arg)
            hide_next = True
        elif arg.split("=", 1)[0] in _SECRET_FLAGS and "=" in arg:
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(redacted_urls(arg))
    return out


def redacted_urls(text: str) -> str:
    """Text with the credentials of every URL in it (`http://user:password@host`) replaced."""
    return _URL_CREDENTIALS.sub(rf"\g<scheme>{REDACTED}@", text)


def redacted_env(env: Mapping[str, str]) -> dict[str, str]:
    """Variables whose names look secret (…_KEY, …_TOKEN, …_SECRET, …_PASSWORD) with their values replaced,
    and the credentials of URLs in the others (HTTPS_PROXY=http://user:password@proxy)."""
    return {k: (REDACTED if _SECRET_NAME.search(k) and v else redacted_urls(v)) for k, v in env.items()}


def base_environment(settings: ServerSettings) -> tuple[dict[str, str], tuple[str, ...]]:
    """Variables the settings add (GPUs, caches, `env`) and the inherited ones they remove; no secrets."""
    env: dict[str, str] = {}
    if settings.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g.strip() for g in settings.gpus.split(","))
    if settings.cache_dir:
        # Compilation caches and temporary files in a directory the caller owns (not ~/.cache or /tmp).
        root = Path(settings.cache_dir).expanduser().resolve()
        env["TMPDIR"] = str(root / "tmp")
        env["VLLM_CACHE_ROOT"] = str(root / "vllm")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
    env.update({k: str(v) for k, v in settings.env.items()})
    return env, tuple(settings.unset_env)


def build_command(
    settings: ServerSettings,
    version: DetectedVersion | str,
    secrets: Mapping[str, str] | None = None,
) -> ServerCommand:
    """The command for `settings` on `version` (a detected version, or a version string such as "0.26.0").

    `secrets` is where the API key is read from (default: this process's environment, variable
    settings.api_key_env). Raises ConfigError for settings this release cannot honour.
    """
    if settings.mode == "external":
        raise ConfigError("mode external starts no server")
    detected = resolve_version(version) if isinstance(version, str) else version
    flags = _Flags(detected, [*settings.executable, "serve", settings.model])
    architecture = _checked_architecture(settings, flags)
    if settings.served_model_name:
        flags.add("served_model_name", "--served-model-name", settings.served_model_name)
    flags.add("mode", "--hf-overrides", json.dumps({"architectures": [architecture]}))
    _add_parallelism(settings, flags)
    _add_media(settings, flags)
    _add_engine_limits(settings, flags)
    _add_output_parsing(settings, flags)
    flags.add("host", "--host", settings.host)
    flags.add("port", "--port", str(settings.port))
    _add_extra_args(settings, flags)
    env, unset = _environment(settings, flags)
    _add_api_key(settings, secrets, flags, env)
    return ServerCommand(tuple(flags.cmd), env, unset, tuple(flags.notes), detected)


class _Flags:
    """The command line being built for one release, and the notes on what was left out of it."""

    def __init__(self, detected: DetectedVersion, cmd: list[str]) -> None:
        self.release = detected.row.info
        self.label = f"vLLM {detected.version}"
        self.cmd = cmd
        self.notes: list[str] = []

    def add(self, setting: str, flag: str, *values: str, optional: str = "") -> None:
        """Emit `flag` when the release has it; else note `optional` (why vLLM needs no flag), or fail."""
        if flag in self.release.flags:
            self.cmd.extend((flag, *values))
        elif optional:
            self.notes.append(f"{setting}: not emitted, {self.label} has no {flag} ({optional})")
        else:
            raise ConfigError(f"{setting}: {self.label} has no {flag} ({_rows_with(flag)})")


def _checked_architecture(settings: ServerSettings, flags: _Flags) -> str:
    """The architecture the mode asks for, refused when the release cannot serve it natively."""
    architecture = ARCHITECTURES[settings.mode]
    release, label = flags.release, flags.label
    if settings.mode == "native" and architecture not in release.architectures:
        raise ConfigError(
            f"mode native: {label} does not serve {architecture} (it does from vLLM "
            f"{_first_row_with(architecture=architecture)}); use mode plugin with the vllm-cosmos3 plugin"
        )
    if settings.mode == "plugin" and ARCHITECTURES["native"] in release.architectures:
        flags.notes.append(
            f"mode plugin: {label} serves {ARCHITECTURES['native']} without the plugin (mode native); the "
            "vllm-cosmos3 plugin was made for vLLM 0.19.1 and 0.21.0"
        )
    return architecture


def _add_parallelism(settings: ServerSettings, flags: _Flags) -> None:
    """Tensor and data parallelism, and the API servers in front of them."""
    add = flags.add
    add("tensor_parallel_size", "--tensor-parallel-size", str(settings.tensor_parallel_size))
    if settings.data_parallel_size > 1:
        add("data_parallel_size", "--data-parallel-size", str(settings.data_parallel_size))
    if settings.data_parallel_size_local:
        add("data_parallel_size_local", "--data-parallel-size-local", str(settings.data_parallel_size_local))
    if settings.data_parallel_start_rank:
        add("data_parallel_start_rank", "--data-parallel-start-rank", str(settings.data_parallel_start_rank))
    if settings.data_parallel_address:
        add("data_parallel_address", "--data-parallel-address", settings.data_parallel_address)
    if settings.data_parallel_rpc_port:
        add("data_parallel_rpc_port", "--data-parallel-rpc-port", str(settings.data_parallel_rpc_port))
    if settings.data_parallel_backend:
        add("data_parallel_backend", "--data-parallel-backend", settings.data_parallel_backend)
    if settings.headless:
        add("headless", "--headless")
    if settings.api_server_count:
        add("api_server_count", "--api-server-count", str(settings.api_server_count))
    if settings.mm_encoder_tp_mode:
        add("mm_encoder_tp_mode", "--mm-encoder-tp-mode", settings.mm_encoder_tp_mode, optional="a tuning")
    if settings.async_scheduling:
        add("async_scheduling", "--async-scheduling", optional="a tuning")


def _add_media(settings: ServerSettings, flags: _Flags) -> None:
    """Where the server may read clips, and how it decodes them."""
    if settings.media_dir:
        media = str(Path(settings.media_dir).expanduser().resolve())
        flags.add("media_dir", "--allowed-local-media-path", media)
    if settings.media_io_kwargs:
        flags.add("media_io_kwargs", "--media-io-kwargs", json.dumps(settings.media_io_kwargs))
    if settings.trust_request_mm_kwargs:
        flags.add(
            "trust_request_mm_kwargs",
            "--trust-request-mm-kwargs",
            optional="it takes per-request media_io_kwargs and mm_processor_kwargs without it",
        )


def _add_engine_limits(settings: ServerSettings, flags: _Flags) -> None:
    """Context length, memory, batch size, scheduling, caches and the media per request."""
    add = flags.add
    if settings.max_model_len > 0:
        add("max_model_len", "--max-model-len", str(settings.max_model_len))
    if settings.enforce_eager:
        add("enforce_eager", "--enforce-eager")
    if settings.gpu_memory_utilization > 0:
        add("gpu_memory_utilization", "--gpu-memory-utilization", f"{settings.gpu_memory_utilization:g}")
    if settings.max_num_seqs > 0:
        add("max_num_seqs", "--max-num-seqs", str(settings.max_num_seqs))
    if settings.scheduling_policy != "fcfs":
        add("scheduling_policy", "--scheduling-policy", settings.scheduling_policy)
    if settings.prefix_caching != "default":
        flag = "--enable-prefix-caching" if settings.prefix_caching == "on" else "--no-enable-prefix-caching"
        add("prefix_caching", flag)
    if settings.mm_processor_cache_gb >= 0:
        add("mm_processor_cache_gb", "--mm-processor-cache-gb", f"{settings.mm_processor_cache_gb:g}")
    if settings.cameras > 0:
        # One video (or one image) per camera and request: vLLM reserves memory for, and accepts, no more.
        limits = json.dumps({"video": settings.cameras, "image": settings.cameras})
        add("cameras", "--limit-mm-per-prompt", limits)


def _add_output_parsing(settings: ServerSettings, flags: _Flags) -> None:
    """The reasoning parser and the structured outputs' backend."""
    if settings.reasoning_parser:
        parser = settings.reasoning_parser
        if parser in KNOWN_REASONING_PARSERS and parser not in flags.release.reasoning_parsers:
            raise ConfigError(f"reasoning_parser: {flags.label} has no reasoning parser {parser!r}")
        flags.add("reasoning_parser", "--reasoning-parser", parser)
    if settings.structured_outputs:
        flags.add(
            "structured_outputs", "--structured-outputs-config", json.dumps(settings.structured_outputs)
        )


def _add_extra_args(settings: ServerSettings, flags: _Flags) -> None:
    """The extra arguments as given, refused when one is a flag this release does not have."""
    for arg in settings.extra_args:
        flag = arg.split("=", 1)[0]
        if flag in KNOWN_FLAGS and flag not in flags.release.flags:
            raise ConfigError(f"extra_args: {flags.label} has no {flag} ({_rows_with(flag)})")
    flags.cmd.extend(settings.extra_args)


def _environment(settings: ServerSettings, flags: _Flags) -> tuple[dict[str, str], tuple[str, ...]]:
    """The variables to set (less those this release does not read, noted) and those to unset."""
    env, unset = base_environment(settings)
    for name in list(env):
        if name in KNOWN_ENV and name not in flags.release.env:
            flags.notes.append(f"env: {name} not set, {flags.label} does not read it")
            del env[name]
    return env, unset


def _add_api_key(
    settings: ServerSettings, secrets: Mapping[str, str] | None, flags: _Flags, env: dict[str, str]
) -> None:
    """The API key: in VLLM_API_KEY where the release reads it, else as --api-key; noted when unset."""
    key = _api_key(settings, secrets)
    if key:
        if "VLLM_API_KEY" in flags.release.env:
            env["VLLM_API_KEY"] = key
        else:
            flags.cmd += ["--api-key", key]
    elif settings.api_key_env:
        flags.notes.append(
            f"api_key_env: ${settings.api_key_env} is unset or empty, the server requires no API key"
        )


def _api_key(settings: ServerSettings, secrets: Mapping[str, str] | None) -> str:
    if not settings.api_key_env:
        return ""
    source = os.environ if secrets is None else secrets
    return source.get(settings.api_key_env, "").strip()


def _rows_with(flag: str) -> str:
    having = sorted((r for r, info in RELEASES.items() if flag in info.flags), key=sort_key)
    return f"releases with it: {', '.join(having)}" if having else "no release in the flag table has it"


def _first_row_with(architecture: str) -> str:
    having = sorted((r for r, info in RELEASES.items() if architecture in info.architectures), key=sort_key)
    return having[0] if having else "none"
