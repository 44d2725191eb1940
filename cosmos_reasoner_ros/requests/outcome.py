"""What one request asks and what it ends in, without ROS: RequestSpec (a trigger's task, instruction,
cameras, window, deadline), Outcome (everything a ReasonerResult needs, success or error: no frames but the
annotated one, no inline media), their timings, a request's cancel event, and the progress stages.

pipeline.py turns a RequestSpec into an Outcome; the scheduler, the node and the outputs pass them on.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cosmos_reasoner_ros.clips import Clip, Frame, MediaRef
from cosmos_reasoner_ros.errors import ReasonerError, StaleResult
from cosmos_reasoner_ros.geometry import ns_to_seconds
from cosmos_reasoner_ros.reasoner import ParsedAnswer
from cosmos_reasoner_ros.requests.handoff_decision import HandoffDecision
from cosmos_reasoner_ros.requests.result_checks import Check

# The order the Reason action's feedback goes through (its STAGE_* constants have these indices).
STAGES: tuple[str, ...] = ("capturing", "encoding", "waiting_for_server", "querying", "streaming")

ProgressCallback = Callable[[str, str, str], None]
"""Called with (stage, text streamed so far, request id); the text is empty before the streaming stage. With
several requests about one clip, each request reports its own stages (possibly from different threads)."""

OutcomeCallback = Callable[["Outcome"], None]


class Cancel(threading.Event):
    """A request's cancel event; `expire()` sets it because the request's deadline passed, so that the request
    ends as a timeout rather than as cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        self.set()


@dataclass(frozen=True)
class RequestSpec:
    """What one trigger asks: the task and its values, the cameras, the window, and what the answer must meet
    to be acted on (deadline, age)."""

    request_id: str
    task: str
    instruction: str = ""
    step: str = ""
    cameras: tuple[str, ...] = ()  # empty: every camera the buffer has
    clip_seconds: float = 0.0  # 0: the pipeline's default
    end_ns: int | None = None  # None: the newest frame
    trigger_time: float = 0.0  # time.monotonic() when the trigger arrived; 0: when run() starts
    trigger_ns: int = 0  # the node's clock (ROS time) at the trigger, for the result's stamps; 0: unknown
    clip_id: str = ""  # shared by the requests about one clip (and their media uuids); empty: request_id
    reasoning: bool = True  # False: the task without reasoning (no suffix, its plain sampling profile)
    deadline_s: float = 0.0  # [s] after trigger_time the request is cancelled and ends as a timeout; 0: none
    max_result_age_s: float = 0.0  # [s] a success older than this when published is stale; 0: no limit

    @property
    def clip_key(self) -> str:
        return self.clip_id or self.request_id

    def deadline(self, default_start: float) -> float | None:
        """time.monotonic() of the deadline (from trigger_time, else default_start), None without one."""
        return (self.trigger_time or default_start) + self.deadline_s if self.deadline_s > 0 else None


# A request's latency budget: each stage (Stage.msg's NAME_* values, in this order) and the Timings mark it
# ends at. A stage runs from the end of the latest stage before it that was reached; one whose mark is None is
# left out.
LATENCY_STAGES: tuple[tuple[str, str], ...] = (
    ("clip_ready", "clip_ready"),  # trigger -> the window taken (a worker's wait, the prompt rendered)
    ("encoding", "encoded"),  # -> the media written
    ("request_sent", "request_sent"),  # -> sent: the server's wait, model discovery, a sibling's prefill
    ("first_token", "first_token"),  # -> first streamed token (prefill); None when not streamed
    ("last_token", "response_received"),  # -> the whole answer (decode)
    ("parsing", "parsed"),  # -> the answer parsed
    ("published", "published"),  # -> taken for publication (Outcome.published: the scheduler's delivery)
    ("handoff", "handoff"),  # -> the Nav2 handoff's first decision (Outcome.with_handoff); None when off
)


@dataclass(frozen=True)
class Timings:
    """time.monotonic() marks along the request; None when the request ended before that point."""

    trigger: float
    started: float
    request_sent: float | None = None
    first_token: float | None = None
    response_received: float | None = None
    finished: float = 0.0
    clip_ready: float | None = None  # the clip's window was taken from the buffer
    encoded: float | None = None  # its media were written
    parsed: float | None = None  # the answer was parsed (successfully or not)
    published: float | None = None  # the node took the outcome for publication
    handoff: float | None = None  # the handoff's first decision about the answer

    def stages(self) -> tuple[tuple[str, float], ...]:
        """(stage, seconds) in LATENCY_STAGES order for the marks reached: each from the previous mark reached
        (the trigger first) to its own, never negative (a mark earlier than the one before it, from another
        thread, counts as zero); they add up to the latest mark minus the trigger."""
        out: list[tuple[str, float]] = []
        end = self.trigger
        for name, mark in LATENCY_STAGES:
            at = getattr(self, mark)
            if at is None:
                continue
            start, end = end, max(end, at)
            out.append((name, end - start))
        return tuple(out)


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


