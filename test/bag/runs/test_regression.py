"""Regression runs against reasoner_node in its own process and the scripted server: lock-step replay gives
the clip windows the bag dictates (what a lossless, instant node would see) at two playback rates, the second
under CPU load; several bags in one run (a folder, up to N requests in flight, one report with a row per bag,
recorded beside the camera); a baseline that the second run exceeds (exit 1, JUnit valid against its schema,
differing frames drawn and loaded by headless Chromium); a scenario with a parameter sweep side by side."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.bag_evaluate import evaluate
from support.bags import read_topics
from support.reports import CHROMIUM, chromium_image_widths, validate
from support.scripted_server import ScriptedReply, ScriptedServer

from cosmos_reasoner_ros.bag.cli import main
from cosmos_reasoner_ros.bag.files.make import MakeOptions, make_bag
from cosmos_reasoner_ros.bag.files.reader import BagReader
from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.geometry.coordinates import ns_from_sec_nanosec

OLD_START = 1_700_000_000_000_000_000  # bags recorded in 2023: replays run on their clock

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def points(x: int) -> str:
    items = [f'{{"point_2d": [{px}, {py}], "label": "gripper"}}' for px, py in ((x, 500), (x + 200, 600))]
    return f"```json\n[{', '.join(items)}]\n```"


class Server(ScriptedServer):
    """Answers trajectories at x = `self.x` (0-1000), text otherwise, after `delay_s`; notes arrival times."""

    def __init__(self, delay_s: float = 0.2, x: int = 250) -> None:
        self.x, self.delay_s = x, delay_s
        self.arrivals: list[float] = []
        self._arrival_lock = threading.Lock()  # not _lock: the server has its own
        super().__init__(self.reply)

    def reply(self, body: dict[str, Any]) -> ScriptedReply:
        with self._arrival_lock:
            self.arrivals.append(time.monotonic())
        text = " ".join(p.get("text", "") for p in body["messages"][-1]["content"] if isinstance(p, dict))
        if "2D trajectory" in text:
            return ScriptedReply(text=f"<think>\nok\n</think>\n\n{points(self.x)}", delay_s=self.delay_s)
        return ScriptedReply(text="<think>\nok\n</think>\n\nMove the gripper left.", delay_s=self.delay_s)

    def peak_concurrency(self) -> int:
        spans = [(t, t + self.delay_s) for t in self.arrivals]
        return max((sum(a <= t < b for a, b in spans) for t, _ in spans), default=0)


@pytest.fixture(scope="module")
def bags(robot_clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of three bags: the robot clip at 10 Hz (raw), at 8 Hz (JPEG, sqlite3), at 10 Hz smaller."""
    folder = tmp_path_factory.mktemp("bags")
    make_bag([robot_clip], folder / "a_raw", MakeOptions(start_ns=OLD_START, rate_hz=10.0, max_long_side=320))
    make_bag(
        [robot_clip],
        folder / "b_jpeg",
        MakeOptions(start_ns=OLD_START, rate_hz=8.0, encoding="jpeg", storage="sqlite3"),
    )
    make_bag(
        [robot_clip], folder / "c_small", MakeOptions(start_ns=OLD_START, rate_hz=10.0, max_long_side=160)
    )
    return folder


def expected_windows(
    bag: Path, times: list[float], sample_fps: float, clip_s: float
) -> list[tuple[int, int, int]]:
    """(clip start, clip end, frames) per trigger time, by the node's own buffer logic fed every frame stamped
    up to the trigger, in the bag's order: what any lossless node sees, however fast or slow."""
    buffer = ClipBuffer("camera", sample_fps, 30.0, 2**30, 0)
    items = read_topics(bag)["/camera/image_raw"]
    first = items[0][0]
    stamped = [
        (bag_ns - first, ns_from_sec_nanosec(msg.header.stamp.sec, msg.header.stamp.nanosec))
        for bag_ns, msg in items
    ]
    out, i = [], 0
    tiny = np.zeros((2, 2, 3), dtype=np.uint8)
    for t in times:
        while i < len(stamped) and stamped[i][0] <= round(t * 1e9):
            if buffer.wants(stamped[i][1]):
                buffer.add(Frame("camera", stamped[i][1], tiny))
            i += 1
        clip = buffer.clip(clip_s)
        out.append((clip.start_ns, clip.end_ns, len(clip.frames)))
    return out


def windows(out: Path) -> list[tuple[float, str, tuple[int, int, int]]]:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return [
        (r["trigger_s"], r["task"], (r["clip_start_ns"], r["clip_end_ns"], r["clip_frames"])) for r in records
    ]


@pytest.fixture
def cpu_load() -> Any:
    """Two busy processes (this machine has two cores) for the length of a `with` block."""

    class Load:
        def __enter__(self) -> None:
            code = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end: pass\n"
            self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]

        def __exit__(self, *_: object) -> None:
            for p in self.procs:
                p.kill()
                p.wait()

    return Load()


