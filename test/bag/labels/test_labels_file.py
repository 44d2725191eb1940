"""Labels files: every answer kind read through the project's parser, times and spans, tolerances; and every
kind of bad file refused with its line, never echoing the file's content (generated files carry a secret)."""

from __future__ import annotations

import contextlib
import os
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.paths import ROOT

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels import MAX_FILE_BYTES, labels_from_text, load_labels
from cosmos_reasoner_ros.reasoner import TaskCatalog

EXAMPLE = ROOT / "config" / "labels_example.yaml"
SECRET = "hunter2-Zq9x"


def test_the_shipped_example_reads_every_kind() -> None:
    labels = load_labels(EXAMPLE)
    kinds = {label.task: label.kind for label in labels.labels}
    assert kinds == {
        "next_action": "text",
        "trajectory": "points",
        "grounding_2d": "boxes",
        "temporal_localization": "segments",
        "plausibility": "choice",
    }
    trajectory = next(lb for lb in labels.labels if lb.task == "trajectory")
    points = trajectory.answers[0].trajectories[0].points
    assert [(p.x_norm, p.y_norm) for p in points] == [(795, 525), (700, 330), (560, 300), (420, 440)]
    assert trajectory.instruction == "put the white package in the cardboard box"
    spoons = [lb for lb in labels.labels if lb.task == "grounding_2d"][1]
    assert spoons.at == (2.0, 6.0) and spoons.tolerances.iou_min == 0.3
    assert spoons.tolerances.match_min == 0.6  # the file's default, kept where the label says nothing
    choice = next(lb for lb in labels.labels if lb.task == "plausibility")
    assert choice.answers[0].choice == "A"
    segments = next(lb for lb in labels.labels if lb.kind == "segments").answers[0].segments
    assert [(s.start_s, s.end_s) for s in segments] == [(0.0, 2.75), (2.75, 4.0)]
    assert labels.labels[0].line == 29 and labels.labels[0].where == "labels[0] (line 29)"


def test_answers_in_yaml_structure_times_spans_and_own_kinds() -> None:
    text = """
version: 1
bag: shelf
labels:
  - task: grounding_2d
    between: [1, 3.5]
    answers:
      - [{bbox_2d: [10, 20, 300, 400], label: cup}]
      - '[{"bbox_2d": [12, 22, 310, 390], "label": "mug"}]'
  - task: my_task
    kind: choice
    at: [1, 2]
    instruction: ""
    answer: "(B) it falls"
  - task: timestamp_query
    at: 4
    answer: '{"start": "00:01.50", "end": "00:03.00"}'
"""
    labels = labels_from_text(text)
    assert labels.bag == "shelf"
    box, own, stamp = labels.labels
    assert box.between == (1.0, 3.5) and box.at == () and len(box.answers) == 2
    assert box.covers(1.0) and box.covers(3.5) and not box.covers(3.6)
    assert box.instruction is None and box.fits("grounding_2d", "anything", "")
    assert own.kind == "choice" and own.answers[0].choice == "B" and own.instruction == ""
    assert own.fits("my_task", "", "") and not own.fits("my_task", "x", "")
    assert (stamp.answers[0].segments[0].start_s, stamp.answers[0].segments[0].end_s) == (1.5, 3.0)


def test_a_task_catalog_of_ones_own_gives_the_kind() -> None:
    catalog = TaskCatalog.from_dict(
        {
            "profiles": {
                "p": dict.fromkeys(
                    ("temperature", "top_p", "top_k", "repetition_penalty", "presence_penalty", "max_tokens"),
                    1,
                )
            },
            "tasks": {
                "shelf_gap": {
                    "template": "Where?",
                    "media": "image",
                    "reasoning": False,
                    "answer_kind": "boxes",
                    "profile": "p",
                }
            },
        }
    )
    labels = labels_from_text("labels: [{task: shelf_gap, at: 1, answer: '[[1, 2, 30, 40]]'}]", "x", catalog)
    assert labels.labels[0].kind == "boxes"
    with pytest.raises(BagError, match=r"line 1: labels\[0\]: the task is not in the task catalog"):
        labels_from_text("labels: [{task: next_action, at: 1, answer: go}]", "x", catalog)


