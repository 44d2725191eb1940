"""Which request a label is about: by bag, task, instruction, step and trigger time; the most specific label
wins and the others are said; a label no request matched and a task the run never asked are reported; labels
files bind to the run's bags or are refused before anything runs. A generated sequence of labels and requests
checked against a brute-force oracle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.labelled import failed, record

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels import LabelSet, bind_labels, labels_from_text, match_labels

LABELS = """
labels:
  - {task: next_action, at: [2.0, 4.0], answer: go}
  - {task: next_action, at: 2.0, instruction: pack the box, answer: pack}
  - {task: trajectory, between: [1.0, 3.0], answer: '[[1, 2], [3, 4]]'}
  - {task: trajectory, at: 9.0, answer: '[[1, 2]]'}
  - {task: caption, at: 1.0, answer: a table}
  - {task: next_action, at: 6.0, tolerances: {time_s: 0.5}, answer: late}
"""


def test_requests_meet_their_labels() -> None:
    labels = labels_from_text(LABELS, "robot.yaml")
    records = [
        record("next_action", 2.0, "go", "text"),
        record("next_action", 2.0, "pack", "text", instruction="pack the box"),
        record("next_action", 2.04, "go", "text", instruction="other"),  # within the default 0.05 s
        record("next_action", 4.1, "go", "text"),  # beyond it: no label
        record("trajectory", 1.5, "[[1, 2]]", "points"),
        record("trajectory", 3.0, "[[1, 2]]", "points"),
        failed("trajectory", 3.5),
        record("next_action", 6.4, "late", "text"),  # the label's own time_s 0.5
        record("grounding_2d", 1.0, "[[1, 2, 30, 40]]", "boxes"),
    ]
    m = match_labels(records, bind_labels([labels], ["robot"]))
    found = {lb.position: lb.label.index for lb in m.labelled}
    assert found == {0: 0, 1: 1, 2: 0, 4: 2, 5: 2, 7: 5}
    # the general label also fits request #2, the specific one wins and that is said
    assert (
        len(m.ambiguous) == 1
        and "request #2" in m.ambiguous[0]
        and "labels[1] (line 4) is used" in m.ambiguous[0]
    )
    assert [(source, label.index) for source, label in m.unmatched] == [("robot.yaml", 3)]
    assert m.unasked == (("robot.yaml", "caption"),)
    assert m.unlabelled == {"grounding_2d": 1, "next_action": 1, "trajectory": 1}
    problems = m.problems()
    assert "robot.yaml: labels[3] (line 6) (trajectory at 9 s): no request of this run matched it" in problems
    assert "robot.yaml: task caption is labelled but this run did not ask it" in problems


def test_labels_files_bind_to_the_runs_bags() -> None:
    named = labels_from_text("bag: shelf\nlabels: []", "shelf.yaml")
    unnamed = labels_from_text("labels: []", "any.yaml")
    assert bind_labels([unnamed], ["robot"]) == {"robot": unnamed}
    assert bind_labels([named], ["shelf", "robot"]) == {"shelf": named}
    assert bind_labels([named], [""]) == {"": named}  # recorded results name no bag
    with pytest.raises(BagError, match="names no bag"):
        bind_labels([unnamed], ["a", "b"])
    with pytest.raises(BagError, match="for a bag this run does not replay"):
        bind_labels([named], ["robot"])
    with pytest.raises(BagError, match="for a bag this run does not replay"):
        bind_labels([named], ["a", "b"])
    with pytest.raises(BagError, match="are both for one bag"):
        bind_labels([named, unnamed], ["shelf"])


def test_records_of_other_bags_are_unlabelled() -> None:
    labels = labels_from_text("bag: a\nlabels: [{task: next_action, at: 1, answer: go}]", "a.yaml")
    records = [
        record("next_action", 1.0, "go", "text", bag="a"),
        record("next_action", 1.0, "go", "text", bag="b"),
    ]
    m = match_labels(records, bind_labels([labels], ["a", "b"]))
    assert [lb.position for lb in m.labelled] == [0] and m.unlabelled == {"next_action": 1}
    assert m.unasked == () and m.unmatched == ()


times = st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.02, 1.5, 2.0, 2.5]), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["next_action", "caption"]),
            st.one_of(times, st.tuples(st.sampled_from([0.0, 1.0]), st.sampled_from([1.0, 2.0]))),
            st.sampled_from([None, "", "x"]),
        ),
        max_size=6,
    ),
    st.lists(
        st.tuples(
            st.sampled_from(["next_action", "caption"]),
            st.sampled_from([0.0, 0.5, 1.0, 1.04, 2.0, 3.0]),
            st.sampled_from(["", "x", "y"]),
        ),
        max_size=8,
    ),
)
def test_matching_agrees_with_a_brute_force_oracle(
    labels_spec: list[tuple[str, object, str | None]], requests: list[tuple[str, float, str]]
) -> None:
    items = []
    for task, when, instruction in labels_spec:
        key = f"at: {list(when)}" if isinstance(when, list) else f"between: {list(when)}"
        extra = "" if instruction is None else f", instruction: '{instruction}'"
        items.append(f"  - {{task: {task}, {key}{extra}, answer: go}}\n")
    labels = labels_from_text("labels:\n" + "".join(items) if items else "labels: []", "gen.yaml")
    records = [record(task, t, "go", "text", instruction=instr) for task, t, instr in requests]
    m = match_labels(records, {"robot": LabelSet(labels.labels, "", "gen.yaml")})

    def fits(i: int, j: int) -> bool:  # the oracle: every label checked against every request
        task, t, instr = requests[i]
        label = labels.labels[j]
        when = labels_spec[j][1]
        near = (
            (when[0] - 0.05 <= t <= when[1] + 0.05)
            if isinstance(when, tuple)
            else any(abs(t - a) <= 0.05 for a in when)
        )
        return label.task == task and near and (label.instruction is None or label.instruction == instr)

    chosen = {lb.position: lb.label.index for lb in m.labelled}
    for i in range(len(requests)):
        candidates = [j for j in range(len(labels.labels)) if fits(i, j)]
        if not candidates:
            assert i not in chosen
            continue
        assert chosen[i] in candidates
        best = min(
            candidates,
            key=lambda j: (labels.labels[j].instruction is None, isinstance(labels_spec[j][1], tuple), j),
        )
        assert chosen[i] == best
    used = set(chosen.values())
    asked = {task for task, _, _ in requests}
    assert {lb.index for _, lb in m.unmatched} == {
        j for j, lb in enumerate(labels.labels) if lb.task in asked and j not in used
    }
    assert {task for _, task in m.unasked} == {lb.task for lb in labels.labels} - asked
