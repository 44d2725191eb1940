"""Provenance per answer (issue 38, finding 3), replayed into reasoner_node (its own process, lock-step)
against the scripted server.

Before, damage was counted per run: in a bag whose frames 13.4-16.3 s are broken JPEGs every record carried
the run's `frames_refused`, also the one at 5 s, and the answer at 15 s, computed on a clip ending at 13.2 s,
had no note and a card saying "success". Now each record names the frames refused, out of order or not
recorded in its own clip window per camera, flags a clip that ends well before its trigger, and keeps the
node's count for the bag apart (`bag_frames_refused`). The generated test places damage at random frames
(undecodable JPEGs, a header stamp that jumps back, frames not recorded) and checks every record against an
oracle computed from where the damage was put and the clip windows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.bags import STORE, T0, Msg, camera_messages, write_mcap_ros2
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.replay.provenance import CLIP_LAG_TOLERANCE_S

pytestmark = [pytest.mark.ros, pytest.mark.slow]

CAMERA = "/cam/color/image_raw/compressed"
PERIOD_NS = 100_000_000  # 10 fps
ORIGIN = T0 + 2  # the recording's first message: the JPEG of frame 0 (support.bags offsets topics by ns)


@dataclass(frozen=True)
class Damage:
    """Where the damage was put, by frame index (frame k is recorded at k * PERIOD_NS from the start)."""

    frames: int
    broken: frozenset[int] = frozenset()
    removed: frozenset[int] = frozenset()
    jump: int = 0  # from this frame on, header stamps sit jump_s behind their log time (0: none)
    jump_s: float = 0.0
    triggers: tuple[float, ...] = field(default=())


def recording(root: Path, d: Damage) -> Path:
    msgs = []
    for k, m in enumerate(camera_messages(frames=d.frames, kinds=("jpeg",), width=32, height=24)):
        if k in d.removed:
            continue
        msg = STORE.deserialize_cdr(m.data, m.msgtype)
        if k in d.broken:
            msg.data = np.frombuffer(b"\xff\xd8 not a jpeg", np.uint8).copy()
        if d.jump and k >= d.jump:
            stamp = m.ns - round(d.jump_s * 1e9)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
        msgs.append(Msg(m.topic, m.msgtype, m.ns, bytes(STORE.serialize_cdr(msg, m.msgtype))))
    return write_mcap_ros2(root / "bag", msgs, 9)


def evaluate(
    bag: Path, out: Path, triggers: tuple[float, ...], *params: str
) -> tuple[int, list[dict[str, Any]]]:
    reply = ScriptedReply(text="<think>\nok\n</think>\n\nmove left")
    with ScriptedServer(default=reply) as server:
        args = ["evaluate", str(bag), "-o", str(out), "--server-url", server.base_url, "--lock-step"]
        args += ["--at", ",".join(map(str, triggers)), "--no-progress", "--timeout", "60"]
        for p in params:
            args += ["-p", p]
        rc = main(args)
    return rc, [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def in_window(k: int, trigger_s: float, clip_s: float) -> bool:
    """The provenance's window: frames by log time in [trigger - clip_seconds, trigger]."""
    t = k * PERIOD_NS / 1e9
    return trigger_s - clip_s <= t <= trigger_s


def oracle(d: Damage, trigger_s: float, clip_s: float) -> dict[str, Any]:
    kept = [k for k in range(d.frames) if k not in d.removed]
    inside = [k for k in kept if in_window(k, trigger_s, clip_s)]
    # Frames not recorded count where a kept frame follows them (a gap between two recorded frames).
    missing = [k for k in d.removed if kept[0] < k < kept[-1] and in_window(k, trigger_s, clip_s)]
    return {
        "refused_s": [round(k * PERIOD_NS / 1e9, 3) for k in inside if k in d.broken],
        "out_of_order_s": [round(d.jump * PERIOD_NS / 1e9, 3)] if d.jump in inside and d.jump else [],
        "missing": len(missing),
        "frames": len(inside),
    }


# ------------------------------------------------------------------------------------------ the finding


