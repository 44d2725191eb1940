"""One Reasoner request end to end, without ROS: clips -> media -> prompt -> request -> client -> answer.

Every request ends in one `Outcome`, success or error; nothing raised inside escapes `Pipeline.run`. An
outcome holds no frames but the one the annotated image is drawn on, and no inline media: what outlives a
request must not pin memory the clip buffer has let go.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cosmos_reasoner_ros.client import Completion, ReasonerClient
from cosmos_reasoner_ros.clip_buffer import Clip, MultiCameraBuffer
from cosmos_reasoner_ros.clip_writer import ClipWriter
from cosmos_reasoner_ros.errors import ClipError, ReasonerError, RequestCancelled
from cosmos_reasoner_ros.image_conversion import Frame
from cosmos_reasoner_ros.media_store import MediaRef
from cosmos_reasoner_ros.parsing import ParsedAnswer, parse_answer
from cosmos_reasoner_ros.request_builder import RequestSettings, build_request
from cosmos_reasoner_ros.tasks import RenderedTask, TaskCatalog

log = logging.getLogger(__name__)

# The order the Reason action's feedback goes through (its STAGE_* constants have these indices).
STAGES: tuple[str, ...] = ("capturing", "encoding", "waiting_for_server", "querying", "streaming")

ProgressCallback = Callable[[str, str], None]
"""Called with (stage, text streamed so far); the text is empty before the streaming stage."""


@dataclass(frozen=True)
class RequestSpec:
    """What one trigger asks: the task and its values, the cameras, the window."""

    request_id: str
    task: str
    instruction: str = ""
    step: str = ""
    cameras: tuple[str, ...] = ()  # empty: every camera the buffer has
    clip_seconds: float = 0.0  # 0: the pipeline's default
    end_ns: int | None = None  # None: the newest frame
    trigger_time: float = 0.0  # time.monotonic() when the trigger arrived; 0: when run() starts


@dataclass(frozen=True)
class Timings:
    """time.monotonic() marks along the request; None when the request ended before that point."""

    trigger: float
    started: float
    request_sent: float | None = None
    first_token: float | None = None
    response_received: float | None = None
    finished: float = 0.0


@dataclass(frozen=True)
class ClipSummary:
    """What a result reports of one clip: its camera, window and sizes, without the frames."""

    camera: str
    start_ns: int  # stamp of the first frame sent
    end_ns: int  # stamp of the last frame sent
    frame_count: int
    fps: float  # the buffer's sampling rate
    width: int  # [px] size of the frames sent
    height: int
    source_size: tuple[int, int]  # [px] (width, height) of the camera's own images

    @classmethod
    def of(cls, clip: Clip) -> ClipSummary:
        return cls(
            camera=clip.camera,
            start_ns=clip.start_ns,
            end_ns=clip.end_ns,
            frame_count=len(clip.frames),
            fps=clip.fps,
            width=clip.width,
            height=clip.height,
            source_size=clip.source_size,
        )


def _light(media: MediaRef) -> MediaRef:
    """A media reference without its payload: a data: URL is megabytes, its MIME type says enough."""
    return dataclasses.replace(media, url=f"data:{media.mime}") if media.url.startswith("data:") else media


@dataclass(frozen=True)
class Outcome:
    """Everything a ReasonerResult needs, success or error."""

    request_id: str
    task: str
    instruction: str
    success: bool
    error_kind: str = ""
    error: str = ""
    reasoning: str = ""
    answer: str = ""  # final answer; on unparseable/truncated answers the raw text
    choice: str = ""
    parsed: ParsedAnswer | None = None
    clips: tuple[ClipSummary, ...] = ()
    media: tuple[MediaRef, ...] = ()  # as sent, but data: URLs reduced to their MIME type
    last_frame: Frame | None = None  # the answer camera's newest frame sent (for the annotated image)
    cameras: tuple[str, ...] = ()
    stale_cameras: tuple[str, ...] = ()  # asked for but left out: no recent frames (why: stale_reasons)
    stale_reasons: tuple[str, ...] = ()
    answer_camera: str = ""  # the camera whose image the pixel coordinates refer to
    image_width: int = 0  # [px] size of the image the pixel coordinates refer to
    image_height: int = 0
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    ttft_s: float = 0.0
    finish_reason: str = ""
    timings: Timings | None = None

    @property
    def clip_start_ns(self) -> int:
        return min((c.start_ns for c in self.clips), default=0)

    @property
    def clip_end_ns(self) -> int:
        return max((c.end_ns for c in self.clips), default=0)

    @property
    def clip_frames(self) -> int:
        return max((c.frame_count for c in self.clips), default=0)

    @property
    def clip_uris(self) -> tuple[str, ...]:
        return tuple(_light(m).url for m in self.media)  # never megabytes of base64

    def without_frames(self) -> Outcome:
        """The same outcome without its last frame: what may be kept after publishing."""
        return dataclasses.replace(self, last_frame=None)


@dataclass(frozen=True)
class PipelineSettings:
    clip_seconds: float = 4.0
    tiled: bool = False  # several cameras: one tiled video instead of one video per camera
    stream: bool = True
    wait_for_server_s: float = 0.0  # >0: wait this long for /health before each request
    stale_after_s: float = (
        1.0  # a camera lagging the newest by more (at least two sampling periods) is left out
    )


@dataclass
class _Progress:
    """Mutable state of one run, so that an error outcome still carries what was done before the error."""

    spec: RequestSpec
    timings: dict[str, float | None] = field(default_factory=dict)
    clips: tuple[Clip, ...] = ()
    stale: dict[str, str] = field(default_factory=dict)  # cameras left out of the clip: why
    media: tuple[MediaRef, ...] = ()
    task: RenderedTask | None = None
    completion: Completion | None = None
    text: str = ""


class Pipeline:
    """Runs requests against one buffer, writer, task catalog and client; `run` is thread-safe."""

    def __init__(
        self,
        buffer: MultiCameraBuffer,
        writer: ClipWriter,
        catalog: TaskCatalog,
        client: ReasonerClient,
        request_settings: RequestSettings,
        settings: PipelineSettings | None = None,
    ) -> None:
        self.buffer = buffer
        self.writer = writer
        self.catalog = catalog
        self.client = client
        self.request_settings = request_settings
        self.settings = settings or PipelineSettings()

    def run(
        self,
        spec: RequestSpec,
        on_progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> Outcome:
        """One request; never raises. Errors become an Outcome with the error's kind."""
        started = time.monotonic()
        progress = _Progress(spec=spec, timings={"trigger": spec.trigger_time or started, "started": started})
        cancel = cancel or threading.Event()
        try:
            return self._run(progress, on_progress, cancel)
        except ReasonerError as exc:
            return self._error(progress, exc.kind, str(exc) or type(exc).__name__, exc)
        except Exception as exc:
            # A bug, not a request problem: keep the traceback in the log and the message in the result.
            log.exception("request %s failed unexpectedly", spec.request_id)
            return self._error(progress, "internal", f"{type(exc).__name__}: {exc}", exc)

    def _run(self, p: _Progress, on_progress: ProgressCallback | None, cancel: threading.Event) -> Outcome:
        spec = p.spec

        def stage(name: str, text: str = "") -> None:
            if cancel.is_set():
                raise RequestCancelled(f"cancelled before {name}")
            if on_progress is not None:
                try:
                    on_progress(name, text)
                except Exception:
                    log.exception("progress callback failed (ignored)")

        # Render first: an unknown task or a missing value fails before any work.
        p.task = task = self.catalog.render(spec.task, **self._values(spec))

        stage("capturing")
        seconds = spec.clip_seconds if spec.clip_seconds > 0 else self.settings.clip_seconds
        window = self.buffer.fresh_window(
            seconds, list(spec.cameras) or None, spec.end_ns, stale_after_s=self.settings.stale_after_s
        )
        clips = list(window.clips)
        p.clips, p.stale = window.clips, dict(window.stale)

        stage("encoding")
        if task.media == "image":
            media = [self.writer.write_image(clip.frames[-1]) for clip in clips]
        else:
            media = self.writer.write_clips(clips, tiled=self.settings.tiled)
        if not media:
            raise ClipError("the writer returned no media")
        p.media = tuple(media)
        request = build_request(task, media, self.request_settings)

        stage("waiting_for_server")
        if self.settings.wait_for_server_s > 0:
            self.client.wait_ready(self.settings.wait_for_server_s)
        self.client.model_id()  # discovery (first request only) belongs to this stage, not to querying

        stage("querying")

        def on_text(text: str) -> None:  # the client passes the accumulated text
            if "first_token" not in p.timings:
                p.timings["first_token"] = time.monotonic()
            p.text = text
            if on_progress is not None:
                try:
                    on_progress("streaming", p.text)
                except Exception:
                    log.exception("progress callback failed (ignored)")

        p.timings["request_sent"] = time.monotonic()
        completion = self.client.complete(
            request, stream=self.settings.stream, on_text=on_text, cancel=cancel
        )
        p.timings["response_received"] = time.monotonic()
        p.completion = completion
        p.text = completion.text
        if cancel.is_set():
            raise RequestCancelled("cancelled while the answer was arriving")

        width, height = self._pixel_space(p.clips, media[0])
        parsed = parse_answer(
            completion.text,
            task.answer_kind,
            width=width or None,
            height=height or None,
            finish_reason=completion.finish_reason,
            reasoning=completion.reasoning,
        )
        return self._outcome(p, success=True, parsed=parsed)

    @staticmethod
    def _pixel_space(clips: Sequence[Clip], media: MediaRef) -> tuple[int, int]:
        """The image size answers are reported in: the camera's own image, not the downscaled one sent (the
        0-1000 space is relative, so the planner gets pixels of the image it knows); a tiled video's size."""
        clip = next((c for c in clips if c.camera == media.camera), None)
        return clip.source_size if clip is not None else (media.width, media.height)

    def _values(self, spec: RequestSpec) -> dict[str, str]:
        # The instruction fills the task's main placeholder (task, object, event, question, prompt: the first
        # one that is not the step), so one instruction parameter serves every task of the catalog.
        values = {"instruction": spec.instruction, "step": spec.step}
        main = next((n for n in self.catalog.spec(spec.task).placeholders if n != "step"), None)
        if main is not None and main != "instruction":
            values[main] = spec.instruction
        return {k: v for k, v in values.items() if v}

    def _error(self, p: _Progress, kind: str, message: str, exc: BaseException) -> Outcome:
        raw = getattr(exc, "raw", "") or p.text
        return self._outcome(p, success=False, error_kind=kind, error=message, answer=raw)

    def _outcome(
        self,
        p: _Progress,
        *,
        success: bool,
        parsed: ParsedAnswer | None = None,
        error_kind: str = "",
        error: str = "",
        answer: str = "",
    ) -> Outcome:
        spec, c = p.spec, p.completion
        t = p.timings
        timings = Timings(
            trigger=t["trigger"] or 0.0,
            started=t["started"] or 0.0,
            request_sent=t.get("request_sent"),
            first_token=t.get("first_token"),
            response_received=t.get("response_received"),
            finished=time.monotonic(),
        )
        first_media = p.media[0] if p.media else None
        width, height = (
            self._pixel_space(p.clips, first_media)
            if first_media
            else (p.clips[0].source_size if p.clips else (0, 0))
        )
        cameras = tuple(clip.camera for clip in p.clips) or spec.cameras
        answer_camera = (first_media.camera if first_media and first_media.camera else "") or (
            cameras[0] if cameras else ""
        )
        answer_clip = next((clip for clip in p.clips if clip.camera == answer_camera and clip.frames), None)
        return Outcome(
            request_id=spec.request_id,
            task=p.task.name if p.task is not None else spec.task,
            instruction=spec.instruction,
            success=success,
            error_kind=error_kind,
            error=error,
            reasoning=(parsed.reasoning or "") if parsed is not None else (c.reasoning or "" if c else ""),
            answer=parsed.answer if parsed is not None else answer,
            choice=(parsed.choice or "") if parsed is not None else "",
            parsed=parsed,
            clips=tuple(ClipSummary.of(clip) for clip in p.clips),
            media=tuple(_light(m) for m in p.media),
            last_frame=answer_clip.frames[-1] if answer_clip is not None else None,
            cameras=cameras,
            stale_cameras=tuple(p.stale),
            stale_reasons=tuple(p.stale.values()),
            answer_camera=answer_camera,
            image_width=width,
            image_height=height,
            model=c.model if c else "",
            prompt_tokens=c.prompt_tokens if c else 0,
            completion_tokens=c.completion_tokens if c else 0,
            latency_s=c.latency_s if c else 0.0,
            ttft_s=c.ttft_s if c else 0.0,
            finish_reason=c.finish_reason if c else "",
            timings=timings,
        )


def error_outcome(spec: RequestSpec, error: ReasonerError) -> Outcome:
    """An outcome for a trigger that never reached the pipeline (busy, replaced, shutting down)."""
    now = time.monotonic()
    return Outcome(
        request_id=spec.request_id,
        task=spec.task,
        instruction=spec.instruction,
        success=False,
        error_kind=error.kind,
        error=str(error),
        cameras=spec.cameras,
        timings=Timings(trigger=spec.trigger_time or now, started=now, finished=now),
    )
