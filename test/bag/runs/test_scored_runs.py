"""Scored runs end to end, reasoner_node replaying the robot clip against scripted servers, with the labels
written for the clip (config/labels_example.yaml): answering exactly the labels scores perfectly, answering
wrong scores near zero, answering with known noise lands in between and in that order on the leaderboard a
scenario's sweep writes; thresholds are JUnit cases; the report draws each label beside its answer; a drafted
labels file scores its own run perfectly; distances also in metres where the bag has depth."""

from __future__ import annotations

import json
import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.reports import validate
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.labels import load_labels
from cosmos_reasoner_ros.package_files import config_file

pytestmark = [pytest.mark.ros, pytest.mark.slow]

OLD_START = 1_700_000_000_000_000_000
LABELS = config_file("labels_example.yaml")
GOALS = """goals:
  - {task: next_action, at: [2.0, 6.0]}
  - {task: trajectory, instruction: put the white package in the cardboard box, at: 2.0}
  - {task: grounding_2d, instruction: the cardboard box, at: [2.0, 6.0]}
  - {task: grounding_2d, instruction: the white package with the spoons, at: [2.0, 6.0]}
  - {task: temporal_localization, at: 6.0}
  - {task: plausibility, at: 6.0}
"""
TASK_ARGS = [
    "--task",
    "next_action",
    "--task",
    "trajectory:put the white package in the cardboard box",
    "--task",
    "grounding_2d:the cardboard box",
    "--task",
    "grounding_2d:the white package with the spoons",
    "--task",
    "temporal_localization",
    "--task",
    "plausibility",
]


