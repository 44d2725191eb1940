"""The regions kind ("describe anything", reasoner/kinds/regions.py) and its shipped task region_captions:
what it reads and refuses (cut and incomplete answers as every structured kind does, a region without a
caption unlike boxes), its grades by hand (IoU pairing, caption similarity), a labels file of regions read,
drafted from a run and scored, and a run compared with its baseline."""

from __future__ import annotations

import json

import pytest
from support.labelled import record

from cosmos_reasoner_ros.bag.judge.compare import answer_metrics
from cosmos_reasoner_ros.bag.labels import bind_labels, draft_labels, labels_from_text
from cosmos_reasoner_ros.bag.scores import grade, score_run
from cosmos_reasoner_ros.errors import IncompleteAnswer, ParseError, SchemaViolation
from cosmos_reasoner_ros.reasoner import KINDS, TaskCatalog, parse_answer

W, H = 640, 480
TASK = "region_captions"
SCHEMA = TaskCatalog.load().spec(TASK).json_schema
MUG = {"bbox_2d": [100, 200, 300, 400], "caption": "a red mug with a chipped rim"}
PLATE = {"bbox_2d": [500, 500, 700, 600], "caption": "an empty white plate"}


def regions(*items: dict[str, object]) -> str:
    return json.dumps(list(items))


# ---- parsing ---


def test_regions_are_boxes_with_their_captions_in_pixels() -> None:
    text = f"<think>\nTwo things.\n</think>\n\n```json\n{regions(MUG, PLATE)}\n```"
    parsed = parse_answer(text, "regions", W, H, schema=None)
    assert parsed.answer_kind == "regions" and not parsed.trajectories and not parsed.segments
    assert [b.label for b in parsed.boxes] == ["a red mug with a chipped rim", "an empty white plate"]
    mug = parsed.boxes[0]
    assert (mug.x1, mug.y1, mug.x2, mug.y2) == (64.0, 96.0, 192.0, 192.0)
    # the same answer under the task's schema (structured output): one JSON value, accepted
    strict = parse_answer(regions(MUG, PLATE), "regions", W, H, schema=SCHEMA)
    assert strict.boxes == parse_answer(regions(MUG, PLATE), "regions", W, H).boxes


@pytest.mark.parametrize(
    ("item", "caption"),
    [
        ({"bbox": [300, 400, 100, 200], "description": " a mug "}, "a mug"),  # other keys, corners swapped
        ({"box": [[100, 200], [300, 400]], "text": "a mug"}, "a mug"),
        ({"x1": 100, "y1": 200, "x2": 300, "y2": 400, "label": "a mug"}, "a mug"),
    ],
)
def test_the_forms_models_write(item: dict[str, object], caption: str) -> None:
    box = parse_answer(regions(item), "regions").boxes[0]
    assert (box.label, box.x1_norm, box.y1_norm, box.x2_norm, box.y2_norm) == (caption, 100, 200, 300, 400)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (regions({"bbox_2d": [1, 2, 3, 4]}), "region 1 has no caption"),
        (regions(MUG, {"bbox_2d": [1, 2, 3, 4], "caption": "   "}), "region 2 has no caption"),
        ("[[100, 200, 300, 400]]", "no regions"),  # boxes read a bare array; a region needs its caption
        ('[{"caption": "a mug"}]', "no regions"),
        ("A red mug on the left.", "no regions"),
        (regions({"bbox_2d": [5, 5, 5, 40], "caption": "a line"}), "has no area"),
    ],
)
def test_what_is_not_a_region_is_refused(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why) as err:
        parse_answer(text, "regions", W, H)
    assert err.value.raw == text
    if "caption" in why:  # the same answer is a boxes answer: that is the difference
        assert parse_answer(text, "boxes", W, H).boxes


