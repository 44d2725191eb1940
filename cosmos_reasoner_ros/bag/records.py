"""One evaluated request as a typed record, its JSON-lines file (results.jsonl) and its making from a
ReasonerResult message. Answers are kept as the parser's own values (`parsing.Trajectory`, `Box2D`,
`Segment`), with the pixel values the node published beside the 0-1000 ones: evaluation compares and draws
those values and never re-derives them from loose dictionaries.

Provenance per answer (bag/replay/provenance.py): what the recording held in each request's own clip window,
not the run's. The window is the `clip_seconds` of bag time up to the trigger, [trigger - clip_seconds,
trigger], frames placed by their log time; `provenance` has one entry per camera of the request with the
window, the frames recorded in it, `refused_s` (bag times of the frames the node's decoder refuses),
`out_of_order_s` (frames whose header stamp is not after the previous frame's), `missing` (frames not
recorded at the camera's rate: a gap) and `stamp_offset_s` (header stamp minus log time, the furthest from 0;
said in `notes` beyond 1 s). `frames_refused` is the sum of `refused_s` over the request's cameras; the run's
total in a window sense is the sum over records (a frame in two overlapping windows counts for each answer).
`bag_frames_refused` is the node's own count for the whole replay of the bag (its diagnostics), the same on
every record of a bag: the judge's `frames_refused_max` takes it once per bag (files written before
provenance: their `frames_refused` is read as `bag_frames_refused`). `clip_lag_s` is the trigger minus the
clip's end (the log time of the frame with the clip's last stamp); `clip_stale` applies the rule `clip_lag`:
more than one frame period (the camera's median log interval, or 1 / sample_fps if longer) plus 0.25 s.
A successful answer whose window lost frames or whose clip is stale (`clip_damaged`) is reported as "success
on a damaged clip", its card saying what was lost."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.errors import ANSWER_ERROR_KINDS
from cosmos_reasoner_ros.geometry import Box2D, Point2D, Trajectory, ns_from_sec_nanosec
from cosmos_reasoner_ros.reasoner import CameraBox, CameraTrajectory, Segment, kind_of, slot_kinds

__all__ = [
    "CameraBox",
    "CameraProvenance",
    "CameraTrajectory",
    "GateRecord",
    "HandoffRecord",
    "ResultRecord",
    "load_records",
    "record_from_msg",
    "results_file",
    "write_records",
]


@dataclass(frozen=True)
class CameraProvenance:
    """What one camera's recording held in a request's own clip window (bag/replay/provenance.py): times
    are seconds from the recording's start, frames placed by their log time."""

    topic: str
    window_start_s: float = 0.0  # [s] the trigger minus clip_seconds
    window_end_s: float = 0.0  # [s] the trigger
    frames: int = 0  # frames recorded in the window
    refused_s: tuple[float, ...] = ()  # [s] each frame the node's decoder refuses (undecodable, ...)
    out_of_order_s: tuple[
        float, ...
    ] = ()  # [s] each frame whose header stamp is not after the previous one's
    missing: int = 0  # frames not recorded in the window at the camera's rate (a gap)
    stamp_offset_s: float = 0.0  # [s] header stamp minus log time, the furthest from 0 in the window

    @property
    def damaged(self) -> bool:
        return bool(self.refused_s or self.out_of_order_s or self.missing)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CameraProvenance:
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in names}
        for key in ("refused_s", "out_of_order_s"):
            values[key] = tuple(float(t) for t in values.get(key, ()))
        return cls(**values)


@dataclass(frozen=True)
class GateRecord:
    """One gate of the Nav2 handoff (HandoffGate): what it measured against what, and whether it passed."""

    name: str
    passed: bool
    value: float = 0.0
    limit: float = 0.0
    detail: str = ""


@dataclass(frozen=True)
class HandoffRecord:
    """What the node's Nav2 handoff decided about the request's answer (ReasonerResult.handoff): in a replay,
    always dry (bag/replay/node_process.py), the path that would have been sent and every gate's verdict."""

    decision: str
    reason: str = ""
    gates: tuple[GateRecord, ...] = ()
    path: tuple[tuple[float, float, float], ...] = ()  # [m] in frame_id (the camera's optical frame)
    path_px: tuple[tuple[float, float], ...] = ()  # the same poses in the answer's image [px]
    frame_id: str = ""
    source: str = ""  # depth or ground_plane
    length_m: float = 0.0
    answered_length_m: float = 0.0
    dry_run: bool = False

    @property
    def failed_gate(self) -> GateRecord | None:
        return next((g for g in self.gates if not g.passed), None)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["gates"] = [dataclasses.asdict(g) for g in self.gates]
        data["path"], data["path_px"] = [list(p) for p in self.path], [list(p) for p in self.path_px]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HandoffRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in names}
        values["gates"] = tuple(GateRecord(**g) for g in values.get("gates", ()))
        values["path"] = tuple((float(x), float(y), float(z)) for x, y, z in values.get("path", ()))
        values["path_px"] = tuple((float(u), float(v)) for u, v in values.get("path_px", ()))
        return cls(**values)


