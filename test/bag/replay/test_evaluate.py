"""bag_evaluate: a bag of the robot clip replayed into reasoner_node (a child process) against the scripted
server gives one result line per trigger, annotated frames and an HTML page whose images exist; the report
from recorded results; bad input exits with 2."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import cv2
import numpy as np
import pytest
import yaml
from support.bag_evaluate import evaluate
from support.bags import read_topics, topic_counts
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.errors import BagError
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.files.typestore import typestore
from cosmos_reasoner_ros.bag.files.writer import open_writer
from cosmos_reasoner_ros.bag.replay.node_process import NodeCamera, node_command, node_parameters
from cosmos_reasoner_ros.bag.replay.plan import EvalOptions, TaskSpec, trigger_times
from cosmos_reasoner_ros.bag.report.frames import FrameIndex
from cosmos_reasoner_ros.bag.runs.suite import evaluate_recorded

OLD_START = 1_700_000_000_000_000_000  # bags recorded in 2023: replays run on their clock

# Two points 0.35 m apart on the bag's 2 m depth plane (60° field of view): within the node's max_step_m
# check, so that each trajectory also becomes a 3D path.
POINTS = (
    '```json\n[{"point_2d": [250, 500], "label": "gripper"},\n'
    ' {"point_2d": [400, 500], "label": "gripper"}]\n```'
)


@pytest.fixture(scope="module")
def robot_bag(robot_clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bag = tmp_path_factory.mktemp("evaluate") / "robot"
    make_bag(
        [robot_clip],
        bag,
        MakeOptions(start_ns=OLD_START, rate_hz=10.0, max_long_side=320, depth="plane", depth_m=2.0),
    )
    return bag  # 65 frames 320x237 over 6.4 s, CameraInfo and a depth plane at 2 m


def prompt_text(body: dict[str, Any]) -> str:
    parts = body["messages"][-1]["content"]
    return " ".join(p.get("text", "") for p in parts if isinstance(p, dict))


def reply_for(body: dict[str, Any]) -> ScriptedReply:
    text = prompt_text(body)
    if "2D trajectory" in text:
        return ScriptedReply(text=f"<think>\nfollow the bottle\n</think>\n\n{POINTS}", chunk_delay_s=0.005)
    if "overall task" in text:
        return ScriptedReply(status=400, error_message="scripted rejection")
    return ScriptedReply(
        text="<think>\nlooking\n</think>\n\nMove the gripper <left> & down.", chunk_delay_s=0.005
    )


class _Srcs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.srcs.append(dict(attrs)["src"] or "")


def image_srcs(index: Path) -> list[str]:
    parser = _Srcs()
    parser.feed(index.read_text())
    return parser.srcs


@pytest.mark.ros
@pytest.mark.slow
def test_live_evaluation_against_the_scripted_server(robot_bag: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    with ScriptedServer(reply_for) as server:
        rc = evaluate(
            robot_bag,
            out,
            server.base_url,
            "--at",
            "2.0,4.5",
            "--task",
            "next_action",
            "--task",
            "trajectory:pick up the bottle",
            "--task",
            "assisted_next_action:pack the box|put the bottle in",
            "--no-progress",
            "--timeout",
            "60",
            "-p",
            "max_retries:=0",
            "--record",
        )
        requests = list(server.requests)
    # The scripted server rejects every assisted_next_action: the run fails on that task's success rate (a
    # request that ends without an answer counts against the run), and on nothing else.
    assert rc == 1, (out / "node.log").read_text()[-3000:]
    verdict = json.loads((out / "verdict.json").read_text())
    assert [c["name"] for c in verdict["aggregate"] if not c["passed"]] == [
        "success_rate[assisted_next_action]"
    ]
    assert verdict["latency_gate"] == "off (latency reported, not judged)"
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6 == len(requests)  # 2 trigger times x 3 tasks, every one answered once
    records = [json.loads(line) for line in lines]
    assert [(r["trigger_s"], r["task"]) for r in records] == [
        (t, task) for t in (2.0, 4.5) for task in ("next_action", "trajectory", "assisted_next_action")
    ]
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_task.setdefault(r["task"], []).append(r)
    for r in by_task["next_action"]:
        assert (
            r["success"] and r["answer"] == "Move the gripper <left> & down." and r["reasoning"] == "looking"
        )
        assert r["latency_s"] > 0 and r["ttft_s"] > 0 and r["model"] == "scripted"
    for r in by_task["trajectory"]:
        assert r["success"] and r["instruction"] == "pick up the bottle"
        assert r["trajectories"][0]["points_norm"] == [[250.0, 500.0], [400.0, 500.0]]
    for r in by_task["assisted_next_action"]:
        assert not r["success"] and r["error_kind"] == "rejected" and "scripted rejection" in r["error"]
    # On the bag's clock (use_sim_time), each request is taken at or after its goal's bag time, and its clip
    # ends at a frame the node had by then, never one from its future. How late goals and frames reached
    # the node depends on the machine; lock-step replay pins the window exactly
    # (test/bag/runs/test_regression.py).
    for r in records:
        trigger_ns = r["trigger_stamp_ns"]
        assert trigger_ns >= OLD_START + r["trigger_s"] * 1e9 - 0.1e9, r  # /clock at 40 Hz: one tick behind
        assert OLD_START < r["clip_end_ns"] <= trigger_ns, r
    # Every record has a frame; the HTML references exactly those files (plus the plots) and they exist.
    srcs = image_srcs(out / "index.html")
    assert sorted(unquote(s) for s in srcs if s.startswith("images/")) == sorted(r["image"] for r in records)
    assert all((out / unquote(s)).is_file() for s in srcs)
    assert {Path(s).name for s in srcs if s.startswith("plots/")} == {
        "latency.png",
        "ttft.png",
        "outcomes.png",
    }
    assert "Move the gripper &lt;left&gt; &amp; down." in (out / "index.html").read_text()
    # The trajectory is drawn: at its first point (250/1000 of the width, the middle row) the annotated frame
    # differs from the bag's frame.
    frames = FrameIndex(robot_bag)
    try:
        raw = frames.frame(by_task["trajectory"][0]["clip_end_ns"])
    finally:
        frames.close()
    assert raw is not None
    drawn = cv2.cvtColor(cv2.imread(str(out / by_task["trajectory"][0]["image"])), cv2.COLOR_BGR2RGB)
    h, w = raw.shape[:2]
    y, x = h // 2, round(w * 0.25)
    assert (
        np.abs(drawn[y - 2 : y + 3, x - 2 : x + 3].astype(int) - raw[y - 2 : y + 3, x - 2 : x + 3]).mean()
        > 40
    )
    # --record kept the node's outputs, and the report rebuilt from them has the same results.
    counts = topic_counts(out / "outputs")
    assert counts["/reasoner_node/result"] == 6
    assert counts["/reasoner_node/next_action"] == 4 and counts["/reasoner_node/annotated_image"] == 4
    assert counts["/diagnostics"] >= 1
    # The bag's depth reached the node: each trajectory answer also became a 3D path, on the 2 m plane.
    assert counts["/reasoner_node/trajectory"] == 2
    paths = [m for _, m in read_topics(out / "outputs")["/reasoner_node/trajectory"]]
    assert all(len(p.poses) == 2 for p in paths)
    assert all(pose.pose.position.z == pytest.approx(2.0) for p in paths for pose in p.poses)
    rebuilt = tmp_path / "rebuilt"
    # The same verdict as the live run: the rejected task fails its success rate.
    assert main(["evaluate", str(robot_bag), "--results", str(out / "outputs"), "-o", str(rebuilt)]) == 1
    again = [json.loads(line) for line in (rebuilt / "results.jsonl").read_text().splitlines()]
    key = lambda r: r["request_id"]  # noqa: E731
    assert [(r["request_id"], r["answer"], r["error_kind"]) for r in sorted(again, key=key)] == [
        (r["request_id"], r["answer"], r["error_kind"]) for r in sorted(records, key=key)
    ]
    assert all((rebuilt / r["image"]).is_file() for r in again)


@pytest.mark.ros
@pytest.mark.slow
def test_period_triggers_and_pause_while_waiting_on_a_jpeg_bag(robot_clip: Path, tmp_path: Path) -> None:
    jpeg_bag = tmp_path / "jpeg"
    make_bag(
        [robot_clip],
        jpeg_bag,
        MakeOptions(start_ns=OLD_START, rate_hz=10.0, encoding="jpeg", storage="sqlite3"),
    )
    # rcl reads `-p` values as YAML: this folder's name was a mapping ({.../run: 1}), and the node exited.
    out = tmp_path / "run: 1 #a"
    slow = ScriptedReply(text="<think>\nhm\n</think>\n\nwait", delay_s=1.5)
    with ScriptedServer(default=slow) as server:
        rc = evaluate(
            jpeg_bag,
            out,
            server.base_url,
            "--period",
            "1.5",
            "--rate",
            "2",
            "--wait",
            "--no-progress",
            "--timeout",
            "60",
        )
    assert rc == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # 6.4 s at a 1.5 s period: 1.5, 3.0, 4.5, 6.0. With --wait none is rejected as busy despite 1.5 s answers
    # at double speed.
    assert [r["trigger_s"] for r in records] == [1.5, 3.0, 4.5, 6.0]
    assert all(r["success"] for r in records), [r["error"] for r in records]
    assert all(r["clip_frames"] >= 5 for r in records)  # the node decoded the CompressedImage frames
    assert all((out / r["image"]).is_file() for r in records)
    assert list((out / "media").iterdir()), "the node wrote no clip into the media folder it was given"
    command = " ".join(
        node_command(EvalOptions(), [NodeCamera("camera", "/camera/image_raw/compressed", True)], out)
    )
    assert "camera.camera.compressed:=true" in command and "use_sim_time:=true" in command


def test_node_parameters_are_yaml_that_reads_back_as_given(tmp_path: Path) -> None:
    # Folder names, topics and URLs go to the node as `-p name:=value`, which rcl parses as YAML.
    media = tmp_path / "out/run #1: a, [b]"
    options = EvalOptions(server_url="http://host:8000/v1#x")
    cameras = [NodeCamera("camera", "/cam/image", False, "", "/cam/info")]
    values = dict(item.split(":=", 1) for item in node_parameters(options, cameras, media))
    assert yaml.safe_load(values["media_dir"]) == str(media)
    assert yaml.safe_load(values["server_url"]) == "http://host:8000/v1#x"
    assert yaml.safe_load(values["camera.camera.topic"]) == "/cam/image"
    assert yaml.safe_load(values["camera.camera.depth_topic"]) == ""  # a string, not nothing
    assert yaml.safe_load(values["camera.camera.camera_info_topic"]) == "/cam/info"


def write_results_bag(path: Path, texts: list[str], clip_end_ns: list[int]) -> None:
    from rclpy.serialization import serialize_message
    from support.interface_samples import sample_result

    from cosmos_reasoner_ros.node.ros_conversion import ns_to_time

    writer = open_writer(path)
    conn = writer.add_topic("/reasoner_node/result", "cosmos_reasoner_ros/msg/ReasonerResult", typestore())
    for i, (text, end) in enumerate(zip(texts, clip_end_ns, strict=True)):
        msg = sample_result(text)
        msg.clip_end = ns_to_time(end)
        msg.success = i != 1
        msg.error_kind = "" if i != 1 else "timeout"
        writer.write(conn, 1_800_000_000_000_000_000 + i * 1_000_000_000, serialize_message(msg))
    writer.close()


@pytest.mark.ros
def test_report_from_recorded_results(
    robot_bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "recorded"
    ends = [1_700_000_001_000_000_000, 1_700_000_003_000_000_000, 1_700_000_005_000_000_000]
    write_results_bag(results, ["a <b>", "b", "c"], ends)
    out = tmp_path / "report"
    # One of the three timed out: below the default 80 % of successful requests, the run fails.
    assert (
        main(["evaluate", str(robot_bag), "--results", str(results), "-o", str(out), "--image-format", "png"])
        == 1
    )
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["answer"] for r in records] == ["a <b>", "b", "c"]
    assert [r["trigger_s"] for r in records] == [0.0, 1.0, 2.0]
    assert [r["success"] for r in records] == [True, False, True] and records[1]["error_kind"] == "timeout"
    assert records[0]["trajectories"][0]["points_norm"] == [[500.0, 250.0], [100.0, 100.0]]
    assert records[0]["boxes"][0]["norm"] == [100.0, 100.0, 200.0, 200.0]
    assert all(r["image"].endswith(".png") and (out / r["image"]).is_file() for r in records)
    assert cv2.imread(str(out / records[0]["image"])).shape == (237, 320, 3)
    # Without a camera bag there are no frames, but the page and lines are still written.
    assert evaluate_recorded(results, tmp_path / "bare").index.is_file()
    assert "no frame" in (tmp_path / "bare" / "index.html").read_text()
    # The same recording judged against the report as its baseline: every request matches, exit 0; a recording
    # with one answer changed and a text tolerance exceeds it (exit 1), and says which request.
    capsys.readouterr()
    lenient = tmp_path / "lenient.yaml"  # the recording's one timeout is what it is: judge the answers here
    lenient.write_text("per_request:\n  success_rate_min: 0.5\n")
    same = ["evaluate", "--results", str(results), "-o", str(tmp_path / "same"), "--baseline", str(out)]
    same += ["--tolerances", str(lenient)]
    assert main(same) == 0
    assert "3/3 within tolerance" in capsys.readouterr().out
    changed = tmp_path / "changed"
    write_results_bag(changed, ["a <b>", "b", "something else"], ends)
    strict = tmp_path / "strict.yaml"
    strict.write_text("per_request:\n  text_similarity_min: 0.9\n  success_rate_min: 0.5\n")
    args = [
        "evaluate",
        "--results",
        str(changed),
        "-o",
        str(tmp_path / "changed_report"),
        "--baseline",
        str(out),
    ]
    assert main([*args, "--tolerances", str(strict)]) == 1
    stdout = capsys.readouterr().out
    assert "FAIL: 1 tolerance(s) exceeded" in stdout and "t=2.00s trajectory" in stdout


def test_trigger_times_and_task_specs() -> None:
    assert trigger_times(6.4, 2.0) == [2.0, 4.0, 6.0]
    assert trigger_times(6.4, 0.0, (3.0, 1.0)) == [1.0, 3.0]
    # --start / --until bound them (issue 38, finding 5): periods from one period after the start
    assert trigger_times(6.4, 2.0, start_s=1.0) == [4.0, 6.0]
    assert trigger_times(4.5, 2.0, start_s=2.0) == [4.0]
    with pytest.raises(BagError, match=r"lie outside the recording: 2-4\.50 s"):
        trigger_times(4.5, 0.0, (1.0, 3.0), start_s=2.0)
    with pytest.raises(BagError, match="--start"):
        EvalOptions(start_s=3.0, until_s=2.0)
    assert EvalOptions(until_s=2.0).end_s(6.4) == 2.0 and EvalOptions().end_s(6.4) == 6.4
    with pytest.raises(BagError, match=r"outside the recording: 0-6.40 s from its start \(its first message"):
        trigger_times(6.4, 2.0, (7.0,))
    with pytest.raises(BagError):
        trigger_times(6.4, 0.0)
    assert TaskSpec.parse("trajectory: pick up: the cup") == TaskSpec("trajectory", "pick up: the cup")
    assert TaskSpec.parse("assisted_next_action:pack|open the lid") == TaskSpec(
        "assisted_next_action", "pack", "open the lid"
    )
    with pytest.raises(BagError):
        TaskSpec.parse(":x")


def test_bad_input_exits_2(robot_bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A bag without images, checked before any node starts.
    info_only = tmp_path / "info_only"
    writer = open_writer(info_only)
    writer.add_topic("/camera/camera_info", "sensor_msgs/msg/CameraInfo", typestore())
    writer.close()
    assert main(["evaluate", str(info_only), "-o", str(tmp_path / "r1")]) == 2
    err = capsys.readouterr().err
    assert "has no camera topic" in err and "Traceback" not in err
    assert main(["evaluate", str(robot_bag), "-o", str(tmp_path / "r2"), "--image-topic", "/nope"]) == 2
    assert "has no topic /nope" in capsys.readouterr().err
    assert main(["evaluate", str(robot_bag), "-o", str(tmp_path / "r3"), "--results", str(robot_bag)]) == 2
    assert "no ReasonerResult topic" in capsys.readouterr().err
    assert main(["evaluate", "-o", str(tmp_path / "r4")]) == 2
    assert "needs a bag" in capsys.readouterr().err


def test_truncated_sqlite3_bag_exits_2(
    robot_clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bag = tmp_path / "sq"
    make_bag([robot_clip], bag, MakeOptions(start_ns=OLD_START, storage="sqlite3", max_long_side=160))
    db = next(bag.glob("*.db3"))
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    assert main(["evaluate", "--results", str(bag), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and "Traceback" not in err
    # An unknown storage plugin named in the metadata.
    (bag / "metadata.yaml").write_text(
        "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: zip\n"
        f"  relative_file_paths: [{db.name}]\n"
    )
    assert main(["evaluate", "--results", str(bag), "-o", str(tmp_path / "r")]) == 2
    assert "storage 'zip' is not supported" in capsys.readouterr().err


@pytest.mark.ros
@pytest.mark.slow
def test_a_replay_ends_with_its_last_trigger(robot_bag: Path, tmp_path: Path) -> None:
    """Issue 38, finding 5: `--at 4` on a 20 s bag took 30 s, the bag played to its end. The replay now ends
    once its last trigger is asked (its answer then awaited), and --until bounds it. The oracle: the camera
    frames the run recorded beside the node's outputs (10 Hz from 0 s, 65 in the bag)."""
    runs = {}
    with ScriptedServer(reply_for) as server:
        for name, extra in (("last", ["--at", "1.0"]), ("until", ["--period", "1.0", "--until", "2.5"])):
            out = tmp_path / name
            argv = ["evaluate", str(robot_bag), "-o", str(out), "--server-url", server.base_url, *extra]
            rc = main([*argv, "--no-progress", "--timeout", "60", "-p", "max_retries:=0", "--record"])
            assert rc == 0, (out / "node.log").read_text()[-3000:]
            runs[name] = topic_counts(out / "outputs")
    assert runs["last"]["/reasoner_node/result"] == 1
    assert runs["last"]["/camera/image_raw"] == 11  # frames 0.0 ... 1.0 s, not 65
    assert runs["until"]["/reasoner_node/result"] == 2  # at 1 s and 2 s; none at 3 s, past the end
    assert runs["until"]["/camera/image_raw"] == 21  # frames 0.0 ... 2.0 s: the last trigger's