@pytest.fixture(scope="module")
def robot_bag(robot_clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bag = tmp_path_factory.mktemp("scored") / "robot_clip"
    make_bag([robot_clip], bag, MakeOptions(start_ns=OLD_START, rate_hz=10.0, depth="plane", depth_m=2.0))
    return bag  # 644x476 at 10 Hz over 6.4 s, CameraInfo and a depth plane at 2 m


def prompt(body: dict[str, Any]) -> str:
    parts = body["messages"][-1]["content"]
    return " ".join(p.get("text", "") for p in parts if isinstance(p, dict))


class LabelServer:
    """Answers each request with its label (by task, instruction and, for next_action, the order of the
    triggers: lock-step asks the 2.0 s questions before the 6.0 s ones), moved by `noise` or made wrong."""

    def __init__(self, noise: float = 0.0, wrong: bool = False) -> None:
        self.noise, self.wrong = noise, wrong
        self.labels = load_labels(LABELS).labels
        self.asked: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.server = ScriptedServer(self.reply)

    def label_for(self, text: str) -> Any:
        for task, needle in (
            ("trajectory", "2D trajectory"),
            ("grounding_2d", "bounding box of"),
            ("temporal_localization", "List all action segments"),
            ("plausibility", "physically plausible"),
            ("next_action", "next immediate action"),
        ):
            if needle in text:
                mine = [lb for lb in self.labels if lb.task == task and (lb.instruction or "") in text]
                with self.lock:
                    self.asked[task] += 1
                    n = self.asked[task]
                return mine[min(n - 1, len(mine) - 1)] if task == "next_action" else mine[0]
        raise AssertionError(f"no label for the prompt {text[:80]!r}")

    def reply(self, body: dict[str, Any]) -> ScriptedReply:
        """The answer a server holding the request's schema sends (the node sends it: structured_output is
        on by default): integers in 0-1000, a caption per segment, a choice as {"answer": letter}."""
        label = self.label_for(prompt(body))
        answer = label.answers[0]
        if label.kind == "points":
            pts = [(p.x_norm, p.y_norm) for p in answer.trajectories[0].points]
            shift = 400 if self.wrong else self.noise * 100
            text = json.dumps(
                [{"point_2d": [round(min(x + shift, 1000)), round(y)], "label": "gripper"} for x, y in pts]
            )
        elif label.kind == "boxes":
            b = answer.boxes[0]
            w, h = b.x2_norm - b.x1_norm, b.y2_norm - b.y1_norm
            dx, dy = (-b.x1_norm, 1000 - b.y2_norm) if self.wrong else (w * self.noise, h * self.noise)
            box = [b.x1_norm + dx, b.y1_norm + dy, min(b.x2_norm + dx, 1000), min(b.y2_norm + dy, 1000)]
            if self.wrong:
                box = [0, 0, 40, 40] if b.x1_norm > 300 else [900, 900, 1000, 1000]
            text = json.dumps([{"bbox_2d": [round(v) for v in box], "label": b.label}])
        elif label.kind == "segments":
            shift = 3.0 if self.wrong else self.noise * 2
            text = json.dumps(
                [
                    {"start": s.start_s + shift, "end": s.end_s + shift, "caption": "e"}
                    for s in answer.segments
                ]
            )
        elif label.kind == "choice":
            text = json.dumps({"answer": "B" if self.wrong else answer.choice})
        else:
            words = answer.answer.split()
            text = "Wave at the camera." if self.wrong else " ".join(words[:-3] if self.noise else words)
        return ScriptedReply(text=f"<think>\nscripted\n</think>\n\n{text}")


def scenario_file(tmp_path: Path, bag: Path, urls: list[str]) -> Path:
    """A suite folder whose scenario names its bag (through a link in the folder) and its labels inside it."""
    path = tmp_path / "suite" / "robot.yaml"
    (path.parent / "bags").mkdir(parents=True)
    (path.parent / "bags" / bag.name).symlink_to(bag)
    shutil.copy(LABELS, path.parent / "robot.labels.yaml")
    path.write_text(
        f"name: robot\nbags: [bags/{bag.name}]\n{GOALS}labels: robot.labels.yaml\n"
        "min_scores: {grounding_2d.mean_iou: 0.5}\n"
        f"params: {{max_retries: 0}}\nsweep: {{parameter: server_url, values: {json.dumps(urls)}}}\n"
    )
    return path


def test_exact_noisy_and_wrong_answers_on_the_leaderboard_of_a_sweep(robot_bag: Path, tmp_path: Path) -> None:
    exact, noisy, wrong = LabelServer(), LabelServer(noise=0.15), LabelServer(wrong=True)
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    with exact.server, noisy.server, wrong.server:
        urls = [exact.server.base_url, noisy.server.base_url, wrong.server.base_url]
        rc = main(
            [
                "scenario",
                str(scenario_file(tmp_path, robot_bag, urls)),
                "-o",
                str(out),
                "--junit",
                str(junit),
                "--no-progress",
                "--timeout",
                "60",
                "--bootstrap-rounds",
                "500",
            ]
        )
    assert rc == 1  # the wrong server's boxes miss the threshold; nothing else fails
    board = json.loads((out / "robot" / "leaderboard.json").read_text())
    names = [r["run"] for r in board["runs"]]
    assert len(names) == 3 and all(n.startswith("server_url=") for n in names)
    runs = dict(zip(("exact", "noisy", "wrong"), board["runs"], strict=True))

    def value(run: str, task: str, metric: str) -> float:
        return float(runs[run]["tasks"][task]["metrics"][metric]["value"])

    perfect = {
        ("next_action", "match"): 1.0,
        ("grounding_2d", "mean_iou"): 1.0,
        ("grounding_2d", "iou50"): 1.0,
        ("temporal_localization", "mean_tiou"): 1.0,
        ("plausibility", "accuracy"): 1.0,
        ("trajectory", "ade_px"): 0.0,
        ("trajectory", "fde_px"): 0.0,
        ("trajectory", "frechet_px"): 0.0,
        ("trajectory", "ade_m"): 0.0,
    }
    for (task, metric), v in perfect.items():
        assert value("exact", task, metric) == pytest.approx(v, abs=1e-9), (task, metric)
    for task, metric in (
        ("grounding_2d", "mean_iou"),
        ("temporal_localization", "mean_tiou"),
        ("next_action", "similarity"),
    ):
        assert value("exact", task, metric) > value("noisy", task, metric) > value("wrong", task, metric), (
            task,
            metric,
        )
        assert value("wrong", task, metric) < 0.35
    assert value("wrong", "plausibility", "accuracy") == 0.0 and value("wrong", "next_action", "match") == 0.0
    for metric in ("ade_px", "fde_px", "frechet_px", "ade_m", "fde_m", "frechet_m"):
        assert (
            value("exact", "trajectory", metric)
            < value("noisy", "trajectory", metric)
            < value("wrong", "trajectory", metric)
        )
    # 15 units of 1000 across the image the node sent; on the 2 m depth plane with a 60° horizontal field of
    # view (fx = width / 2 / tan 30°): 15 / 1000 * 2 * 2 * tan 30° = 0.0346 m
    noisy_dir = out / "robot" / names[1]
    width = json.loads((noisy_dir / "results.jsonl").read_text().splitlines()[1])["trajectories"][0]["width"]
    assert value("noisy", "trajectory", "ade_px") == pytest.approx(15 / 1000 * width, abs=0.01)
    assert value("noisy", "trajectory", "ade_m") == pytest.approx(2 * 2 * 0.57735 * 15 / 1000, rel=0.02)
    columns = {(c["task"], c["metric"]): c for c in board["columns"]}
    # 4 requests (or 1) a run: fewer than MIN_N answers, so nothing is ranked (issue 38): no best, no claim
    for key in (("grounding_2d", "mean_iou"), ("plausibility", "accuracy"), ("trajectory", "ade_px")):
        assert columns[key]["best"] == [] and columns[key]["not_significant"] == [], key
        assert columns[key]["too_few"] == names, key
    # each run's own scores.json is the leaderboard's row
    exact_dir = out / "robot" / names[0]
    assert json.loads((exact_dir / "scores.json").read_text())["tasks"] == runs["exact"]["tasks"]
    assert json.loads((exact_dir / "scores.json").read_text())["labels"]["not_scored"] == []
    # thresholds as JUnit cases: one per run, the wrong one failing
    validate(junit)
    xml = junit.read_text()
    assert xml.count('name="score[grounding_2d.mean_iou]"') == 3
    verdict = json.loads((out / "robot" / names[2] / "verdict.json").read_text())
    assert [c["name"] for c in verdict["aggregate"] if not c["passed"]] == ["score[grounding_2d.mean_iou]"]
    # the report: the scores section, each label beside its answer, on the frame for trajectories and boxes
    page = (exact_dir / "index.html").read_text()
    assert "Scores against the labels" in page and page.count("<div class='label'>") == 9
    assert len(list((exact_dir / "images").glob("label_*"))) == 5
    assert (out / "robot" / "leaderboard.html").is_file() and (out / "robot" / "leaderboard.md").is_file()


def test_evaluate_with_labels_a_draft_and_a_leaderboard(robot_bag: Path, tmp_path: Path) -> None:
    server = LabelServer(noise=0.15)
    run, junit = tmp_path / "run", tmp_path / "junit.xml"
    with server.server:
        rc = main(
            [
                "evaluate",
                str(robot_bag),
                "-o",
                str(run),
                "--lock-step",
                "--at",
                "2.0,6.0",
                *TASK_ARGS,
                "--server-url",
                server.server.base_url,
                "--labels",
                str(LABELS),
                "--no-progress",
                "--min-score",
                "trajectory.ade_px=20",
                "--min-score",
                "caption.match=0.5",
                "--junit",
                str(junit),
                "-p",
                "max_retries:=0",
            ]
        )
    assert rc == 1  # caption was never labelled nor asked: its threshold fails rather than passing unseen
    scores = json.loads((run / "scores.json").read_text())
    assert scores["tasks"]["trajectory"]["n"] == 1 and scores["tasks"]["grounding_2d"]["n"] == 4
    # every task is asked at both times; three are labelled at one of them only
    unlabelled = {"plausibility": 1, "temporal_localization": 1, "trajectory": 1}
    assert scores["labels"]["unlabelled_requests"] == unlabelled
    verdict = json.loads((run / "verdict.json").read_text())
    checks = {c["name"]: c["passed"] for c in verdict["aggregate"]}
    assert checks["score[trajectory.ade_px]"] and not checks["score[caption.match]"]
    validate(junit)
    # a draft of this run, read back, scores the run perfectly
    drafted = tmp_path / "drafted.yaml"
    assert main(["labels", "draft", str(run), "-o", str(drafted)]) == 0
    assert len(load_labels(drafted).labels) == 12 and load_labels(drafted).bag == "robot_clip"
    board = tmp_path / "board"
    assert main(["leaderboard", str(run), "-o", str(board), "--labels", str(drafted)]) == 0
    row = json.loads((board / "leaderboard.json").read_text())["runs"][0]["tasks"]
    assert row["grounding_2d"]["metrics"]["mean_iou"]["value"] == 1.0
    assert row["trajectory"]["metrics"]["ade_px"]["value"] == 0.0
    assert row["next_action"]["metrics"]["match"]["value"] == 1.0


def test_recorded_results_are_scored_against_labels(robot_bag: Path, tmp_path: Path) -> None:
    """`evaluate --results RECORDED --labels`: results recorded on a robot (ReasonerResult messages in a
    bag, trigger times from the recording's start) scored like a replay's, drawn on the camera's frames."""
    from rclpy.serialization import serialize_message
    from support.interface_samples import sample_result

    from cosmos_reasoner_ros.bag.files.typestore import typestore
    from cosmos_reasoner_ros.bag.files.writer import open_writer
    from cosmos_reasoner_ros.node.ros_conversion import ns_to_time

    recorded = tmp_path / "recorded"
    writer = open_writer(recorded)
    conn = writer.add_topic("/reasoner_node/result", "cosmos_reasoner_ros/msg/ReasonerResult", typestore())
    for i in range(3):
        msg = sample_result(f"answer {i}")  # trajectory (500, 250) -> (100, 100) on a 644x476 image
        msg.clip_end = ns_to_time(OLD_START + (i + 1) * 1_000_000_000)
        writer.write(conn, 1_800_000_000_000_000_000 + i * 1_000_000_000, serialize_message(msg))
    writer.close()
    labels = tmp_path / "labels.yaml"
    labels.write_text(
        "labels:\n"
        "  - {task: trajectory, at: [0, 1], answer: '[[500, 250], [100, 100]]'}\n"
        "  - {task: trajectory, at: 2, answer: '[[600, 250], [200, 100]]'}\n"
        "  - {task: caption, at: 2, answer: a table}\n"
    )
    out = tmp_path / "report"
    rc = main(
        ["evaluate", str(robot_bag), "--results", str(recorded), "-o", str(out), "--labels", str(labels)]
    )
    assert rc == 0
    scores = json.loads((out / "scores.json").read_text())
    ade = scores["tasks"]["trajectory"]["metrics"]["ade_px"]
    assert scores["tasks"]["trajectory"]["n"] == 3
    assert ade["value"] == pytest.approx(64.4 / 3)  # the third 100 units (64.4 px of 644) off
    assert scores["labels"]["not_scored"] == [
        f"{labels}: task caption is labelled but this run did not ask it"
    ]
    assert len(list((out / "images").glob("label_*"))) == 3
