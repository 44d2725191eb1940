"""A scenario's `labels:` and `min_scores:`: read and checked when the scenario loads, inside the suite's
folder, one labels file per bag; merged with the command line's scoring options."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import CONFIG

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.runs.scenario import load_scenario
from cosmos_reasoner_ros.bag.runs.scoring import RunScoring
from cosmos_reasoner_ros.bag.scores import MinScore, ScoreOptions

LABELS = "labels: [{task: next_action, at: 1, answer: go}]\n"


def suite(tmp_path: Path, body: str, bags: tuple[str, ...] = ("a",)) -> Path:
    for bag in bags:
        (tmp_path / bag).mkdir(parents=True, exist_ok=True)
        (tmp_path / bag / "metadata.yaml").write_text("")
    (tmp_path / "a.labels.yaml").write_text(LABELS)
    (tmp_path / "b.labels.yaml").write_text("bag: b\n" + LABELS)
    path = tmp_path / "s.yaml"
    listed = ", ".join(bags)
    path.write_text(f"bags: [{listed}]\ngoals: [{{task: next_action, at: 1}}]\n{body}")
    return path


def test_labels_and_thresholds_load_with_the_scenario(tmp_path: Path) -> None:
    s = load_scenario(suite(tmp_path, "labels: a.labels.yaml\nmin_scores: {next_action.match: 0.7}\n"))
    assert [len(lb.labels) for lb in s.labels] == [1] and s.labels[0].source.endswith("a.labels.yaml")
    assert s.min_scores == (MinScore("next_action", "match", 0.7),)
    base = RunScoring((), (MinScore("caption", "match", 0.5),), ScoreOptions())
    scoring = s.scoring(base)
    assert scoring is not None and scoring.labels == s.labels and scoring.options == ScoreOptions()
    assert scoring.min_scores == (MinScore("next_action", "match", 0.7), MinScore("caption", "match", 0.5))
    plain = load_scenario(suite(tmp_path / "p", ""))
    assert plain.scoring(None) is None
    assert plain.scoring(base) == base  # thresholds without labels: they fail, rather than pass unseen


def test_several_bags_take_a_mapping(tmp_path: Path) -> None:
    s = load_scenario(suite(tmp_path, "labels: {a: a.labels.yaml, b: b.labels.yaml}\n", ("a", "b")))
    assert [lb.bag for lb in s.labels] == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("labels: a.labels.yaml\n", "names no bag"),  # two bags, a file for neither
        ("labels: {c: a.labels.yaml}\n", "is not a bag of the scenario"),
        ("labels: {a: b.labels.yaml}\n", "is for another bag"),
        ("labels: [a.labels.yaml]\n", "labels must be a labels file, or a mapping"),
        (f"labels: {CONFIG / 'labels_example.yaml'}\n", "inside the suite's folder"),
        ("labels: ../x.yaml\n", "inside the suite's folder"),
        ("labels: missing.yaml\n", "cannot read the labels file"),
        ("labels: {a: a.labels.yaml}\nmin_scores: [next_action.match]\n", "min_scores must be a mapping"),
        ("labels: {a: a.labels.yaml}\nmin_scores: {next_action.match: high}\n", "must be a number"),
        ("labels: {a: a.labels.yaml}\nmin_scores: {next_action.speed: 1}\n", "unknown metric"),
    ],
)
def test_bad_scoring_keys_are_refused_when_the_scenario_loads(tmp_path: Path, body: str, says: str) -> None:
    with pytest.raises(BagError, match=says):
        load_scenario(suite(tmp_path, body, ("a", "b")))
