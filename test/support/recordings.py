"""Generated recordings for the bag tools' property tests (test/bag/verbs/test_generated_recordings.py)
and bench/bag_generated.py.

A `Recording` describes a small camera recording as robots and other tools leave them: any name a file
system allows (`ros2 bag record`'s rosbag2_2025_06_01-10_20_30, spaces, `=`, parentheses, unicode, bytes
that are not UTF-8, leading dots and dashes), MCAP (the `mcap` package's writer: chunks with or without
CRCs, with or without a Statistics record, zstd or none) or sqlite3 (rosbag2's releases), a folder with
metadata.yaml, a folder of storage files, or one bare file (named .mcap/.db3 or not), split files, a gap,
header stamps that go back or repeat, a topic without messages, Humble's sensor_msgs/Range and an unknown
type with or without their definitions stored, camera frames that cannot be decoded, and a damaged or
truncated storage file. `write_recording` writes one, `recordings()` generates them (hypothesis), and
`outcomes` says which exit codes each verb may end in.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st
from mcap.writer import CompressionType, Writer
from rosbags.typesys import Stores, get_typestore

from support.bags import (
    STORE,
    T0,
    Msg,
    camera_messages,
    damage,
    definition,
    metadata_yaml,
    write_sqlite_bag,
)

HUMBLE = get_typestore(Stores.ROS2_HUMBLE)
RANGE = "sensor_msgs/msg/Range"
WIDGET = "acme_msgs/msg/Widget"
CAMERA_TOPICS = {"raw": "/cam/color/image_raw", "jpeg": "/cam/color/image_raw/compressed"}

# Names robots and people give recordings: what `ros2 bag record` makes by default, and what a shell,
# YAML, a URI or a ROS name would take for something else.
SPECIAL_NAMES = (
    "rosbag2_2025_06_01-10_20_30",
    "rosbag2_2025_06_01-10_20_30 (copy)",
    "run=3",
    "a b",
    "-leading-dash",
    ".hidden",
    "..x",
    "x..",
    "é",
    "日本語",
    "run: 1 #a",
    "%41?x#y",
    "[a, b]",
    "*",
    "'\"",
    "\\",
    "\t",
    "name\nwith newline",
    os.fsdecode(b"latin1-\xe9"),
    os.fsdecode(b"\xff\xfe"),
)


@dataclass(frozen=True)
class Recording:
    name: str  # the folder's (or bare file's) name: any name a file system allows
    storage: str = "mcap"  # mcap | sqlite3
    layout: str = "folder"  # folder (metadata.yaml) | plain (folder of storage files) | bare (one file)
    metadata_version: int = 9
    parts: int = 1  # storage files (folders only)
    frames: int = 12
    period_ms: int = 100
    camera: str = "raw"  # raw (Image) | jpeg (CompressedImage)
    info: bool = True  # a CameraInfo topic beside the camera
    gap_s: float = 0.0  # a pause in every topic after the middle frame
    stamps_back_s: float = 0.0  # from three quarters in, header stamps jump back by this much
    duplicate_stamps: bool = False  # two frames in a row carry one stamp
    empty_topic: bool = False  # a topic declared without messages
    empty_camera: bool = False  # the camera topic itself has none: nothing to replay
    older_type: str = ""  # "" | schema | bare: Humble's sensor_msgs/Range, its definition stored or not
    unknown_type: str = ""  # "" | schema | bare: acme_msgs/msg/Widget, its definition stored or not
    broken_frames: int = 0  # camera frames whose image cannot be decoded (valid CDR)
    damage: str = ""  # "" | bytes (random bytes over the middle of a storage file) | truncated
    crcs: bool = True  # MCAP chunk CRCs
    statistics: bool = True  # MCAP Statistics record
    compression: str = "zstd"  # MCAP chunks: zstd | none
    suffix: bool = True  # bare files: named .mcap / .db3 (else found by their first bytes)

    @property
    def camera_topic(self) -> str:
        return CAMERA_TOPICS[self.camera]

    @property
    def duration_s(self) -> float:
        return (self.frames - 1) * self.period_ms / 1000 + self.gap_s


# ----------------------------------------------------------------------------------------- messages


def _header(ns: int) -> Any:
    return STORE.types["std_msgs/msg/Header"](
        stamp=STORE.types["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
        frame_id="camera_optical_frame",
    )


def messages(r: Recording) -> list[Msg]:
    """The recording's messages, in receive-time order."""
    kinds = (r.camera, *(("info",) if r.info else ()))
    base = camera_messages(
        frames=r.frames, period_ns=r.period_ms * 1_000_000, kinds=kinds, width=32, height=24
    )
    gap_ns = round(r.gap_s * 1e9)
    middle, late = r.frames // 2, (3 * r.frames) // 4
    out: list[Msg] = []
    for m in base:
        k = (m.ns - T0) // (r.period_ms * 1_000_000)
        shift = gap_ns if k >= middle else 0
        msg = STORE.deserialize_cdr(m.data, m.msgtype)
        stamp = T0 + k * r.period_ms * 1_000_000 + shift
        if r.stamps_back_s and k >= late:
            stamp -= round(r.stamps_back_s * 1e9)
        if r.duplicate_stamps and k == middle - 1:
            stamp -= r.period_ms * 1_000_000  # the same stamp as the frame before it
        msg.header = _header(stamp)
        if m.topic == r.camera_topic:
            if r.empty_camera:
                continue
            if r.broken_frames and middle <= k < middle + r.broken_frames:
                if r.camera == "jpeg":
                    msg.data = np.frombuffer(b"\xff\xd8 not a jpeg", np.uint8).copy()
                else:
                    msg.data = msg.data[: len(msg.data) // 2].copy()  # fewer bytes than step x height
        out.append(Msg(m.topic, m.msgtype, m.ns + shift, bytes(STORE.serialize_cdr(msg, m.msgtype))))
    for k in range(r.frames if r.older_type else 0):
        ns = T0 + k * r.period_ms * 1_000_000 + (gap_ns if k >= middle else 0)
        rng = HUMBLE.types[RANGE](
            header=HUMBLE.types["std_msgs/msg/Header"](
                stamp=HUMBLE.types["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id="range",
            ),
            radiation_type=0,
            field_of_view=0.1,
            min_range=0.1,
            max_range=4.0,
            range=1.5,
        )
        out.append(Msg("/test/sensor_msgs/range", RANGE, ns + 9, bytes(HUMBLE.serialize_cdr(rng, RANGE))))
    for k in range(r.frames if r.unknown_type else 0):
        ns = T0 + k * r.period_ms * 1_000_000 + (gap_ns if k >= middle else 0)
        widget = STORE.types[WIDGET](
            header=_header(ns), parts=[STORE.types["acme_msgs/msg/Part"](id=k, weight=1.5)],
            pose=np.array([1.0, 2.0, 3.0]), label="w",
        )  # fmt: skip
        out.append(Msg("/acme/widget", WIDGET, ns + 10, bytes(STORE.serialize_cdr(widget, WIDGET))))
    return sorted(out, key=lambda m: m.ns)


def _definition(r: Recording, msgtype: str) -> str | None:
    """The definition the recording stores for a type (None: none)."""
    if msgtype == RANGE:
        return str(HUMBLE.generate_msgdef(RANGE, ros_version=2)[0]) if r.older_type == "schema" else None
    if msgtype == WIDGET:
        return definition(WIDGET) if r.unknown_type == "schema" else None
    return definition(msgtype)


# ------------------------------------------------------------------------------------------- writing


def _split(msgs: list[Msg], parts: int) -> list[list[Msg]]:
    size = -(-len(msgs) // parts) if msgs else 1
    chunks = [msgs[i : i + size] for i in range(0, len(msgs), size)] or [[]]
    return chunks


def _write_mcap(r: Recording, path: Path, msgs: list[Msg], empty: list[tuple[str, str]]) -> None:
    with path.open("wb") as fh:
        writer = Writer(
            fh,
            chunk_size=4096,  # several chunks per file: damage lands inside one
            compression=CompressionType.ZSTD if r.compression == "zstd" else CompressionType.NONE,
            use_statistics=r.statistics,
            enable_crcs=r.crcs,
        )
        writer.start("ros2", "recordings.py")
        schemas: dict[str, int] = {}
        channels: dict[str, int] = {}

        def channel(topic: str, msgtype: str) -> int:
            if msgtype not in schemas:
                text = _definition(r, msgtype)
                encoding, data = ("ros2msg", text.encode()) if text is not None else ("", b"")
                schemas[msgtype] = writer.register_schema(msgtype, encoding, data)
            if topic not in channels:
                channels[topic] = writer.register_channel(topic, "cdr", schemas[msgtype])
            return channels[topic]

        for topic, msgtype in empty:
            channel(topic, msgtype)
        for m in msgs:
            writer.add_message(channel(m.topic, m.msgtype), m.ns, m.data, m.ns)
        writer.finish()


def write_recording(r: Recording, root: Path) -> Path:
    """The recording under `root` (which must exist): the path to name on the command line."""
    msgs = messages(r)
    empty = [("/cam/empty", "sensor_msgs/msg/Image")] if r.empty_topic else []
    if r.empty_camera:
        image = "sensor_msgs/msg/Image" if r.camera == "raw" else "sensor_msgs/msg/CompressedImage"
        empty.append((r.camera_topic, image))
    suffix = ".mcap" if r.storage == "mcap" else ".db3"
    if r.storage == "sqlite3":
        folder = root / (r.name if r.layout != "bare" else ".sqlite-staging")
        write_sqlite_bag(
            folder,
            msgs,
            r.metadata_version,
            r.parts if r.layout != "bare" else 1,
            definitions=lambda t: _definition(r, t),
        )
        _sqlite_empty_topics(folder, empty)
        if r.layout == "plain":
            (folder / "metadata.yaml").unlink()
        path = folder
        if r.layout == "bare":
            db = next(folder.glob("*.db3"))
            path = root / (r.name + (suffix if r.suffix else ""))
            db.rename(path)
            shutil.rmtree(folder)
    elif r.layout == "bare":
        path = root / (r.name + (suffix if r.suffix else ""))
        _write_mcap(r, path, msgs, empty)
    else:
        path = root / r.name
        path.mkdir()
        files = []
        for i, chunk in enumerate(_split(msgs, r.parts)):
            name = f"{r.name}_{i}.mcap"
            _write_mcap(r, path / name, chunk, empty)
            files.append((name, chunk))
        if r.layout == "folder":
            (path / "metadata.yaml").write_text(metadata_yaml(r.metadata_version, "mcap", files))
    if r.damage:
        _damage(r, path)
    return path


def _sqlite_empty_topics(folder: Path, empty: list[tuple[str, str]]) -> None:
    import sqlite3

    if not empty:
        return
    for db_path in sorted(folder.glob("*.db3"))[:1]:
        db = sqlite3.connect(db_path)
        columns = [row[1] for row in db.execute("PRAGMA table_info(topics)")]
        for topic, msgtype in empty:
            values = {"name": topic, "type": msgtype, "serialization_format": "cdr"}
            values["offered_qos_profiles"] = ""
            values["type_description_hash"] = ""
            names = [c for c in columns if c in values]
            db.execute(
                f"INSERT INTO topics({','.join(names)}) VALUES ({','.join('?' * len(names))})",
                [values[n] for n in names],
            )
        db.commit()
        db.close()


def _damage(r: Recording, path: Path) -> None:
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.name != "metadata.yaml")
    target = max(files, key=lambda p: p.stat().st_size)
    size = target.stat().st_size
    if r.damage == "truncated":
        with target.open("r+b") as fh:
            fh.truncate(size * 3 // 5)
    else:
        damage(target, size=max(64, size // 3))


# -------------------------------------------------------------------------------------- expectations


def damaged(r: Recording) -> bool | None:
    """True: every verb must find the damage; None: it may not (payload bytes no CRC or structure covers)."""
    if not r.damage:
        return False
    if r.damage == "truncated":
        return True
    if r.storage == "mcap" and (r.crcs or r.compression == "zstd"):
        return True
    return None


def outcomes(r: Recording, verb: str) -> set[int]:
    """The exit codes `verb` may end in on this recording (check, play, evaluate against a server that
    answers every request)."""
    found = damaged(r)
    if found:
        return {2}
    codes = {0, 2} if found is None else {0}
    if verb in ("check", "play"):  # (play --all-topics: an empty camera leaves the other topics to play)
        return codes
    if r.empty_camera:
        return {2}
    # evaluate: frames the node refuses fail the run (frames_refused, clips short of frames). It decodes only
    # the frames its sampling keeps (4 per second by default): broken frames that span less than a sampling
    # period may all be skipped unseen (found by bench/bag_generated.py, seed 1192403328: 2 broken frames at
    # 20 Hz passed, rightly).
    broken = min(r.broken_frames, r.frames - r.frames // 2)
    if broken and broken * r.period_ms >= 300:
        return {1} | (codes - {0})
    if broken:
        return {0, 1} | codes
    return codes


# --------------------------------------------------------------------------------------- strategies


def _valid(name: str) -> bool:
    raw = os.fsencode(name)
    return name not in (".", "..") and b"/" not in raw and b"\0" not in raw and 0 < len(raw) <= 120


names = st.one_of(
    st.sampled_from(SPECIAL_NAMES),
    st.text(
        st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=24
    ),
    st.binary(min_size=1, max_size=24).map(os.fsdecode),
).filter(_valid)


@st.composite
def recordings(draw: Any, damage_kinds: tuple[str, ...] = ("", "", "", "bytes", "truncated")) -> Recording:
    """A generated recording; a third of them are split, a fifth damaged."""
    storage = draw(st.sampled_from(("mcap", "mcap", "sqlite3")))
    layout = draw(st.sampled_from(("folder", "folder", "plain", "bare")))
    version = draw(st.sampled_from((4, 5, 8, 9) if storage == "sqlite3" else (4, 6, 8, 9)))
    sqlite_old = storage == "sqlite3" and version < 8
    r = Recording(
        name=draw(names),
        storage=storage,
        layout=layout,
        metadata_version=version,
        parts=1 if layout == "bare" else draw(st.sampled_from((1, 1, 2, 3))),
        frames=draw(st.integers(4, 16)),
        period_ms=draw(st.sampled_from((50, 100, 200))),
        camera=draw(st.sampled_from(("raw", "jpeg"))),
        info=draw(st.booleans()),
        gap_s=draw(st.sampled_from((0.0, 0.0, 1.5, 2.5))),
        stamps_back_s=draw(st.sampled_from((0.0, 0.0, 0.3, 2.0))),
        duplicate_stamps=draw(st.booleans()),
        empty_topic=draw(st.booleans()),
        empty_camera=draw(st.sampled_from((False, False, False, False, True))),
        older_type=draw(st.sampled_from(("", "bare") if sqlite_old else ("", "schema", "bare"))),
        unknown_type=draw(st.sampled_from(("", "bare") if sqlite_old else ("", "schema", "bare"))),
        broken_frames=draw(st.sampled_from((0, 0, 0, 2, 8))),
        damage=draw(st.sampled_from(damage_kinds)),
        crcs=draw(st.booleans()),
        statistics=draw(st.booleans()),
        compression=draw(st.sampled_from(("zstd", "none"))),
        suffix=draw(st.booleans()),
    )
    if r.empty_camera and not r.info:
        r = replace(r, info=True)  # some message in the recording
    return r
