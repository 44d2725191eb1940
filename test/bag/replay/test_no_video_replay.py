"""The bag tools replay through a server that takes no video (issue 40, item 2): vLLM started with
`--limit-mm-per-prompt '{"image": N, "video": 0}'` refuses every request with a video. `evaluate` against
such a server (the scripted server refusing as vLLM does) must answer every question, with each clip sent as
its frames: by itself (`media_form: auto`: the first clip's videos refused, then frames) or told
(`-p media_form:=frames`). The oracle is the server's own record of what each request carried."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.bag_evaluate import evaluate
from support.scripted_server import ScriptedReply, ScriptedServer, media_counts

from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag

pytestmark = [pytest.mark.ros, pytest.mark.slow]

IMAGES = 4
ANSWER = "<think>\nlooking\n</think>\n\nMove the gripper to the package."


@pytest.fixture(scope="module")
def robot_bag(robot_clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bag = tmp_path_factory.mktemp("no_video") / "robot"
    make_bag([robot_clip], bag, MakeOptions(rate_hz=10.0, max_long_side=320))
    return bag


def reply(body: dict[str, Any]) -> ScriptedReply:
    return ScriptedReply(text=ANSWER)


@pytest.mark.parametrize("form", ["auto", "frames"])
def test_evaluate_answers_every_question_through_a_server_that_takes_no_video(
    robot_bag: Path, tmp_path: Path, form: str
) -> None:
    out = tmp_path / "report"
    with ScriptedServer(reply, mm_limits={"image": IMAGES, "video": 0}) as server:
        rc = evaluate(
            robot_bag,
            out,
            server.base_url,
            "--lock-step",
            "--at",
            "2.0,4.0,6.0",
            "--task",
            "next_action",
            "--task",
            "caption",
            "--no-progress",
            "--timeout",
            "60",
            "-p",
            f"media_form:={form}",
            "-p",
            f"max_image_frames:={IMAGES}",
        )
        carried = [media_counts(body) for body in server.requests]
    log = (out / "node.log").read_text(errors="replace")[-3000:] if (out / "node.log").exists() else ""
    assert rc == 0, log
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(r["success"] for r in records), [r.get("error") for r in records]
    assert all(r["answer"] == "Move the gripper to the package." for r in records)
    answered = [c for c in carried if not c.get("video")]
    assert len(answered) == 6 and all(1 <= c.get("image", 0) <= IMAGES for c in answered), carried
    refused = [c for c in carried if c.get("video")]
    if form == "frames":
        assert not refused, carried
    else:
        # auto: the first clip goes as a video, refused and sent again as frames; its two questions may both
        # be in flight before the first refusal comes back. Every later clip goes as frames at once.
        assert 1 <= len(refused) <= 2 and carried[: len(refused)] == refused, carried
