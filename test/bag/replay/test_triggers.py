"""Triggers at their bag time, on a recording with a gap, a late camera and undecodable frames, replayed into
reasoner_node (its own process) against the scripted server.

The recording: CameraInfo from 0 s to 9 s, a JPEG camera from 1 s to 2.9 s and again from 8 s (a 5 s gap), its
frames at 2.0-2.3 s undecodable. Trigger times count from the recording's start (its first message, on any
topic), not from the camera's first frame. Each trigger is asked when the playback clock reaches it, also
inside the gap (before: every trigger in a gap was sent at the gap's start, in lock-step they came back
`busy`, and `age_s` said 0.2 s where the bag-time age was seconds), and its result is stamped at that bag
time, in lock-step and with the recorded timing on a busy machine (triggers were up to 3 s late before). The
damage reaches the verdict: frames the node refused and a clip short of frames fail the run (exit 1), a
trigger before the camera's first frame is no JUnit pass, a trigger in the gap names it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.bag_evaluate import evaluate
from support.bags import STORE, T0, Msg, camera_messages, write_mcap_ros2
from support.reports import validate
from support.scripted_server import ScriptedReply, ScriptedServer

pytestmark = [pytest.mark.ros, pytest.mark.slow]

CAMERA = "/cam/color/image_raw/compressed"
TRIGGERS = (0.5, 2.6, 5.0, 8.9)


def recording(root: Path) -> Path:
    msgs = []
    for m in camera_messages(frames=91, kinds=("jpeg", "info"), width=32, height=24):
        t = (m.ns - T0) / 1e9
        if m.topic == CAMERA:
            if not (1.0 <= t <= 3.0 or t >= 8.0):
                continue
            if 2.0 <= t < 2.35:
                msg = STORE.deserialize_cdr(m.data, m.msgtype)
                msg.data = np.frombuffer(b"\xff\xd8 not a jpeg", np.uint8).copy()
                m = Msg(m.topic, m.msgtype, m.ns, bytes(STORE.serialize_cdr(msg, m.msgtype)))
        msgs.append(m)
    return write_mcap_ros2(root / "rosbag2_2025_06_01-10_20_30", msgs, 9)


@contextmanager
def busy_machine() -> Iterator[None]:
    """Two busy processes (this machine has two cores)."""
    code = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def replay(bag: Path, out: Path, *extra: str) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    reply = ScriptedReply(text="<think>\nok\n</think>\n\nmove left", delay_s=0.3)
    with ScriptedServer(default=reply) as server:
        rc = evaluate(
            bag,
            out,
            server.base_url,
            "--at",
            ",".join(map(str, TRIGGERS)),
            "--no-progress",
            "--timeout",
            "60",
            "--junit",
            str(out / "junit.xml"),
            "-p",
            "clip_seconds:=1.0",
            *extra,
        )
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return rc, records, json.loads((out / "verdict.json").read_text())


def test_triggers_inside_a_gap_are_asked_at_their_bag_time(tmp_path: Path) -> None:
    bag = recording(tmp_path)
    start = T0 + 4  # the recording's first message: CameraInfo at 0 s (support.bags offsets topics by ns)
    for mode, extra in (("lock-step", ("--lock-step",)), ("recorded timing", ())):
        out = tmp_path / mode.replace(" ", "_")
        if extra:
            rc, records, verdict = replay(bag, out, *extra)
        else:
            with busy_machine():
                rc, records, verdict = replay(bag, out)
        assert rc == 1, (mode, verdict["reasons"])
        assert [r["trigger_s"] for r in records] == list(TRIGGERS)
        by_time = {r["trigger_s"]: r for r in records}
        for r in records:
            # Stamped at its bag time: /clock stands on the trigger until the node has taken the goal.
            asked = start + round(r["trigger_s"] * 1e9)
            assert asked - 0.1e9 <= r["trigger_stamp_ns"] <= asked + 1e6, (mode, r)
            assert r["error_kind"] != "busy", (mode, r)
        # Before the camera's first frame (1 s): nothing to ask about.
        assert by_time[0.5]["error_kind"] == "no_frames", by_time[0.5]
        # Inside the gap: the clip before it, its age in bag time, and the gap named.
        gap = by_time[5.0]
        assert gap["success"] and gap["clip_end_ns"] <= T0 + 3.0e9 + 10**6, gap
        assert gap["age_s"] >= 2.0, gap
        assert any("inside a gap of /cam/color/image_raw/compressed" in n for n in gap["notes"]), gap
        assert "2.90-8.00 s from the recording's start" in gap["notes"][0]
        # The undecodable frames: refused by the node, and the clip that needed them short of frames.
        assert all(r["bag_frames_refused"] == 4 for r in records)  # the node's count for the bag
        # Each answer's own window (1 s up to its trigger): only the 2.6 s one holds the broken frames.
        assert {r["trigger_s"]: r["frames_refused"] for r in records} == {0.5: 0, 2.6: 4, 5.0: 0, 8.9: 0}
        short = by_time[2.6]
        assert any("the clip has" in n and "frames the recording holds" in n for n in short["notes"]), short
        failed = {c["name"] for c in verdict["aggregate"] if not c["passed"]}
        assert "frames_refused" in failed, verdict["aggregate"]
        if extra:  # lock-step: exact windows, a short clip is judged; with the recorded timing only said
            assert 0 < short["clip_frames"] < short["frames_expected"], short
            assert any("clip_frames_missing" in reason for reason in verdict["reasons"]), verdict["reasons"]
        else:
            assert short["frames_expected"] == 0 and "--lock-step" in short["notes"][-1], short
        assert any("refused 4 frame(s) of /cam/color/image_raw/compressed" in x for x in verdict["reasons"])
        # In the report and the JUnit file too; the request without frames is no pass there.
        page = (out / "index.html").read_text()
        assert "What the recordings and clips lost" in page and "inside a gap" in page
        validate(out / "junit.xml")
        junit = (out / "junit.xml").read_text()
        assert "no answer: no_frames" in junit and "the clip has" in junit
