"""results.jsonl's `stages`: each record carries its ReasonerResult's stages, kept through the JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("rclpy", reason="needs rclpy (the ROS 2 Kilted wheels)")
from cosmos_reasoner_ros.msg import ReasonerResult, Stage

from cosmos_reasoner_ros.bag.records import ResultRecord, load_records, record_from_msg, write_records

STAGES = {"clip_ready": 0.012, "encoding": 0.031, "request_sent": 0.002, "published": 0.0004}


def test_a_record_carries_the_results_stages_through_results_jsonl(tmp_path: Path) -> None:
    msg = ReasonerResult(request_id="r-1", task="next_action", success=True)
    msg.stages = [Stage(name=n, seconds=s) for n, s in STAGES.items()]
    record = record_from_msg(msg, trigger_s=1.5, bag="b")
    assert record.stages == STAGES and list(record.stages) == list(STAGES)  # in the message's order
    path = tmp_path / "results.jsonl"
    write_records([record], path)
    assert json.loads(path.read_text().splitlines()[0])["stages"] == STAGES
    back = load_records(path)[0]
    assert back == record and list(back.stages) == list(STAGES)


def test_records_without_stages_have_none() -> None:
    """A recording of an older node (no stages field) and a results.jsonl written before them."""
    old = ReasonerResult(request_id="r-2", task="caption")
    plain = SimpleNamespace(**{k: getattr(old, k) for k in old.get_fields_and_field_types() if k != "stages"})
    assert record_from_msg(plain).stages == {}
    assert ResultRecord.from_dict({"request_id": "r-2"}).stages == {}
