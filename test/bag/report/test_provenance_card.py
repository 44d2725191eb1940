"""A record's provenance (issue 38, finding 3) in results.jsonl, on its HTML card and in the verdict: read
back as written, an old file's run-wide `frames_refused` read as the bag's count, a damaged clip's card
saying what its window lost instead of a plain "success", and the bag's count judged once."""

from __future__ import annotations

import json
from pathlib import Path

from cosmos_reasoner_ros.bag.judge.compare import judge
from cosmos_reasoner_ros.bag.judge.tolerances import Tolerances
from cosmos_reasoner_ros.bag.records import CameraProvenance, ResultRecord, load_records, write_records
from cosmos_reasoner_ros.bag.report.html import provenance_text, write_html

CAMERA = "/cam/color/image_raw/compressed"


def damaged(trigger_s: float = 15.0) -> ResultRecord:
    window = CameraProvenance(
        CAMERA, 11.0, 15.0, 40, refused_s=(13.4, 13.5, 13.6), out_of_order_s=(14.0,), missing=2
    )
    return ResultRecord(
        task="next_action",
        trigger_s=trigger_s,
        success=True,
        answer="move left",
        bag="robot",
        clip_end_ns=1,
        clip_frames=17,
        frames_expected=17,
        frames_refused=3,
        bag_frames_refused=29,
        provenance=(window,),
        clip_lag_s=1.8,
        clip_stale=True,
    )


def test_provenance_reads_back_as_written(tmp_path: Path) -> None:
    record = damaged()
    write_records([record], tmp_path / "results.jsonl")
    assert load_records(tmp_path) == [record]
    data = json.loads((tmp_path / "results.jsonl").read_text())
    assert data["provenance"][0]["refused_s"] == [13.4, 13.5, 13.6] and data["clip_stale"] is True


def test_a_file_written_before_provenance_keeps_its_run_count_as_the_bags(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text(
        json.dumps({"task": "t", "bag": "b", "frames_refused": 29}) + "\n"
    )
    (old,) = load_records(tmp_path)
    assert old.bag_frames_refused == 29 and old.frames_refused == 0 and not old.clip_damaged


def test_the_card_of_a_damaged_clip_says_what_its_window_lost(tmp_path: Path) -> None:
    clean = ResultRecord(task="next_action", trigger_s=5.0, success=True, answer="ok", bag="robot")
    assert provenance_text(clean) == "" and not clean.clip_damaged
    text = provenance_text(damaged())
    assert text == (
        f"3 frames refused, 1 frame out of order, 2 frames not recorded in this clip's window of {CAMERA} "
        "(11.00-15.00 s); clip ends 1.80 s before its trigger"
    )
    page = write_html([clean, damaged()], tmp_path, [], "t").read_text()
    assert page.count("<span class='ok'>success</span>") == 1  # the clean one only
    assert "<span class='warn'>success on a damaged clip</span>" in page
    assert "clip ends 1.80 s before its trigger" in page
    # The run's totals: the sum of the per-answer counts, beside the node's count for the bag.
    assert "3 frames refused in the answers&#x27; clip windows" not in page  # the text is not escaped twice
    assert (
        "3 frames refused in the answers' clip windows (summed over answers) · 29 refused by the node" in page
    )


def test_the_bags_count_is_judged_once_not_the_sum_of_windows() -> None:
    records = [damaged(5.0), damaged(15.0)]
    refused = next(c for c in judge(records, Tolerances()).aggregate if c.name == "frames_refused")
    assert refused.value == 29 and not refused.passed