def test_the_finding_damage_is_told_per_answer_not_per_run(tmp_path: Path) -> None:
    """Broken frames 13.4-16.3 s at 10 fps, node defaults (clip 4 s at 4 fps): the 5 s answer has none,
    the 15 s answer names them and its stale clip; the bag's count is the node's, kept apart."""
    broken = frozenset(range(134, 164))
    d = Damage(frames=200, broken=broken, triggers=(5.0, 15.0))
    rc, records = evaluate(recording(tmp_path, d), tmp_path / "out", d.triggers)
    early, late = records
    assert early["success"] and early["frames_refused"] == 0 and not early["clip_stale"], early
    assert not any("refused" in n for n in early["notes"]), early["notes"]
    # The 15 s answer: its window 11-15 s holds the broken frames 13.4-15.0 s; its clip ended before them.
    expected = oracle(d, 15.0, 4.0)
    (camera,) = late["provenance"]
    assert camera["topic"] == CAMERA and camera["refused_s"] == expected["refused_s"], camera
    assert late["frames_refused"] == len(expected["refused_s"]) == 17
    assert late["clip_stale"] and late["clip_lag_s"] > 1.4, late
    assert any("ends" in n and "before its trigger" in n for n in late["notes"]), late["notes"]
    assert any("17 frame(s) of /cam/color/image_raw/compressed refused" in n for n in late["notes"])
    # The node refused the broken frames it was sent (up to 15 s): the bag's count, judged once.
    assert early["bag_frames_refused"] == late["bag_frames_refused"] > 0
    assert rc == 1
    page = (tmp_path / "out" / "index.html").read_text()
    assert "success on a damaged clip" in page
    assert "17 frames refused in this clip&#x27;s window" in page and "clip ends" in page


# ------------------------------------------------------------------------------------------- generated

CLIP_S = 2.0


@st.composite
def damages(draw: Any) -> Damage:
    frames = 80
    inner = st.integers(1, frames - 2)  # the first and last frame stay whole: the span is known
    broken = draw(st.frozensets(inner, max_size=12))
    gap_at = draw(st.integers(5, frames - 10))
    gap = frozenset(range(gap_at, gap_at + draw(st.integers(0, 6))))
    jump = draw(st.sampled_from([0, draw(st.integers(10, frames - 5))]))
    jump_s = draw(st.sampled_from([1.5, 3.0])) if jump else 0.0
    triggers = sorted(draw(st.sets(st.integers(15, 78), min_size=2, max_size=4)))
    return Damage(
        frames,
        broken - gap,
        gap - {jump},
        jump if jump not in gap else 0,
        jump_s if jump not in gap else 0.0,
        tuple(round(t / 10 + 0.05, 2) for t in triggers),  # between two frames: no tie with a window's edge
    )


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(d=damages())
@example(  # every kind of damage at once, the stamp jump inside a window
    d=Damage(80, frozenset({20, 31, 45, 60}), frozenset({50, 51, 52}), 40, 3.0, (2.55, 4.15, 5.55, 6.55))
)
def test_each_answer_names_the_damage_of_its_own_window(d: Damage, tmp_path_factory: Any) -> None:
    root = tmp_path_factory.mktemp("provenance")
    _, records = evaluate(
        recording(root, d), root / "out", d.triggers, f"clip_seconds:={CLIP_S}", "sample_fps:=10.0"
    )
    assert [r["trigger_s"] for r in records] == list(d.triggers)
    total = 0
    for r in records:
        expected = oracle(d, r["trigger_s"], CLIP_S)
        (camera,) = r["provenance"]
        got = {k: camera[k] for k in expected}
        assert got == expected, (d, r["trigger_s"], got, expected)
        assert r["frames_refused"] == len(expected["refused_s"])
        total += r["frames_refused"]
        stale = _stale(d, r["trigger_s"])
        if r["clip_end_ns"] and stale is not None and not _jumped_near(d, r["trigger_s"]):
            assert r["clip_stale"] == stale, (d, r)
    assert total == sum(len(oracle(d, t, CLIP_S)["refused_s"]) for t in d.triggers)
    page = (root / "out" / "index.html").read_text()
    assert f"{total} frames refused in the answers' clip windows (summed over answers)" in page
    if not d.jump:  # every frame due at 10 fps: the node decoded, and refused, every broken frame sent
        sent = [k for k in d.broken if k * PERIOD_NS / 1e9 <= max(d.triggers)]
        assert all(r["bag_frames_refused"] == len(sent) for r in records), (d, records[0])


def _stale(d: Damage, trigger_s: float) -> bool | None:
    """Whether the node's clip must end more than a frame period + the tolerance before the trigger: its
    newest frame is the last whole one recorded by then. None: too close to the limit to say."""
    whole = [k for k in range(d.frames) if k not in d.removed and k not in d.broken]
    newest = max((k for k in whole if k * PERIOD_NS / 1e9 <= trigger_s), default=None)
    if newest is None:
        return None
    lag = trigger_s - newest * PERIOD_NS / 1e9
    limit = PERIOD_NS / 1e9 + CLIP_LAG_TOLERANCE_S
    return None if abs(lag - limit) < 0.03 else lag > limit


def _jumped_near(d: Damage, trigger_s: float) -> bool:
    """The node holds frames after a stamp jump until their timeline is confirmed: its clip end there is
    the node's to choose."""
    return bool(d.jump) and d.jump * PERIOD_NS / 1e9 <= trigger_s
