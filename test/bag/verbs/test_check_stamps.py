"""`check` tells, per camera, header stamps that go back or sit far from their log time (issue 38, finding
3: a camera whose stamps jump back 5 s passed `check` without a word, and a replay then reported a clip of
29-33 s whose frames were recorded at 34-38 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bags import STORE, Msg, camera_messages, write_mcap_ros2

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.files.header_stamps import STAMP_FAR_S

CAMERA = "/cam/color/image_raw/compressed"


def jumped(root: Path, at: int | None) -> Path:
    """100 JPEG frames at 10 Hz; from frame `at` on, header stamps 5 s behind their log time."""
    msgs = []
    for k, m in enumerate(camera_messages(frames=100, kinds=("jpeg",), width=32, height=24)):
        if at is not None and k >= at:
            msg = STORE.deserialize_cdr(m.data, m.msgtype)
            msg.header.stamp.sec -= 5
            m = Msg(m.topic, m.msgtype, m.ns, bytes(STORE.serialize_cdr(msg, m.msgtype)))
        msgs.append(m)
    return write_mcap_ros2(root / "bag", msgs, 9)


def test_a_stamp_jump_back_is_told_per_camera(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = jumped(tmp_path, 50)
    assert main(["check", str(bag)]) == 0  # said, not damage: the bag is whole
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith(f"header stamps of {CAMERA}"))
    assert "1 go back (at 5.00 s; up to 4.90 s)" in line, line
    assert f"50 of 100 sit more than {STAMP_FAR_S:g} s from their log time" in line, line
    assert "up to 5.00 s behind it, at 5.00-9.90 s" in line, line
    assert main(["check", str(bag), "--json"]) == 0
    (stamps,) = json.loads(capsys.readouterr().out)["header_stamps"]
    assert stamps["topic"] == CAMERA and stamps["back_s"] == [5.0] and stamps["far"] == 50
    assert stamps["worst_offset_s"] == pytest.approx(-5.0, abs=1e-3) and stamps["far_limit_s"] == STAMP_FAR_S


def test_stamps_in_order_are_said_to_be(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(jumped(tmp_path, None))]) == 0
    text = capsys.readouterr().out
    assert f"header stamps of {CAMERA}: in order, within {STAMP_FAR_S:g} s of their log time" in text