# (file text with the SECRET where a careless message would show it, what the message says, its line)
BAD = [
    (f"{SECRET}: 1\n", "the file: unknown key", 1),
    ("labels: {}\n", "labels must be a list", 1),
    (f"version: 2\nlabels: []\n#{SECRET}\n", "version must be 1", 1),
    (f"labels:\n  - task: next_action\n    at: 1\n    answer: go\n    {SECRET}: x\n", "unknown key", 5),
    (f"labels:\n  - task: {SECRET}\n    at: 1\n    answer: go\n", "not in the task catalog", 2),
    (f"labels:\n  - task: trajectory\n    at: 1\n    answer: '{SECRET}'\n", "not a points answer", 4),
    (f"labels:\n  - task: grounding_2d\n    at: 1\n    answer: '[[1, 2, 1, {SECRET}]]'\n", "not a boxes", 4),
    (f"labels:\n  - task: plausibility\n    at: 1\n    answer: '{SECRET}'\n", "not a choice answer", 4),
    (f"labels:\n  - task: temporal_localization\n    at: 1\n    answer: '{SECRET}'\n", "not a segments", 4),
    ("labels:\n  - task: next_action\n    at: -1\n    answer: go\n", r"labels\[0\].at must be >= 0", 3),
    (f"labels:\n  - task: next_action\n    at: {SECRET}\n    answer: go\n", "a finite number", 3),
    ("labels:\n  - task: next_action\n    at: .nan\n    answer: go\n", "a finite number", 3),
    ("labels:\n  - task: next_action\n    between: [3, 1]\n    answer: go\n", "ends before it starts", 3),
    ("labels:\n  - task: next_action\n    at: 1\n    between: [0, 2]\n    answer: go\n", "one of them", 2),
    ("labels:\n  - task: next_action\n    answer: go\n", "bag time", 2),
    ("labels:\n  - task: next_action\n    at: 1\n", "give `answer`", 2),
    ("labels:\n  - task: next_action\n    at: 1\n    answers: []\n", "at least one answer", 4),
    ("labels:\n  - task: next_action\n    at: 1\n    answer: '  '\n", "is empty", 4),
    ("labels:\n  - {task: next_action, at: 1, answer: go, tolerances: {iou_min: 1.5}}\n", "must be 0-1", 2),
    (
        f"labels:\n  - {{task: next_action, at: 1, answer: go, tolerances: {{{SECRET}: 1}}}}\n",
        "unknown key",
        2,
    ),
    ("labels:\n  - task: next_action\n    task: caption\n    at: 1\n    answer: go\n", "given twice", 3),
    (f"a: &{SECRET} [1]\nb: *{SECRET}\n", "anchors", 1),
    (f"labels: [\n  '{SECRET}\n", "unexpected end", 3),
    (f"labels:\n\t- {SECRET}\n", "cannot start any token", 2),
    (f'labels: ["\\{SECRET[0]}"]\n', "unknown escape character", 1),
    (f"labels:\n  - task: next_action\n    at: 1\n    answer: !!python/object:os.system {SECRET}\n", "", 4),
    ("", "is empty", 0),
    (f"- {SECRET}\n", "the file must be a mapping", 1),
]


@pytest.mark.parametrize("libyaml", [True, False], ids=["libyaml", "python"])
@pytest.mark.parametrize(("text", "says", "line"), BAD)
def test_a_bad_file_is_refused_with_its_line_and_never_its_content(
    text: str, says: str, line: int, libyaml: bool
) -> None:
    with pytest.raises(BagError) as caught:
        labels_from_text(text, "labels.yaml", libyaml=libyaml)
    message = str(caught.value)
    assert SECRET not in message and SECRET[:6] not in message
    assert message.startswith("labels file labels.yaml")
    if says:
        assert pytest.importorskip("re").search(says, message), message
    if line:
        assert f"line {line}" in message, message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(
            [
                "labels:",
                "\n",
                "  - ",
                "task: ",
                "next_action",
                "trajectory",
                "at: ",
                "1",
                "[",
                "]",
                "{",
                "}",
                ",",
                ":",
                "'",
                '"',
                "answer: ",
                "answers:",
                "between: ",
                "&a ",
                "*a",
                "!!str ",
                "\t",
                "#",
                "version: 1",
                "bag: ",
                "tolerances: ",
                "iou_min: ",
                "-",
                "\\",
                "point_2d",
                SECRET,
            ]
        ),
        max_size=40,
    ).map("".join)
)
@example('labels:\n  - task: trajectory\n    at: 1\n    answer: \'[{"point_2d": [' + SECRET + ", 2]}]'\n")
def test_generated_files_load_or_fail_without_quoting_them(text: str) -> None:
    """Whatever the file holds, loading ends in labels or a BagError that quotes none of it, and libyaml's
    loader and PyYAML's own agree on which (a differential test of the two paths)."""
    outcomes = []
    for libyaml in (True, False):
        try:
            outcomes.append(labels_from_text(text, "gen.yaml", libyaml=libyaml))
        except BagError as exc:
            assert SECRET not in str(exc) and "Zq9x" not in str(exc)
            outcomes.append(None)
    assert outcomes[0] == outcomes[1]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.printable + "äé€\u2028\x00\x85", max_size=200))
@example("\x0c")  # a character YAML refuses when the loader starts (found by this test)
@example("labels: []\n\x00")
def test_any_text_loads_or_fails_cleanly(text: str) -> None:
    for libyaml in (True, False):
        with contextlib.suppress(BagError):  # anything else (a YAML or Python exception) fails the test
            labels_from_text(text, "gen.yaml", libyaml=libyaml)


def test_only_a_regular_utf8_file_of_bounded_size_is_read(tmp_path: Path) -> None:
    with pytest.raises(BagError, match="not a regular file"):
        load_labels(tmp_path)
    with pytest.raises(BagError, match="not a regular file"):
        load_labels(Path("/dev/zero"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BagError, match="not a regular file"):  # opening it would block forever
        load_labels(fifo)
    with pytest.raises(BagError, match="cannot read the labels file"):
        load_labels(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(BagError, match="larger than 16 MiB"):
        load_labels(big)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(f"labels: []\n# {SECRET} \xe9\n".encode("latin-1"))
    with pytest.raises(BagError, match=r"not UTF-8 text \(byte") as caught:
        load_labels(latin)
    assert SECRET not in str(caught.value)
    secret = tmp_path / "secret.yaml"
    secret.write_text(f"password: {SECRET}\n")
    with pytest.raises(BagError) as caught:
        load_labels(secret)
    assert SECRET not in str(caught.value) and "password" not in str(caught.value)
