"""A run judged against its baseline compares each task's answers by the task's own answer kind (the run's
catalog, preflight.answer_kinds): a regions answer (region_captions) by its boxes' IoU and its captions'
similarity, not by the IoU of its boxes alone as if it were a boxes answer."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.bag.judge.compare import judge
from cosmos_reasoner_ros.bag.judge.tolerances import Tolerances
from cosmos_reasoner_ros.bag.records import CameraBox, ResultRecord
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions
from cosmos_reasoner_ros.bag.replay.preflight import answer_kinds
from cosmos_reasoner_ros.bag.runs.finish import finish_run
from cosmos_reasoner_ros.geometry.shapes import Box2D

W, H = 1000, 500
# Two vocabularies without a word in common: a caption of one and a caption of the other share no word.
_BASE_WORDS = ("red", "mug", "chipped", "rim", "on", "table")
_OTHER_WORDS = ("blue", "bottle", "cap", "beside", "sink", "tiled")


def _region(n: int, caption: str) -> CameraBox:
    """Region n: a box of its own column (regions apart, so each pairs with its own partner)."""
    x1, x2 = 100.0 * n, 100.0 * n + 80.0
    return CameraBox(Box2D(caption, x1, 100.0, x2, 300.0, x1, 50.0, x2, 150.0), "camera", W, H)


def _record(regions: tuple[CameraBox, ...]) -> ResultRecord:
    return ResultRecord(
        task="region_captions", trigger_s=2.0, success=True, answer="regions", latency_s=1.0, boxes=regions
    )


def test_the_catalog_names_region_captions_a_regions_task() -> None:
    kinds = answer_kinds(EvalOptions())
    assert kinds["region_captions"] == "regions"
    assert kinds["grounding_2d"] == "boxes"  # a boxes task stays one


def _changed(captions: list[tuple[list[str], list[str], bool]]) -> tuple[ResultRecord, ResultRecord]:
    """(baseline, current): each region keeps its box; its caption stays (similarity 1) or becomes words of
    the other vocabulary (similarity 0)."""
    base = tuple(_region(n, " ".join(words)) for n, (words, _, _) in enumerate(captions))
    cur = tuple(
        replace(r, box=replace(r.box, label=" ".join(other))) if changed else r
        for r, (_, other, changed) in zip(base, captions, strict=True)
    )
    return _record(base), _record(cur)


@settings(max_examples=50, deadline=None)
@given(
    captions=st.lists(
        st.tuples(
            st.lists(st.sampled_from(_BASE_WORDS), min_size=1, max_size=4),
            st.lists(st.sampled_from(_OTHER_WORDS), min_size=1, max_size=4),
            st.booleans(),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_regions_with_the_same_boxes_are_compared_by_their_captions(
    captions: list[tuple[list[str], list[str], bool]],
) -> None:
    base, cur = _changed(captions)
    kept = [not changed for _, _, changed in captions]
    [request] = judge([cur], Tolerances(), [base], answer_kinds(EvalOptions())).requests
    assert request.metrics["box_iou_min"] == 1.0 and request.metrics["box_iou_mean"] == 1.0
    assert request.metrics["caption_similarity_mean"] == sum(kept) / len(kept)
    assert request.metrics["caption_similarity_min"] == (1.0 if all(kept) else 0.0)


def test_the_run_judges_with_the_kinds_it_is_given(tmp_path: Path) -> None:
    """finish_run hands the run's kinds to the judge: verdict.json has the captions' figures."""
    base, cur = _changed([(["red", "mug"], ["blue", "bottle"], True), (["chipped", "rim"], ["cap"], False)])
    result = finish_run([cur], tmp_path, {}, Tolerances(), [base], kinds=answer_kinds(EvalOptions()))
    [request] = result.verdict.requests
    assert request.metrics["caption_similarity_mean"] == 0.5
    written = json.loads((tmp_path / "verdict.json").read_text())
    assert written["requests"][0]["metrics"] == request.metrics


@pytest.mark.ros
def test_evaluate_results_against_a_baseline_compares_region_captions(tmp_path: Path) -> None:
    """`evaluate --results RECORDED --baseline`: the verb hands the catalog's kinds to the judge, so recorded
    region_captions answers whose boxes match the baseline's but whose captions do not score 0 similarity."""
    from rclpy.serialization import serialize_message
    from support.interface_samples import sample_result

    from cosmos_reasoner_ros.bag.cli import main
    from cosmos_reasoner_ros.bag.files.typestore import typestore
    from cosmos_reasoner_ros.bag.files.writer import open_writer
    from cosmos_reasoner_ros.bag.records import load_records, write_records

    recorded = tmp_path / "recorded"
    writer = open_writer(recorded)
    conn = writer.add_topic("/reasoner_node/result", "cosmos_reasoner_ros/msg/ReasonerResult", typestore())
    for i in range(2):
        msg = sample_result("regions")
        msg.task = "region_captions"
        msg.boxes[0].label = "a red cube on the table"
        msg.clip_end.sec += i
        writer.write(conn, 1_800_000_000_000_000_000 + i * 1_000_000_000, serialize_message(msg))
    writer.close()
    first = tmp_path / "first"
    assert main(["evaluate", "--results", str(recorded), "-o", str(first)]) == 0
    # The baseline: the same answers, the second one's caption in other words (its box unchanged).
    records = load_records(first)
    other = replace(
        records[1].boxes[0], box=replace(records[1].boxes[0].box, label="blue bottle beside sink")
    )
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    write_records([records[0], replace(records[1], boxes=(other,))], baseline / "results.jsonl")
    second = tmp_path / "second"
    assert main(["evaluate", "--results", str(recorded), "-o", str(second), "--baseline", str(baseline)]) == 0
    metrics = [r["metrics"] for r in json.loads((second / "verdict.json").read_text())["requests"]]
    assert [m["box_iou_mean"] for m in metrics] == [1.0, 1.0]
    assert [m["caption_similarity_mean"] for m in metrics] == [1.0, 0.0]
