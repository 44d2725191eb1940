"""scores.json in exactly the issue's form, read back; labelled.jsonl; thresholds as checks (a floor for a
score, a ceiling for a distance, a failing check for a task without labelled requests); exact, noisy and wrong
answers of every kind score perfectly, in between and near zero."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.labelled import generated_run

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels import bind_labels, labels_from_text
from cosmos_reasoner_ros.bag.scores import (
    Interval,
    ScoreOptions,
    TaskScores,
    parse_min_score,
    read_scores,
    score_checks,
    score_run,
    write_scores,
)


def scored(requests: int, noise: float, wrong: bool = False, seed: int = 0):  # type: ignore[no-untyped-def]
    run = generated_run(requests, noise, seed, wrong=wrong)
    labels = labels_from_text(run.labels_text, "generated.yaml")
    return run, score_run(run.records, bind_labels([labels], ["robot"]), ScoreOptions())


def test_scores_json_has_exactly_the_issues_form(tmp_path: Path) -> None:
    run, scores = scored(50, 0.1)
    path = write_scores(scores, tmp_path, run.records, ["generated.yaml"])
    data = json.loads(path.read_text())
    assert set(data["tasks"]) == {
        "trajectory",
        "grounding_2d",
        "temporal_localization",
        "plausibility",
        "next_action",
    }
    names = {
        "trajectory": {"ade_px", "fde_px", "frechet_px"},
        "grounding_2d": {"mean_iou", "iou50"},
        "temporal_localization": {"mean_tiou", "tiou50"},
        "plausibility": {"accuracy"},
        "next_action": {"match", "similarity"},
    }
    for task, body in data["tasks"].items():
        assert set(body) == {"n", "metrics"} and body["n"] == 10
        common = {"answered", "latency_p50_s", "latency_p95_s", "completion_tokens"}
        assert set(body["metrics"]) == names[task] | common
        for name, metric in body["metrics"].items():
            assert set(metric) == {"value", "low", "high", "n", "note"} and isinstance(metric["value"], float)
            has_interval = isinstance(metric["low"], float) and isinstance(metric["high"], float)
            # 10 answers: every interval but a p95's (which needs 72) and those of answers all alike
            assert has_interval == (metric["note"] == ""), (task, name, metric)
            assert has_interval or name == "latency_p95_s" or "alike" in metric["note"]
    assert data["confidence"] == 0.95 and data["intervals"] == {
        "shares": "wilson",
        "means": "student-t",
        "percentiles": "order-statistics",
        "min_n": 10,
    }
    assert data["labels"]["labelled_requests"] == 50 and data["labels"]["not_scored"] == []
    assert read_scores(tmp_path) == {
        task: TaskScores(body["n"], {m: Interval(**i) for m, i in body["metrics"].items()})
        for task, body in data["tasks"].items()
    }
    lines = [json.loads(line) for line in (tmp_path / "labelled.jsonl").read_text().splitlines()]
    assert len(lines) == 50 and lines[0]["request"] == 1 and lines[0]["label"] == "labels[0] (line 3)"
    assert not (tmp_path / "judge.jsonl").exists()


def test_exact_answers_score_perfectly_wrong_ones_near_zero_noisy_ones_between() -> None:
    _, exact = scored(100, 0.0)
    _, noisy = scored(100, 0.3)
    _, wrong = scored(100, 0.0, wrong=True)

    def v(scores, task: str, metric: str) -> float:  # type: ignore[no-untyped-def]
        value = scores.tasks[task].metrics[metric].value
        assert value is not None
        return float(value)

    for task, metric in (
        ("grounding_2d", "mean_iou"),
        ("grounding_2d", "iou50"),
        ("temporal_localization", "mean_tiou"),
        ("plausibility", "accuracy"),
        ("next_action", "match"),
    ):
        assert v(exact, task, metric) == 1.0
        assert v(wrong, task, metric) <= 0.05, (task, metric)
        assert v(wrong, task, metric) < v(noisy, task, metric) < 1.0, (task, metric)
    assert v(exact, "trajectory", "ade_px") == 0.0
    assert 0.0 < v(noisy, "trajectory", "ade_px") < v(wrong, "trajectory", "ade_px")
    exact_iou = exact.tasks["grounding_2d"].metrics["mean_iou"]
    assert exact_iou.low is None and "alike" in exact_iou.note  # no zero-width interval as certainty
    exact_share = exact.tasks["grounding_2d"].metrics["iou50"]  # Wilson: 20 of 20 is not certainty either
    assert exact_share.low is not None and 0.8 < exact_share.low < 1.0 and exact_share.high == 1.0
    noisy_iou = noisy.tasks["grounding_2d"].metrics["mean_iou"]
    assert noisy_iou.low is not None and noisy_iou.high is not None and noisy_iou.low < noisy_iou.high < 1.0


def test_thresholds_are_checks() -> None:
    _, scores = scored(25, 0.2)
    checks = score_checks(
        scores.tasks,
        [
            parse_min_score("grounding_2d.mean_iou=0.2"),
            parse_min_score("trajectory.ade_px=1"),
            parse_min_score("trajectory.latency_p95_s=10"),
            parse_min_score("caption.match=0.5"),
            parse_min_score("plausibility.mean_iou=0.5"),
        ],
    )
    by = {c.name: c for c in checks}
    assert by["score[grounding_2d.mean_iou]"].op == ">=" and by["score[grounding_2d.mean_iou]"].passed
    assert by["score[trajectory.ade_px]"].op == "<=" and not by["score[trajectory.ade_px]"].passed
    assert by["score[trajectory.ade_px]"].unit == " px"
    assert by["score[trajectory.latency_p95_s]"].passed
    assert (
        not by["score[caption.match]"].passed
        and by["score[caption.match]"].value == "no labelled request of the task"
    )
    assert (
        not by["score[plausibility.mean_iou]"].passed
        and by["score[plausibility.mean_iou]"].value == "no value"
    )
    assert "score[trajectory.ade_px]" in by["score[trajectory.ade_px]"].describe()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("trajectory", "takes TASK.METRIC=VALUE"),
        ("ade_px=3", "takes TASK.METRIC=VALUE"),
        ("trajectory.ade=3", "unknown metric 'ade'"),
        ("trajectory.ade_px=x", "trajectory.ade_px: expected a number"),
        ("trajectory.ade_px=nan", "expected a finite number"),
        ("trajectory.ade_px=inf", "expected a finite number"),
    ],
)
def test_a_bad_threshold_is_refused(text: str, says: str) -> None:
    with pytest.raises(BagError, match=says):
        parse_min_score(text)


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"tasks": []}',
        '{"tasks": {"t": {"n": 1}}}',
        '{"tasks": {"t": {"n": -1, "metrics": {}}}}',
        '{"tasks": {"t": {"n": 1, "metrics": {"m": {"value": 1}}}}}',
        '{"tasks": {"t": {"n": 1, "metrics": {"m": {"value": "1", "low": 1, "high": 1}}}}}',
        '{"tasks": {"t": {"n": 1, "metrics": {"m": {"value": Infinity, "low": 1, "high": 1}}}}}',
    ],
)
def test_a_file_not_in_the_form_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "scores.json"
    path.write_text(content)
    with pytest.raises(BagError, match="is not a scores file of cosmos-reasoner-bag"):
        read_scores(path)


def test_nan_never_reaches_the_file(tmp_path: Path) -> None:
    run = generated_run(5, 0.0)
    labels = labels_from_text(run.labels_text)
    failed_only = [
        r.__class__(task=r.task, trigger_s=r.trigger_s, bag="robot", error_kind="timeout")
        for r in run.records
    ]
    scores = score_run(failed_only, bind_labels([labels], ["robot"]))
    text = write_scores(scores, tmp_path, failed_only, []).read_text()
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    assert data["tasks"]["trajectory"]["metrics"]["ade_px"] == {
        "value": None,
        "low": None,
        "high": None,
        "n": 0,
        "note": "",
    }
    assert data["tasks"]["plausibility"]["metrics"]["accuracy"]["value"] == 0.0
    assert not math.isnan(data["tasks"]["plausibility"]["metrics"]["answered"]["value"])