def handoff_from_msg(msg: Any) -> HandoffRecord | None:
    """A ReasonerResult's `handoff` (HandoffDecision) as a record; None without one (the handoff was off, or
    a result recorded before the field existed)."""
    if msg is None or not getattr(msg, "decision", ""):
        return None
    poses = [p.pose.position for p in msg.path.poses]
    return HandoffRecord(
        decision=msg.decision,
        reason=msg.reason,
        gates=tuple(
            GateRecord(g.name, bool(g.passed), float(g.value), float(g.limit), g.detail) for g in msg.gates
        ),
        path=tuple((float(p.x), float(p.y), float(p.z)) for p in poses),
        path_px=tuple((float(p.x), float(p.y)) for p in msg.path_px),
        frame_id=msg.path.header.frame_id,
        source=msg.path_source,
        length_m=float(msg.path_length_m),
        answered_length_m=float(msg.answered_length_m),
        dry_run=bool(msg.dry_run),
    )


@dataclass(frozen=True)
class ResultRecord:
    """One request of an evaluation: what was asked, on which clip, what came back, how long it took."""

    request_id: str = ""
    task: str = ""
    instruction: str = ""
    trigger_s: float = 0.0  # [s] bag time of the trigger, from the bag's start
    trigger_stamp_ns: int = 0  # the node's clock when it took the request (bag time under use_sim_time)
    stamp_ns: int = 0  # result header stamp (the clip's newest frame)
    clip_start_ns: int = 0
    clip_end_ns: int = 0
    clip_frames: int = 0
    cameras: tuple[str, ...] = ()
    clip_uris: tuple[str, ...] = ()
    success: bool = False
    error_kind: str = ""
    error: str = ""
    reasoning: str = ""
    answer: str = ""
    choice: str = ""
    trajectories: tuple[CameraTrajectory, ...] = ()
    boxes: tuple[CameraBox, ...] = ()
    segments: tuple[Segment, ...] = ()
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    ttft_s: float = 0.0
    age_s: float = 0.0  # [s] from the clip's end to the result, on the node's clock (the bag's, in a replay)
    finish_reason: str = ""
    image: str = ""  # annotated frame, relative to the report folder; empty: none
    bag: str = ""  # the bag's name (its folder or file name as given)
    step: str = ""  # the goal's step (assisted_next_action)
    bag_id: str = ""  # fingerprint of the replayed camera topics (counts, span): another recording differs
    # What the request or its bag lost (judged by the tolerances; said in the report, JUnit and verdict):
    frames_expected: int = 0  # frames a node that lost none would have sent in this clip (0: not known)
    frames_refused: int = 0  # frames refused in this request's own clip window, all cameras (provenance)
    bag_frames_refused: int = 0  # frames of the bag's cameras the replayed node refused over the whole replay
    unverifiable: tuple[str, ...] = ()  # the bag's storage files whose payloads no CRC protects
    notes: tuple[str, ...] = ()  # this request's: frames its clip lacks, a trigger inside a recording's gap
    bag_notes: tuple[str, ...] = ()  # its bag's, in words: frames the node refused, files without CRCs
    provenance: tuple[CameraProvenance, ...] = ()  # per camera, what its own clip window held
    clip_lag_s: float = 0.0  # [s] from the clip's end (its frame's log time) to the trigger; 0: no clip
    clip_stale: bool = False  # the clip ends more than a frame period + tolerance before the trigger

    handoff: HandoffRecord | None = None  # the Nav2 handoff's decision (dry in a replay); None: it was off
    # [s] ReasonerResult.stages: each stage reached (msg/Stage.msg), in order, from trigger to publication
    stages: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def outcome(self) -> str:
        return "success" if self.success else (self.error_kind or "internal")

    @property
    def frames_missing(self) -> int:
        """Frames the clip lacks against what the recording holds (0 when that is not known)."""
        return max(0, self.frames_expected - self.clip_frames) if self.frames_expected else 0

    @property
    def clip_damaged(self) -> bool:
        """Its own clip window lost frames (refused, out of order, not recorded, missing from the clip) or
        its clip ends well before the trigger (provenance)."""
        return self.clip_stale or self.frames_missing > 0 or any(p.damaged for p in self.provenance)

    @property
    def answered(self) -> bool:
        """The server gave an answer (parsed or not): what the parse rate is counted over."""
        return self.success or self.error_kind in ANSWER_ERROR_KINDS

    def answered_as(self, kind: str) -> bool:
        """A successful answer that holds the shape a label of this kind compares with (its kind's values in
        the kind's slot): what scoring grades and `labels draft` turns into a label."""
        unit = kind_of(kind)
        return self.success and unit.holds(getattr(self, unit.slot))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in _TEXTS:
            data[key] = list(getattr(self, key))
        for unit in slot_kinds():  # each answer kind's values in its own file form
            data[unit.slot] = unit.dump(getattr(self, unit.slot))
        data["handoff"] = self.handoff.to_dict() if self.handoff is not None else None
        data["provenance"] = [dataclasses.asdict(p) for p in self.provenance]
        return data

    def to_json(self) -> str:
        text = json.dumps(self.to_dict(), ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (bytes of a name that are not UTF-8): escaped
            text = json.dumps(self.to_dict())
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultRecord:
        """The inverse of to_dict; unknown keys are ignored (newer files), missing ones take defaults."""
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in names}
        for key in _TEXTS:
            if key in values:
                values[key] = tuple(str(v) for v in values[key])
        for unit in slot_kinds():
            if unit.slot in values:
                values[unit.slot] = unit.load(values[unit.slot])
        if values.get("handoff") is not None:
            values["handoff"] = HandoffRecord.from_dict(values["handoff"])
        if "stages" in values:
            values["stages"] = {str(k): float(v) for k, v in dict(values["stages"]).items()}
        values["provenance"] = tuple(CameraProvenance.from_dict(p) for p in values.get("provenance", ()))
        if "bag_frames_refused" not in values:  # written before provenance: frames_refused was the bag's
            values["bag_frames_refused"] = int(values.pop("frames_refused", 0))
        return cls(**values)


