"""Where a run's rehearsed handoff put its paths, for scoring them against labels on the ground: the run's
ground plane and path limits (its handoff.* parameters) and the handoff camera's intrinsics (its CameraInfo in
the bag, read on first use). Without them, why not: the paths are then scored in pixels only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.bag.files.topics import INFO_TYPE, choose_topics
from cosmos_reasoner_ros.bag.records import ResultRecord
from cosmos_reasoner_ros.bag.replay.node_process import camera_names
from cosmos_reasoner_ros.bag.scores import GroundOf, HandoffGround
from cosmos_reasoner_ros.geometry import Intrinsics
from cosmos_reasoner_ros.handoff import HandoffSettings

__all__ = ["BagCameras", "handoff_ground"]


@dataclass(frozen=True)
class BagCameras:
    """A bag's replayed camera topics and their CameraInfo topics ("": none), in the node's camera order."""

    reader: BagReader
    cameras: tuple[str, ...]
    infos: tuple[str, ...]

    @classmethod
    def of(cls, reader: BagReader, camera_topic: str) -> BagCameras:
        """One camera topic, its CameraInfo found as a replay finds it (none when that is ambiguous)."""
        try:
            info = choose_topics(reader, (camera_topic,), depth=False).infos[0]
        except BagError:
            info = ""
        return cls(reader, (camera_topic,), (info,))


def _intrinsics(reader: BagReader, topic: str) -> Intrinsics | str:
    store, unknown = reader.typestore([topic])
    if unknown:
        return f"the bag's {topic} cannot be read: {next(iter(unknown.values()))}"
    for m in reader.messages([topic]):
        info: Any = store.deserialize_cdr(m.data, m.msgtype)
        try:
            return Intrinsics.from_k(list(info.k), int(info.width), int(info.height))
        except ValueError as exc:
            return f"the bag's CameraInfo on {topic} is unusable: {exc}"
    return f"the bag's {topic} holds no CameraInfo"


def handoff_ground(settings: HandoffSettings, bags: Mapping[str, BagCameras]) -> GroundOf:
    """Each record's ground (HandoffGround), or why it has none. bags: by the records' bag names (one entry
    serves records of any bag)."""
    try:
        plane, limits = settings.ground_plane(), settings.path_limits()
    except (ValueError, TypeError) as exc:
        problem = f"no ground plane from the run's handoff.camera_height_m and camera_pitch_deg ({exc})"
        return lambda _record: problem
    found: dict[tuple[str, str], Intrinsics | str] = {}

    def ground(record: ResultRecord) -> HandoffGround | str:
        bag = bags.get(record.bag) or (next(iter(bags.values())) if len(bags) == 1 else None)
        if bag is None:
            return f"no bag of the run is named {record.bag!r}: its CameraInfo is unknown"
        camera = next((t.camera for t in record.trajectories if t.trajectory.points), "")
        names = camera_names(len(bag.cameras))
        index = names.index(camera) if camera in names else 0 if len(bag.cameras) == 1 else -1
        if index < 0:
            return f"the answer's camera {camera!r} is none of the bag's replayed cameras"
        mine = settings.camera_info_topic
        info = mine if mine in bag.reader.topics and bag.reader.topics[mine].msgtype == INFO_TYPE else ""
        info = info or bag.infos[index]
        if not info:
            return f"the bag has no CameraInfo for {bag.cameras[index]}"
        key = (str(bag.reader.path), info)
        if key not in found:
            found[key] = _intrinsics(bag.reader, info)
        intrinsics = found[key]
        return intrinsics if isinstance(intrinsics, str) else HandoffGround(intrinsics, plane, limits)

    return ground
