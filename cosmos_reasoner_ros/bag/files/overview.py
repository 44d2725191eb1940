"""What a recording holds, before anything is replayed (`cosmos-reasoner-bag check`): whether it is whole
(integrity.verify over every readable topic), its topics with their types, counts, rates and time spans in
seconds from its start, the gaps in each, the types it cannot read or reads with a definition of its own
(another distribution's), and the camera, CameraInfo and depth topics a replay would choose. No ROS import."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.integrity import verify
from cosmos_reasoner_ros.bag.files.reader import BagReader, storage_kind
from cosmos_reasoner_ros.bag.files.topics import choose_topics
from cosmos_reasoner_ros.bag.safe_paths import printable

__all__ = ["Overview", "TopicOverview", "overview"]


@dataclass(frozen=True)
class TopicOverview:
    name: str
    msgtype: str
    count: int
    first_s: float  # [s from the recording's start]
    last_s: float
    gaps: tuple[tuple[float, float], ...] = ()  # [s from the recording's start] (last before, first after)
    note: str = ""  # why it is not read, or how it is read (another distribution's definition)
    rate_hz: float = 0.0  # [Hz] from the median time between its messages (gaps do not lower it)


@dataclass(frozen=True)
class Overview:
    bag: str
    storage: str  # "mcap", "sqlite3" or both, with the number of files
    distro: str  # the distribution the bag says recorded it ("" when it does not say)
    start_ns: int
    end_ns: int
    topics: tuple[TopicOverview, ...]
    problems: tuple[str, ...] = ()  # damage: the bag is never replayed or judged
    notes: tuple[str, ...] = ()  # what could not be checked (files without CRCs)
    replay: tuple[str, ...] = ()  # the topics a replay would choose, in words
    replay_problem: str = ""  # why a replay could not choose without more options
    cameras: tuple[str, ...] = field(default=())

    @property
    def whole(self) -> bool:
        return not self.problems

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9 if self.topics else 0.0

    def lines(self) -> list[str]:
        """The overview for a terminal, times in seconds from the recording's start."""
        start = (
            datetime.datetime.fromtimestamp(self.start_ns / 1e9, tz=datetime.timezone.utc).isoformat(
                timespec="milliseconds"
            )
            if self.topics and self.start_ns < 2**63 - 1
            else "-"
        )
        out = [
            f"bag: {self.bag}",
            f"storage: {self.storage}" + (f", recorded by ROS 2 {self.distro}" if self.distro else ""),
            f"whole: {'yes' if self.whole else 'NO: damaged'}",
            *(f"  damage: {p}" for p in self.problems),
            *(f"  note: {n}" for n in self.notes),
            f"time: {self.duration_s:.3f} s from {start} (times below: s from this start)",
            f"topics: {len(self.topics)}",
        ]
        for t in self.topics:
            span = f"{t.first_s:.3f}-{t.last_s:.3f} s" if t.count else "-"
            out.append(f"  {t.name}  {t.msgtype or '?'}  {t.count} msgs  {t.rate_hz:.2f} Hz  {span}")
            for a, b in t.gaps:
                out.append(f"    gap: {b - a:.3f} s without a message, {a:.3f}-{b:.3f} s")
            if t.note:
                out.append(f"    {t.note}")
        if self.replay_problem:
            out.append(f"replay: {self.replay_problem}")
        else:
            out += [f"replay: {line}" for line in self.replay]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "bag": self.bag,
            "storage": self.storage,
            "distro": self.distro,
            "whole": self.whole,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "start_ns": self.start_ns if self.topics else 0,
            "duration_s": round(self.duration_s, 6),
            "topics": [
                {
                    "name": t.name,
                    "type": t.msgtype,
                    "count": t.count,
                    "rate_hz": round(t.rate_hz, 3),
                    "first_s": round(t.first_s, 6),
                    "last_s": round(t.last_s, 6),
                    "gaps_s": [[round(a, 6), round(b, 6)] for a, b in t.gaps],
                    "note": t.note,
                }
                for t in self.topics
            ],
            "replay": {
                "chosen": list(self.replay),
                "cameras": list(self.cameras),
                "problem": self.replay_problem,
            },
        }


def overview(
    reader: BagReader,
    cameras: Sequence[str] = (),
    infos: Sequence[str] = (),
    depths: Sequence[str] = (),
    depth: bool = True,
) -> Overview:
    """One pass over the recording (every readable topic checked as a replay checks its own), and the
    topics a replay with these options would choose."""
    readable = sorted(t.name for t in reader.topics.values() if t.readable)
    integrity = verify(reader, readable)
    _, unknown = reader.typestore(readable)
    own = reader.own_definitions(readable)
    start = reader.start_ns
    topics = []
    for info in sorted(reader.topics.values(), key=lambda t: t.name):
        count = integrity.counts.get(info.name, 0)
        first, last = integrity.spans.get(info.name, (start, start))
        if not info.readable:
            note = f"not read: {info.encoding or 'no'} encoding" if info.msgtype else "not read: no type"
        elif info.name in integrity.foreign:
            note = integrity.foreign[info.name]
        elif info.msgtype in unknown:
            note = f"not read: {unknown[info.msgtype]}"
        else:
            note = own.get(info.msgtype, "")
        gaps = tuple(((a - start) / 1e9, (b - start) / 1e9) for a, b in integrity.gaps(info.name))
        times = sorted(integrity.times.get(info.name, []))
        steps = sorted(b - a for a, b in itertools.pairwise(times))
        rate = 1e9 / steps[len(steps) // 2] if steps and steps[len(steps) // 2] > 0 else 0.0
        first_s, last_s = (first - start) / 1e9, (last - start) / 1e9
        topics.append(TopicOverview(info.name, info.msgtype, count, first_s, last_s, gaps, note, rate))
    replay: tuple[str, ...] = ()
    problem = ""
    chosen: tuple[str, ...] = ()
    try:
        choice = choose_topics(reader, cameras, infos, depths, depth)
        replay = choice.chosen or tuple(f"camera {c} (named)" for c in choice.cameras)
        chosen = choice.cameras
    except BagError as exc:
        problem = str(exc)
    kinds = sorted({"mcap" if storage_kind(p) == ".mcap" else "sqlite3" for p in reader.storage_paths})
    files = len(reader.storage_paths)
    storage = f"{' and '.join(kinds) or '-'}, {files} file{'s' if files != 1 else ''}"
    if reader.metadata is not None:
        storage += f", metadata.yaml version {reader.metadata.version}"
    return Overview(
        printable(str(reader.path)),
        storage,
        reader.ros_distro,
        start,
        reader.end_ns,
        tuple(topics),
        tuple(integrity.problems),
        tuple(integrity.notes),
        replay,
        problem,
        chosen,
    )