def test_lock_step_gives_the_same_clip_windows_at_any_speed_and_load(
    bags: Path, tmp_path: Path, cpu_load: Any
) -> None:
    bag = bags / "a_raw"
    times = [0.9, 2.05, 3.3, 4.45, 6.3]
    common = [
        "--at",
        ",".join(map(str, times)),
        "--task",
        "next_action",
        "--task",
        "trajectory:pick up the bottle",
    ]
    common += [
        "--lock-step",
        "--no-progress",
        "--timeout",
        "60",
        "-p",
        "sample_fps:=4.0",
        "-p",
        "clip_seconds:=2.0",
    ]
    with Server(delay_s=0.4) as server:
        quiet = tmp_path / "quiet"
        assert evaluate(bag, quiet, server.base_url, *common) == 0
        loaded = tmp_path / "loaded"
        with cpu_load:
            rc = evaluate(
                bag,
                loaded,
                server.base_url,
                "--rate",
                "4",
                *common,
            )
        assert rc == 0
    a, b = windows(quiet), windows(loaded)
    assert len(a) == 10 and a == b  # every request: the same trigger, task and clip window
    expected = expected_windows(bag, times, 4.0, 2.0)
    assert [w for _, task, w in a if task == "next_action"] == expected
    assert all(json.loads(line)["success"] for line in (loaded / "results.jsonl").read_text().splitlines())


