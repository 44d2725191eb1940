"""The node's core assembled from a validated configuration, without ROS: per-camera clip buffers, the media
store and clip writer, the task catalog, the Reasoner client and the request pipeline (plus the pre-encoder).

The node builds one Core at start (or at a lifecycle node's `configure`) and closes it at shutdown.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cosmos_reasoner_ros.clips import (
    ClipBuffer,
    ClipWriter,
    MediaStore,
    MultiCameraBuffer,
    PreEncoder,
    RetentionPolicy,
    VisionProfile,
)
from cosmos_reasoner_ros.errors import ReasonerError, quoted
from cosmos_reasoner_ros.model_family import AUTO, family_from_checkpoint, resolve_family
from cosmos_reasoner_ros.node.parameters import ConfigError, NodeConfig, split_tasks, validate
from cosmos_reasoner_ros.parameters.server_url import normalise_server_url
from cosmos_reasoner_ros.reasoner import (
    ClientSettings,
    MediaForm,
    ReasonerClient,
    RequestSettings,
    TaskCatalog,
)
from cosmos_reasoner_ros.requests import Pipeline, PipelineSettings
from cosmos_reasoner_ros.schemas.structured_output import BACKENDS, compile_check
from cosmos_reasoner_ros.vllm_releases import video_kwargs_mode, video_kwargs_refusals

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Core"]

_Settings = TypeVar("_Settings", bound="DataclassInstance")


@dataclass
class Core:
    config: NodeConfig
    catalog: TaskCatalog
    buffers: dict[str, ClipBuffer]
    buffer: MultiCameraBuffer
    writer: ClipWriter
    client: ReasonerClient
    pipeline: Pipeline
    pre_encoder: PreEncoder | None
    notes: tuple[str, ...] = ()  # for the node's log, once at start

    @classmethod
    def build(cls, cfg: NodeConfig, log: Callable[[str], object] | None = None) -> Core:
        """Validate the whole configuration (every problem at once, as one ConfigError), then build.
        `log`: the node's logger (a warning) for what the pipeline learns while it runs, such as a server that
        takes no video (logged once per switch); None: Python's logging."""
        catalog, notes = _checked_catalog(cfg)
        try:
            writer = _clip_writer(cfg)
            client_settings = _client_settings(cfg)
            request_settings = _request_settings(cfg)
        except (ReasonerError, ValueError) as exc:
            raise ConfigError(f"invalid parameters:\n  {exc}") from exc
        max_bytes = int(cfg.buffer_max_mb * 1024 * 1024)
        buffers = {
            c.name: ClipBuffer(c.name, cfg.sample_fps, cfg.buffer_seconds, max_bytes, cfg.max_long_side)
            for c in cfg.cameras
        }
        buffer = MultiCameraBuffer(list(buffers.values()))
        client = ReasonerClient(client_settings)
        pipeline = Pipeline(
            buffer,
            writer,
            catalog,
            client,
            request_settings,
            _pipeline_settings(cfg),
            MediaForm(cfg.media_form, cfg.max_image_frames, log=log),
        )
        core = cls(cfg, catalog, buffers, buffer, writer, client, pipeline, _pre_encoder(cfg, writer), notes)
        # The video mode the server's vLLM takes, when it answers now (else when it becomes healthy).
        version = client.server_version()
        if version is not None:
            try:
                core.notes += (core.adapt_to_server(version, strict=True),)
            except ConfigError:
                core.close()
                raise
        return core

    def adapt_to_server(self, version: str | None, strict: bool = False) -> str:
        """Choose the per-request video mode for the server's vLLM `version` (video_kwargs_mode auto), or
        refuse a mode it answers with HTTP 400: ConfigError when `strict` (at start), else every video request
        ends as invalid_request with the reason, never sent. Returns the line for the log."""
        base = self.pipeline.request_settings
        wanted = self.config.video_kwargs_mode
        # A (re)started server may take video again, or fewer images: media_form auto asks it afresh.
        self.pipeline.media_form.forget()
        try:
            refusals = video_kwargs_refusals(version) if version else {}
            chosen = video_kwargs_mode(version) if version and wanted == "auto" else wanted
        except ValueError:
            refusals, chosen = {}, "media_io_kwargs" if wanted == "auto" else wanted
        where = f"the server's vLLM {version}" if version else "a server of unknown version"
        refusal = refusals.get(chosen, "")
        detected = self._family_of_served_model() if version else ""
        self.pipeline.request_settings = dataclasses.replace(
            base,
            video_kwargs_mode=chosen,
            video_refusal=refusal,
            model_family=detected.split(" ", 1)[0] if detected else base.model_family,
        )
        if refusal:
            message = f"video_kwargs_mode {wanted}: {refusal}; use auto or media_io_kwargs"
            if strict:
                raise ConfigError(f"invalid parameters:\n  {message}")
            return message
        line = f"video_kwargs_mode {wanted}: {chosen} for {where}"
        return f"{line}; model_family auto: {detected}" if detected else line

    def _family_of_served_model(self) -> str:
        """model_family auto, the `model` parameter naming no local checkpoint: the family of the checkpoint
        directory the server's /v1/models reports (the model's root, else its id) when this host can read its
        config.json, as "<family> (from <dir>)"; "" when stated, or nothing is found."""
        cfg = self.config
        if cfg.model_family != AUTO or (cfg.model and family_from_checkpoint(Path(cfg.model)) is not None):
            return ""
        for where in served_model_paths(
            self.client.settings.base_url, cfg.model, os.environ.get(cfg.api_key_env)
        ):
            found = family_from_checkpoint(Path(where)) if where.startswith(("/", "~")) else None
            if found is not None:
                return f"{found.name} (from {where}/config.json)"
        return ""

    def close(self) -> None:
        """Stop the pre-encoder and the writer's encoding threads, close the client. Call after the last
        request has ended."""
        if self.pre_encoder is not None:
            self.pre_encoder.close()
        self.writer.close()
        self.client.close()