@pytest.mark.parametrize("schema", [None, SCHEMA])
def test_a_cut_answer_is_refused_at_every_cut(schema: object) -> None:
    """As every structured kind (test_completeness cuts the shipped task's generated answers too): a cut that
    leaves the JSON open is incomplete, never the regions before the cut."""
    whole = regions(MUG, PLATE)
    for cut in range(1, len(whole)):
        with pytest.raises(ParseError) as err:
            parse_answer(whole[:cut], "regions", W, H, finish_reason="stop", schema=schema)  # type: ignore[arg-type]
        assert isinstance(err.value, IncompleteAnswer | SchemaViolation) or "no regions" in str(err.value)


def test_cut_by_the_server_and_blocks_left_open_are_refused() -> None:
    with pytest.raises(ParseError, match="cut off") as err:
        parse_answer(regions(MUG), "regions", finish_reason="length")
    assert err.value.kind == "truncated"
    with pytest.raises(IncompleteAnswer, match="never closed"):
        parse_answer(f"<think>\nr\n</think>\n<answer>\n{regions(MUG)}", "regions", finish_reason="stop")
    with pytest.raises(IncompleteAnswer, match="never closed"):
        parse_answer(f"<think>\nthe mug is {regions(MUG)} and", "regions", finish_reason="stop")


@pytest.mark.parametrize(
    "value",
    [
        [MUG] * 9,  # more regions than the schema allows
        [{"bbox_2d": [1, 2, 3, 4], "caption": " starts blank"}],
        [{"bbox_2d": [1, 2, 3, 4], "caption": "x" * 129}],
        [{"bbox_2d": [1, 2, 3, 4], "label": "a mug"}],  # the caption is required under the schema
    ],
)
def test_the_schema_refuses_what_the_task_does_not_ask(value: object) -> None:
    with pytest.raises(SchemaViolation):
        parse_answer(json.dumps(value), "regions", W, H, schema=SCHEMA)


# ---- grading ---


def _label(*answers: str, tolerances: str = "") -> object:
    tol = f", tolerances: {{{tolerances}}}" if tolerances else ""
    listed = ", ".join(repr(a) for a in answers)
    return labels_from_text(f"labels: [{{task: {TASK}, at: 1, answers: [{listed}]{tol}}}]").labels[0]


def values(answer: str, *truth: str, tolerances: str = "") -> dict[str, float]:
    return grade(0, record(TASK, 1.0, answer, "regions"), _label(*truth, tolerances=tolerances)).values  # type: ignore[arg-type]


def test_regions_by_hand() -> None:
    exact = values(regions(MUG, PLATE), regions(PLATE, MUG))  # order does not matter: paired by IoU
    assert exact["region"] == exact["iou"] == exact["caption_similarity"] == 1.0
    assert exact["iou50"] == exact["caption_match"] == exact["answered"] == 1.0
    # the right place, fewer words: IoU 1, "a red mug" against the label's 7 words: 2 * 3 / (3 + 7)
    moved = values(regions({**MUG, "caption": "a red mug"}), regions(MUG))
    assert moved["iou"] == 1.0 and moved["caption_similarity"] == pytest.approx(0.6)
    assert moved["region"] == pytest.approx(0.6) and moved["caption_match"] == 0.0
    # half the box (IoU 1/2), the same words: the region counts half
    half = values(regions({**MUG, "bbox_2d": [100, 200, 200, 400]}), regions(MUG))
    assert half["iou"] == pytest.approx(0.5) and half["caption_similarity"] == 1.0
    assert half["region"] == pytest.approx(0.5)
    # one of two labelled regions answered: the other counts 0
    one = values(regions(MUG), regions(MUG, PLATE))
    assert one["region"] == one["iou"] == one["caption_similarity"] == pytest.approx(0.5)
    # the words of the plate, but where nothing is: no overlap, so not the plate's caption either
    apart = values(regions({**PLATE, "bbox_2d": [0, 0, 50, 50]}), regions(PLATE))
    assert apart["iou"] == apart["caption_similarity"] == apart["region"] == 0.0


