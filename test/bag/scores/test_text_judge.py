"""The optional text judge against the scripted OpenAI-compatible server: its verdicts become judge_match,
every prompt and reply is recorded (judge.jsonl), one question per distinct answer, and unclear replies,
failing or unreachable servers leave answers unjudged without stopping the scoring."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from support.labelled import failed, record
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.labels import bind_labels, labels_from_text
from cosmos_reasoner_ros.bag.scores import JudgeSettings, TextJudge, read_verdict, score_run, write_scores

LABELS = labels_from_text(
    "labels:\n"
    "  - task: next_action\n"
    "    between: [0, 10]\n"
    "    answers: [Put the bottle in the box., Place the bottle in the box.]\n"
)


def candidate(body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    return prompt.split("Model answer:\n", 1)[1].split("\n\nDoes the model answer", 1)[0]


def judge_reply(body: dict[str, Any]) -> ScriptedReply:
    answer = candidate(body)
    if "maybe" in answer:
        return ScriptedReply(text="It is hard to say.")
    if "box" in answer:
        return ScriptedReply(text="<think>\nboth put it in the box\n</think>\n\nYes.")
    return ScriptedReply(text="No, they differ.")


def test_verdicts_prompts_and_replies(tmp_path: Path) -> None:
    records = [
        record("next_action", 1.0, "Drop the bottle into the box.", "text"),
        record("next_action", 2.0, "Drop the bottle into the box.", "text"),  # asked once
        record("next_action", 3.0, "Wave at the camera.", "text"),
        record("next_action", 4.0, "maybe grasp it", "text"),
        failed("next_action", 5.0),
    ]
    with ScriptedServer(judge_reply) as server:
        judge = TextJudge(JudgeSettings(server.base_url))
        scores = score_run(records, bind_labels([LABELS], ["robot"]), judge=judge)
        asked = list(server.requests)
    assert len(asked) == 3  # one question per distinct answer
    assert all(body["model"] == "scripted" and body["temperature"] == 0.0 for body in asked)
    values = {g.position: g.values["judge_match"] for g in scores.grades}
    assert values[0] == values[1] == 1.0 and values[2] == 0.0 and values[4] == 0.0
    assert values[3] != values[3]  # unjudged: NaN, left out of the share
    metric = scores.tasks["next_action"].metrics["judge_match"]
    assert metric.value == pytest.approx(2 / 4)
    assert scores.tasks["next_action"].metrics["match"].value == 0.0  # the words alone never match
    write_scores(scores, tmp_path, records, ["labels.yaml"])
    lines = [json.loads(line) for line in (tmp_path / "judge.jsonl").read_text().splitlines()]
    assert [(j["request"], j["same"]) for j in lines] == [(1, True), (2, True), (3, False), (4, None)]
    assert "- Put the bottle in the box.\n- Place the bottle in the box." in lines[0]["prompt"]
    assert lines[0]["reply"].endswith("Yes.") and lines[0]["model"] == "scripted"
    summary = json.loads((tmp_path / "scores.json").read_text())["judge"]
    assert summary == {"model": "scripted", "asked": 4, "unjudged": 1, "file": "judge.jsonl"}


def test_a_failing_or_missing_judge_leaves_answers_unjudged() -> None:
    records = [record("next_action", 1.0, "Drop the bottle into the box.", "text")]
    with ScriptedServer(default=ScriptedReply(status=500, error_message="judge broke")) as server:
        scores = score_run(
            records, bind_labels([LABELS], ["robot"]), judge=TextJudge(JudgeSettings(server.base_url))
        )
    (j,) = scores.judged
    assert j.answer.same is None and "InternalServerError" in j.answer.error and j.answer.reply == ""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    settings = JudgeSettings(f"http://127.0.0.1:{port}/v1", model="any", timeout_s=2.0)
    scores = score_run(records, bind_labels([LABELS], ["robot"]), judge=TextJudge(settings))
    assert scores.judged[0].answer.same is None and "Connection" in scores.judged[0].answer.error
    assert scores.tasks["next_action"].metrics["judge_match"].value is None


def test_judge_settings_and_replies() -> None:
    with pytest.raises(BagError, match="must not contain credentials") as caught:
        JudgeSettings("http://user:s3cret@127.0.0.1:8000/v1")
    assert "s3cret" not in str(caught.value)
    with pytest.raises(BagError, match="http:// or https://"):
        JudgeSettings("file:///etc/passwd")
    assert read_verdict("Yes") is True
    assert read_verdict("<think>\nno idea yet\n</think>\n\nno.") is False
    assert read_verdict("**Yes**, the same meaning") is True
    assert read_verdict("Not the same.") is False
    assert read_verdict("The answers differ.") is None
    assert read_verdict("") is None
