"""`cosmos-reasoner-parse`: the JSON it prints and its exit status, in-process and as a real process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.paths import ROOT

from cosmos_reasoner_ros.reasoner.parse_cli import main

# Each structured kind's values under its name, in the order of the table of kinds (reasoner.KINDS).
KEYS = ["ok", "task", "reasoning", "answer", "choice", "boxes", "points", "segments", "error"]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    status = main(argv)
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object on one line
    return status, json.loads(out)


def test_points_with_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answer = tmp_path / "a.txt"
    answer.write_text('<think>\nup\n</think>\n```json\n[{"point_2d": [500, 250], "label": "g"}]\n```')
    status, out = _run(["--task", "trajectory", "--width", "640", "--height", "480", str(answer)], capsys)
    assert status == 0
    assert list(out) == KEYS
    assert out == {
        "ok": True,
        "task": "trajectory",
        "reasoning": "up",
        "answer": '```json\n[{"point_2d": [500, 250], "label": "g"}]\n```',
        "points": [{"label": "g", "x": 320.0, "y": 120.0, "x_norm": 500.0, "y_norm": 250.0}],
        "boxes": [],
        "segments": [],
        "choice": None,
        "error": None,
    }


def test_boxes_without_size_have_null_pixels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answer = tmp_path / "b.txt"
    answer.write_text('[{"bbox_2d": [100, 200, 300, 400], "label": "cup"}]')
    status, out = _run(["--task", "grounding_2d", str(answer)], capsys)
    assert status == 0
    assert out["boxes"] == [
        {
            "label": "cup",
            "x1": None,
            "y1": None,
            "x2": None,
            "y2": None,
            "x1_norm": 100.0,
            "y1_norm": 200.0,
            "x2_norm": 300.0,
            "y2_norm": 400.0,
        }
    ]


def test_stdin_segments_and_choice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        sys, "stdin", io.StringIO('{"start": "00:01.00", "end": "00:02.50", "caption": "drop"}')
    )
    status, out = _run(["--task", "timestamp_query"], capsys)
    assert status == 0 and out["segments"] == [{"start_s": 1.0, "end_s": 2.5, "caption": "drop"}]
    monkeypatch.setattr(sys, "stdin", io.StringIO("<think>\nfalls\n</think>\n<answer>(B)</answer>"))
    status, out = _run(["--task", "plausibility"], capsys)
    assert status == 0 and out["choice"] == "B" and out["answer"] == "(B)" and out["reasoning"] == "falls"


def test_failures_exit_1_with_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("<think>\nhmm\n</think>\nNo cup here.")
    status, out = _run(["--task", "grounding_2d", str(bad)], capsys)
    assert status == 1
    assert list(out) == KEYS
    assert out["ok"] is False and out["error"].startswith("unparseable: no boxes")
    assert (out["reasoning"], out["answer"], out["boxes"]) == ("hmm", "No cup here.", [])
    status, out = _run(["--task", "next_action", "--finish-reason", "length", str(bad)], capsys)
    assert status == 1 and out["error"].startswith("truncated:")
    status, out = _run(["--task", "nope", str(bad)], capsys)
    assert status == 1 and "unknown task 'nope'" in out["error"]
    status, out = _run(["--task", "next_action", str(tmp_path / "missing.txt")], capsys)
    assert status == 1 and out["error"].startswith("input:")


def test_user_tasks_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        yaml.safe_dump(
            {
                "tasks": {
                    "where_is": {
                        "template": "Point at {thing}.",
                        "media": "image",
                        "reasoning": False,
                        "answer_kind": "points",
                        "profile": "default",
                    }
                }
            }
        )
    )
    answer = tmp_path / "a.txt"
    answer.write_text("[10, 20]")
    status, out = _run(["--task", "where_is", "--tasks-file", str(tasks), str(answer)], capsys)
    assert status == 0 and out["points"][0]["x_norm"] == 10.0


def test_installed_script_runs_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cosmos-reasoner-parse"), "--task", "next_action"],
        input="<think>\nr\n</think>\n\nPick up the cup.",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == "Pick up the cup."


@pytest.mark.parametrize(
    ("text", "structured", "error"),
    [
        ('[{"point_2d": [500, 250], "label": "g"}, {"point_2d": [5', False, "incomplete: "),
        ('[{"point_2d": [500, 2500], "label": "g"}]', True, "schema_invalid: "),
        ('[{"point_2d": [500, 250], "label": "g"}] and more', True, "incomplete: "),
    ],
)
def test_cut_and_schema_refused_answers_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, structured: bool, error: str
) -> None:
    answer = tmp_path / "a.txt"
    answer.write_text(text)
    argv = ["--task", "drive_path", *(["--structured"] if structured else []), str(answer)]
    status, out = _run(argv, capsys)
    assert status == 1 and out["ok"] is False and out["points"] == []
    assert out["error"].startswith(error), out["error"]
