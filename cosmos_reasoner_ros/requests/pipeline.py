"""One Reasoner request end to end, without ROS: clips -> media -> prompt -> request -> client -> answer; and
several requests (tasks) about one clip, which is captured and written once.

Every request ends in one `Outcome`, success or error; nothing raised inside escapes `Pipeline.run` or
`Pipeline.run_clip`. An outcome holds no frames but the one the annotated image is drawn on, and no inline
media: what outlives a request must not pin memory the clip buffer has let go.

The requests about one clip name its media with the same vLLM multimodal uuid, and the first request of each
media kind goes alone until its first token (its prefill is done), so that the server's processor and prefix
caches serve the others instead of computing the clip again.

A server that takes no video gets the clip as its sampled frames (media_fallback.py).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from cosmos_reasoner_ros.clips import Clip, ClipWriter, MediaRef, MultiCameraBuffer
from cosmos_reasoner_ros.errors import (
    ClipError,
    DeadlineExceeded,
    ReasonerError,
    RequestCancelled,
)
from cosmos_reasoner_ros.reasoner import (
    ChatRequest,
    Completion,
    MediaForm,
    ParsedAnswer,
    ReasonerClient,
    RenderedTask,
    RequestSettings,
    TaskCatalog,
    build_request,
    parse_answer,
)
from cosmos_reasoner_ros.requests.media_fallback import ClipFrames, complete_with_fallback, media_uuids
from cosmos_reasoner_ros.requests.outcome import (
    Cancel,
    ClipSummary,
    Outcome,
    OutcomeCallback,
    ProgressCallback,
    RequestSpec,
    Timings,
    light_media,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PipelineSettings:
    clip_seconds: float = 4.0
    tiled: bool = False  # several cameras: one tiled video instead of one video per camera
    stream: bool = True
    # >0: wait this long before each request for the server to be ready (ReasonerClient.health: /health, or
    # /v1/models on a server without it)
    wait_for_server_s: float = 0.0
    stale_after_s: float = (
        1.0  # a camera lagging the newest by more (at least two sampling periods) is left out
    )


@dataclass
class _Progress:
    """Mutable state of one request, so that an error outcome still carries what was done before the error."""

    spec: RequestSpec
    timings: dict[str, float | None] = field(default_factory=dict)
    clips: tuple[Clip, ...] = ()
    stale: dict[str, str] = field(default_factory=dict)  # cameras left out of the clip: why
    media: tuple[MediaRef, ...] = ()
    frames: ClipFrames | None = None  # the clip's frames as images, written when a request needs them
    frame_times: tuple[float, ...] = ()  # media are the clip's frames: their times from its start [s]
    task: RenderedTask | None = None
    completion: Completion | None = None
    text: str = ""
    outcome: Outcome | None = None  # set once, when the request has ended


def _mark(runs: Sequence[_Progress], name: str) -> None:
    """A timing mark (Timings' field `name`) reached by every request about the clip at once."""
    now = time.monotonic()
    for p in runs:
        p.timings[name] = now


@dataclass
class _Call:
    """One `run_clip` call: its cancel event and callbacks, which every step of its requests uses."""

    cancel: threading.Event
    on_progress: ProgressCallback | None = None
    on_outcome: OutcomeCallback | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def finish(self, p: _Progress, outcome: Outcome) -> None:
        """`p` ends with `outcome`, unless it has ended already (its first outcome stands)."""
        with self.lock:
            if p.outcome is not None:
                return
            p.outcome = outcome
        if self.on_outcome is not None:
            try:
                self.on_outcome(outcome)
            except Exception:
                log.exception("outcome callback failed (ignored)")

    def progress(self, stage: str, text: str, request_id: str) -> None:
        if self.on_progress is None:
            return
        try:
            self.on_progress(stage, text, request_id)
        except Exception:
            log.exception("progress callback failed (ignored)")


class Pipeline:
    """Runs requests against one buffer, writer, task catalog and client; `run` and `run_clip` are
    thread-safe."""

    def __init__(
        self,
        buffer: MultiCameraBuffer,
        writer: ClipWriter,
        catalog: TaskCatalog,
        client: ReasonerClient,
        request_settings: RequestSettings,
        settings: PipelineSettings | None = None,
        media_form: MediaForm | None = None,
    ) -> None:
        self.buffer = buffer
        self.writer = writer
        self.catalog = catalog
        self.client = client
        self.request_settings = request_settings
        self.settings = settings or PipelineSettings()
        self.media_form = media_form or MediaForm()  # a video, or its frames (shared by every request)

    def run(
        self,
        spec: RequestSpec,
        on_progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> Outcome:
        """One request; never raises. Errors become an Outcome with the error's kind."""
        return self.run_clip((spec,), on_progress, cancel)[0]

    def run_clip(
        self,
        specs: Sequence[RequestSpec],
        on_progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        on_outcome: OutcomeCallback | None = None,
    ) -> tuple[Outcome, ...]:
        """Several requests about one clip (the first spec's cameras, window and trigger): the clip is
        captured and written once, each request gets its own outcome, in the order of `specs`. Never raises.

        `on_outcome` gets each outcome as soon as its request has ended (a quick answer need not wait for a
        long one), before this returns; `cancel` ends them all.
        """
        if not specs:
            return ()
        started = time.monotonic()
        call = _Call(cancel or threading.Event(), on_progress, on_outcome)
        runs = [
            _Progress(spec=spec, timings={"trigger": spec.trigger_time or started, "started": started})
            for spec in specs
        ]
        try:
            self._prepare(runs, call)
            live = [p for p in runs if p.outcome is None]
            if len(live) == 1:
                self._ask_guarded(live[0], None, threading.Event(), call)
            elif live:
                self._ask_all(live, call)
        except Exception as exc:  # a bug between the guarded steps: every request still gets its outcome
            log.exception("requests %s failed unexpectedly", [p.spec.request_id for p in runs])
            for p in runs:
                call.finish(p, self._error(p, "internal", f"{type(exc).__name__}: {exc}", exc, call.cancel))
        return tuple(p.outcome for p in runs if p.outcome is not None)

    # -- the shared part: tasks, window, media -------------------------------------------------------------

    def _prepare(self, runs: list[_Progress], call: _Call) -> None:
        """Render every task (a bad one fails alone, before any work), take the window, write the media once
        per kind, find the model. A failure here ends every request still open with that error."""
        first = runs[0].spec
        for p in runs:
            try:
                p.task = self._render(p.spec)
            except ReasonerError as exc:
                call.finish(p, self._error(p, exc.kind, str(exc) or type(exc).__name__, exc, call.cancel))
        live = [p for p in runs if p.outcome is None]
        if not live:
            return
        try:
            self._stage(live, "capturing", call)
            seconds = first.clip_seconds if first.clip_seconds > 0 else self.settings.clip_seconds
            window = self.buffer.fresh_window(
                seconds, list(first.cameras) or None, first.end_ns, stale_after_s=self.settings.stale_after_s
            )
            clips = list(window.clips)
            for p in live:
                p.clips, p.stale = window.clips, dict(window.stale)

            _mark(live, "clip_ready")
            self._stage(live, "encoding", call)
            frames = ClipFrames(self.writer, clips, tiled=self.settings.tiled)
            written: dict[str, tuple[MediaRef, ...]] = {}
            for p in live:
                assert p.task is not None
                kind = p.task.media
                p.frames = frames
                if kind == "video" and self.media_form.frames:
                    self._use_frames(p)
                    continue
                if kind not in written:
                    if kind == "image":
                        media = [self.writer.write_image(clip.frames[-1]) for clip in clips]
                    else:
                        media = self.writer.write_clips(clips, tiled=self.settings.tiled)
                    if not media:
                        raise ClipError("the writer returned no media")
                    written[kind] = tuple(media)
                p.media = written[kind]

            _mark(live, "encoded")
            self._stage(live, "waiting_for_server", call)
            if self.settings.wait_for_server_s > 0:
                self.client.wait_ready(self.settings.wait_for_server_s, cancel=call.cancel)
            self.client.model_id()  # discovery (first request only) belongs to this stage, not to querying
        except Exception as exc:
            for p in live:
                call.finish(p, self._failure(p, exc, call.cancel))

    def _render(self, spec: RequestSpec) -> RenderedTask:
        values = self._values(spec)
        if spec.reasoning:
            return self.catalog.render(spec.task, **values)
        return self.catalog.render_without_reasoning(spec.task, **values)

    @staticmethod
    def _stage(runs: Sequence[_Progress], name: str, call: _Call, text: str = "") -> None:
        cancel = call.cancel
        if cancel.is_set():
            raise RequestCancelled(f"cancelled before {name}")
        # The deadline itself, not only the scheduler's word of it: a deadline of a few milliseconds passes
        # before the scheduler's thread wakes, and the request went to the server after its deadline.
        deadline = runs[0].spec.deadline(math.inf) if runs else None
        if deadline is not None and time.monotonic() >= deadline:
            if isinstance(cancel, Cancel):
                cancel.expire()  # ends as a timeout, as if the scheduler had been in time
            raise RequestCancelled(f"the deadline passed before {name}")
        for p in runs:
            call.progress(name, text, p.spec.request_id)

    # -- the requests --------------------------------------------------------------------------------------

    def _ask_all(self, live: list[_Progress], call: _Call) -> None:
        """The first request of each media kind at once; the others of that kind once it has its first token
        (its prefill, the clip's tokens included, is in the server's prefix cache) or has ended."""
        primers: dict[str, threading.Event] = {}
        threads = []
        for p in live:
            assert p.task is not None
            kind = p.task.media
            primed = threading.Event()
            wait_for = primers.get(kind)
            if wait_for is None:
                primers[kind] = primed
            threads.append(
                threading.Thread(
                    target=self._ask_guarded,
                    args=(p, wait_for, primed, call),
                    name=f"reasoner-ask-{p.spec.request_id}",
                    daemon=True,
                )
            )
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _ask_guarded(
        self, p: _Progress, wait_for: threading.Event | None, primed: threading.Event, call: _Call
    ) -> None:
        try:
            call.finish(p, self._ask(p, wait_for, primed, call))
        except Exception as exc:
            call.finish(p, self._failure(p, exc, call.cancel))
        finally:
            primed.set()  # whatever happened, the requests waiting for this one go on

    def _ask(
        self, p: _Progress, wait_for: threading.Event | None, primed: threading.Event, call: _Call
    ) -> Outcome:
        cancel = call.cancel
        task = p.task
        assert task is not None
        if wait_for is not None:
            while not wait_for.wait(0.02):
                if cancel.is_set():
                    raise RequestCancelled("cancelled before querying")
        if task.media == "video" and not p.frame_times and self.media_form.frames:
            self._use_frames(p)  # the server refused a video since this clip was written (or its first asker)
        request = self._request(p, task)
        self._stage([p], "querying", call)

        def on_text(text: str) -> None:  # the client passes the accumulated text
            if "first_token" not in p.timings:
                p.timings["first_token"] = time.monotonic()
                primed.set()
            p.text = text
            call.progress("streaming", p.text, p.spec.request_id)

        p.timings["request_sent"] = time.monotonic()

        def as_frames() -> ChatRequest:
            self._use_frames(p)
            return self._request(p, task)

        completion = complete_with_fallback(
            lambda r: self.client.complete(r, stream=self.settings.stream, on_text=on_text, cancel=cancel),
            request,
            self.media_form,
            as_frames if task.media == "video" else None,
            lambda: len(p.frame_times),
        )
        p.timings["response_received"] = time.monotonic()
        p.completion = completion
        p.text = completion.text
        if cancel.is_set():
            raise RequestCancelled("cancelled while the answer was arriving")

        width, height = self._pixel_space(p.clips, p.media[0])
        parsed = parse_answer(
            completion.text,
            task.answer_kind,
            width=width or None,
            height=height or None,
            finish_reason=completion.finish_reason,
            reasoning=completion.reasoning,
            # The schema the server was asked to hold the answer to: the answer must be one value it accepts.
            schema=task.json_schema if request.structured else None,
        )
        return self._outcome(p, success=True, parsed=parsed)

    def _request(self, p: _Progress, task: RenderedTask) -> ChatRequest:
        uuids = media_uuids(p.spec.clip_key, p.media, p.frame_times)
        return build_request(
            task, p.media, self.request_settings, media_uuids=uuids, frame_times_s=p.frame_times
        )

    def _use_frames(self, p: _Progress) -> None:
        """The request's media become its clip's frames, as many as a prompt may carry now."""
        assert p.frames is not None
        images = p.frames.images(self.media_form.image_limit)
        p.media, p.frame_times = images.media, images.offsets_s

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

    # -- outcomes ------------------------------------------------------------------------------------------

    def _failure(self, p: _Progress, exc: BaseException, cancel: threading.Event) -> Outcome:
        if isinstance(exc, ReasonerError):
            return self._error(p, exc.kind, str(exc) or type(exc).__name__, exc, cancel)
        # A bug, not a request problem: keep the traceback in the log and the message in the result.
        log.error("request %s failed unexpectedly", p.spec.request_id, exc_info=exc)
        return self._error(p, "internal", f"{type(exc).__name__}: {exc}", exc, cancel)

    def _error(
        self, p: _Progress, kind: str, message: str, exc: BaseException, cancel: threading.Event
    ) -> Outcome:
        raw = getattr(exc, "raw", "") or p.text
        if isinstance(exc, RequestCancelled) and getattr(cancel, "expired", False):
            deadline = DeadlineExceeded(
                f"the deadline of {p.spec.deadline_s:g} s passed; the request was cancelled ({message})"
            )
            kind, message = deadline.kind, str(deadline)
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
        finished = time.monotonic()
        timings = Timings(
            trigger=t["trigger"] or 0.0,
            started=t["started"] or 0.0,
            request_sent=t.get("request_sent"),
            first_token=t.get("first_token"),
            response_received=t.get("response_received"),
            finished=finished,
            clip_ready=t.get("clip_ready"),
            encoded=t.get("encoded"),
            # Parsing (or its failure) ends as its outcome is made: the answer's own parse, successful or not.
            parsed=finished if t.get("response_received") is not None else None,
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
            media=tuple(light_media(m) for m in p.media),
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
            clip_id=spec.clip_key,
            trigger_ns=spec.trigger_ns,
            reasoning_requested=p.task.reasoning if p.task is not None else spec.reasoning,
            cached_tokens=c.cached_tokens if c else 0,
            max_age_s=spec.max_result_age_s,
        )
