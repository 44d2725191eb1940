"""bag.verbs.check and the command line's help: `check` tells whether a recording is whole (exit 2 when it is
damaged), its topics with types, counts, rates, spans and gaps in seconds from the recording's start, the
types it cannot read or reads with a definition of its own, and the topics a replay would choose; --json
says the same as one object. --help gives the exit codes, where trigger times count from, and what the
tolerances judge by default (from the tolerances themselves)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bags import damage
from support.recordings import Recording, write_recording

from cosmos_reasoner_ros.bag.cli import VERBS, build_parser, main
from cosmos_reasoner_ros.bag.judge.tolerances import load_tolerances


def test_check_tells_what_a_recording_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = Recording(
        name="rosbag2_2025_06_01-10_20_30",
        frames=20,
        gap_s=3.0,
        older_type="schema",
        unknown_type="bare",
        empty_topic=True,
        parts=2,
    )
    bag = write_recording(r, tmp_path)
    assert main(["check", str(bag)]) == 0
    text = capsys.readouterr().out
    assert "whole: yes" in text and "storage: mcap, 2 files, metadata.yaml version 9" in text
    # 20 frames at 10 Hz with a 3 s pause after the tenth: its rate, its span and the gap in seconds.
    assert "/cam/color/image_raw  sensor_msgs/msg/Image  20 msgs  10.00 Hz  0.000-4.900 s" in text
    assert "gap: 3.100 s without a message, 0.900-4.000 s" in text
    assert "Humble's" not in text and "differs from ROS 2" in text  # Range read with the bag's own schema
    assert "not read: not a standard ROS 2 type, and the bag stores no definition of it" in text
    assert "/cam/empty  sensor_msgs/msg/Image  0 msgs" in text
    assert "replay: camera /cam/color/image_raw" in text and "(/cam/empty has none)" in text
    assert main(["check", str(bag), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    topics = {t["name"]: t for t in found["topics"]}
    assert found["whole"] and found["duration_s"] == pytest.approx(4.9, abs=0.01)
    assert topics["/cam/color/image_raw"]["gaps_s"] == [[0.9, 4.0]]
    assert topics["/cam/color/image_raw"]["rate_hz"] == pytest.approx(10.0)
    assert found["replay"]["cameras"] == ["/cam/color/image_raw"]
    # Several cameras without a choice: said, not an error; named, the choice follows.
    assert main(["check", str(bag), "--camera-topic", "/cam/empty", "--no-depth"]) == 0
    assert "replay: camera info /cam/color/camera_info for /cam/empty" in capsys.readouterr().out


def test_check_exits_2_on_damage_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_recording(Recording(name="robot", frames=40), tmp_path)
    damage(next(bag.glob("*.mcap")), size=2048)
    assert main(["check", str(bag)]) == 2
    out, err = capsys.readouterr()
    assert "whole: NO: damaged" in out and "damage:" in out and "Traceback" not in err
    assert main(["check", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_check_says_what_cannot_be_verified(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_recording(Recording(name="no crc", crcs=False, statistics=False), tmp_path)
    assert main(["check", str(bag)]) == 0  # unverifiable is not damaged: said, exit 0
    out = capsys.readouterr().out
    assert "carry no CRC" in out and "12 msgs" in out  # counted without a Statistics record (was 0)


def test_help_says_exit_codes_trigger_times_and_what_is_judged(capsys: pytest.CaptureFixture[str]) -> None:
    top = build_parser().format_help()
    assert all(name in top for name in VERBS)
    for code in ("0    done", "1    evaluate, scenario: a tolerance was exceeded", "2    bad input"):
        assert code in top
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for verb in ("evaluate", "scenario"):
        text = " ".join(sub.choices[verb].format_help().split())  # type: ignore[attr-defined]
        assert "seconds from the recording's start" in text, verb
        assert "Reported, not judged: answer text similarity; latency and TTFT" in text, verb
        assert "each task's success rate >= 0.8" in text and "Exit 0:" in text and "1: a tolerance" in text
    # The help is made from the tolerances, not beside them: another value says another thing.
    strict = load_tolerances(overrides={"per_request": {"text_similarity_min": 0.5}})
    assert "answer text similarity" not in strict.judged().split("Reported")[1]
    check = " ".join(sub.choices["check"].format_help().split())  # type: ignore[attr-defined]
    assert "Exit 0: whole" in check and "2: damaged" in check