def test_the_best_acceptable_answer_is_the_best_region_score() -> None:
    near = regions({**MUG, "caption": "a red mug"})
    graded = grade(0, record(TASK, 1.0, near, "regions"), _label(regions(PLATE), regions(MUG)))  # type: ignore[arg-type]
    assert graded.best == 1 and graded.values["iou"] == 1.0


def test_tolerances_apply_to_iou_and_caption() -> None:
    near = regions({**MUG, "caption": "a red mug"})
    loose = values(near, regions(MUG), tolerances="match_min: 0.6, iou_min: 0.9")
    assert loose["caption_match"] == 1.0 and loose["iou50"] == 1.0


def test_a_request_without_regions_scores_zero() -> None:
    failed = record(TASK, 1.0, "plain words", "text")
    graded = grade(0, failed, _label(regions(MUG)))  # type: ignore[arg-type]
    assert graded.values["answered"] == 0.0 and graded.values["region"] == 0.0
    assert graded.notes == ("not answered: no regions in the answer",)


# ---- labels: read, drafted from a run, scored ---


def test_a_labels_file_of_regions_is_read_and_a_wrong_one_names_the_form() -> None:
    labels = labels_from_text(
        f"labels:\n  - task: {TASK}\n    at: 2\n    answer: {json.dumps(regions(MUG))}\n"
    )
    (label,) = labels.labels
    assert label.kind == "regions" and label.answers[0].boxes[0].label == MUG["caption"]
    from cosmos_reasoner_ros.bag.errors import BagError

    with pytest.raises(BagError, match=r"is not a regions answer .*\"caption\": "):
        labels_from_text(f"labels:\n  - task: {TASK}\n    at: 2\n    answer: '[[1, 2, 3, 4]]'\n")
    # a task not in the catalog names its kind
    custom = labels_from_text(
        f"labels:\n  - {{task: mine, kind: regions, at: 1, answer: '{regions(MUG)}'}}\n"
    )
    assert custom.labels[0].kind == "regions"


def test_a_drafted_labels_file_scores_its_own_run_perfectly() -> None:
    records = [
        record(TASK, 1.0, regions(MUG, PLATE), "regions"),
        record(TASK, 2.0, regions({**MUG, "bbox_2d": [101.5, 200, 300, 400.25]}), "regions"),
    ]
    text = draft_labels(records, "run")
    assert '"caption": "a red mug with a chipped rim"' in text and "kind:" not in text  # the catalog's task
    labels = labels_from_text(text, "drafted.yaml")
    scores = score_run(records, bind_labels([labels], ["robot"]))
    metrics = scores.tasks[TASK].metrics
    assert list(metrics)[:5] == ["mean_iou", "iou50", "mean_region", "caption_similarity", "caption_match"]
    for name in ("mean_region", "mean_iou", "iou50", "caption_similarity", "caption_match", "answered"):
        assert metrics[name].value == pytest.approx(1.0), name


# ---- a run against its baseline ---


def test_regions_are_compared_by_iou_and_captions() -> None:
    baseline = record(TASK, 1.0, regions(MUG, PLATE), "regions")
    worded = record(TASK, 1.0, regions({**MUG, "caption": "a red mug"}, PLATE), "regions")
    metrics, _ = answer_metrics(baseline, worded, "regions")
    assert metrics["box_iou_min"] == 1.0 and metrics["caption_similarity_min"] == pytest.approx(0.6)
    assert metrics["caption_similarity_mean"] == pytest.approx((0.6 + 1) / 2)
    # without the task's kind the answers are compared by what they hold: boxes
    by_slot, _ = answer_metrics(baseline, worded)
    assert by_slot["box_iou_min"] == 1.0 and "caption_similarity_min" not in by_slot


def test_the_kind_is_in_the_table_with_its_task() -> None:
    kind = KINDS["regions"]
    assert kind.slot == "boxes" and kind.structured and not kind.path and not kind.free_text
    assert TaskCatalog.load().spec(TASK).answer_kind == "regions"