def served_model_paths(base_url: str, model: str, api_key: str | None, timeout_s: float = 2.0) -> list[str]:
    """The root and id of the served model on {base_url}/models (`model`, else the first listed): where the
    server loaded it from. Empty when the server does not answer with such a list."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    request = urllib.request.Request(normalise_server_url(base_url) + "/models", headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (http(s), checked)
            data = json.loads(response.read(1 << 20)).get("data")
    except (OSError, ValueError, AttributeError):
        return []
    entries = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    chosen = next((m for m in entries if m.get("id") == model), None) if model else None
    entry = chosen or (entries[0] if entries else {})
    return [v for v in (entry.get("root"), entry.get("id")) if isinstance(v, str) and v]


def model_video_profile(cfg: NodeConfig) -> VisionProfile | None:
    """The served model's video processor as the node's parameters describe it; None when they do not."""
    if not (cfg.model_video_fps or cfg.model_video_max_pixels or cfg.model_video_min_pixels):
        return None
    return VisionProfile(
        fps=cfg.model_video_fps,
        max_pixels=cfg.model_video_max_pixels,
        min_pixels=cfg.model_video_min_pixels,
    )


def user_schema_check(catalog: TaskCatalog, timeout_s: float = 120.0) -> tuple[list[str], list[str]]:
    """(problems, notes): the json_schema of the tasks a tasks_file added or changed, compiled by the grammar
    backends this Python has (a robot's ROS environment usually has none: the note says so, and the server
    compiles them with vLLM's own backend at its start). The shipped schemas are compiled in CI."""
    shipped = TaskCatalog.load()
    schemas = {
        name: spec.json_schema
        for name, spec in catalog.tasks.items()
        if spec.json_schema is not None
        and (name not in shipped.tasks or shipped.spec(name).json_schema != spec.json_schema)
    }
    if not schemas:
        return [], []
    backends = [b for b in BACKENDS if importlib.util.find_spec(b) is not None]
    names = ", ".join(schemas)
    if not backends:
        return [], [
            f"structured output: the json_schema of {names} (tasks_file) was checked against known backend "
            "limits only; this Python has neither xgrammar nor llguidance to compile it "
            "(cosmos-reasoner-server compiles it with vLLM's own backend when its tasks_file names the file)"
        ]
    try:
        report = compile_check(schemas, sys.executable, backends, timeout_s=timeout_s)
    except ValueError as exc:
        return [], [f"structured output: the json_schema of {names} could not be compiled here: {exc}"]
    problems = [f"tasks_file: {failure.describe()}" for failure in report.failures]
    checked = ", ".join(f"{k} {v}" for k, v in report.backends.items())
    return problems, [] if problems else [
        f"structured output: the json_schema of {names} compile with {checked}"
    ]


def _checked_catalog(cfg: NodeConfig) -> tuple[TaskCatalog, tuple[str, ...]]:
    """The task catalog, once every parameter, task name and user schema checks out (every problem at once,
    as one ConfigError), and the notes of the schema check."""
    problems = validate(cfg)
    catalog = None
    try:
        catalog = TaskCatalog.load(cfg.tasks_file or None)
        known = ", ".join(catalog.names())
        if cfg.task not in catalog:
            problems.append(f"task: unknown task {quoted(cfg.task)}; known: {known}")
        # Every task the timer and ~/trigger will ask, now: a typo would otherwise start normally and have
        # every trigger rejected.
        unknown = [name for name in split_tasks(cfg.trigger_tasks) if name not in catalog]
        if unknown:
            names = ", ".join(quoted(name) for name in unknown[:4])
            problems.append(f"trigger_tasks: unknown task(s) {names}; known: {known}")
    except (ReasonerError, OSError) as exc:
        problems.append(f"tasks_file: {exc}")
    notes: list[str] = []
    if catalog is not None and cfg.structured_output and not problems:
        found, notes = user_schema_check(catalog)
        problems += found
    if problems:
        raise ConfigError("invalid parameters:\n  " + "\n  ".join(problems))
    assert catalog is not None
    return catalog, tuple(notes)


def _clip_writer(cfg: NodeConfig) -> ClipWriter:
    """The clip writer, into a media store kept within its retention limits."""
    store = MediaStore(
        Path(cfg.media_dir),
        RetentionPolicy(
            max_files=cfg.media_max_files,
            max_bytes=round(cfg.media_max_mb * 1024**2),
            max_age_s=cfg.media_max_age_s,
        ),
    )
    return ClipWriter(
        store,
        codec=cfg.codec,
        inline=cfg.inline_media,
        image_format=cfg.image_format,
        vision=model_video_profile(cfg),
    )


def _from_config(settings: type[_Settings], cfg: NodeConfig, **others: Any) -> _Settings:
    """`settings` with each field that NodeConfig has under the same name set by that parameter, and `others`
    for the fields the node names differently or converts; the rest keep their defaults."""
    same = {f.name for f in dataclasses.fields(settings)} & {f.name for f in dataclasses.fields(cfg)}
    return settings(**{name: getattr(cfg, name) for name in same - others.keys()}, **others)


def _client_settings(cfg: NodeConfig) -> ClientSettings:
    # the same names: model, api_key_env, connect_timeout_s, first_token_timeout_s, min_tokens_per_s,
    # progress_window_s, max_retries
    return _from_config(
        ClientSettings,
        cfg,
        base_url=cfg.server_url,
        read_timeout_s=cfg.request_timeout_s,
        total_timeout_s=cfg.request_total_timeout_s or None,
    )


def _request_settings(cfg: NodeConfig) -> RequestSettings:
    return RequestSettings(
        fps=cfg.sample_fps,
        structured_output=cfg.structured_output,
        max_tokens=cfg.max_tokens or None,
        video_kwargs_mode=cfg.video_kwargs_mode,
        # auto: a local checkpoint directory named by `model` tells; else Nano (the launch file states edge
        # for a server it starts in mode edge).
        model_family=resolve_family(cfg.model_family, cfg.model).name,
    )


def _pipeline_settings(cfg: NodeConfig) -> PipelineSettings:
    # every field: clip_seconds, tiled, stream, wait_for_server_s, stale_after_s
    return _from_config(PipelineSettings, cfg)


def _pre_encoder(cfg: NodeConfig, writer: ClipWriter) -> PreEncoder | None:
    """Frames encoded on arrival make a clip at trigger time a matter of muxing. A tiled video is composed at
    trigger time, so its cameras' frames are never reused: nothing to encode ahead."""
    tiled = cfg.tiled and len(cfg.cameras) > 1
    useful = cfg.pre_encode != "off" and writer.backend == "pyav" and not tiled
    return PreEncoder(writer) if useful else None