@pytest.mark.ros
def test_trigger_outside_the_bag_exits_2(
    robot_bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["evaluate", str(robot_bag), "-o", str(tmp_path / "r"), "--at", "1,100", "--no-progress"]) == 2
    )
    err = capsys.readouterr().err
    assert "lie outside the recording: 0-" in err and "from its start" in err and "Traceback" not in err
    assert not (tmp_path / "r" / "node.log").exists()  # no node was started


@pytest.mark.ros
def test_a_replay_beside_another_node_of_its_name_runs_in_its_own_namespace(
    robot_bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], harness_factory: Any
) -> None:
    """Another /reasoner_node on the domain (left running, another session's, a previous run's still in
    discovery: issue 38, finding 9). Before, the replay was refused ("2 servers of
    /reasoner_node/reason/_action/send_goal"); each run now replays under a namespace of its own, so the other
    node takes none of its goals and the run asks the server exactly its one question."""
    from support.node_harness import base_params

    with ScriptedServer() as server:
        harness_factory(base_params(server.base_url, tmp_path / "stale_media"))
        rc = evaluate(
            robot_bag,
            tmp_path / "r",
            server.base_url,
            "--at",
            "2.0",
            "--task",
            "next_action",
            "--no-progress",
            "--timeout",
            "60",
        )
        asked = len(server.requests)
    err = capsys.readouterr().err
    assert rc == 0, err[-3000:]
    assert asked == 1, err[-3000:]
    assert "Traceback" not in err