_TEXTS = ("cameras", "clip_uris", "unverifiable", "notes", "bag_notes")  # the record's tuples of strings


def write_records(records: Iterable[ResultRecord], path: Path) -> None:
    path.write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")


def results_file(path: Path) -> Path:
    """A results.jsonl given directly or as the report folder that holds it."""
    return path / "results.jsonl" if path.is_dir() else path


def load_records(path: Path) -> list[ResultRecord]:
    """The records of a results.jsonl (or of the report folder holding one)."""
    path = results_file(path)
    if not path.is_file():
        raise BagError(f"results file {path} does not exist")
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            records.append(ResultRecord.from_dict(data))
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise BagError(f"{path}:{n}: not a result record: {exc}") from None
    return records


def _stamp_ns(t: Any) -> int:
    return ns_from_sec_nanosec(t.sec, t.nanosec)


def _points(label: str, norm: Sequence[Any], px: Sequence[Any]) -> tuple[Point2D, ...]:
    if len(px) != len(norm):  # a message built by hand without pixels: derive none, keep the 0-1000 values
        return tuple(Point2D(label, float(n.x), float(n.y)) for n in norm)
    return tuple(
        Point2D(label, float(n.x), float(n.y), float(p.x), float(p.y)) for n, p in zip(norm, px, strict=True)
    )


def _box(b: Any) -> Box2D:
    return Box2D(
        b.label,
        float(b.x1_norm),
        float(b.y1_norm),
        float(b.x2_norm),
        float(b.y2_norm),
        float(b.x1_px),
        float(b.y1_px),
        float(b.x2_px),
        float(b.y2_px),
    )


def _camera_image(item: Any) -> tuple[str, int, int]:
    """The camera and the width x height of its image that a message's trajectory or box refers to."""
    return item.camera, int(item.image_width), int(item.image_height)


def record_from_msg(msg: Any, trigger_s: float = 0.0, bag: str = "", step: str = "") -> ResultRecord:
    """A ReasonerResult (rclpy or rosbags object: fields are read by name) as a ResultRecord, with the
    message's own pixel and 0-1000 values."""
    return ResultRecord(
        request_id=msg.request_id,
        task=msg.task,
        instruction=msg.instruction,
        trigger_s=round(trigger_s, 6),
        trigger_stamp_ns=_stamp_ns(msg.trigger_stamp),
        stamp_ns=_stamp_ns(msg.header.stamp),
        clip_start_ns=_stamp_ns(msg.clip_start),
        clip_end_ns=_stamp_ns(msg.clip_end),
        clip_frames=int(msg.clip_frames),
        cameras=tuple(msg.cameras),
        clip_uris=tuple(msg.clip_uris),
        success=bool(msg.success),
        error_kind=msg.error_kind,
        error=msg.error,
        reasoning=msg.reasoning,
        answer=msg.answer,
        choice=msg.choice,
        trajectories=tuple(
            CameraTrajectory(
                Trajectory(t.label, _points(t.label, t.points_norm, t.points_px)), *_camera_image(t)
            )
            for t in msg.trajectories
        ),
        boxes=tuple(CameraBox(_box(b), *_camera_image(b)) for b in msg.boxes),
        segments=tuple(
            Segment(float(s.start_offset_s), float(s.end_offset_s), s.caption) for s in msg.segments
        ),
        model=msg.model,
        prompt_tokens=int(msg.prompt_tokens),
        completion_tokens=int(msg.completion_tokens),
        latency_s=float(msg.latency_s),
        ttft_s=float(msg.time_to_first_token_s),
        age_s=float(msg.age_s),
        finish_reason=msg.finish_reason,
        bag=bag,
        step=step,
        handoff=handoff_from_msg(getattr(msg, "handoff", None)),
        stages={s.name: float(s.seconds) for s in getattr(msg, "stages", ())},  # none in older recordings
    )