def test_several_bags_with_requests_in_flight_a_baseline_and_junit(
    bags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, junit = tmp_path / "first", tmp_path / "second", tmp_path / "junit.xml"
    tolerances = tmp_path / "tolerances.yaml"
    tolerances.write_text("per_request:\n  trajectory_mean_px: 5.0\n")
    args = ["--period", "2.0", "--task", "trajectory:pick up the bottle", "--task", "next_action"]
    args += ["--in-flight", "2", "--timeout", "60", "--image-format", "png"]
    with Server(delay_s=0.6, x=250) as server:
        assert (
            main(
                ["evaluate", str(bags), "-o", str(first), "--server-url", server.base_url, *args, "--record"]
            )
            == 0
        )
        peak = server.peak_concurrency()
    captured = capsys.readouterr()
    assert "evaluate: 100%" in captured.err and "18/18" in captured.err  # the progress bar, over all bags
    assert "18 requests over 3 bags: 18 success" in captured.out and "PASS" in captured.out
    # 3 bags x 3 trigger times (2, 4, 6 s) x 2 tasks, at most 2 in flight, and indeed 2 at once.
    records = [json.loads(line) for line in (first / "results.jsonl").read_text().splitlines()]
    assert len(records) == 18 and all(r["success"] for r in records), [r["error"] for r in records]
    assert [r["bag"] for r in records] == ["a_raw"] * 6 + ["b_jpeg"] * 6 + ["c_small"] * 6
    assert peak == 2
    page = (first / "index.html").read_text()
    assert page.count("<tr class='pass'><td>") == 3 and "a_raw" in page and "c_small" in page  # a row per bag
    # Each bag was recorded beside its camera, on the bag's timeline: every frame played, and the replay
    # stopped once its last trigger (6 s) was answered, not at the bag's end.
    camera = "/camera/image_raw/compressed"
    with BagReader(bags / "b_jpeg") as reader:
        played = [m.log_ns for m in reader.messages([camera])]
    with BagReader(first / "outputs" / "b_jpeg") as reader:
        counts = {t.name: t.count for t in reader.topics.values()}
        start, end = reader.start_ns, reader.end_ns
        last_frame = max(m.log_ns for m in reader.messages([camera]))
        # Each topic carries its message definition (what Foxglove decodes the package's own messages with).
        result_def = next(t.definition for t in reader.topics.values() if t.name.endswith("/result"))
    assert "string request_id" in result_def and "Trajectory2D[] trajectories" in result_def
    assert counts[camera] == sum(ns <= last_frame for ns in played), (counts[camera], len(played))
    assert last_frame - played[0] >= 6e9 and counts["/eval2/reasoner_node/result"] == 6
    assert counts["/eval2/diagnostics"] >= 1
    assert counts["/eval2/reasoner_node/annotated_image"] >= 1
    assert start == 1_700_000_000_000_000_000 and end - start < 8e9  # bag time, not wall-clock time

    # The same run with trajectories 60 units (of 1000) to the right: per-request tolerances are exceeded.
    with Server(delay_s=0.6, x=310) as server:
        rc = evaluate(
            bags,
            second,
            server.base_url,
            *args,
            "--baseline",
            str(first),
            "--junit",
            str(junit),
            "--tolerances",
            str(tolerances),
            "--no-progress",
        )
    assert rc == 1
    verdict = json.loads((second / "verdict.json").read_text())
    assert not verdict["passed"]
    failed = [r for r in verdict["requests"] if not r["passed"]]
    assert len(failed) == 9 and all("trajectory" in r["name"] for r in failed)
    # a_raw and c_small images are 320 and 160 px wide: 60/1000 of that; the JPEG bag's frames are 644 px.
    mean = {r["name"].split()[0]: r["metrics"]["trajectory_mean_px"] for r in failed}
    assert mean == pytest.approx({"a_raw": 19.2, "b_jpeg": 38.64, "c_small": 9.6}, abs=0.01)
    validate(junit)
    xml = junit.read_text()
    assert xml.count("<testcase ") == 18 + len(verdict["aggregate"]) and xml.count("<failure ") == 9
    # The report: both runs side by side, each differing request drawn with both answers; all images load.
    page = (second / "index.html").read_text()
    assert "Baseline and this run side by side" in page and "FAIL" in page
    diffs = sorted((second / "images").glob("diff_*.png"))
    assert len(diffs) == 9
    if CHROMIUM.exists():
        widths = chromium_image_widths(second / "index.html", tmp_path)
        assert len(widths) == 3 + 2 + 9 + 18 and all(w > 0 for w in widths)


def test_scenario_with_a_sweep(bags: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "suite" / "packing.yaml"
    scenario.parent.mkdir()
    (scenario.parent / "bags").symlink_to(bags)  # a suite reaches a bag store through a link in its folder
    scenario.write_text(
        """name: packing
bags: [bags/a_raw]
params: {clip_seconds: 2.0}
goals:
  - {task: next_action, at: [2.0, 5.0]}
  - {task: trajectory, instruction: pick up the bottle, at: 5.0}
lock_step: true
tolerances: {per_request: {require_success: true}}
sweep: {parameter: sample_fps, values: [2.0, 4.0]}
"""
    )
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    with Server(delay_s=0.1) as server:
        rc = main(
            [
                "scenario",
                str(scenario.parent),
                "-o",
                str(out),
                "--server-url",
                server.base_url,
                "--junit",
                str(junit),
                "--no-progress",
            ]
        )
    assert rc == 0
    runs = {}
    for value in ("2.0", "4.0"):
        records = [
            json.loads(line)
            for line in (out / "packing" / f"sample_fps={value}" / "results.jsonl").read_text().splitlines()
        ]
        assert [(r["trigger_s"], r["task"]) for r in records] == [
            (2.0, "next_action"),
            (5.0, "next_action"),
            (5.0, "trajectory"),
        ]
        runs[value] = [r["clip_frames"] for r in records]
    # 2 s clips: 4-5 frames at 2 fps, 8-9 at 4 fps.
    assert all(n <= 5 for n in runs["2.0"]) and all(n >= 8 for n in runs["4.0"]), runs
    page = (out / "packing" / "index.html").read_text()
    assert "sample_fps = 2.0" in page and "sample_fps = 4.0" in page and page.count("PASS") == 2
    validate(junit)
    assert junit.read_text().count("<testsuite ") == 2 and "packing[sample_fps=4.0]" in junit.read_text()
    # The same suite against its first run as the baseline, with a tolerance the answers cannot meet.
    strict = scenario.read_text().replace("require_success: true", "text_similarity_min: 1.1")
    scenario.write_text(strict)
    with Server(delay_s=0.1) as server:
        rc = main(
            [
                "scenario",
                str(scenario),
                "-o",
                str(tmp_path / "again"),
                "--server-url",
                server.base_url,
                "--baseline",
                str(out),
                "--no-progress",
            ]
        )
    assert rc == 1


def test_a_run_that_stops_is_reported_beside_the_runs_before_it(
    bags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The second sweep value passes the checks made before anything runs (a known parameter, a number), and
    # the node refuses it at its start (clip_seconds above buffer_seconds). Before, the first value's run was
    # lost: exit 2 and no JUnit file. Now the JUnit file has the first run and the second as an error.
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "bags").symlink_to(bags)
    (suite / "sweep.yaml").write_text(
        "name: sweep\nbags: [bags/c_small]\ngoals: [{task: next_action, at: 2.0}]\n"
        "sweep: {parameter: clip_seconds, values: [2.0, 40.0]}\n"
    )
    junit = tmp_path / "junit.xml"
    with Server(delay_s=0.1) as server:
        rc = main(
            [
                "scenario",
                str(suite),
                "-o",
                str(tmp_path / "out"),
                "--server-url",
                server.base_url,
                "--junit",
                str(junit),
                "--no-progress",
            ]
        )
    out, err = capsys.readouterr()
    assert rc == 2 and "sweep[clip_seconds=40.0]: reasoner_node exited" in err and "Traceback" not in err
    assert "PASS" in out and f"junit: {junit}" in out  # the first run's summary, then the file
    validate(junit)
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == ["sweep[clip_seconds=2.0]", "sweep[clip_seconds=40.0]"]
    assert (suites[0].get("failures"), suites[0].get("errors")) == ("0", "0")
    error = suites[1].find("testcase/error")
    assert error is not None and "clip_seconds" in (error.text or "")
