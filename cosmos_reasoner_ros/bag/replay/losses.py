"""What a replayed bag and each request's clip lost, said in the records: frames the node refused (its
diagnostics' counts), storage files without CRCs, the frames a clip lacks against what the recording holds
for its window (expected_clips: the node's own buffer fed every recorded frame), and a trigger that fell
inside a gap of the recording. The verdict judges and reports them from the records. No ROS import."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cosmos_reasoner_ros.bag.files.header_stamps import header_stamps
from cosmos_reasoner_ros.bag.files.integrity import Integrity
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.replay.expected_clips import ClipSettings, expected_frames
from cosmos_reasoner_ros.bag.replay.provenance import answer_provenance

__all__ = ["ReplayFacts", "with_losses"]


@dataclass(frozen=True)
class ReplayFacts:
    """What one bag's replay knows about its recording and its node."""

    reader: BagReader
    integrity: Integrity
    origin_ns: int  # time 0 of trigger times: the recording's first message
    cameras: tuple[str, ...]  # the replayed camera topics
    kinds: tuple[str, ...]  # each one's kind: raw, compressed or video
    node_cameras: tuple[str, ...]  # the node's name for each (camera, camera2, ...)
    clip_settings: ClipSettings | None  # the node's clip parameters (None: not known)
    refused: Mapping[str, Mapping[str, int]]  # camera topic -> frames the node refused, by kind
    # Lock-step: the node took in every frame before each trigger, so a clip short of frames lost them to
    # the node; with the recorded timing a busy machine may also lose frames on the way (reported, not
    # judged: a clip then keeps frames_expected 0).
    exact: bool = True


def with_losses(records: Sequence[ResultRecord], facts: ReplayFacts) -> list[ResultRecord]:
    """Each record with what its bag lost (frames the node refused, files without CRCs), what its clip lacks
    against the recording, a trigger that fell inside a gap of the recording, and its provenance: what its
    own clip window held per camera (frames refused, out of order, not recorded) and a stale clip."""
    invalid = {t: {k: n for k, n in kinds.items() if k != "dropped"} for t, kinds in facts.refused.items()}
    refused_total = sum(sum(kinds.values()) for kinds in invalid.values())
    bag_notes = [
        f"the node refused {sum(kinds.values())} frame(s) of {topic} ("
        + ", ".join(f"{k} {n}" for k, n in kinds.items())
        + ")"
        for topic, kinds in invalid.items()
        if kinds
    ]
    bag_notes += [
        f"the node dropped {kinds['dropped']} frame(s) of {topic} (out of order or duplicate stamps)"
        for topic, kinds in facts.refused.items()
        if kinds.get("dropped")
    ]
    unverifiable = facts.integrity.unverifiable
    if unverifiable:
        bag_notes.append(
            f"unverifiable: {', '.join(unverifiable)} carry no CRC (damage to a payload cannot be detected)"
        )
    cameras = list(zip(facts.cameras, facts.kinds, facts.node_cameras, strict=True))
    provenance = answer_provenance(facts.reader, facts.origin_ns, cameras, facts.clip_settings, records)
    out = []
    for record, expected, own in zip(records, _expected(records, facts), provenance, strict=True):
        notes = _gaps(record, facts) + list(own.notes)
        if expected and record.clip_frames < expected:
            holds = f"{expected} frames the recording holds for its window"
            notes.append(f"the clip has {record.clip_frames} of the {holds}")
            if not facts.exact:
                notes[-1] += " (recorded timing: a busy machine may lose frames on the way; --lock-step)"
                expected = 0
        if record.error_kind == "no_frames" and notes and "inside a gap" in notes[0]:
            record = replace(record, error=f"{record.error} ({notes[0]})" if record.error else notes[0])
        out.append(
            replace(
                record,
                frames_expected=expected,
                frames_refused=own.refused,
                bag_frames_refused=refused_total,
                provenance=own.cameras,
                clip_lag_s=own.clip_lag_s,
                clip_stale=own.clip_stale,
                unverifiable=tuple(unverifiable),
                notes=tuple(notes),
                bag_notes=tuple(bag_notes),
            )
        )
    return out


def _gaps(record: ResultRecord, facts: ReplayFacts) -> list[str]:
    trigger_ns = facts.origin_ns + round(record.trigger_s * 1e9)
    notes = []
    for topic in facts.cameras:
        for a, b in facts.integrity.gaps(topic):
            if a < trigger_ns < b:
                span = f"{(a - facts.origin_ns) / 1e9:.2f}-{(b - facts.origin_ns) / 1e9:.2f} s"
                notes.append(
                    f"asked inside a gap of {topic}: no frame recorded between {span} from the recording's "
                    "start"
                )
    return notes


def _expected(records: Sequence[ResultRecord], facts: ReplayFacts) -> list[int]:
    """Per record, the frames a node that lost none would have sent (0 when not known: no clip, unknown clip
    parameters, a video topic)."""
    best = [0] * len(records)
    if facts.clip_settings is None:
        return best
    for topic, kind, name in zip(facts.cameras, facts.kinds, facts.node_cameras, strict=True):
        asked = [(k, r) for k, r in enumerate(records) if r.clip_end_ns > 0 and name in r.cameras]
        if kind == "video" or not asked:
            continue
        frames = header_stamps(facts.reader, topic)
        requests = [(facts.origin_ns + round(r.trigger_s * 1e9), r.clip_end_ns) for _, r in asked]
        for (k, _), n in zip(asked, expected_frames(frames, facts.clip_settings, requests), strict=True):
            best[k] = max(best[k], n)
    return best