def light_media(media: MediaRef) -> MediaRef:
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
    clip_id: str = ""  # shared by the requests about one clip
    trigger_ns: int = 0  # the node's clock at the trigger (timings are relative to it)
    reasoning_requested: bool = False  # the prompt asked for reasoning
    cached_tokens: int = 0  # prompt tokens the server's prefix cache served (0: none or not reported)
    max_age_s: float = 0.0  # [s] the age limit that applies; 0: none
    # Set when the outcome is published (published()):
    published_ns: int = 0  # the node's clock at publication
    age_s: float = 0.0  # [s] published_ns - clip end: how old the observation is
    checks: tuple[Check, ...] = ()  # geometric checks of the answer (result_checks)
    checks_passed: bool = True  # every check the node requires before publishing 3D paths passed
    paths_3d: tuple[tuple[str, tuple[tuple[float, float, float], ...]], ...] = ()  # (label, [m] points)
    paths_frame_id: str = ""  # frame of paths_3d (the camera's optical frame)
    handoff: HandoffDecision | None = (
        None  # the Nav2 handoff's decision about this answer (handoff/); None: off
    )

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
    def stages(self) -> tuple[tuple[str, float], ...]:
        """The latency budget: (stage, seconds) of each stage reached (Timings.stages), () without timings."""
        return self.timings.stages() if self.timings is not None else ()

    @property
    def clip_uris(self) -> tuple[str, ...]:
        return tuple(light_media(m).url for m in self.media)  # never megabytes of base64

    def without_frames(self) -> Outcome:
        """The same outcome without its last frame: what may be kept after publishing."""
        return dataclasses.replace(self, last_frame=None)

    def published(self, now_ns: int, at: float | None = None) -> Outcome:
        """This outcome as published at `now_ns` (the node's clock, the cameras' time base): with its age, the
        time from the clip's end to now; a success older than max_age_s becomes a stale result, its answer
        and parts kept for inspection. `at`: the steady clock's mark of it (the published stage's end;
        default now)."""
        age = ns_to_seconds(now_ns - self.clip_end_ns) if self.clip_end_ns else 0.0
        out = dataclasses.replace(self, published_ns=now_ns, age_s=age, timings=self._marked("published", at))
        if self.success and self.max_age_s > 0 and age > self.max_age_s:
            stale = StaleResult(
                f"the answer is {age:.3f} s old at publication (from the clip's end), more than "
                f"max_result_age_s ({self.max_age_s:g} s)"
            )
            out = dataclasses.replace(out, success=False, error_kind=stale.kind, error=str(stale))
        return out

    def with_handoff(self, decision: HandoffDecision, at: float | None = None) -> Outcome:
        """This outcome with the handoff's first decision about it, and when it was made (the handoff stage's
        end; `at` default now)."""
        return dataclasses.replace(self, handoff=decision, timings=self._marked("handoff", at))

    def _marked(self, mark: str, at: float | None) -> Timings | None:
        if self.timings is None:
            return None
        return dataclasses.replace(self.timings, **{mark: time.monotonic() if at is None else at})


def error_outcome(
    spec: RequestSpec, error: ReasonerError, answer: str = "", marks: Mapping[str, float] | None = None
) -> Outcome:
    """An outcome for a trigger that never reached the pipeline (busy, replaced, shutting down), or whose
    request did not end in time (deadline, shutdown): then `answer` is the text it had streamed and `marks`
    when it began ("started"), was sent ("request_sent") and streamed its first text ("first_token")."""
    now = time.monotonic()
    marks = marks or {}
    return Outcome(
        request_id=spec.request_id,
        task=spec.task,
        instruction=spec.instruction,
        success=False,
        error_kind=error.kind,
        error=str(error),
        answer=answer,
        cameras=spec.cameras,
        timings=Timings(
            trigger=spec.trigger_time or now,
            started=marks.get("started", now),
            request_sent=marks.get("request_sent"),
            first_token=marks.get("first_token"),
            finished=now,
        ),
        clip_id=spec.clip_key,
        trigger_ns=spec.trigger_ns,
        reasoning_requested=spec.reasoning,
        max_age_s=spec.max_result_age_s,
    )
