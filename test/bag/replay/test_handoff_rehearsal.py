"""The Nav2 handoff rehearsed on bags: evaluate runs it dry whatever the parameters say (a replay never sends
a goal), each record keeps the path that would have been sent and every gate's verdict, the report draws the
path on its frame and lists the gates; records round-trip through results.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.bag_evaluate import evaluate
from support.handoff_answers import AHEAD, LEFT, points_text
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.files.make import MakeOptions, intrinsics, make_bag
from cosmos_reasoner_ros.bag.records import GateRecord, HandoffRecord, ResultRecord, load_records
from cosmos_reasoner_ros.bag.replay.node_process import (
    NodeCamera,
    handoff_rehearsal,
    handoff_settings,
    node_parameters,
)
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
from cosmos_reasoner_ros.bag.report.frames import annotated_frame, handoff_trajectory
from cosmos_reasoner_ros.geometry import GroundPlane, Intrinsics, Point2D, Trajectory
from cosmos_reasoner_ros.handoff import HandoffSettings, score_path_against_label

CAMERAS = [NodeCamera("camera", "/ns/camera/image_raw", bag_info_topic="/ns/camera/camera_info")]


def _params_file(tmp_path: Path, handoff: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"reasoner_node": {"ros__parameters": {"handoff": handoff}}}))
    return path


@pytest.mark.parametrize(
    ("params", "handoff", "expected"),
    [
        ((), None, []),  # the shipped file: off
        (("handoff.mode:=none",), {"mode": "follow_path"}, []),  # -p wins over the file
        (
            ("handoff.mode:=navigate_to_pose",),
            None,
            ["handoff.mode:=dry_run", 'handoff.camera_info_topic:="/ns/camera/camera_info"'],
        ),
        ((), {"mode": "follow_path", "camera_info_topic": "/mine"}, ["handoff.mode:=dry_run"]),
        (("handoff.camera_info_topic:=/x",), {"mode": "dry_run"}, ["handoff.mode:=dry_run"]),
    ],
)
def test_a_replay_runs_the_handoff_dry_and_on_the_bag_s_camera_info(
    tmp_path: Path, params: tuple, handoff: dict | None, expected: list
) -> None:
    options = EvalOptions(params=params, params_file=_params_file(tmp_path, handoff) if handoff else None)
    assert handoff_rehearsal(options, CAMERAS) == expected
    parameters = node_parameters(options, CAMERAS, tmp_path)
    assert parameters[-len(expected) :] == expected if expected else True  # last: they win over -p
    # Without depth the node's camera gets no CameraInfo topic (its depth path needs both); the handoff does.
    assert 'camera.camera.camera_info_topic:=""' in parameters


def test_scoring_reads_the_handoff_settings_the_replayed_node_reads(tmp_path: Path) -> None:
    file = _params_file(tmp_path, {"mode": "follow_path", "camera_height_m": 0.5, "camera_pitch_deg": 15})
    params = ("handoff.camera_height_m:=0.8", "handoff.max_start_distance_m:=0")  # -p wins; 0 is a value
    settings = handoff_settings(EvalOptions(params=params, params_file=file))
    assert (settings.camera_height_m, settings.camera_pitch_deg) == (0.8, 15)
    assert settings.path_limits().max_start_distance_m == 0 and settings.path_spacing_m == 0.1  # default
    assert handoff_settings(EvalOptions()).mode == "none"  # the shipped file: off, no ground plane


def _record(decision: str = "would_send", gate_failed: str = "") -> ResultRecord:
    label = "robot path"
    trajectory = Trajectory(label, tuple(Point2D(label, x, y, x * 0.64, y * 0.48) for x, y in AHEAD))
    from cosmos_reasoner_ros.bag.records import CameraTrajectory

    gates = tuple(
        GateRecord(n, n != gate_failed, 0.1, 1.0, f"{n} seen") for n in ("answer", "ground_path", "age")
    )
    handoff = HandoffRecord(
        decision=decision,
        reason="every gate passed (dry run: nothing sent)",
        gates=gates,
        path=((0.0, 0.4, 0.3), (0.0, 0.35, 0.5)),
        path_px=((320.0, 450.0), (330.0, 300.0)),
        frame_id="camera_optical_frame",
        source="ground_plane",
        length_m=0.2,
        answered_length_m=0.9,
        dry_run=True,
    )
    return ResultRecord(
        request_id="r1",
        task="drive_path",
        success=True,
        trajectories=(CameraTrajectory(trajectory, "camera", 640, 480),),
        handoff=handoff,
    )


def test_a_record_keeps_the_handoff_through_results_jsonl(tmp_path: Path) -> None:
    record = _record()
    back = ResultRecord.from_dict(json.loads(record.to_json()))
    assert back == record
    assert ResultRecord.from_dict({"request_id": "old"}).handoff is None  # files written before the handoff


def test_the_report_frame_draws_the_path_that_would_have_been_sent() -> None:
    frame = np.zeros((240, 320, 3), dtype=np.uint8)
    record = _record(decision="refused", gate_failed="age")
    drawn = annotated_frame(record, frame)
    without = annotated_frame(ResultRecord(**{**record.__dict__, "handoff": None}), frame)
    assert (drawn != without).any()
    handoff = handoff_trajectory(record)
    assert handoff is not None and handoff.label == "handoff refused (age)"
    # Drawn from 0-1000 values: at half the size of the node's image, the pixels halve.
    assert (handoff.points[0].x_norm, handoff.points[0].y_norm) == pytest.approx((500.0, 937.5))


@pytest.mark.ros
@pytest.mark.slow
def test_evaluate_rehearses_the_handoff_dry_on_a_bag(robot_clip: Path, tmp_path: Path) -> None:
    """A bag with CameraInfo and no depth, a drive_path answer, the handoff asked to follow paths: the replay
    sends nothing, and each record holds the ground-plane path that would have been sent, with its gates;
    labelled, each path is scored against its label on the ground (the bag's CameraInfo, the run's plane)."""
    bag = tmp_path / "robot"
    made = make_bag(
        [robot_clip], bag, MakeOptions(start_ns=1_700_000_000_000_000_000, rate_hz=10.0, max_long_side=320)
    )
    labels = tmp_path / "labels.yaml"  # the answer's own path at 2 s, one bending left at 4 s
    lines = [
        json.dumps({"task": "drive_path", "at": t, "answer": json.dumps([{"point_2d": p} for p in pts])})
        for t, pts in ((2.0, AHEAD), (4.0, LEFT))
    ]
    labels.write_text("labels:\n" + "".join(f"  - {line}\n" for line in lines))  # JSON is YAML
    out = tmp_path / "report"
    with ScriptedServer(default=ScriptedReply(text=points_text(AHEAD))) as server:
        rc = evaluate(
            bag,
            out,
            server.base_url,
            "--at",
            "2.0,4.0",
            "--task",
            "drive_path:go to the door",
            "--no-progress",
            "--timeout",
            "60",
            *("-p", "max_retries:=0", "-p", "handoff.mode:=follow_path"),
            *("-p", "handoff.camera_height_m:=0.5", "-p", "handoff.camera_pitch_deg:=20"),
            *("-p", "handoff.max_age_s:=30.0"),
            *("--labels", str(labels), "--bootstrap-rounds", "200"),
        )
    assert rc in (0, 1), (out / "node.log").read_text()[-3000:]
    records = load_records(out)
    assert len(records) == 2
    for record in records:
        assert record.success, record.error
        h = record.handoff
        assert h is not None and h.dry_run, (out / "node.log").read_text()[-3000:]
        assert h.decision in ("would_send", "refused"), h.reason
        assert [g.name for g in h.gates][:3] == ["answer", "checks", "ground_path"]
        assert h.source == "ground_plane" and h.frame_id == "camera_optical_frame"
        assert len(h.path) == len(h.path_px) > 3
    assert records[0].handoff is not None and records[0].handoff.decision == "would_send"
    page = (out / "index.html").read_text()
    assert "handoff: <b>would_send</b> (dry run)" in page and "<td>ground_path</td>" in page
    assert all((out / r.image).is_file() for r in records)
    assert "sent to" not in (out / "node.log").read_text()
    # Scored against the labels: by handoff/scoring with the bag's CameraInfo and the run's ground plane.
    fx, fy, cx, cy = intrinsics(made.width, made.height, 60.0)
    ground = (
        Intrinsics.from_k([fx, 0, cx, 0, fy, cy, 0, 0, 1], made.width, made.height),
        GroundPlane.from_degrees(0.5, 20.0),
        HandoffSettings().path_limits(),
    )
    graded = [json.loads(line) for line in (out / "labelled.jsonl").read_text().splitlines()]
    assert len(graded) == 2
    for row, record, truth in zip(graded, records, (AHEAD, LEFT), strict=True):
        h, size = record.handoff, (record.trajectories[0].width, record.trajectories[0].height)
        assert h is not None
        label = Trajectory("", tuple(Point2D("", float(x), float(y)) for x, y in truth))
        expected = score_path_against_label(h.path, h.path_px, label, size, *ground)
        assert expected.frechet_m is not None
        assert row["values"]["handoff_frechet_m"] == pytest.approx(expected.frechet_m, abs=1e-5)
        assert row["values"]["handoff_frechet_px"] == pytest.approx(expected.frechet_px, abs=1e-5)
    assert graded[0]["values"]["handoff_frechet_m"] < 1e-6 < 0.2 < graded[1]["values"]["handoff_frechet_m"]
    scores = json.loads((out / "scores.json").read_text())
    metrics = scores["tasks"]["drive_path"]["metrics"]
    through = [r.handoff is not None and r.handoff.decision == "would_send" for r in records]
    assert metrics["handoff_passed"]["value"] == pytest.approx(sum(through) / 2)
    assert metrics["handoff_frechet_m"]["value"] == pytest.approx(
        graded[1]["values"]["handoff_frechet_m"] / 2, abs=1e-5
    )
    assert scores["handoff"] == {
        "labelled_answers": 2,
        "paths_scored": 2,
        "on_the_ground": 2,
        "pixels_only": [],
    }
    # the report: the figures, and each label drawn beside the path that would have been sent
    page = (out / "index.html").read_text()
    assert "handoff_frechet_m" in page and "2 paths scored against their labels, 2 on the ground" in page
    assert len(list((out / "images").glob("label_*"))) == 2
    board = tmp_path / "board"
    assert main(["leaderboard", str(out), "-o", str(board)]) == 0
    assert "handoff_frechet_m" in (board / "leaderboard.md").read_text()
