"""`labels draft`: a run's answers become a labels file in each task's own answer form; read back and scored
against the same run it scores perfectly (generated answers of every kind); requests without an answer are
listed, not drafted; the command refuses to overwrite hand-edited labels."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.labelled import boxes_text, failed, points_text, record, segments_text

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels import bind_labels, draft_labels, labels_from_text
from cosmos_reasoner_ros.bag.records import write_records
from cosmos_reasoner_ros.bag.scores import score_run

coordinate = st.floats(0, 1000, allow_nan=False).map(lambda v: round(v, 1))
point = st.tuples(coordinate, coordinate)
box = st.tuples(coordinate, coordinate, coordinate, coordinate).filter(
    lambda b: abs(b[0] - b[2]) >= 1 and abs(b[1] - b[3]) >= 1
)
seconds = st.floats(0, 60, allow_nan=False).map(lambda v: round(v, 2))
segment = st.tuples(seconds, seconds).map(sorted).map(tuple)
words = st.text(
    st.characters(codec="utf-8", categories=("L", "N", "Zs", "P")), min_size=1, max_size=60
).filter(lambda t: t.strip() and "</think>" not in t and "<answer>" not in t)

answer = st.one_of(
    st.lists(point, min_size=1, max_size=8).map(lambda p: ("trajectory", points_text(p), "points")),
    st.lists(box, min_size=1, max_size=3).map(lambda b: ("grounding_2d", boxes_text(b), "boxes")),
    st.lists(segment, min_size=1, max_size=4).map(
        lambda s: ("temporal_localization", segments_text(s), "segments")
    ),
    st.sampled_from("ABCDE").map(lambda c: ("plausibility", f"({c}) because", "choice")),
    words.map(lambda t: ("next_action", t, "text")),
)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(answer, st.sampled_from(["", "pick it up", "a: b # c"])), min_size=1, max_size=12))
def test_a_drafted_file_scores_its_own_run_perfectly(items: list[tuple[tuple[str, str, str], str]]) -> None:
    records = [
        record(task, round(0.25 * (i + 1), 2), text, kind, instruction=instruction)
        for i, ((task, text, kind), instruction) in enumerate(items)
    ]
    text = draft_labels(records, "run")
    labels = labels_from_text(text, "drafted.yaml")
    assert len(labels.labels) == len(records) and labels.bag == "robot"
    scores = score_run(records, bind_labels([labels], ["robot"]))
    assert len(scores.grades) == len(records)
    perfect = {
        "accuracy": 1.0,
        "mean_iou": 1.0,
        "iou50": 1.0,
        "ade_px": 0.0,
        "fde_px": 0.0,
        "frechet_px": 0.0,
        "mean_tiou": 1.0,
        "tiou50": 1.0,
        "match": 1.0,
        "similarity": 1.0,
        "answered": 1.0,
    }
    for task_scores in scores.tasks.values():
        for name, interval in task_scores.metrics.items():
            if name in perfect:
                assert interval.value == pytest.approx(perfect[name], abs=1e-9), (name, text)
                if interval.low is None:  # too few answers, or all alike: said, not a zero-width interval
                    assert interval.too_few or "alike" in interval.note, (name, interval)
                else:  # a share of 1.0 (Wilson): certain only as far as n says
                    assert interval.low < interval.value == interval.high == 1.0


def test_what_could_not_be_drafted_is_listed_and_keys_are_the_tasks_own() -> None:
    records = [
        record("trajectory", 2.0, points_text([(512, 430), (600, 430.5)]), "points", instruction="pick"),
        failed("trajectory", 4.0),
        record("next_action", 2.0, "Move left.", "text", step="reach"),
        record("next_action", 2.0, "Move left again.", "text", step="reach"),  # the same request twice: once
        record("my_own_task", 3.0, boxes_text([(1, 2, 30, 40)]), "boxes"),
    ]
    text = draft_labels(records, "out/run/results.jsonl")
    assert "# not drafted (no answer): #2 trajectory at 4 s: timeout" in text
    data = yaml.safe_load(text)
    assert data["version"] == 1 and data["bag"] == "robot"
    assert data["labels"] == [
        {
            "task": "trajectory",
            "at": 2,
            "instruction": "pick",
            "answer": '[{"point_2d": [512, 430], "label": "gripper trajectory"}, '
            '{"point_2d": [600, 430.5], "label": "gripper trajectory"}]',
        },
        {"task": "next_action", "at": 2, "step": "reach", "answer": "Move left."},
        {
            "task": "my_own_task",
            "kind": "boxes",
            "at": 3,
            "answer": '[{"bbox_2d": [1, 2, 30, 40], "label": "cup"}]',
        },
    ]


def test_a_run_of_several_bags_drafts_one_bag() -> None:
    records = [
        record("next_action", 1.0, "go", "text", bag="a"),
        record("next_action", 1.0, "stop", "text", bag="b"),
    ]
    with pytest.raises(BagError, match=r"choose one with --bag \(a, b\)"):
        draft_labels(records)
    assert yaml.safe_load(draft_labels(records, bag="b"))["labels"][0]["answer"] == "stop"
    with pytest.raises(BagError, match="no bag of that name"):
        draft_labels(records, bag="c")


def test_the_command_drafts_checks_and_never_overwrites(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_records([record("plausibility", 6.0, "<answer>A</answer>", "choice")], run / "results.jsonl")
    out = tmp_path / "labels.yaml"
    assert main(["labels", "draft", str(run), "-o", str(out)]) == 0
    assert "1 labels from 1 requests" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["labels"] == [{"task": "plausibility", "at": 6, "answer": "A"}]
    out.write_text(out.read_text() + "# reviewed by hand\n")
    assert main(["labels", "draft", str(run), "-o", str(out)]) == 2
    assert "exists; labels are edited by hand" in capsys.readouterr().err
    assert out.read_text().endswith("# reviewed by hand\n")
    assert main(["labels", "draft", str(run), "-o", str(out), "--force"]) == 0
    assert main(["labels", "check", str(out)]) == 0
    assert "1 labels for bag robot; by task: plausibility 1" in capsys.readouterr().out
    assert main(["labels", "draft", str(tmp_path / "none"), "-o", str(tmp_path / "x.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["labels", "check", str(tmp_path / "none.yaml")]) == 2
