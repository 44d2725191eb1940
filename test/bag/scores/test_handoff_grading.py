"""The rehearsed handoff's path scored against labels: values computed by hand (a camera 1 m above a flat
floor, looking level, where rows 750 and 625 of a 1000 px image meet the floor 2 m and 4 m ahead), the share
the gates let through, the pixels-only cases named, and the wiring checked against handoff/scoring on
generated paths."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from support.labelled import failed, points_text, record

from cosmos_reasoner_ros.bag.labels import LabelSet, labels_from_text
from cosmos_reasoner_ros.bag.leaderboard import Leaderboard, RunScores
from cosmos_reasoner_ros.bag.records import GateRecord, HandoffRecord, ResultRecord
from cosmos_reasoner_ros.bag.scores import (
    HandoffGround,
    ScoreOptions,
    grade,
    handoff_summary,
    score_run,
    write_scores,
)
from cosmos_reasoner_ros.geometry import BasePath, GroundPlane, Intrinsics
from cosmos_reasoner_ros.handoff import PathLimits, ground_path, score_path_against_label
from cosmos_reasoner_ros.reasoner import parse_answer
from cosmos_reasoner_ros.requests import ClipSummary, Outcome

SIDE = 1000  # a square image, so that 0-1000 units are pixels
GROUND = HandoffGround(
    Intrinsics.from_k([500, 0, 500, 0, 500, 500, 0, 0, 1], SIDE, SIDE),
    GroundPlane.from_degrees(1.0, 0.0),
    PathLimits(0.5, 3.0, 5.0, 6.0),
)
NAME = "robot path"
STRAIGHT = ((500.0, 750.0), (500.0, 625.0))  # on the floor: (0, 1, 2) -> (0, 1, 4) [m]
# The path the handoff would have sent for an answer 1 m to the right of the label, every 0.5 m:
RIGHT_PATH = tuple((1.0, 1.0, 2.0 + 0.5 * i) for i in range(5))
RIGHT_PX = ((600.0, 750.0), (600.0, 625.0))  # as recorded: the label's line 100 px to the right


def labels(*answers: str, task: str = "drive_path") -> LabelSet:
    listed = ", ".join(repr(a) for a in answers)
    return labels_from_text(f"labels: [{{task: {task}, at: 1, answers: [{listed}]}}]")


def handoff(
    decision: str = "would_send",
    path: tuple[tuple[float, float, float], ...] = RIGHT_PATH,
    path_px: tuple[tuple[float, float], ...] = RIGHT_PX,
) -> HandoffRecord:
    gates = (GateRecord("answer", True), GateRecord("age", decision != "refused", 2.0, 1.0))
    return HandoffRecord(decision, gates=gates, path=path, path_px=path_px, dry_run=True)


def answered(h: HandoffRecord | None, points: tuple[tuple[float, float], ...] = STRAIGHT) -> ResultRecord:
    r = record("drive_path", 1.0, points_text(points, NAME), "points", width=SIDE, height=SIDE)
    return replace(r, handoff=h)


def test_a_handoff_path_by_hand() -> None:
    label = labels(points_text(STRAIGHT, NAME)).labels[0]
    # On the ground: the label resampled every 0.5 m from 2 m to 4 m, the path the same 1 m to its right.
    g = grade(0, answered(handoff()), label, ground=lambda _r: GROUND)
    assert g.values["handoff_frechet_m"] == pytest.approx(1.0)
    assert g.values["handoff_frechet_px"] == pytest.approx(100.0)
    assert g.values["handoff_passed"] == 1.0 and g.pixels_only == ""
    # Refused by a gate: not let through, its path still measured (the report draws it beside the label).
    g = grade(0, answered(handoff("refused")), label, ground=lambda _r: GROUND)
    assert g.values["handoff_passed"] == 0.0 and g.values["handoff_frechet_m"] == pytest.approx(1.0)
    # Without the ground: pixels only, said why.
    g = grade(0, answered(handoff()), label)
    assert "handoff_frechet_m" not in g.values and g.values["handoff_frechet_px"] == pytest.approx(100.0)
    assert g.pixels_only and g.notes[-1].startswith("handoff path in pixels only:")
    g = grade(0, answered(handoff()), label, ground=lambda _r: "the bag has no CameraInfo for /cam")
    assert g.pixels_only == "the bag has no CameraInfo for /cam" and "handoff_frechet_m" not in g.values


def test_which_label_the_path_is_scored_against() -> None:
    # Several acceptable answers: the path is scored against the one the answer fits best (drawn beside it).
    far = ((100.0, 750.0), (100.0, 625.0))
    label = labels(points_text(far, NAME), points_text(STRAIGHT, NAME)).labels[0]
    g = grade(0, answered(handoff(), STRAIGHT), label, ground=lambda _r: GROUND)
    assert g.best == 1 and g.values["handoff_frechet_px"] == pytest.approx(100.0)
    # Several labelled trajectories: the one of the answer's name.
    both = json.dumps(
        [{"point_2d": list(p), "label": "other"} for p in far]
        + [{"point_2d": list(p), "label": NAME} for p in STRAIGHT]
    )
    g = grade(0, answered(handoff()), labels(both).labels[0], ground=lambda _r: GROUND)
    assert g.values["handoff_frechet_m"] == pytest.approx(1.0)
    # A label above the horizon has no ground path: pixels only, the label's problem named.
    sky = labels(points_text(((500.0, 750.0), (500.0, 400.0)), NAME)).labels[0]
    g = grade(0, answered(handoff()), sky, ground=lambda _r: GROUND)
    assert "handoff_frechet_m" not in g.values and "above the horizon" in g.pixels_only


def test_no_handoff_no_path_and_no_verdict_yet() -> None:
    label = labels(points_text(STRAIGHT, NAME)).labels[0]
    plain = grade(0, answered(None), label, ground=lambda _r: GROUND)
    assert not any(k.startswith("handoff") for k in plain.values)
    # A failed answer the handoff refused: not let through, nothing to measure.
    refused = replace(failed("drive_path", 1.0), handoff=handoff("refused", (), ()))
    g = grade(0, refused, label, ground=lambda _r: GROUND)
    assert g.values["handoff_passed"] == 0.0 and math.isnan(g.values["handoff_frechet_px"])
    # Waiting for IsPathValid or a person: no verdict, left out of the share and said so.
    g = grade(0, answered(handoff("awaiting_confirmation")), label, ground=lambda _r: GROUND)
    assert math.isnan(g.values["handoff_passed"]) and "no verdict yet" in g.notes[0]
    assert g.values["handoff_frechet_m"] == pytest.approx(1.0)


def test_a_run_s_handoff_scores_with_intervals_in_scores_json_and_the_leaderboard(tmp_path: Path) -> None:
    text = "labels:\n" + "".join(
        f"  - {{task: drive_path, at: {t}, answer: '{points_text(STRAIGHT, NAME)}'}}\n" for t in range(1, 13)
    )
    label_set = labels_from_text(text)
    shifted = [
        tuple((x, 1.0, z) for _, _, z in RIGHT_PATH) for x in (0.0, 1.0, 2.0)
    ]  # 0, 1 and 2 m off the label
    four = [
        ("sent", shifted[0]),
        ("would_send", shifted[1]),
        ("refused", shifted[2]),
        ("validating", shifted[1]),
    ]
    records = [  # three times the four: 12 answers, enough for intervals (MIN_N)
        replace(answered(handoff(*four[i % 4])), trigger_s=float(i + 1)) for i in range(12)
    ]
    scores = score_run(records, {"robot": label_set}, ScoreOptions(), ground=lambda _r: GROUND)
    metrics = scores.tasks["drive_path"].metrics
    assert metrics["handoff_frechet_m"].value == pytest.approx((0 + 1 + 2 + 1) / 4)
    assert metrics["handoff_passed"].value == pytest.approx(2 / 3)  # the one still validating is left out
    low, high = metrics["handoff_frechet_m"].low, metrics["handoff_frechet_m"].high
    assert low is not None and high is not None and low < 1.0 < high
    summary = handoff_summary(scores.grades)
    assert summary is not None and (summary.answers, summary.paths, summary.on_ground) == (12, 12, 12)
    write_scores(scores, tmp_path, records, ["labels.yaml"])
    data = json.loads((tmp_path / "scores.json").read_text())
    assert data["handoff"] == {
        "labelled_answers": 12,
        "paths_scored": 12,
        "on_the_ground": 12,
        "pixels_only": [],
    }
    assert set(data["tasks"]["drive_path"]["metrics"]) >= {"handoff_frechet_m", "handoff_passed"}
    # In pixels only (no ground): no metres, and scores.json says why.
    pixels = score_run(records, {"robot": label_set}, ScoreOptions())
    assert "handoff_frechet_m" not in pixels.tasks["drive_path"].metrics
    write_scores(pixels, tmp_path, records, ["labels.yaml"])
    said = json.loads((tmp_path / "scores.json").read_text())["handoff"]
    assert said["on_the_ground"] == 0 and said["pixels_only"] == [
        "the camera's intrinsics and the run's ground plane are not known"
    ]
    board = Leaderboard.of([RunScores("ground", scores.tasks), RunScores("pixels", pixels.tasks)])
    columns = {c.metric: c for c in board.columns}
    assert columns["handoff_frechet_px"].better == "lower" and columns["handoff_passed"].better == "higher"
    assert columns["handoff_frechet_m"].best == (0,)


coordinate = st.floats(0, 1000, allow_nan=False).map(lambda v: round(v, 1))
pixel_points = st.lists(st.tuples(coordinate, coordinate), min_size=2, max_size=5)
ahead = st.tuples(st.floats(-3, 3), st.floats(0.2, 2), st.floats(0.3, 8)).map(
    lambda p: (round(p[0], 3), round(p[1], 3), round(p[2], 3))
)


@settings(max_examples=80, deadline=None)
@given(
    label_points=pixel_points,
    other=st.one_of(st.none(), pixel_points),
    answer_points=pixel_points,
    path=st.lists(ahead, min_size=1, max_size=6),
    path_px=st.lists(st.tuples(coordinate, coordinate), min_size=1, max_size=6),
    size=st.sampled_from([(640, 480), (1000, 1000), (320, 237)]),
    height=st.floats(0.2, 2.0),
    pitch=st.floats(-10, 45),
    on_ground=st.booleans(),
)
@example(  # the hand-computed case
    label_points=list(STRAIGHT),
    other=None,
    answer_points=list(STRAIGHT),
    path=list(RIGHT_PATH),
    path_px=list(RIGHT_PX),
    size=(SIDE, SIDE),
    height=1.0,
    pitch=0.0,
    on_ground=True,
)
def test_the_grade_is_handoff_scoring_on_the_recorded_path(
    label_points: list[tuple[float, float]],
    other: list[tuple[float, float]] | None,
    answer_points: list[tuple[float, float]],
    path: list[tuple[float, float, float]],
    path_px: list[tuple[float, float]],
    size: tuple[int, int],
    height: float,
    pitch: float,
    on_ground: bool,
) -> None:
    """Differential: the grade's handoff values are handoff/scoring's on the record's path, its pixels and
    the labelled trajectory of the answer's name (a label of another name beside it is not the one)."""
    items = [{"point_2d": list(p), "label": NAME} for p in label_points]
    if other is not None:
        items = [{"point_2d": list(p), "label": "other"} for p in other] + items
    label = labels(json.dumps(items)).labels[0]
    r = record("drive_path", 1.0, points_text(answer_points, NAME), "points", width=size[0], height=size[1])
    r = replace(r, handoff=handoff(path=tuple(path), path_px=tuple(path_px)))
    ground = HandoffGround(
        Intrinsics.from_k([400, 0, size[0] / 2, 0, 400, size[1] / 2, 0, 0, 1], size[0], size[1]),
        GroundPlane.from_degrees(height, pitch),
        PathLimits(0.1, 3.0, 1.5, 6.0),
    )
    g = grade(0, r, label, ground=(lambda _r: ground) if on_ground else None)
    labelled = next(t for t in label.answers[0].trajectories if t.label == NAME)
    expected = (
        score_path_against_label(
            path, path_px, labelled, size, ground.intrinsics, ground.plane, ground.limits
        )
        if on_ground
        else score_path_against_label(path, path_px, labelled, size)
    )
    assert g.values["handoff_frechet_px"] == pytest.approx(expected.frechet_px, abs=1e-9)
    if not on_ground:
        assert "handoff_frechet_m" not in g.values
        assert g.pixels_only == "the camera's intrinsics and the run's ground plane are not known"
    elif expected.frechet_m is None:
        assert "handoff_frechet_m" not in g.values and g.pixels_only == expected.label_problem != ""
    else:
        assert g.values["handoff_frechet_m"] == pytest.approx(expected.frechet_m, abs=1e-9)
        assert g.pixels_only == ""
    assert g.values["handoff_passed"] == 1.0