@pytest.mark.ros
@pytest.mark.vllm
@pytest.mark.slow
def test_live_evaluation_against_the_real_vllm_cpu_tier(robot_bag: Path, tmp_path: Path) -> None:
    from support import vllm_tier

    reason = vllm_tier.missing_reason()
    if reason:
        pytest.skip(reason)
    server = vllm_tier.shared_server()
    assert server.media_dir is not None
    media = Path(server.media_dir) / "bag_evaluate"  # inside the server's --allowed-local-media-path
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:\n  next_action:\n    max_tokens: 24\n  trajectory:\n    max_tokens: 48\n")
    # A random checkpoint's answers may be cut or not parse: no success rate is asked of them here, only that
    # a run with no successful request does not pass.
    tolerances = tmp_path / "tolerances.yaml"
    tolerances.write_text("per_request:\n  success_rate_min: null\n")
    out = tmp_path / "report"
    rc = evaluate(
        robot_bag,
        out,
        server.base_url,
        "--at",
        "3.0,6.0",
        "--task",
        "next_action",
        "--task",
        "trajectory:pick up the bottle",
        "--wait",
        "--no-progress",
        "--timeout",
        "300",
        "-p",
        f"media_dir:={media}",
        "-p",
        f"tasks_file:={tasks}",
        "-p",
        "request_timeout_s:=300.0",
        "--tolerances",
        str(tolerances),
    )
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rc == (0 if any(r["success"] for r in records) else 1), (out / "node.log").read_text()[-3000:]
    assert [(r["trigger_s"], r["task"]) for r in records] == [
        (t, task) for t in (3.0, 6.0) for task in ("next_action", "trajectory")
    ]
    for r in records:
        # A random checkpoint says random things: the request must complete; its text may not parse as points.
        assert r["error_kind"] in ("", "truncated", "unparseable"), r
        assert r["model"] == "tiny" and 0 < r["completion_tokens"] <= 48 and r["latency_s"] > 0, r
        assert (out / r["image"]).is_file()
    assert all(r["success"] for r in records if r["task"] == "next_action" and r["finish_reason"] == "stop")