def _node_path(
    points: list[tuple[float, float]], size: tuple[int, int], ground: HandoffGround
) -> BasePath | str:
    """The path the node's handoff makes of an answer (handoff/ground_path), as a rehearsal records it."""
    parsed = parse_answer(points_text(points, NAME), "points", *size)
    clip = ClipSummary("camera", 0, 0, 1, 1.0, size[0], size[1], size)
    outcome = Outcome(
        "r",
        "drive_path",
        "",
        True,
        parsed=parsed,
        answer_camera="camera",
        image_width=size[0],
        image_height=size[1],
        clips=(clip,),
    )
    return ground_path(outcome, ground.intrinsics, ground.plane, ground.limits, "camera_optical")


below_horizon = st.tuples(st.floats(0, 1000), st.floats(560, 1000)).map(
    lambda p: (round(p[0], 1), round(p[1], 1))
)


@settings(max_examples=60, deadline=None)
@given(
    points=st.lists(below_horizon, min_size=2, max_size=6),
    size=st.sampled_from([(640, 480), (1000, 1000), (320, 237)]),
    height=st.floats(0.3, 1.5),
    pitch=st.floats(0, 30),
    spacing=st.sampled_from([0.05, 0.1, 0.25, 0.5]),
)
@example(  # issue 38, finding 8: a perfect drive_path answer scored handoff_frechet_px 1.14
    points=[(500.0, 750.0), (560.0, 690.0), (520.0, 640.0)],
    size=(640, 480),
    height=1.0,
    pitch=10.0,
    spacing=0.1,
)
def test_an_answer_equal_to_its_label_scores_0_on_every_distance(
    points: list[tuple[float, float]], size: tuple[int, int], height: float, pitch: float, spacing: float
) -> None:
    """The oracle needs no arithmetic: the same trajectory as answer and label is no distance, in pixels and
    on the ground, whatever the handoff did to it (resampled, cropped, projected back to the image)."""
    ground = HandoffGround(
        Intrinsics.from_k([400, 0, size[0] / 2, 0, 400, size[1] / 2, 0, 0, 1], size[0], size[1]),
        GroundPlane.from_degrees(height, pitch),
        PathLimits(spacing, 3.0, 50.0, 50.0),
    )
    sent = _node_path(points, size, ground)
    assume(not isinstance(sent, str) and sent.pixels)
    assert not isinstance(sent, str)
    label = labels(points_text(points, NAME)).labels[0]
    r = record("drive_path", 1.0, points_text(points, NAME), "points", width=size[0], height=size[1])
    r = replace(r, handoff=handoff(path=sent.points, path_px=sent.pixels))
    g = grade(0, r, label, ground=lambda _r: ground)
    distances = {k: v for k, v in g.values.items() if k.endswith(("_px", "_m"))}
    assert {"ade_px", "fde_px", "frechet_px", "handoff_frechet_px", "handoff_frechet_m"} <= set(distances)
    assert all(v == pytest.approx(0.0, abs=1e-6) for v in distances.values()), distances
